"""A model cut into pipeline stages across workers (model parallelism), each
stage's parameters trained through the servers by DistributedOptimizer.

The job runs R replicas of K stages: ``size() == R * K`` workers, rank w
holding stage ``w % K`` of replica ``w // K`` (the launcher's convention
with ``--pipeline_stages=K``, which exports PS_PIPELINE_STAGES, and
``--micro_batches=M``, PS_MICRO_BATCHES)::

    import paramserver.torch as ps
    from paramserver.torch.pipeline import Pipeline
    ps.init()
    pipe = Pipeline(nn.Sequential(...), micro_batches=4, schedule="1f1b")
    opt = ps.DistributedOptimizer(
        torch.optim.SGD(pipe.parameters(), lr=0.1),
        named_parameters=pipe.named_parameters(),
        backward_passes_per_step=pipe.micro_batches)
    for x, y in batches(shard=pipe.replica, shards=pipe.replicas):
        opt.zero_grad()
        loss = pipe.train_step(x, y, F.cross_entropy)   # None but last
        opt.step()
    pipe.close()

Every rank builds the whole model (rank 0's initial values are the ones
the servers keep) and every stage of a replica reads the same batch:
stage 0 uses the inputs, the last stage the targets (labels are not sent
along; the others may pass None). Each step splits the batch into
``micro_batches`` along dimension 0; activations go forward, and their
gradients back, directly between the neighbouring stages' workers of a
replica over a TCP connection of their own (_pipeline_channel), never
through the servers. ``schedule`` orders the micro-batches
(_pipeline_schedule): "gpipe" or "1f1b"; both sum the same gradients in
the same order.

Parameters on the servers: the servers hold one model, declared alike by
every rank, so every rank declares the whole model
(``named_parameters()``: this stage's parameters and the other stages'
as tensors outside its graph, which the servers' pull keeps current in
server placement). A rank pushes its stage's gradients times K and zeros
for the other stages' tensors, so the servers' mean over the R * K ranks
is, for each tensor, the mean over its stage's R replicas; the loss is
the mean over the batch (``loss_fn`` returns each micro-batch's mean;
micro-batches are weighted by their size). This costs each rank the
whole model's memory for the servers' buffers and its pushes and pulls;
the activations and the compute are its stage's only. Sync mode only: in
ssp and async modes the zeros would be steps of their own.

A neighbour that dies (its connection closes) or stays silent for
``timeout_s`` makes train_step raise NeighbourError naming its stage and
rank. Not thread-safe: one training loop drives a Pipeline.
"""

import os
import socket

import torch

from paramserver.torch import _runtime
from paramserver.torch._functions import allgather_object
from paramserver.torch._pipeline_channel import (ACTIVATION, GRADIENT,
                                                 Channel, NeighbourError,
                                                 Peer, hello, read_hello)
from paramserver.torch._pipeline_schedule import FORWARD
from paramserver.torch._pipeline_schedule import schedule as _schedule
from paramserver.torch._pipeline_split import (as_sequential, split_points,
                                               stage_modules,
                                               stage_of_parameters)

__all__ = ["Pipeline", "NeighbourError", "stages_from_environment"]


def stages_from_environment():
    """The launcher's PS_PIPELINE_STAGES, or None."""
    value = os.environ.get("PS_PIPELINE_STAGES")
    return int(value) if value else None


def _micro_batches_from_environment():
    """The launcher's PS_MICRO_BATCHES, else 1."""
    return int(os.environ.get("PS_MICRO_BATCHES") or 1)


class Pipeline:
    """This rank's stage of `model` and its links to the neighbouring
    stages. Collective: every rank creates it, with the same model,
    stages, micro_batches and schedule."""

    def __init__(self, model, stages=None, micro_batches=None,
                 schedule="gpipe", split=None, timeout_s=300.0,
                 address="127.0.0.1"):
        """`model`: an nn.Sequential (cut at `split`, K - 1 child indices,
        or balanced by parameter count) or a list of K modules, one per
        stage. `stages`: K, else PS_PIPELINE_STAGES, else the list's
        length. `micro_batches`: M, else PS_MICRO_BATCHES, else 1.
        `address`: where this worker listens for the previous stage (its
        host's address when the job spans hosts)."""
        sequential, implied = as_sequential(model)
        if stages is None:
            stages = stages_from_environment()
        if stages is None and implied is not None:
            stages = len(implied) + 1
        if stages is None:
            raise ValueError("paramserver.pipeline: how many stages? Pass "
                             "stages=K or run with PS_PIPELINE_STAGES")
        stages = int(stages)
        if implied is not None and split is None:
            if len(implied) + 1 != stages:
                raise ValueError("paramserver.pipeline: a list of %d stage "
                                 "modules for %d stages" %
                                 (len(implied) + 1, stages))
            split = implied
        points = split_points(sequential, stages, split)
        if micro_batches is None:
            micro_batches = _micro_batches_from_environment()
        _schedule(schedule, 0, stages, micro_batches)  # Checks the names.
        state = _runtime.require_init()
        from paramserver.torch import _allreduce
        if _allreduce.active():
            raise NotImplementedError(
                "paramserver.pipeline: --mode=allreduce is not supported; "
                "run the pipeline with the servers in sync mode")
        if state.size % stages:
            raise ValueError("paramserver.pipeline: %d workers cannot run %d "
                             "stages: --num_workers must be replicas x "
                             "stages" % (state.size, stages))
        self.stages = stages
        self.replicas = state.size // stages
        self.rank = state.rank
        self.stage = state.rank % stages
        self.replica = state.rank // stages
        self.micro_batches = int(micro_batches)
        self.schedule_name = schedule
        self._order = _schedule(schedule, self.stage, stages,
                                self.micro_batches)
        self.points = points
        self.module = stage_modules(sequential, points, self.stage)
        owner = stage_of_parameters(sequential, points)
        self._named = list(sequential.named_parameters())
        self._own = {n for n, _ in self._named if owner[n] == self.stage}
        self._exchange = 0
        self._checked_optimizer = None
        self._prev = self._next = None
        self._connect(address, float(timeout_s))

    # -- the model ---------------------------------------------------------

    @property
    def is_first(self):
        return self.stage == 0

    @property
    def is_last(self):
        return self.stage == self.stages - 1

    def named_parameters(self):
        """[(name, parameter)] of the whole model, in its order: what every
        rank gives DistributedOptimizer (see the module's docstring)."""
        return list(self._named)

    def parameters(self):
        return [p for _, p in self._named]

    def stage_parameters(self):
        """[(name, parameter)] of this rank's stage."""
        return [(n, p) for n, p in self._named if n in self._own]

    # -- links -------------------------------------------------------------

    def _connect(self, address, timeout_s):
        """Listens, learns every rank's address through the servers'
        collectives, connects to the next stage and accepts the previous."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            listener.bind((address, 0))
            listener.listen(1)
            listener.settimeout(timeout_s)
            port = listener.getsockname()[1]
            addresses = allgather_object(
                (address, port, self.stage, self.stages),
                name="paramserver.pipeline.addresses")
            for r, (_, _, stage, stages) in enumerate(addresses):
                if stages != self.stages or stage != r % self.stages:
                    raise ValueError(
                        "paramserver.pipeline: rank %d runs stage %d of %d, "
                        "this rank expects stage %d of %d" %
                        (r, stage, stages, r % self.stages, self.stages))
            if not self.is_last:
                peer = Peer(self.stage + 1, self.rank + 1)
                host, port = addresses[self.rank + 1][:2]
                try:
                    sock = socket.create_connection((host, port), timeout_s)
                except OSError as e:
                    raise NeighbourError(
                        "paramserver.pipeline: cannot connect to %s at "
                        "%s:%d: %s" % (peer, host, port, e)) from None
                sock.sendall(hello(self.rank, self.stage, self.replica,
                                   self.stages))
                self._next = Channel(sock, peer, timeout_s)
            if not self.is_first:
                peer = Peer(self.stage - 1, self.rank - 1)
                try:
                    sock, _ = listener.accept()
                except socket.timeout:
                    raise NeighbourError(
                        "paramserver.pipeline: %s did not connect within "
                        "%gs" % (peer, timeout_s)) from None
                sock.settimeout(timeout_s)
                got = read_hello(sock, peer)
                expected = (self.rank - 1, self.stage - 1, self.replica,
                            self.stages)
                if got != expected:
                    sock.close()
                    raise NeighbourError(
                        "paramserver.pipeline: the worker that connected "
                        "says (rank, stage, replica, stages) = %s; expected "
                        "%s" % (got, expected))
                self._prev = Channel(sock, peer, timeout_s)
        finally:
            listener.close()

    def close(self):
        """Sends what is queued and closes the links."""
        for channel in (self._next, self._prev):
            if channel is not None:
                channel.close()
        self._next = self._prev = None

    # -- a step ------------------------------------------------------------

    def _check_optimizer(self):
        optimizer = _runtime.require_init().optimizer
        if optimizer is self._checked_optimizer:
            return
        if optimizer is None:
            # The gradients are K times the stage's (see the module's
            # docstring): only the servers' mean makes them right.
            raise ValueError(
                "paramserver.pipeline: create the DistributedOptimizer over "
                "pipe.named_parameters() before train_step")
        names = [n for n, _ in optimizer._trainable]
        if names != [n for n, _ in self._named]:
            raise ValueError(
                "paramserver.pipeline: the DistributedOptimizer trains %s; "
                "it must be created over pipe.named_parameters() (%d "
                "tensors, every stage's)" % (names, len(self._named)))
        mode = optimizer._client.mode
        if mode != "sync":
            raise ValueError(
                "paramserver.pipeline: the servers run --mode=%s; a pipeline "
                "trains in sync mode only (each rank pushes zeros for the "
                "other stages' tensors, which ssp and async would apply as "
                "steps)" % mode)
        passes = optimizer._gradients._passes_per_step
        if passes != self.micro_batches:
            raise ValueError(
                "paramserver.pipeline: DistributedOptimizer has "
                "backward_passes_per_step=%d; a step of %d micro-batches "
                "needs backward_passes_per_step=pipe.micro_batches" %
                (passes, self.micro_batches))
        self._checked_optimizer = optimizer

    def _split(self, tensor, what):
        if tensor is None:
            raise ValueError("paramserver.pipeline: stage %d needs the %s" %
                             (self.stage, what))
        if tensor.shape[0] < self.micro_batches:
            raise ValueError("paramserver.pipeline: a batch of %d cannot be "
                             "split into %d micro-batches" %
                             (tensor.shape[0], self.micro_batches))
        return torch.tensor_split(tensor, self.micro_batches)

    def _input(self, xs, step, m):
        """Micro-batch m's input: the data (stage 0) or the previous
        stage's activation, as a leaf whose gradient goes back."""
        if self.is_first:
            return xs[m]
        x = self._prev.recv(ACTIVATION, step, m)
        if x.is_floating_point():
            x.requires_grad_(True)
        return x

    def train_step(self, inputs, targets, loss_fn):
        """Runs this stage's forward and backward passes of one step;
        the parameters' .grad then hold their share (see the module's
        docstring) for DistributedOptimizer.step(). `loss_fn(output,
        target)` returns a micro-batch's mean loss. Returns the batch's
        mean loss on the last stage, None on the others."""
        self._check_optimizer()
        step = self._exchange
        self._exchange += 1
        xs = self._split(inputs, "inputs") if self.is_first else None
        ys = self._split(targets, "targets") if self.is_last else None
        total = sum(y.shape[0] for y in ys) if ys is not None else None
        kept = {}  # micro-batch -> (input, output or scaled loss)
        loss_sum = 0.0
        for kind, m in self._order:
            if kind == FORWARD:
                x = self._input(xs, step, m)
                out = self.module(x)
                if self.is_last:
                    loss = loss_fn(out, ys[m])
                    weight = ys[m].shape[0] / total
                    loss_sum += float(loss.detach()) * weight
                    # Times K: the servers average over R * K ranks.
                    out = loss * (weight * self.stages)
                else:
                    self._next.send(ACTIVATION, step, m, out)
                kept[m] = (x, out)
                continue
            x, out = kept.pop(m)
            if self.is_last:
                out.backward()
            else:
                grad = self._next.recv(GRADIENT, step, m, out.shape,
                                       out.dtype) if (
                    out.is_floating_point()) else None
                if out.requires_grad:
                    out.backward(grad)
            if not self.is_first and x.is_floating_point():
                # Zeros where this stage's output does not depend on x.
                self._prev.send(GRADIENT, step, m, x.grad if x.grad is not
                                None else torch.zeros_like(x))
        return loss_sum if self.is_last else None

    @torch.no_grad()
    def predict(self, inputs):
        """The model's output for `inputs` (needed on stage 0), in
        micro-batches through the stages: on the last stage, else None."""
        step = self._exchange
        self._exchange += 1
        xs = self._split(inputs, "inputs") if self.is_first else None
        outputs = []
        for m in range(self.micro_batches):
            x = xs[m] if self.is_first else self._prev.recv(ACTIVATION, step,
                                                            m)
            out = self.module(x)
            if self.is_last:
                outputs.append(out)
            else:
                self._next.send(ACTIVATION, step, m, out)
        return torch.cat(outputs) if self.is_last else None
