"""Horovod's collectives (horovod/torch/mpi_ops.py) on the servers'
collective service (client/collectives.h): allreduce, allgather,
broadcast, their async and in-place forms, grouped_allreduce, join,
barrier, poll and synchronize.

Tensors travel as float32: float64, float16, bfloat16 and integer tensors
are converted there and back (integers exactly up to 2**24), and results
come back on the tensor's device with its dtype. The servers combine the
ranks' tensors in rank order, so every rank gets the same result, run after
run. A call is matched across ranks by its name and by how many calls of
that name came before; unnamed calls share their kind's default name, as
Horovod's do.

Handles are ints, as Horovod's: the collective runs on a thread of its own
from the moment it is started, so a script overlaps it with compute;
synchronize(handle) waits and returns the result, poll(handle) says
whether it would return at once.
"""

import itertools
import threading
import warnings

import numpy as np
import torch

from paramserver.torch import _runtime


class ReduceOp:
    """Horovod's reduction ops (hvd.Average, hvd.Sum, ...)."""

    def __init__(self, name, code, refusal=None):
        self.name = name
        self.code = code
        self._refusal = refusal

    def __repr__(self):
        return "paramserver.torch.%s" % self.name

    def check(self):
        if self._refusal is not None:
            raise NotImplementedError(self._refusal)
        return self.code


Sum = ReduceOp("Sum", 0)
Average = ReduceOp("Average", 1)
Min = ReduceOp("Min", 2)
Max = ReduceOp("Max", 3)
Adasum = ReduceOp(
    "Adasum", None,
    "paramserver: op=Adasum is not supported: use op=hvd.Average (the "
    "servers average in rank order, bit-identical on every rank), or keep "
    "the optimizer on the servers with DistributedOptimizer's default "
    "placement='server'")
Product = ReduceOp(
    "Product", None,
    "paramserver: op=Product is not supported: allreduce the logarithms "
    "with op=hvd.Sum, or allgather the tensors and multiply them")


class ProcessSet:
    """Only the global process set exists: every rank of the job."""

    def __init__(self, ranks=None):
        if ranks is not None:
            raise NotImplementedError(
                "paramserver: process sets other than the global one are "
                "not supported: run the collective on every rank (a rank "
                "without data can call join())")
        self.ranks = None

    def __repr__(self):
        return "paramserver.torch.global_process_set"


global_process_set = ProcessSet()


def add_process_set(process_set):
    raise NotImplementedError(
        "paramserver: add_process_set is not supported: only the global "
        "process set (every rank) exists; run the collective on every rank")


def remove_process_set(process_set):
    return add_process_set(process_set)


def _check_process_set(process_set):
    if process_set is not global_process_set:
        add_process_set(process_set)


class _Handles:
    """The started collectives by handle. Thread-safe."""

    def __init__(self):
        self._lock = threading.Lock()
        self._next = itertools.count(1)
        self._started = {}

    def add(self, pending, finish):
        with self._lock:
            handle = next(self._next)
            self._started[handle] = (pending, finish)
        return handle

    def peek(self, handle):
        with self._lock:
            if handle not in self._started:
                raise ValueError("paramserver: unknown handle %r (already "
                                 "synchronized?)" % (handle,))
            return self._started[handle]

    def pop(self, handle):
        with self._lock:
            if handle not in self._started:
                raise ValueError("paramserver: unknown handle %r (already "
                                 "synchronized?)" % (handle,))
            return self._started.pop(handle)


_handles = _Handles()


class _Group:
    """Several started collectives behind one handle (grouped_*)."""

    def __init__(self, handles):
        self.handles = handles

    def done(self):
        return all(poll(h) for h in self.handles)

    def wait(self):
        return [synchronize(h) for h in self.handles]


def _service():
    return _runtime.require_init().client.collectives()


def _as_float32(tensor, what):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError("paramserver: %s takes a torch.Tensor, got %s" %
                        (what, type(tensor).__name__))
    if tensor.is_sparse:
        raise NotImplementedError(
            "paramserver: %s of a sparse tensor is not supported: pass "
            "tensor.to_dense()" % what)
    if tensor.is_complex():
        raise NotImplementedError(
            "paramserver: %s of a complex tensor is not supported: pass "
            "torch.view_as_real(tensor)" % what)
    # Not np.ascontiguousarray, which makes a scalar a vector.
    return np.array(tensor.detach().to(device="cpu", dtype=torch.float32)
                    .numpy(), dtype=np.float32, order="C", copy=False)


def _like(array, tensor):
    return torch.from_numpy(array).to(device=tensor.device,
                                      dtype=tensor.dtype)


def _op_code(average, op):
    if average is not None:
        if op is not None:
            raise ValueError("paramserver: give op or average, not both "
                             "(average is deprecated)")
        warnings.warn("average is deprecated; use op=hvd.Average or "
                      "op=hvd.Sum", DeprecationWarning, stacklevel=3)
        op = Average if average else Sum
    if op is None:
        op = Average
    if not isinstance(op, ReduceOp):
        raise ValueError("paramserver: op must be hvd.Average, hvd.Sum, "
                         "hvd.Min or hvd.Max, got %r" % (op,))
    return op.check()


def poll(handle):
    """Whether synchronize(handle) would return at once."""
    pending, _ = _handles.peek(handle)
    return pending.done()


def synchronize(handle):
    """Waits for the started collective; returns its result (a tensor, a
    list for grouped calls, None for those without one)."""
    pending, finish = _handles.pop(handle)
    return finish(pending.wait())


def _start_allreduce(tensor, average, name, op, prescale_factor,
                     postscale_factor, process_set, out):
    _check_process_set(process_set)
    code = _op_code(average, op)
    array = _as_float32(tensor, "allreduce")
    if prescale_factor != 1.0:
        array = array * np.float32(prescale_factor)
    pending = _service().start_allreduce(name or "", code, array)

    def finish(result):
        if postscale_factor != 1.0:
            result = result * np.float32(postscale_factor)
        if out is None:
            return _like(result, tensor)
        with torch.no_grad():
            out.copy_(torch.from_numpy(result))
        return out
    return _handles.add(pending, finish)


def allreduce_async(tensor, average=None, name=None, op=None,
                    prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set):
    """Starts an allreduce of `tensor` (op: hvd.Average by default, Sum,
    Min, Max); returns a handle whose synchronize() gives a new tensor.
    `prescale_factor` multiplies each rank's tensor before, and
    `postscale_factor` the result after, the reduction."""
    return _start_allreduce(tensor, average, name, op, prescale_factor,
                            postscale_factor, process_set, None)


def allreduce_async_(tensor, average=None, name=None, op=None,
                     prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    """allreduce_async whose result is written into `tensor`."""
    return _start_allreduce(tensor, average, name, op, prescale_factor,
                            postscale_factor, process_set, tensor)


def allreduce(tensor, average=None, name=None, compression=None, op=None,
              prescale_factor=1.0, postscale_factor=1.0,
              process_set=global_process_set):
    """The ranks' `tensor`s reduced by `op` (hvd.Average by default), as a
    new tensor; every rank gets the same bits. `compression`
    (hvd.Compression.fp16) rounds the tensor to float16 before and the
    result after, as Horovod's does."""
    from paramserver.torch._compression import Compression
    compression = compression or Compression.none
    compressed, ctx = compression.compress(tensor)
    result = synchronize(allreduce_async(compressed, average, name, op,
                                         prescale_factor, postscale_factor,
                                         process_set))
    return compression.decompress(result, ctx)


def allreduce_(tensor, average=None, name=None, op=None,
               prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set):
    """allreduce in place: the result is written into `tensor`."""
    return synchronize(allreduce_async_(tensor, average, name, op,
                                        prescale_factor, postscale_factor,
                                        process_set))


def _group_names(name, count):
    if name is None:
        return [None] * count
    return ["%s.%d" % (name, i) for i in range(count)]


def grouped_allreduce_async(tensors, average=None, name=None, op=None,
                            prescale_factor=1.0, postscale_factor=1.0,
                            process_set=global_process_set):
    """allreduce_async of every tensor of `tensors`, behind one handle."""
    handles = [allreduce_async(t, average, n, op, prescale_factor,
                               postscale_factor, process_set)
               for t, n in zip(tensors, _group_names(name, len(tensors)))]
    return _handles.add(_Group(handles), lambda results: results)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None,
                             prescale_factor=1.0, postscale_factor=1.0,
                             process_set=global_process_set):
    """grouped_allreduce_async in place."""
    handles = [allreduce_async_(t, average, n, op, prescale_factor,
                                postscale_factor, process_set)
               for t, n in zip(tensors, _group_names(name, len(tensors)))]
    return _handles.add(_Group(handles), lambda results: results)


def grouped_allreduce(tensors, average=None, name=None, compression=None,
                      op=None, prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set):
    """allreduce of every tensor of `tensors`, all in flight at once; a
    list of new tensors."""
    from paramserver.torch._compression import Compression
    compression = compression or Compression.none
    pairs = [compression.compress(t) for t in tensors]
    results = synchronize(grouped_allreduce_async(
        [p[0] for p in pairs], average, name, op, prescale_factor,
        postscale_factor, process_set))
    return [compression.decompress(r, ctx)
            for r, (_, ctx) in zip(results, pairs)]


def grouped_allreduce_(tensors, average=None, name=None, op=None,
                       prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set):
    """grouped_allreduce in place."""
    return synchronize(grouped_allreduce_async_(
        tensors, average, name, op, prescale_factor, postscale_factor,
        process_set))


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts an allgather: every rank's `tensor` (at least one dimension;
    the first may differ between ranks) concatenated in rank order."""
    _check_process_set(process_set)
    array = _as_float32(tensor, "allgather")
    if array.ndim == 0:
        array = array.reshape(1)  # Horovod gathers scalars as rows.
    pending = _service().start_allgather(name or "", array)
    return _handles.add(pending, lambda result: _like(result[0], tensor))


def allgather(tensor, name=None, process_set=global_process_set):
    """Every rank's `tensor` concatenated along the first dimension, in
    rank order; a new tensor."""
    return synchronize(allgather_async(tensor, name, process_set))


def grouped_allgather_async(tensors, name=None,
                            process_set=global_process_set):
    handles = [allgather_async(t, n, process_set)
               for t, n in zip(tensors, _group_names(name, len(tensors)))]
    return _handles.add(_Group(handles), lambda results: results)


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    return synchronize(grouped_allgather_async(tensors, name, process_set))


def _start_broadcast(tensor, root_rank, name, process_set, out):
    _check_process_set(process_set)
    array = _as_float32(tensor, "broadcast")
    pending = _service().start_broadcast(name or "", int(root_rank), array)

    def finish(result):
        if out is None:
            return _like(result, tensor)
        with torch.no_grad():
            out.copy_(torch.from_numpy(result))
        return out
    return _handles.add(pending, finish)


def broadcast_async(tensor, root_rank, name=None,
                    process_set=global_process_set):
    """Starts a broadcast of root_rank's `tensor`; synchronize() gives a
    new tensor."""
    return _start_broadcast(tensor, root_rank, name, process_set, None)


def broadcast_async_(tensor, root_rank, name=None,
                     process_set=global_process_set):
    """broadcast_async whose result is written into `tensor`."""
    return _start_broadcast(tensor, root_rank, name, process_set, tensor)


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """root_rank's `tensor`, on every rank, as a new tensor."""
    return synchronize(broadcast_async(tensor, root_rank, name, process_set))


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """root_rank's `tensor` written into `tensor` on every rank."""
    return synchronize(broadcast_async_(tensor, root_rank, name,
                                        process_set))


def join(device=-1):
    """For a rank out of data: until every rank joined, the others'
    collectives go on without it (its share of a sum is zero; an average
    still divides by size()). Returns the last rank to join."""
    return _service().join()


def barrier(process_set=global_process_set):
    """Returns once every rank (that has not joined) called barrier()."""
    _check_process_set(process_set)
    _service().barrier()


def _unsupported(name, instead):
    def refuse(*args, **kwargs):
        raise NotImplementedError("paramserver: %s is not supported: %s" %
                                  (name, instead))
    refuse.__name__ = name
    return refuse


alltoall = _unsupported(
    "alltoall", "allgather the tensors and keep the rows meant for this rank")
alltoall_async = _unsupported("alltoall_async", "use allgather_async")
reducescatter = _unsupported(
    "reducescatter", "allreduce and keep this rank's slice of the result")
reducescatter_async = _unsupported("reducescatter_async",
                                   "use allreduce_async")
grouped_reducescatter = _unsupported("grouped_reducescatter",
                                     "use grouped_allreduce")
grouped_reducescatter_async = _unsupported("grouped_reducescatter_async",
                                           "use grouped_allreduce_async")
sparse_allreduce_async = _unsupported(
    "sparse_allreduce_async", "allreduce_async(tensor.to_dense())")
