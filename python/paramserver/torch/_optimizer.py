"""DistributedOptimizer: gradient hooks that push during backward, and
step(), which finishes the servers' step and puts its result into the
parameters. Placement (where the optimizer runs) is described in the
package's docstring.
"""

import contextlib
import numpy as np
import torch

import paramserver
from paramserver.torch import _runtime
from paramserver.torch._collectives import Average
from paramserver.torch._compression import (Compression,
                                            set_wire_compression)
from paramserver.torch._broadcast import (broadcast_after_declaration,
                                          broadcast_declared)
from paramserver.torch import _gradients
from paramserver.torch._gradients import StepGradients
from paramserver.torch._optimizer_record import ServerRecord
from paramserver.torch._reduction import Reduction
from paramserver.torch._declaration import (group_of, hyperparameters,
                                            tensor_specs,
                                            trainable_parameters)
from paramserver.torch._server_optimizer import (declared_spec,
                                                 resolve_placement)
from paramserver.torch._worker_mean import GradientMean


class _DistributedOptimizer(torch.optim.Optimizer):
    """Methods mixed into a subclass of the wrapped optimizer's class, as
    Horovod does, so that isinstance(), schedulers and state_dict() behave
    as for the optimizer itself, with ServerRecord's (_optimizer_record).
    See DistributedOptimizer()."""

    def __init__(self, params, named_parameters, placement, planned_steps,
                 backward_passes_per_step, seed, reduction):
        super(self.__class__, self).__init__(params)
        state = _runtime.require_init()
        if state.optimizer is not None:
            raise ValueError("paramserver: one DistributedOptimizer per "
                             "process (the servers hold one model)")
        self._client = state.client
        self._metrics = state.metrics
        self._placement = placement
        self._reduction = reduction
        self.num_examples = 1
        self._trainable = trainable_parameters(self.param_groups,
                                               named_parameters)
        self._gradients = StepGradients([n for n, _ in self._trainable],
                                        backward_passes_per_step, placement)
        spec, wd_flags = declared_spec(
            placement, type(self).__mro__[1], self.param_groups,
            [group_of(self.param_groups, p) for _, p in self._trainable])
        self._hyper = hyperparameters(self.param_groups)

        specs, self._extra = tensor_specs(self._trainable, state.pending,
                                          wd_flags)
        self._client.declare(specs, planned_steps or 0, seed, spec)
        if placement == "worker" and self._client.mode != "sync":
            raise paramserver.FailedPreconditionError(
                "placement='worker' averages gradients in sync mode only; "
                "the servers run --mode=%s" % self._client.mode)
        self._uploaded_crc = broadcast_declared(
            self._client, self._trainable, self._extra,
            alias=placement == "server")
        state.pending = {}
        state.optimizer = self

        # Where a restarted rank resumes: its step and data position.
        self.registration = self._client.registration
        self._epoch = self.registration.epoch
        self._step_number = self.registration.next_step
        if placement == "worker":
            self._mean = GradientMean(
                self._client.collectives(), [n for n, _ in self._trainable],
                [p.shape for _, p in self._trainable], reduction)
        self._push = None
        self._synchronized = False  # synchronize() finished the push.
        self._hook_error = None  # Why a hook cancelled the step.
        self._skip_synchronize = False
        self._zeros = {}
        self._first_step = self._step_number
        self._start_crc = self._trainable_crc()
        self._grad_accs = []
        self._register_hooks()

    # -- construction ------------------------------------------------------

    def _broadcast_after_declaration(self, named):
        """broadcast_parameters(named) after this optimizer declared."""
        # Rank 0's parameters must still be what it uploaded until its
        # first step in server placement: the servers keep those.
        check = (self._placement == "server" and self._client.rank == 0 and
                 self._step_number == self._client.registration.next_step)
        return broadcast_after_declaration(
            self._client, self._trainable, self._extra, named,
            self._uploaded_crc if check else None)

    def _register_hooks(self):
        for i, (_, p) in enumerate(self._trainable):
            # The gradient accumulator, whose hooks run once p.grad holds
            # this backward's sum (torch 1.13 has no post-accumulate hook).
            acc = p.expand_as(p).grad_fn.next_functions[0][0]
            acc.register_hook(self._make_hook(i, p))
            self._grad_accs.append(acc)

    def _make_hook(self, i, p):
        def hook(*unused):
            if self._hook_error is not None:
                return
            if self._synchronized:
                self._cancel_in_hook(
                    "paramserver: backward() after synchronize() and before "
                    "step(): the gradients were already averaged; this step "
                    "was cancelled")
                return
            push_now, error = self._gradients.backward_pass(i)
            if error is not None:
                self._cancel_in_hook(error)
                return
            if push_now:
                try:
                    self._send(i, p.grad)
                except paramserver.Error as e:
                    self._cancel_in_hook(e)
                    return
                self._gradients.pushed(i, p.grad)
        return hook

    # -- a step ------------------------------------------------------------

    def _learning_rate(self):
        """What this step's push asks the servers to apply."""
        rates = {float(g["lr"]) for g in self.param_groups}
        if len(rates) > 1:
            self._abort(
                "paramserver: the param_groups' learning rates differ (%s); "
                "the servers apply one per step: schedule every group alike, "
                "or use placement='worker'" %
                ", ".join(map(repr, sorted(rates))))
        return rates.pop()

    def _check_num_examples(self):
        if int(self.num_examples) < 1:
            # The data cursor would not advance: the servers would take
            # every push for a replay and apply none (server placement);
            # the rank's gradient would weigh nothing (worker placement).
            self._abort("paramserver: num_examples is %r; it is this "
                        "rank's batch size, >= 1" % (self.num_examples,))

    def _start(self):
        if self._push is None:
            self._check_num_examples()
            self._push_lr = self._learning_rate()
            self._push = self._client.start_step(
                self._step_number, pull_after=True,
                num_examples=int(self.num_examples), epoch=self._epoch,
                learning_rate=self._push_lr)
        return self._push

    def _abort(self, message):
        """Cancels the open step (nothing is applied) and raises."""
        if self._placement == "worker":
            self._mean.cancel()
        self._push = None
        self._synchronized = False
        self._hook_error = None
        self._gradients.reset()
        raise paramserver.FailedPreconditionError(message)

    def _cancel_in_hook(self, error):
        """Cancels the open step from an autograd hook; the next
        synchronize() or step() raises `error` (an exception or a message).
        Raising in the hook would leave autograd's graph to a traceback,
        whose release at exit deadlocks torch 1.13 (it takes the GIL to
        free a node)."""
        self._push = None
        self._hook_error = (
            error if isinstance(error, Exception) else
            paramserver.FailedPreconditionError(error))

    def _raise_hook_error(self):
        error = self._hook_error
        if error is not None:
            try:
                self._abort(str(error))
            except paramserver.FailedPreconditionError:
                raise error from None

    def _send(self, i, grad):
        with self._metrics.phase("communication"):
            self._send_now(i, grad)

    def _send_now(self, i, grad):
        if self._placement == "worker":
            self._check_num_examples()
            self._mean.send(i, grad, int(self.num_examples))
            return
        push = self._start()
        if grad is None:
            values = self._zeros_for(i)
        else:
            # A copy, read by the client's threads until the step ends,
            # that nothing the script does to .grad can change.
            values = self._reduction.outgoing(grad)
        push.send(i, values)

    def _zeros_for(self, i):
        # A trainable parameter backward() gave no gradient: an update of
        # zero.
        if i not in self._zeros:
            self._zeros[i] = np.zeros(self._client.model[i].shape, np.float32)
        return self._zeros[i]

    def _check_hyperparameters(self):
        if self._placement != "server":
            return
        now = hyperparameters(self.param_groups)
        for gi, (before, after) in enumerate(zip(self._hyper, now)):
            for key in before:
                if before[key] != after.get(key):
                    self._abort(
                        "paramserver: param_groups[%d]['%s'] changed from %r "
                        "to %r, but the servers run the optimizer declared "
                        "with %r; only the learning rate may change (each "
                        "push carries it), or use placement='worker'" %
                        (gi, key, before[key], after.get(key), before[key]))

    def synchronize(self):
        """Placement 'worker': finishes the step's collectives and puts the
        ranks' mean gradient into each ``.grad``, where the script may edit
        it (clipping, unscaling) before ``with skip_synchronize():
        step()``, as in Horovod. Placement 'server' refuses it: there the
        servers average and step, and the mean never reaches the worker."""
        self._raise_hook_error()
        if self._synchronized:
            return
        if self._placement != "worker":
            self._abort(
                "paramserver: synchronize() needs placement='worker': with "
                "placement='server' the servers average the gradients and "
                "step, so there is no mean gradient on the worker to edit "
                "(this step was cancelled)")
        means = self._finish_mean()
        for i, (_, p) in enumerate(self._trainable):
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            p.grad.copy_(torch.from_numpy(means[i]).reshape(p.shape))
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        """Inside it, step() only steps (after synchronize())."""
        self._skip_synchronize = True
        try:
            yield
        finally:
            self._skip_synchronize = False

    def _check_gradients(self):
        error = (self._gradients.incomplete() or self._gradients.edited(
            [p.grad for _, p in self._trainable]))
        if error is not None:
            self._abort(error)

    def _finish_mean(self):
        """Worker placement: sends what the hooks have not, after checking
        that what they sent is what the script holds; the ranks' mean
        gradients, by trainable index."""
        self._check_gradients()
        for i, (_, p) in enumerate(self._trainable):
            if not self._mean.sent(i):
                self._send(i, p.grad)
        try:
            with self._metrics.phase("waiting"):
                return self._mean.finish(int(self.num_examples))
        finally:
            self._gradients.reset()
            self._step_number += 1

    def _finish_push(self):
        """Pushes what the hooks have not sent, after checking that what
        they sent is what the script holds, and pulls the result."""
        self._check_hyperparameters()
        self._check_gradients()
        push = self._start()
        if self._push_lr != self._learning_rate():
            self._abort("paramserver: the learning rate changed between "
                        "backward() and step(); this step was cancelled")
        for i in range(len(self._trainable)):
            if not self._gradients.was_pushed(i):
                self._send(i, self._trainable[i][1].grad)
        for i, tensor in self._extra:
            # Buffers (declared assigned): their value, a copy; the servers
            # keep the ranks' mean, which the pull brings back.
            push.send(i, np.array(tensor.detach().cpu().numpy(),
                                  dtype=np.float32))
        try:
            with self._metrics.phase("waiting"):
                push.finish_with_pull()
        finally:
            self._push = None
            self._gradients.reset()
        self._step_number += 1
        weights = self._client.weights
        with torch.no_grad():
            for i, tensor in self._extra:
                mean = torch.from_numpy(weights[i])
                if not tensor.dtype.is_floating_point:
                    mean = mean.round()  # num_batches_tracked
                tensor.copy_(mean.reshape(tensor.shape).to(tensor.dtype))

    def step(self, closure=None):
        """Finishes the step: pushes what the hooks have not sent, then
        puts the new weights (server placement) or the ranks' mean
        gradient, stepped by the wrapped optimizer (worker placement), into
        the parameters. After synchronize(), only the wrapped optimizer
        steps."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._raise_hook_error()
        if self._skip_synchronize and not self._synchronized:
            self._abort("paramserver: step() inside skip_synchronize() "
                        "without synchronize() first; this step was "
                        "cancelled. To " + _gradients.EDIT_PATTERN)
        if not self._synchronized:
            if self._placement == "worker":
                self.synchronize()
            else:
                self._finish_push()
        if self._placement == "worker":
            super(self.__class__, self).step()
        self._synchronized = False
        self._metrics.step_done(self.num_examples, self._epoch,
                                self._client.replays.replays)
        return loss


# The class body DistributedOptimizer() gives its subclass of the wrapped
# optimizer's class (ServerRecord's attributes describe no instance layout).
_METHODS = dict(
    {k: v for k, v in ServerRecord.__dict__.items()
     if k not in ("__dict__", "__weakref__", "__doc__", "__module__")},
    **_DistributedOptimizer.__dict__)


def DistributedOptimizer(optimizer, named_parameters=None,
                         compression=Compression.none,
                         backward_passes_per_step=1, op=Average,
                         gradient_predivide_factor=1.0, placement="server",
                         planned_steps=None, seed=1, **unsupported):
    """Wraps `optimizer` so that step() trains through the servers.

    Collective: every rank creates it; it declares the model (the
    optimizer's trainable parameters, named by `named_parameters`, plus
    whatever broadcast_parameters was given before) with the servers'
    optimizer, and gives every rank rank 0's values. `planned_steps`: the
    steps this rank trains, recorded by the servers (their own
    --lr_schedule only applies to pushes without a learning rate, which
    this layer never sends). Set ``opt.num_examples``
    to weight this rank's gradient in a sync step by its batch (default:
    every rank alike). Returns an instance of a subclass of the
    optimizer's class, named Distributed<its name>.

    Gradients are pushed from autograd's hooks as copies, so the servers
    receive what backward() computed; step() refuses (and cancels the
    step) if the script changed a pushed gradient since (clipping,
    unscaling): with placement='worker', edit them between synchronize()
    and ``with opt.skip_synchronize(): opt.step()``, as in Horovod.
    `backward_passes_per_step`: the backward() calls whose gradients
    accumulate into each step; backward() more often, or step() before the
    last, is refused.

    Horovod's `compression`, `op` and `gradient_predivide_factor` (in
    Horovod's positional order) mean in each placement what
    paramserver.torch._reduction says: in short, all three as in Horovod
    with placement='worker'; with placement='server' only op=hvd.Average
    (the servers step on the mean), and fp16 rounds what is pushed. What
    cannot be honoured raises ValueError before anything is declared.
    Horovod's other arguments (sparse_as_dense, num_groups, groups,
    process_set) raise TypeError naming them.
    """
    from paramserver.torch import _allreduce
    if _allreduce.active():  # No servers: the ring's optimizer.
        return _allreduce.DistributedOptimizer(
            optimizer, named_parameters, compression,
            backward_passes_per_step, op, gradient_predivide_factor,
            placement, planned_steps, seed, **unsupported)
    if unsupported:
        raise TypeError(
            "paramserver: DistributedOptimizer does not take %s (Horovod's "
            "fusion groups, sparse gradients and process sets are not "
            "supported: gradients are sent one tensor at a time, dense, to "
            "every rank)" % ", ".join(sorted(unsupported)))
    placement = resolve_placement(placement, optimizer)
    reduction = Reduction(placement, compression, op,
                          gradient_predivide_factor)
    _runtime.require_init()
    # Named for what it is: an error about a missing attribute says
    # 'DistributedAdam', not 'Adam', while isinstance(opt, Adam) holds.
    cls = type("Distributed" + optimizer.__class__.__name__,
               (optimizer.__class__,), _METHODS)
    named = list(named_parameters) if named_parameters is not None else None
    opt = cls(optimizer.param_groups, named, placement, planned_steps,
              backward_passes_per_step, seed, reduction)
    set_wire_compression(opt._client, compression, placement,
                         gradient_predivide_factor)
    return opt
