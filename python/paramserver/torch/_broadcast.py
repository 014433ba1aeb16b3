"""Rank 0's values to every rank: broadcast_parameters and the broadcast
that creating a DistributedOptimizer performs.

Rank 0 declares the model, so rank 0's values are the ones every rank
gets: tensors given before the optimizer join its declaration, and the
declaration's broadcast writes them on every rank.
"""

import zlib

import numpy as np
import torch

import paramserver
from paramserver.torch import _runtime


def _named(params):
    """(name, tensor) pairs from a state_dict, named parameters, or a list
    of (name, tensor)."""
    items = params.items() if hasattr(params, "items") else params
    return [(str(name), tensor) for name, tensor in items]


def broadcast_parameters(params, root_rank=0):
    """Gives every rank root_rank's values of `params` (a state_dict or
    named parameters), in place.

    With root_rank 0, the rank that declares the model: called before
    DistributedOptimizer (as Horovod's MNIST example does), the tensors
    join the declaration and are broadcast when the optimizer is created:
    buffers and frozen parameters included (buffers are then kept on the
    servers, see the package's docstring). Called after it (as Horovod's
    benchmark does), the trainable parameters already hold rank 0's values
    (the optimizer broadcast them), and the other tensors (buffers) get
    rank 0's values through the servers' collectives, as with another
    root_rank; they are not declared then, so each rank's stay its own
    (average_buffers).

    With another root_rank, each tensor is broadcast at once through the
    servers' collectives, as Horovod does.
    """
    state = _runtime.require_init()
    named = _named(params)
    from paramserver.torch import _allreduce
    if _allreduce.active():  # Over the workers' ring, at once.
        return _allreduce.broadcast_parameters(state.client, named, root_rank)
    if root_rank != 0:
        _through_collectives(named, root_rank)
        return
    if state.optimizer is None:
        for name, tensor in named:
            state.pending[name] = tensor
        return
    undeclared = state.optimizer._broadcast_after_declaration(named)
    _through_collectives([(n, t) for n, t in named if n in undeclared], 0)


def _through_collectives(named, root_rank):
    from paramserver.torch import _collectives
    handles = [_collectives.broadcast_async_(
        tensor, root_rank, "broadcast_parameters.%s" % name)
        for name, tensor in named]
    for handle in handles:
        _collectives.synchronize(handle)


def checksum(client, count):
    """CRCs of the client's first `count` weight buffers."""
    return [zlib.crc32(w.tobytes()) for w in client.weights[:count]]


def broadcast_declared(client, trainable, extra, alias):
    """Rank 0's values into every rank's `trainable` parameters
    ([(name, param)], the first weight buffers) and `extra` tensors
    ([(index, tensor)]); with `alias` the parameters then alias the
    client's buffers (server placement), else they get a copy. Pulls the
    version the first push is computed from. Returns checksum() of the
    trainable values as uploaded."""
    weights = client.weights
    for i, (_, p) in enumerate(trainable):
        weights[i][...] = p.detach().numpy()
    for i, tensor in extra:
        values = tensor.detach().cpu().numpy().astype(np.float64)
        if client.rank == 0 and np.any(np.abs(values) > 2**24):
            raise ValueError("paramserver: %s holds integers beyond "
                             "float32's exact range" % client.model[i].name)
        weights[i][...] = values
    client.broadcast()
    uploaded = checksum(client, len(trainable))
    for i, (_, p) in enumerate(trainable):
        with torch.no_grad():
            if alias:
                p.data = torch.from_numpy(weights[i])
            else:
                p.copy_(torch.from_numpy(weights[i]))
    for i, tensor in extra:
        with torch.no_grad():
            tensor.copy_(torch.from_numpy(weights[i]).to(tensor.dtype))
    client.pull(client.registration.next_step)
    return uploaded


def broadcast_after_declaration(client, trainable, extra, named,
                                uploaded=None):
    """broadcast_parameters(named) once the model is declared: trainable
    ones get the parameter's values (already rank 0's). With `uploaded`
    (rank 0, before its first step, in server placement), raises if rank
    0's parameters no longer match checksum() as uploaded: the servers
    would keep the old values. Returns the names of `named` that were not
    declared (the caller broadcasts them otherwise)."""
    ids = {name: i for i, (name, _) in enumerate(trainable)}
    undeclared = {n for n, t in named if n not in ids and
                  not any(t is x for _, x in extra)}
    if uploaded is not None and checksum(client, len(trainable)) != uploaded:
        raise paramserver.FailedPreconditionError(
            "paramserver: rank 0's parameters changed after "
            "DistributedOptimizer broadcast them (a checkpoint loaded "
            "since?); the servers keep the first values, so call "
            "broadcast_parameters before DistributedOptimizer")
    for name, tensor in named:
        if name in ids:
            p = trainable[ids[name]][1]
            if tensor.data_ptr() != p.data_ptr():
                with torch.no_grad():
                    tensor.copy_(p)
    return undeclared
