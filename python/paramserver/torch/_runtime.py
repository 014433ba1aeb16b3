"""This process's place in the job: init(), rank and size, shutdown().

One state per process, as Horovod's: what init() learnt from the launcher's
environment, the client it opened, and the DistributedOptimizer once one is
created. Not thread-safe; a training script calls these from one thread.
"""

import atexit
import os
import sys

import paramserver
from paramserver.torch._metrics import MetricsServer, WorkerMetrics


class _State:
    """What init() learnt; one per process, as Horovod's."""

    def __init__(self, client, place=None):
        self.client = client
        self.rank = client.rank
        if place is not None:
            # The environment the client read its rank from (the launcher's,
            # or srun's or mpirun's): the same source for every number.
            _, self._size, self.local_rank, self._local_size = place
        else:
            # Servers or rank given by hand: without the launcher's
            # variables, the servers tell the size when the model is
            # declared (their reply to the registration).
            self._size = _env_int("PS_NUM_WORKERS", "WORLD_SIZE", None)
            self.local_rank = _env_int("PS_LOCAL_RANK", "LOCAL_RANK",
                                       self.rank)
            self._local_size = _env_int("PS_LOCAL_NUM_WORKERS",
                                        "LOCAL_WORLD_SIZE", None)
        # Tensors given to broadcast_parameters before the declaration.
        self.pending = {}
        self.optimizer = None
        self.finished = False
        self.metrics = WorkerMetrics(self.rank)
        port = os.environ.get("PS_METRICS_PORT")
        self.metrics_server = (MetricsServer(self.metrics, int(port))
                               if port else None)

    @property
    def size(self):
        """The number of workers: the environment's, else the servers'."""
        if self._size is not None:
            return self._size
        registration = self.client.registration
        if registration is None:
            raise ValueError(
                "paramserver.torch: size() is not known yet: without the "
                "launcher's PS_NUM_WORKERS, the servers tell it once the model "
                "is declared (when the DistributedOptimizer is created)")
        return registration.num_workers

    @property
    def local_size(self):
        """The workers on this host: the environment's, else size()."""
        return self._local_size if self._local_size is not None else self.size


_state = None


def _env_int(name, fallback, default):
    value = os.environ.get(name) or os.environ.get(fallback)
    return int(value) if value else default


def init(servers=None, rank=None, job_id=None, connect_timeout=None,
         retry_timeout=None, **options):
    """Connects to the servers the launcher's environment names.

    rank(), size(), local_rank() and local_size() come from the same
    environment (paramserver.worker_place(): the launcher's PS_ variables,
    or srun's or mpirun's without them).

    The arguments override PS_SERVERS, PS_RANK and PS_JOB_ID (for running
    without the launcher); `options` are paramserver.Client's others:
    tls_ca_file=... (over the PS_TLS_* variables, which apply also when
    `servers` is given), local_transport=False (gRPC even on one host).
    Calling it again does nothing. With $PS_METRICS_PORT (the
    launcher's --metrics_port_base), the worker's metrics are served there
    (paramserver.torch._metrics).
    """
    global _state
    if _state is not None:
        return
    if servers is None and rank is None:
        from paramserver.torch import _allreduce
        if _allreduce.requested():  # The launcher's --mode=allreduce.
            _state = _State(_allreduce.RingClient.join(),
                            paramserver.worker_place())
            return
    client = paramserver.Client(servers=servers, rank=rank, job_id=job_id,
                                connect_timeout=connect_timeout,
                                retry_timeout=retry_timeout, **options)
    place = None
    if servers is None and rank is None:
        place = paramserver.worker_place()
    _state = _State(client, place)


def is_initialized():
    """Whether init() has been called (and not shutdown())."""
    return _state is not None


def state():
    """The process's state, or None before init()."""
    return _state


def require_init():
    """The process's state; raises ValueError before init()."""
    if _state is None:
        raise ValueError("paramserver.torch: call init() first")
    return _state


def rank():
    """This worker's rank in [0, size())."""
    return require_init().rank


def size():
    """The number of workers."""
    return require_init().size


def local_rank():
    """This worker's rank among the workers of its host."""
    return require_init().local_rank


def local_size():
    """The number of workers on this host."""
    return require_init().local_size


def cross_size():
    """The number of hosts, each running local_size() workers (the
    launcher's layout: ranks of a host are consecutive)."""
    state = require_init()
    return max(1, state.size // max(1, state.local_size))


def cross_rank():
    """The index of this worker's host (rank() // local_size())."""
    state = require_init()
    return state.rank // max(1, state.local_size)


def _not_built():
    return False


# Scripts branch on these: the collectives go through the servers, with
# neither MPI, NCCL nor Gloo.
mpi_built = mpi_enabled = mpi_threads_supported = _not_built
gloo_built = gloo_enabled = _not_built
nccl_built = ddl_built = ccl_built = cuda_built = rocm_built = _not_built


def start_timeline(file_path, mark_cycles=False):
    raise NotImplementedError(
        "paramserver: Horovod's timeline is not supported: the servers and "
        "workers export their metrics for Prometheus (the launcher's "
        "--metrics_port_base)")


def stop_timeline():
    start_timeline(None)


def mode():
    """The servers' consistency mode, once DistributedOptimizer declared."""
    return require_init().client.mode


def shutdown():
    """Tells the servers this rank is done and closes the connections.
    Called at exit if the script did not (see _at_exit)."""
    global _state
    if _state is None:
        return
    try:
        if _state.optimizer is not None and not _state.finished:
            _state.optimizer.warn_if_untrained()
            _state.client.finish()
            _state.finished = True
    finally:
        if _state.metrics_server is not None:
            _state.metrics_server.close()
        _state.client.close()
        _state = None


def _at_exit():
    """A script that ends without shutdown() (Horovod's never call it):
    shutdown() at a normal exit; after an uncaught exception only the
    connections close, so the servers take the rank for dead (and the
    launcher may restart it), not done."""
    if _state is None:
        return
    if getattr(sys, "last_type", None) is not None:
        _state.client.close()
        return
    shutdown()


atexit.register(_at_exit)


def report_loss(loss):
    """The training loss (a number or a one-element tensor) for the
    metrics (ps_worker_loss), as the C++ worker exports its own."""
    require_init().metrics.report_loss(float(loss))
