"""Horovod's object and optimizer-state functions
(horovod/torch/functions.py): broadcast_object, allgather_object,
broadcast_optimizer_state, on the servers' collectives.

Objects travel pickled: broadcast as root_rank's bytes, allgathered as
float32 words that the servers copy without arithmetic (bit for bit).
"""

import io
import pickle
import struct

import numpy as np
import torch

from paramserver.torch import _collectives, _runtime


def _dumps(obj):
    buffer = io.BytesIO()
    torch.save(obj, buffer, pickle_protocol=pickle.HIGHEST_PROTOCOL)
    return buffer.getvalue()


def _loads(data):
    # Objects of any class, as Horovod's cloudpickle gives them.
    try:
        return torch.load(io.BytesIO(data), weights_only=False)
    except TypeError:  # A torch without weights_only.
        return torch.load(io.BytesIO(data))


def broadcast_object(obj, root_rank=0, name=None,
                     process_set=_collectives.global_process_set):
    """root_rank's `obj` (anything picklable, tensors included), on every
    rank; the others' `obj` is not read."""
    _collectives._check_process_set(process_set)
    state = _runtime.require_init()
    data = _dumps(obj) if state.rank == root_rank else b""
    answer = state.client.collectives().broadcast_bytes(
        name or "", int(root_rank), data)
    return _loads(answer)


def allgather_object(obj, name=None,
                     process_set=_collectives.global_process_set):
    """Every rank's `obj`, as a list in rank order."""
    _collectives._check_process_set(process_set)
    data = _dumps(obj)
    # Length first, then padded to whole float32 words.
    framed = struct.pack("<Q", len(data)) + data
    framed += b"\0" * (-len(framed) % 4)
    words = np.frombuffer(framed, dtype=np.float32)
    rows, counts = _runtime.require_init().client.collectives().allgather(
        name or "allgather_object.noname", words)
    raw = rows.tobytes()
    objects, start = [], 0
    for count in counts:
        chunk = raw[start:start + 4 * count]
        start += 4 * count
        (length,) = struct.unpack("<Q", chunk[:8])
        objects.append(_loads(chunk[8:8 + length]))
    return objects


def broadcast_optimizer_state(optimizer, root_rank=0, model=None):
    """Gives every rank root_rank's optimizer state (moments, step counts,
    param_groups' hyper-parameters): any torch optimizer, before or after
    DistributedOptimizer wraps it. With placement='server' the servers
    hold the one optimizer state of every rank: only the param_groups'
    hyper-parameters are broadcast then."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("paramserver: cannot broadcast torch.optim.LBFGS "
                         "state, as Horovod cannot; broadcast_object its "
                         "state_dict() instead")
    if getattr(optimizer, "_placement", None) == "server":
        groups = broadcast_object(
            [{k: v for k, v in g.items() if k != "params"}
             for g in optimizer.param_groups], root_rank,
            "broadcast_optimizer_state.groups")
        for group, values in zip(optimizer.param_groups, groups):
            group.update(values)
        return
    state = broadcast_object(optimizer.state_dict(), root_rank,
                             "broadcast_optimizer_state")
    if _runtime.require_init().rank != root_rank:
        optimizer.load_state_dict(state)
