"""PyTorch training through the parameter servers, in Horovod's conventions.

A single-process script becomes a worker with a few lines::

    import paramserver.torch as ps
    ps.init()                              # rank, size, servers: launcher
    model = Net()
    ps.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = ps.DistributedOptimizer(
        torch.optim.Adam(model.parameters(), lr=1e-3),
        named_parameters=model.named_parameters())
    for x, y in loader:                    # this rank's shard of the data
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    ps.shutdown()

Where the optimizer runs (``placement``):

- ``"server"`` (the default; the classic parameter server; sync, ssp and
  async): each gradient is pushed as soon as autograd has accumulated it (a
  hook on the parameter's gradient accumulator, so sending overlaps the
  rest of backward); ``step()`` sends what is left and writes the servers'
  updated weights into the parameters. The wrapped optimizer's kind and
  hyper-parameters go to the servers with the declaration, and the servers
  build that optimizer: ``torch.optim.SGD`` (momentum, weight decay;
  neither dampening nor Nesterov) or ``torch.optim.Adam`` (L2 weight decay;
  not amsgrad). Param groups may differ in weight decay only where it is 0
  (biases, norms): the servers hold one optimizer, and a tensor opts out of
  its weight decay. Every push carries the groups' current learning rate,
  so a learning-rate scheduler that changes ``param_groups`` takes effect
  on the servers at the next step. A server started with an optimizer flag
  that says otherwise refuses the declaration; one started without takes
  the declared optimizer. Any other optimizer is refused, naming
  placement='worker'.
- ``"worker"`` (sync only; any PyTorch optimizer): each gradient, times
  the rank's ``num_examples``, is summed over the ranks by the servers'
  collective service (``allreduce``, started from the gradient's hook);
  ``step()`` puts the weighted mean into ``.grad`` and steps the wrapped
  optimizer locally, as Horovod does. Every rank gets the same mean bit
  for bit. The servers hold no weights of the model then: save it from a
  worker.
- ``"auto"``: "server" if the servers implement the wrapped optimizer with
  its settings, else "worker".

Gradients are pushed from the hooks as copies; step() refuses a pushed
gradient the script changed since (clipping, unscaling). To edit them, use
Horovod's pattern with placement="worker": ``opt.synchronize()`` (the
ranks' mean into ``.grad``), the edit, then ``with opt.skip_synchronize():
opt.step()``. Accumulation over N backward passes needs
``backward_passes_per_step=N``. A restarted rank resumes its loop at
``opt.resume_position(steps_per_epoch)``, or, in Horovod's elastic style,
at the ``epoch`` and ``batch`` of an ``elastic.TorchState`` (elastic.py).

Parameters alias the client's weight buffers in "server" placement: each
step's pull lands in them with no copy. Only float32 CPU parameters are
supported. Only trainable parameters (requires_grad, in the optimizer) are
pushed; other tensors given to broadcast_parameters before the optimizer
is created (buffers, frozen parameters) get rank 0's values once.

Buffers (BatchNorm's running statistics) given to broadcast_parameters
before the optimizer: with placement='server' each step pushes their
values, and the servers keep the ranks' mean (declared ``assigned``: no
optimizer), which the step's pull puts back into every rank's buffers; so
the servers' checkpoints and a restarted rank have them. Between steps
(evaluation passes) and with placement='worker' they are per rank: every
rank calls ``average_buffers(model)`` before evaluating or saving, which
gives each the ranks' mean (a collective, so never implicit: a script that
saves on rank 0 only would hang in it). With
placement='server', ``opt.state_dict()`` reads the servers' optimizer
state into torch's layout, and rank 0's ``load_state_dict`` writes one back
(_optimizer_state), so torch.save checkpoints resume.

Run by the launcher with --metrics_port_base, each worker serves the C++
worker's Prometheus metrics (step time as compute, communication and
waiting; examples/s; the loss given to ``report_loss(loss)``) on its
port.

``save_model(path, module)`` writes a state_dict in the format of the
servers' and the C++ worker's models; ``load_model(path)`` reads one, or
the servers' checkpoints in a directory, as a state_dict.
"""

# The package by idea: _runtime (init, rank and size, shutdown), _broadcast
# (rank 0's values to every rank), _server_optimizer (the servers'
# optimizer for a torch one; placement), _declaration (the tensors a
# DistributedOptimizer declares), _gradients (what a step pushed, and the
# edits and passes it refuses), _optimizer (gradient hooks, synchronize()
# and step()), _optimizer_record (what the servers record of a rank: its
# position, state_dict), elastic (Horovod's hvd.elastic), _model_files (save_model, load_model), _collectives
# (Horovod's allreduce, allgather, broadcast, join, barrier on the servers'
# collective service), _compression (Compression.none, .fp16, .bf16), _functions
# (broadcast_object, allgather_object, broadcast_optimizer_state), _buffers
# (average_buffers), _reduction (compression, op, predivide factor),
# pipeline (a model cut into stages across workers).
from paramserver.torch import _runtime, elastic, pipeline
from paramserver.torch._broadcast import broadcast_parameters
from paramserver.torch._buffers import average_buffers
from paramserver.torch._collectives import (
    Adasum, Average, Max, Min, ProcessSet, Product, Sum, add_process_set,
    allgather, allgather_async, allreduce, allreduce_, allreduce_async,
    allreduce_async_, alltoall, alltoall_async, barrier, broadcast,
    broadcast_, broadcast_async, broadcast_async_, global_process_set,
    grouped_allgather, grouped_allgather_async, grouped_allreduce,
    grouped_allreduce_, grouped_allreduce_async, grouped_allreduce_async_,
    grouped_reducescatter, grouped_reducescatter_async, join, poll,
    reducescatter, reducescatter_async, remove_process_set,
    sparse_allreduce_async, synchronize)
from paramserver.torch._compression import Compression
from paramserver.torch._functions import (allgather_object,
                                          broadcast_object,
                                          broadcast_optimizer_state)
from paramserver.torch._model_files import load_model, save_model
from paramserver.torch._optimizer import DistributedOptimizer
from paramserver.torch._runtime import (
    ccl_built, cross_rank, cross_size, cuda_built, ddl_built, gloo_built,
    gloo_enabled, init, is_initialized, local_rank, local_size, mode,
    mpi_built, mpi_enabled, mpi_threads_supported, nccl_built, rank,
    report_loss, rocm_built, shutdown, size, start_timeline, stop_timeline)


def SyncBatchNorm(*args, **kwargs):
    """Not supported: raises, naming what to use."""
    raise NotImplementedError(
        "paramserver: SyncBatchNorm is not supported: use torch.nn."
        "BatchNorm*d (each rank normalises its own batch) and average the "
        "running statistics with hvd.average_buffers(model) before saving or "
        "evaluating")


__all__ = [
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank",
    "local_size", "cross_rank", "cross_size", "mode",
    "mpi_built", "mpi_enabled", "mpi_threads_supported", "gloo_built",
    "gloo_enabled", "nccl_built", "ddl_built", "ccl_built", "cuda_built",
    "rocm_built", "start_timeline", "stop_timeline",
    "Average", "Sum", "Min", "Max", "Adasum", "Product", "Compression",
    "ProcessSet", "global_process_set", "add_process_set",
    "remove_process_set",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async",
    "grouped_allreduce_async_", "sparse_allreduce_async",
    "allgather", "allgather_async", "grouped_allgather",
    "grouped_allgather_async", "broadcast", "broadcast_", "broadcast_async",
    "broadcast_async_", "alltoall", "alltoall_async", "reducescatter",
    "reducescatter_async", "grouped_reducescatter",
    "grouped_reducescatter_async", "join", "barrier", "poll", "synchronize",
    "broadcast_object", "allgather_object", "broadcast_parameters",
    "broadcast_optimizer_state", "DistributedOptimizer", "SyncBatchNorm",
    "save_model", "load_model", "average_buffers", "report_loss",
]


def __getattr__(name):
    # `_state` was this module's global before it became a package; tests
    # read it (ps._state.client). It is rebound by init() and shutdown(),
    # so it is looked up each time rather than imported.
    if name == "_state":
        return _runtime.state()
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
