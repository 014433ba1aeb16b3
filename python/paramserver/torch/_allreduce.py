"""paramserver.torch in the all-reduce mode (the launcher's --mode=allreduce).

No parameter servers: init() joins the workers' Gloo ring through the
launcher's coordinator (the one the C++ worker uses, //allreduce), every
worker keeps the full model, and DistributedOptimizer averages the
gradients among the workers while backward runs, then steps the wrapped
PyTorch optimizer on each worker, as Horovod and DDP do:

- a hook on each parameter's gradient accumulator copies the gradient,
  times the rank's ``num_examples``, into its bucket
  (allreduce::BucketedAllreduce: tensors packed from the last to the first,
  the order backward produces them); a bucket's all-reduce starts on the
  ring's own thread once its tensors are in, while backward goes on;
- step() waits for the buckets, divides each sum by the summed
  ``num_examples`` (one more one-element tensor in the buckets) and steps
  the wrapped optimizer. Every rank gets the same bits (Gloo's ring sums in
  an order fixed by the ranks), so the replicas stay identical.

The step's gradient is what a sync server applies: sum_r n_r g_r /
sum_r n_r. With 2 ranks at a power-of-two batch, n_r g_r is exact and the
sum is one float addition, so it equals the float32 mean of the two ranks'
gradients exactly; it differs from one process's gradient at the combined
batch only by the order PyTorch sums the examples in (the equivalence
test derives the bound).

Checkpoints: with the launcher's --checkpoint_dir (PS_CHECKPOINT_DIR),
rank 0 writes one every ``checkpoint_every_steps`` steps and at shutdown
(_allreduce_checkpoint); a restarted ring resumes from rank 0's newest,
broadcast over the ring, and ``opt.resume_step`` / ``resume_position``
say where the loop resumes. A worker that dies breaks the ring: the others'
step raises UnavailableError, they exit, the launcher restarts them, and
the steps since the last checkpoint are trained again.

Not in this mode (each raises, naming it): Horovod's collectives on tensors
(hvd.allreduce, allgather, ...) and average_buffers, which go through the
servers' collective service; Compression.fp16, op other than Average and
gradient_predivide_factor; the C++ worker's --auth (Gloo's TCP transport
has no TLS).
"""

import os
import sys

import numpy as np
import torch

import paramserver
from paramserver import _native
from paramserver.torch import _allreduce_checkpoint as checkpoints
from paramserver.torch import _runtime
from paramserver.torch._declaration import trainable_parameters

# What the launcher sets for a program in this mode.
MODE = "allreduce"
_BUCKET_BYTES = 25 << 20  # DDP's default bucket.
# Tags of the ring's operations besides the buckets' (0 .. buckets-1).
_BROADCAST_TAG = 1 << 30


def requested():
    """Whether the launcher started this program in the all-reduce mode."""
    return os.environ.get("PS_MODE") == MODE


def active():
    """Whether init() joined a ring (rather than connecting to servers)."""
    state = _runtime.state()
    return state is not None and isinstance(state.client, RingClient)


class RingClient:
    """The ring in the place of paramserver.Client in the package's state:
    rank, mode, finish() and close(), which _runtime calls."""

    mode = MODE
    registration = None

    def __init__(self, ring, job_id):
        self.ring = ring
        self.rank = ring.rank
        self.job_id = job_id
        self._tag = _BROADCAST_TAG
        self.on_finish = None  # The optimizer's last checkpoint.

    @classmethod
    def join(cls, join_timeout_s=120.0, timeout_s=60.0):
        """Joins the coordinator's ring as the launcher's environment says:
        PS_SERVERS (the coordinator, in server 0's place), PS_RANK,
        PS_NUM_WORKERS, PS_JOB_ID and PS_ALLREDUCE_HOST (the address the
        other workers reach this one at)."""
        servers = os.environ.get("PS_SERVERS", "")
        if not servers:
            raise paramserver.InvalidArgumentError(
                "paramserver.torch: PS_MODE=allreduce without PS_SERVERS "
                "(the ring's coordinator): start the program with the "
                "launcher's --mode=allreduce")
        rank, size, _, _ = paramserver.worker_place()
        job_id = os.environ.get("PS_JOB_ID", "")
        ring = _native.join_ring(
            coordinator=servers.split(",")[0], rank=rank, num_workers=size,
            job_id=job_id,
            hostname=os.environ.get("PS_ALLREDUCE_HOST", "127.0.0.1"),
            join_timeout_s=join_timeout_s, timeout_s=timeout_s)
        return cls(ring, job_id)

    def next_tag(self):
        """A tag for one broadcast (two: the blob's length and bytes)."""
        self._tag += 2
        return self._tag

    def collectives(self):
        raise NotImplementedError(
            "paramserver.torch: --mode=allreduce has no servers, so "
            "Horovod's collectives on tensors (hvd.allreduce, allgather, "
            "average_buffers, ...) are not available; DistributedOptimizer "
            "and broadcast_parameters are")

    def finish(self):
        if self.on_finish is not None:
            self.on_finish()

    def close(self):
        self.ring = None


def broadcast_parameters(client, named, root_rank):
    """Gives every rank root_rank's values of the (name, tensor) pairs, in
    place, over the ring: at once, whether before or after the optimizer."""
    for _, tensor in named:
        if tensor.device.type != "cpu":
            raise TypeError("paramserver: only CPU tensors are broadcast")
        with torch.no_grad():
            local = tensor.detach().contiguous().clone()
            data = local.view(-1).view(torch.uint8).numpy()
            client.ring.broadcast_(data, root_rank, client.next_tag())
            tensor.copy_(local)


class _RingOptimizer(torch.optim.Optimizer):
    """Methods mixed into a subclass of the wrapped optimizer's class (as
    _optimizer._DistributedOptimizer's are). See DistributedOptimizer()."""

    def __init__(self, params, named_parameters, backward_passes_per_step,
                 checkpoint_every_steps, bucket_bytes):
        super(self.__class__, self).__init__(params)
        state = _runtime.require_init()
        if state.optimizer is not None:
            raise ValueError("paramserver: one DistributedOptimizer per "
                             "process")
        self._client = state.client
        self._ring = state.client.ring
        self._metrics = state.metrics
        self._trainable = trainable_parameters(self.param_groups,
                                               named_parameters)
        self._passes_per_step = int(backward_passes_per_step)
        if self._passes_per_step < 1:
            raise ValueError("backward_passes_per_step must be >= 1")
        sizes = [p.numel() for _, p in self._trainable] + [1]
        self._count_tensor = len(sizes) - 1
        self._buckets = self._ring.buckets(sizes, int(bucket_bytes))
        self._reduced = [np.zeros(n, dtype=np.float32) for n in sizes]
        self.num_examples = 1
        self._checkpoint_dir = os.environ.get("PS_CHECKPOINT_DIR", "")
        self._checkpoint_every = int(checkpoint_every_steps)
        self._epoch = 0
        self._step_number = 0
        self._open = False
        self._passes = [0] * len(self._trainable)
        self._synchronized = False
        self._skip_synchronize = False
        # Every rank starts from rank 0's values, or rank 0's checkpoint.
        broadcast_parameters(self._client, self._trainable, 0)
        self._resume()
        self._resumed_at = self._step_number
        state.optimizer = self
        self._client.on_finish = self._final_checkpoint
        self._grad_accs = []
        for i, (_, p) in enumerate(self._trainable):
            # As _optimizer: the accumulator's hook runs once p.grad holds
            # this backward's sum (torch 1.13 has no post-accumulate hook).
            acc = p.expand_as(p).grad_fn.next_functions[0][0]
            acc.register_hook(self._make_hook(i, p))
            self._grad_accs.append(acc)

    # -- checkpoints -----------------------------------------------------

    def _resume(self):
        data = None
        if self._ring.rank == 0:
            path = checkpoints.newest(self._checkpoint_dir)
            if path is not None:
                with open(path, "rb") as f:
                    data = f.read()
        data = checkpoints.ring_blob(self._ring, data,
                                     self._client.next_tag())
        if data is None:
            return
        saved = checkpoints.decode(data)
        with torch.no_grad():
            for name, p in self._trainable:
                p.copy_(saved["params"][name])
        # The per-parameter state (momentum, Adam's moments and step) only:
        # the param groups' hyper-parameters stay as the script made them,
        # so that a learning-rate scheduler it steps resume_step times
        # catches up as in the servers' modes (the checkpoint's groups hold
        # the rate the scheduler had reached, from which it would go on).
        restored = dict(saved["optimizer"])
        restored["param_groups"] = super(
            self.__class__, self).state_dict()["param_groups"]
        super(self.__class__, self).load_state_dict(restored)
        self._step_number = saved["step"]
        self._epoch = saved["epoch"]
        if self._ring.rank == 0:
            print("paramserver.torch: the ring resumes after step %d (rank "
                  "0's checkpoint in %s)" % (self._step_number,
                                             self._checkpoint_dir),
                  file=sys.stderr, flush=True)

    def _write_checkpoint(self):
        if self._ring.rank != 0 or not self._checkpoint_dir:
            return
        checkpoints.write(
            self._checkpoint_dir, self._step_number,
            checkpoints.encode(self._step_number, self._epoch,
                               dict(self._trainable),
                               super(self.__class__, self).state_dict()))

    def _final_checkpoint(self):
        if self._step_number > self._resumed_at:
            self._write_checkpoint()

    # -- a step ----------------------------------------------------------

    def _begin(self):
        if not self._open:
            self._buckets.begin()
            self._open = True
            self._buckets.add(self._count_tensor,
                              np.ones(1, dtype=np.float32),
                              float(self.num_examples))

    def _make_hook(self, i, p):
        def hook(*unused):
            if self._synchronized:
                raise paramserver.FailedPreconditionError(
                    "paramserver: backward() after synchronize() and before "
                    "step(): the gradients were already averaged")
            self._passes[i] += 1
            if self._passes[i] > self._passes_per_step:
                raise paramserver.FailedPreconditionError(
                    "paramserver: more backward passes than "
                    "backward_passes_per_step=%d before step()" %
                    self._passes_per_step)
            if self._passes[i] == self._passes_per_step:
                self._begin()
                self._buckets.add(i, p.grad.detach().reshape(-1).numpy(),
                                  float(self.num_examples))
        return hook

    def synchronize(self):
        """Waits for the ring's sums and puts the ranks' mean gradient into
        each parameter's .grad. A parameter backward did not reach adds
        zeros (every rank must add every tensor)."""
        if self._synchronized:
            return
        self._begin()
        for i, (_, p) in enumerate(self._trainable):
            if self._passes[i] < self._passes_per_step:
                if p.grad is None or self._passes[i] == 0:
                    values = np.zeros(p.numel(), dtype=np.float32)
                else:
                    values = p.grad.detach().reshape(-1).numpy()
                self._buckets.add(i, values, float(self.num_examples))
        with self._metrics.phase("waiting"):
            try:
                self._buckets.wait()
            except paramserver.Error as e:
                # The launcher restarts the ring from the last checkpoint;
                # this line says which step was lost.
                print("paramserver.torch: rank %d: the ring broke in step %d "
                      "(%s)" % (self._ring.rank, self._step_number + 1, e),
                      file=sys.stderr, flush=True)
                raise
            finally:
                self._open = False
                self._passes = [0] * len(self._trainable)
        for i, reduced in enumerate(self._reduced):
            self._buckets.reduced_into(i, reduced)
        total = self._reduced[self._count_tensor][0]
        with torch.no_grad():
            for i, (_, p) in enumerate(self._trainable):
                mean = torch.from_numpy(self._reduced[i] / total).view_as(p)
                if p.grad is None:
                    p.grad = mean.clone()
                else:
                    p.grad.copy_(mean)
        self._synchronized = True

    def skip_synchronize(self):
        """Horovod's: step() inside steps without synchronizing again."""
        optimizer = self

        class _Skip:
            def __enter__(self):
                optimizer._skip_synchronize = True

            def __exit__(self, *exc):
                optimizer._skip_synchronize = False
        return _Skip()

    def step(self, closure=None):
        """Averages the gradients over the ring (unless synchronize() did)
        and steps the wrapped optimizer; rank 0 checkpoints when due."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if not self._synchronized:
            if self._skip_synchronize:
                raise paramserver.FailedPreconditionError(
                    "paramserver: step() inside skip_synchronize() without "
                    "synchronize() first")
            self.synchronize()
        super(self.__class__, self).step()
        self._synchronized = False
        self._step_number += 1
        self._metrics.step_done(self.num_examples, self._epoch)
        if (self._checkpoint_every > 0 and
                self._step_number % self._checkpoint_every == 0):
            self._write_checkpoint()
        return loss

    def set_epoch(self, epoch):
        """The epoch the next steps' batches come from (checkpointed)."""
        self._epoch = int(epoch)

    @property
    def step_number(self):
        """Steps this ring has finished, resumed ones included."""
        return self._step_number

    @property
    def resume_step(self):
        """The step the checkpoint this ring resumed from ended at: 0 in a
        new job."""
        return self._resumed_at

    def resume_position(self, steps_per_epoch):
        """(epoch, step within it) to resume a loop of `steps_per_epoch`
        steps per epoch from."""
        if steps_per_epoch < 1:
            raise ValueError("steps_per_epoch must be >= 1, got %r" %
                             (steps_per_epoch,))
        return divmod(self._resumed_at, int(steps_per_epoch))

    def pull_final(self):
        """Nothing to pull: every rank holds the final weights."""

    def warn_if_untrained(self):
        """Nothing to warn of: each worker applies its own steps."""


def DistributedOptimizer(optimizer, named_parameters=None,
                         compression=None, backward_passes_per_step=1,
                         op=None, gradient_predivide_factor=1.0,
                         placement=None, planned_steps=None, seed=None,
                         checkpoint_every_steps=200,
                         bucket_bytes=_BUCKET_BYTES, **unsupported):
    """_optimizer.DistributedOptimizer in the all-reduce mode: the wrapped
    optimizer steps on every worker (any PyTorch optimizer), on the ranks'
    mean gradient. `placement`, `planned_steps` and `seed` mean nothing
    here and are ignored; see the module's docstring for what is refused."""
    from paramserver.torch._collectives import Average
    from paramserver.torch._compression import Compression
    if unsupported:
        raise TypeError("paramserver: DistributedOptimizer does not take %s"
                        % ", ".join(sorted(unsupported)))
    if compression not in (None, Compression.none):
        raise ValueError("paramserver: --mode=allreduce sends float32 "
                         "buckets; compression is not supported")
    if op not in (None, Average) or gradient_predivide_factor != 1.0:
        raise ValueError("paramserver: --mode=allreduce averages the "
                         "gradients (op=Average, no predivide factor)")
    cls = type("Distributed" + optimizer.__class__.__name__,
               (optimizer.__class__,), dict(_RingOptimizer.__dict__))
    named = list(named_parameters) if named_parameters is not None else None
    return cls(optimizer.param_groups, named, backward_passes_per_step,
               checkpoint_every_steps, bucket_bytes)
