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
- ``"worker"`` (sync only; any PyTorch optimizer): the servers only average
  gradients (the declaration asks them for SGD at learning rate 1 without
  momentum, which applies w - mean(pushes)); ``step()`` puts the average
  into ``.grad`` and steps the wrapped optimizer locally.
- ``"auto"``: "server" if the servers implement the wrapped optimizer with
  its settings, else "worker".

Parameters alias the client's weight buffers in "server" placement: each
step's pull lands in them with no copy. Only float32 CPU parameters are
supported. Only trainable parameters (requires_grad, in the optimizer) are
pushed; other tensors given to broadcast_parameters before the optimizer
is created (buffers, frozen parameters) get rank 0's values once.

``save_model(path, module)`` writes a state_dict in the format of the
servers' and the C++ worker's models; ``load_model(path)`` reads one, or
the servers' checkpoints in a directory, as a state_dict.
"""

import os
import warnings
import zlib

import numpy as np
import torch

import paramserver

__all__ = [
    "init", "is_initialized", "rank", "size", "local_rank", "local_size",
    "mode", "broadcast_parameters", "DistributedOptimizer", "shutdown",
    "save_model", "load_model",
]


class _State:
    """What init() learnt; one per process, as Horovod's."""

    def __init__(self, client):
        self.client = client
        self.rank = client.rank
        self.size = _env_int("PS_NUM_WORKERS", "WORLD_SIZE", 1)
        self.local_rank = _env_int("PS_LOCAL_RANK", "LOCAL_RANK", self.rank)
        self.local_size = _env_int("PS_LOCAL_NUM_WORKERS", "LOCAL_WORLD_SIZE",
                                   self.size)
        # Tensors given to broadcast_parameters before the declaration.
        self.pending = {}
        self.optimizer = None
        self.finished = False


_state = None


def _env_int(name, fallback, default):
    value = os.environ.get(name) or os.environ.get(fallback)
    return int(value) if value else default


def init(servers=None, rank=None, job_id=None, connect_timeout=None,
         retry_timeout=None, **options):
    """Connects to the servers the launcher's environment names.

    The arguments override PS_SERVERS, PS_RANK and PS_JOB_ID (for running
    without the launcher); `options` are paramserver.Client's others:
    tls_ca_file=... (over the PS_TLS_* variables, which apply also when
    `servers` is given), local_transport=False (gRPC even on one host).
    Calling it again does nothing.
    """
    global _state
    if _state is not None:
        return
    client = paramserver.Client(servers=servers, rank=rank, job_id=job_id,
                                connect_timeout=connect_timeout,
                                retry_timeout=retry_timeout, **options)
    _state = _State(client)


def is_initialized():
    """Whether init() has been called (and not shutdown())."""
    return _state is not None


def _require_init():
    if _state is None:
        raise ValueError("paramserver.torch: call init() first")
    return _state


def rank():
    """This worker's rank in [0, size())."""
    return _require_init().rank


def size():
    """The number of workers."""
    return _require_init().size


def local_rank():
    """This worker's rank among the workers of its host."""
    return _require_init().local_rank


def local_size():
    """The number of workers on this host."""
    return _require_init().local_size


def mode():
    """The servers' consistency mode, once DistributedOptimizer declared."""
    state = _require_init()
    return state.client.mode


def _named(params):
    """(name, tensor) pairs from a state_dict, named parameters, or a list
    of (name, tensor)."""
    items = params.items() if hasattr(params, "items") else params
    return [(str(name), tensor) for name, tensor in items]


def broadcast_parameters(params, root_rank=0):
    """Gives every rank root_rank's values of `params` (a state_dict or
    named parameters), in place.

    Rank 0 declares the model, so root_rank must be 0. Called before
    DistributedOptimizer (as Horovod's examples do), the tensors join the
    declaration and are broadcast when the optimizer is created: buffers
    and frozen parameters included. Called after it, the trainable
    parameters already hold rank 0's values (the optimizer broadcast
    them), and anything else cannot be declared any more: an error.
    """
    state = _require_init()
    if root_rank != 0:
        raise ValueError("paramserver: only rank 0 declares the model, so "
                         "root_rank must be 0, got %r" % root_rank)
    named = _named(params)
    if state.optimizer is None:
        for name, tensor in named:
            state.pending[name] = tensor
        return
    state.optimizer._broadcast_after_declaration(named)


def shutdown():
    """Tells the servers this rank is done and closes the connections."""
    global _state
    if _state is None:
        return
    try:
        if _state.optimizer is not None and not _state.finished:
            _state.client.finish()
            _state.finished = True
    finally:
        _state.client.close()
        _state = None


def _server_kind(cls, param_groups):
    """"sgd" or "adam" for what the servers implement, else None."""
    if cls is torch.optim.SGD:
        return "sgd"
    if cls is torch.optim.Adam:
        return "adam"
    if cls is torch.optim.AdamW and all(
            g["weight_decay"] == 0 for g in param_groups):
        return "adam"  # AdamW without decay is Adam.
    return None


# The servers' optimizer of worker placement: w - lr * mean(pushes) at
# learning rate 1 is w - mean(pushes), which _send relies on.
_SUMMATION_LR = 1.0


def _summation_spec():
    return paramserver.OptimizerSpec.sgd(_SUMMATION_LR, 0.0, 0.0)


def _server_spec(cls, groups):
    """The servers' OptimizerSpec equal to an optimizer of class `cls` with
    `groups`, or (None, why not)."""
    kind = _server_kind(cls, groups)
    if kind is None:
        return None, ("the servers implement SGD (momentum, weight decay) "
                      "and Adam, not %s" % cls.__name__)
    lacks = {"sgd": ("dampening", "nesterov"), "adam": ("amsgrad",)}[kind]
    problems = []
    for i, g in enumerate(groups):
        for key in lacks + ("maximize",):
            if g.get(key):
                problems.append("param_groups[%d] sets %s=%r, which the "
                                "servers lack" % (i, key, g[key]))
    keys = ("lr", "momentum") if kind == "sgd" else ("lr", "betas", "eps")
    for key in keys:
        values = sorted({repr(g.get(key, 0)) for g in groups})
        if len(values) > 1:
            problems.append("the param_groups' %s differ (%s); the servers "
                            "hold one optimizer" % (key, ", ".join(values)))
    decays = sorted({float(g.get("weight_decay", 0)) for g in groups} - {0})
    if len(decays) > 1:
        problems.append("the param_groups' weight_decay differ (%s); the "
                        "servers apply one, or none to a tensor" %
                        ", ".join(map(repr, decays)))
    if problems:
        return None, "; ".join(problems)
    g = groups[0]
    wd = decays[0] if decays else 0.0
    if kind == "sgd":
        spec = paramserver.OptimizerSpec.sgd(
            float(g["lr"]), float(g.get("momentum", 0)), wd)
    else:
        beta1, beta2 = g["betas"]
        spec = paramserver.OptimizerSpec.adam(
            float(g["lr"]), float(beta1), float(beta2), float(g["eps"]), wd)
    return spec, None


def _resolve_placement(placement, optimizer):
    """"server" or "worker" for `placement`; see the module's docstring."""
    if placement not in ("auto", "server", "worker"):
        raise ValueError("placement is 'auto', 'server' or 'worker', got %r"
                         % (placement,))
    if placement != "auto":
        return placement
    spec, _ = _server_spec(type(optimizer), optimizer.param_groups)
    return "server" if spec is not None else "worker"


class _DistributedOptimizer(torch.optim.Optimizer):
    """Methods mixed into a subclass of the wrapped optimizer's class, as
    Horovod does, so that isinstance(), schedulers and state_dict() behave
    as for the optimizer itself. See DistributedOptimizer()."""

    def __init__(self, params, named_parameters, placement, planned_steps,
                 backward_passes_per_step, seed):
        super(self.__class__, self).__init__(params)
        state = _require_init()
        if state.optimizer is not None:
            raise ValueError("paramserver: one DistributedOptimizer per "
                             "process (the servers hold one model)")
        self._client = state.client
        self._placement = placement
        self._passes_per_step = int(backward_passes_per_step)
        if self._passes_per_step < 1:
            raise ValueError("backward_passes_per_step must be >= 1")
        self.num_examples = 1
        self._trainable = self._trainable_parameters(named_parameters)
        spec, wd_flags = self._optimizer_spec()
        self._hyper = self._hyperparameters()

        specs, self._extra = self._declaration(state.pending, wd_flags)
        self._client.declare(specs, planned_steps or 0, seed, spec)
        if placement == "worker" and self._client.mode != "sync":
            raise paramserver.FailedPreconditionError(
                "placement='worker' averages gradients in sync mode only; "
                "the servers run --mode=%s" % self._client.mode)
        self._broadcast()
        state.pending = {}
        state.optimizer = self

        # Where a restarted rank resumes: its step and data position.
        self.registration = self._client.registration
        self._epoch = self.registration.epoch
        self._step_number = self.registration.next_step
        if placement == "worker":
            self._zero_summation_state(self._step_number)
            self._step_number += 1
        self._push = None
        self._sent = set()
        self._passes = [0] * len(self._trainable)
        self._zeros = {}
        self._grad_accs = []
        self._register_hooks()

    # -- construction ------------------------------------------------------

    def _trainable_parameters(self, named_parameters):
        """[(name, param)] of the optimizer's trainable parameters, in the
        optimizer's order, named as named_parameters says."""
        names = {}
        if named_parameters is not None:
            for name, p in named_parameters:
                names.setdefault(id(p), name)
        else:
            warnings.warn("paramserver: no named_parameters; parameters are "
                          "declared as param.<group>.<index>")
        result, seen = [], set()
        for gi, group in enumerate(self.param_groups):
            for pi, p in enumerate(group["params"]):
                if id(p) in seen or not p.requires_grad:
                    continue
                seen.add(id(p))
                name = names.get(id(p))
                if name is None:
                    if named_parameters is not None:
                        raise ValueError(
                            "paramserver: a parameter of the optimizer "
                            "(group %d, index %d, shape %s) is not in "
                            "named_parameters" % (gi, pi, tuple(p.shape)))
                    name = "param.%d.%d" % (gi, pi)
                _check_tensor(name, p)
                result.append((name, p))
        if not result:
            raise ValueError("paramserver: the optimizer has no trainable "
                             "parameters")
        return result

    def _group_of(self, param):
        for group in self.param_groups:
            if any(p is param for p in group["params"]):
                return group
        raise AssertionError("not in the optimizer")

    def _optimizer_spec(self):
        """The servers' OptimizerSpec and each trainable parameter's weight
        decay flag; raises if the servers cannot run the wrapped optimizer
        here."""
        if self._placement == "worker":
            return _summation_spec(), [False] * len(self._trainable)
        wrapped = type(self).__mro__[1]
        spec, why = _server_spec(wrapped, self.param_groups)
        if spec is None:
            raise ValueError(
                "paramserver: %s, so placement='server' cannot run this %s; "
                "use placement='worker' (sync mode: the servers average "
                "gradients and %s steps on every worker)" %
                (why, wrapped.__name__, wrapped.__name__))
        groups = [self._group_of(p) for _, p in self._trainable]
        return spec, [g.get("weight_decay", 0) != 0 for g in groups]

    def _hyperparameters(self):
        """What the declaration fixed: all but the learning rate, which
        every push carries."""
        keys = ("momentum", "betas", "eps", "weight_decay", "dampening",
                "nesterov", "amsgrad", "maximize")
        return [{k: g[k] for k in keys if k in g} for g in self.param_groups]

    def _declaration(self, pending, wd_flags):
        """The TensorSpecs: trainable parameters, then the other pending
        tensors (broadcast once, then pushed as zeros)."""
        specs = []
        trainable_ptrs = set()
        for (name, p), wd in zip(self._trainable, wd_flags):
            # Worker placement: the tensor holds the summation state, which
            # brings rank 0's values first, then is zeroed (see _send).
            specs.append(paramserver.tensor_spec(name, p.shape, "from_rank0",
                                                 wd))
            trainable_ptrs.add((p.data_ptr(), tuple(p.shape)))
        extra = []
        for name, tensor in pending.items():
            if (tensor.data_ptr(), tuple(tensor.shape)) in trainable_ptrs:
                continue  # A state_dict entry of a trainable parameter.
            if tensor.is_floating_point() or tensor.dtype in (
                    torch.int64, torch.int32, torch.int16, torch.int8,
                    torch.uint8, torch.bool):
                specs.append(paramserver.tensor_spec(
                    name, tensor.shape, "from_rank0", False))
                extra.append((len(specs) - 1, tensor))
            else:
                raise TypeError("paramserver: cannot broadcast %s of dtype "
                                "%s" % (name, tensor.dtype))
        names = [s.name for s in specs]
        if len(set(names)) != len(names):
            raise ValueError("paramserver: two tensors named alike in %s" %
                             names)
        return specs, extra

    def _broadcast(self):
        """Rank 0's values into every rank's parameters and extra tensors;
        in "server" placement the parameters then alias the buffers."""
        weights = self._client.weights
        for i, (_, p) in enumerate(self._trainable):
            weights[i][...] = p.detach().numpy()
        for i, tensor in self._extra:
            values = tensor.detach().cpu().numpy().astype(np.float64)
            if self._client.rank == 0 and np.any(np.abs(values) > 2**24):
                raise ValueError("paramserver: %s holds integers beyond "
                                 "float32's exact range" %
                                 self._client.model[i].name)
            weights[i][...] = values
        self._client.broadcast()
        self._uploaded_crc = self._checksum()
        for i, (_, p) in enumerate(self._trainable):
            with torch.no_grad():
                if self._placement == "server":
                    p.data = torch.from_numpy(weights[i])
                else:
                    p.copy_(torch.from_numpy(weights[i]))
        for i, tensor in self._extra:
            with torch.no_grad():
                tensor.copy_(torch.from_numpy(weights[i]).to(tensor.dtype))
        # The version the first push is computed from.
        self._client.pull(self._client.registration.next_step)

    def _zero_summation_state(self, step):
        """Worker placement: one server step that pushes s itself, leaving
        s = 0 exactly on the servers (s - mean(s, s, ...)), so that the first
        training step's mean gradient is exact too. See _send."""
        weights = self._client.weights
        push = self._client.start_step(step, pull_after=True)
        for i, w in enumerate(weights):
            push.send(i, w)
        push.finish_with_pull()
        self._sum_state = [np.zeros_like(w) for w in weights]

    def _checksum(self):
        return [zlib.crc32(w.tobytes()) for w in
                self._client.weights[:len(self._trainable)]]

    def _broadcast_after_declaration(self, named):
        ids = {name: i for i, (name, _) in enumerate(self._trainable)}
        missing = [n for n, t in named if n not in ids and
                   not any(t is x for _, x in self._extra)]
        if missing:
            raise paramserver.FailedPreconditionError(
                "paramserver: %s cannot be broadcast after "
                "DistributedOptimizer declared the model (they are not "
                "trainable parameters of it); call broadcast_parameters "
                "before DistributedOptimizer" % ", ".join(missing))
        if (self._placement == "server" and self._client.rank == 0 and
                self._step_number == self._client.registration.next_step and
                self._checksum() != self._uploaded_crc):
            raise paramserver.FailedPreconditionError(
                "paramserver: rank 0's parameters changed after "
                "DistributedOptimizer broadcast them (a checkpoint loaded "
                "since?); the servers keep the first values, so call "
                "broadcast_parameters before DistributedOptimizer")
        for name, tensor in named:
            if name in ids:
                p = self._trainable[ids[name]][1]
                if tensor.data_ptr() != p.data_ptr():
                    with torch.no_grad():
                        tensor.copy_(p)

    def _register_hooks(self):
        for i, (_, p) in enumerate(self._trainable):
            # The gradient accumulator, whose hooks run once p.grad holds
            # this backward's sum (torch 1.13 has no post-accumulate hook).
            acc = p.expand_as(p).grad_fn.next_functions[0][0]
            acc.register_hook(self._make_hook(i, p))
            self._grad_accs.append(acc)

    def _make_hook(self, i, p):
        def hook(*unused):
            self._passes[i] += 1
            if self._passes[i] == self._passes_per_step:
                self._send(i, p.grad)
        return hook

    # -- a step ------------------------------------------------------------

    def _learning_rate(self):
        """What this step's push asks the servers to apply."""
        if self._placement == "worker":
            return _SUMMATION_LR
        rates = {float(g["lr"]) for g in self.param_groups}
        if len(rates) > 1:
            self._abort(
                "paramserver: the param_groups' learning rates differ (%s); "
                "the servers apply one per step: schedule every group alike, "
                "or use placement='worker'" %
                ", ".join(map(repr, sorted(rates))))
        return rates.pop()

    def _start(self):
        if self._push is None:
            self._push_lr = self._learning_rate()
            self._push = self._client.start_step(
                self._step_number, pull_after=True,
                num_examples=int(self.num_examples), epoch=self._epoch,
                learning_rate=self._push_lr)
        return self._push

    def _abort(self, message):
        """Cancels the open step (nothing is applied) and raises."""
        self._push = None
        self._sent = set()
        self._passes = [0] * len(self._trainable)
        raise paramserver.FailedPreconditionError(message)

    def _send(self, i, grad):
        if i in self._sent:
            self._abort(
                "paramserver: a gradient of %s was computed again before "
                "step(); this step was cancelled (for gradient accumulation "
                "set backward_passes_per_step)" % self._trainable[i][0])
        push = self._start()
        if grad is None:
            values = self._zeros_for(i)
        else:
            values = grad.detach().numpy()
            if self._placement == "worker":
                # The servers hold s (every rank knows it) and apply
                # s - mean(pushes); pushing s - g leaves mean(g) there.
                values = self._sum_state[i] - values
        self._sent.add(i)
        push.send(i, values)

    def _zeros_for(self, i):
        if self._placement == "worker":
            return self._sum_state[i]  # s - 0.
        # Extra (broadcast-only) tensors: an update of zero.
        if i not in self._zeros:
            self._zeros[i] = np.zeros(self._client.model[i].shape, np.float32)
        return self._zeros[i]

    def _check_hyperparameters(self):
        if self._placement != "server":
            return
        now = self._hyperparameters()
        for gi, (before, after) in enumerate(zip(self._hyper, now)):
            for key in before:
                if before[key] != after.get(key):
                    self._abort(
                        "paramserver: param_groups[%d]['%s'] changed from %r "
                        "to %r, but the servers run the optimizer declared "
                        "with %r; only the learning rate may change (each "
                        "push carries it), or use placement='worker'" %
                        (gi, key, before[key], after.get(key), before[key]))

    def step(self, closure=None):
        """Finishes the step: pushes what the hooks have not sent, then
        puts the new weights (server placement) or the ranks' mean
        gradient, stepped by the wrapped optimizer (worker placement), into
        the parameters."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._check_hyperparameters()
        push = self._start()
        if self._push_lr != self._learning_rate():
            self._abort("paramserver: the learning rate changed between "
                        "backward() and step(); this step was cancelled")
        for i in range(len(self._client.weights)):
            if i in self._sent:
                continue
            if i < len(self._trainable):
                self._send(i, self._trainable[i][1].grad)
            else:
                push.send(i, self._zeros_for(i))
        try:
            push.finish_with_pull()
        finally:
            self._push = None
            self._sent = set()
            self._passes = [0] * len(self._trainable)
        self._step_number += 1
        if self._placement == "worker":
            weights = self._client.weights
            for i, (_, p) in enumerate(self._trainable):
                self._sum_state[i][...] = weights[i]
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                p.grad.copy_(torch.from_numpy(weights[i]))
            super(self.__class__, self).step()
        return loss

    def set_epoch(self, epoch):
        """Tells the servers which epoch the next steps' batches come from,
        as DistributedSampler.set_epoch: with ``num_examples`` they record
        where in the data each rank is, for a restarted rank to resume."""
        self._epoch = int(epoch)

    def pull_final(self):
        """Server placement: puts into the parameters the weights once every
        rank has finished (in ssp and async, others may still be training
        after this rank's last step)."""
        if self._placement != "server":
            raise paramserver.FailedPreconditionError(
                "paramserver: pull_final is for placement='server'")
        self._client.pull_final(self._step_number)

    @property
    def step_number(self):
        """Steps this rank has finished (the servers' clock for it)."""
        return self._step_number


def _check_tensor(name, p):
    if p.dtype != torch.float32 or p.device.type != "cpu" or p.is_sparse:
        raise TypeError("paramserver: %s is %s on %s; only dense float32 CPU "
                        "parameters are supported" % (name, p.dtype,
                                                      p.device))


def DistributedOptimizer(optimizer, named_parameters=None, placement="server",
                         planned_steps=None, backward_passes_per_step=1,
                         seed=1):
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
    optimizer's class.
    """
    _require_init()
    placement = _resolve_placement(placement, optimizer)
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DistributedOptimizer.__dict__))
    named = list(named_parameters) if named_parameters is not None else None
    return cls(optimizer.param_groups, named, placement, planned_steps,
               backward_passes_per_step, seed)


def save_model(path, state):
    """Saves a module's state_dict (or `state`, a state_dict) as a model
    file: every tensor as float32 (integer buffers such as BatchNorm's
    counter included, if float32 holds them exactly), the format the
    servers' and the C++ worker's models use. Call it on one rank."""
    if isinstance(state, torch.nn.Module):
        state = state.state_dict()
    paramserver.save_model(path, [(name, t.detach().cpu().numpy())
                                  for name, t in state.items()])


def load_model(path):
    """A state_dict of float32 tensors from a model file (save_model's, the
    C++ worker's --save_model) or, for a directory, from the servers'
    checkpoints in it (their --checkpoint_dir; the newest version every
    shard wrote). ``module.load_state_dict(ps.load_model(p))`` converts to
    the module's dtypes; names are those declared (DistributedOptimizer
    declares named_parameters' names)."""
    if os.path.isdir(path):
        tensors, _ = paramserver.load_checkpoint(path)
    else:
        tensors = paramserver.load_model(path)
    return {name: torch.from_numpy(array) for name, array in tensors.items()}
