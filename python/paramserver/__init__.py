"""Train through the parameter servers from Python.

A binding of the public C++ client library (client/parameter_client.h); read
that header for what each call means in sync, ssp and async mode. A program
started by the launcher (``deploy/local/launch ... -- /usr/bin/python3
train.py``) finds the servers, its rank and the job in its environment::

    import numpy as np
    import paramserver

    client = paramserver.Client()                 # PS_SERVERS, PS_RANK, ...
    client.declare([("w", (4,), "from_rank0"), ("b", (), "zeros", False)],
                   planned_steps=100)
    client.weights[0][:] = initial_w              # rank 0's values count
    weights = client.broadcast()                  # every rank calls it
    for step in range(100):
        grads = compute(weights)                  # one array per tensor
        client.push_pull(step, grads)             # weights now hold step+1
    client.finish()

Arrays are float32 NumPy arrays. ``client.weights`` are views of the
client's own buffers, which every pull overwrites in place: nothing is
copied between the network and them; copy one to keep it. Gradients are
read where they lie when they are C-contiguous float32 (else converted
once). Failures raise ``paramserver.Error`` (or a subclass per status:
``InvalidArgumentError`` is also a ``ValueError``, ``UnavailableError`` a
``ConnectionError``...) whose message names the shard and carries the
server's words; ``err.code`` is the status code's name.

Saved models: ``load_model(path)`` reads a model file (the C++ worker's
``--save_model``, or ``save_model``'s) and ``load_checkpoint(dir)`` the
weights in the servers' checkpoints (``--checkpoint_dir``), both as
``{name: float32 array}`` in declaration order.

The PyTorch layer, in Horovod's conventions, is ``paramserver.torch``.
"""

import numbers

import numpy as np

try:
    from paramserver import _native
except ImportError as e:  # pragma: no cover - depends on the build
    raise ImportError(
        "paramserver._native is not built or not on the path: run "
        "`bazel build //python:paramserver` and put bazel-bin/python/site "
        "on PYTHONPATH, with Debian's /usr/bin/python3 (%s)" % e) from e
from paramserver import _replays  # noqa: E402 (after the check above)

Error = _native.Error
InvalidArgumentError = _native.InvalidArgumentError
FailedPreconditionError = _native.FailedPreconditionError
NotFoundError = _native.NotFoundError
UnavailableError = _native.UnavailableError
DeadlineExceededError = _native.DeadlineExceededError
AbortedError = _native.AbortedError
Initializer = _native.Initializer
TensorSpec = _native.TensorSpec
OptimizerSpec = _native.OptimizerSpec
Registration = _native.Registration

__all__ = [
    "Client", "Step", "TensorSpec", "Initializer", "OptimizerSpec",
    "Registration",
    "tensor_spec", "Error", "InvalidArgumentError",
    "FailedPreconditionError", "NotFoundError", "UnavailableError",
    "DeadlineExceededError", "AbortedError", "load_model", "save_model",
    "load_checkpoint", "worker_place",
]

_INITIALIZERS = {
    "zeros": Initializer.zeros,
    "constant": Initializer.constant,
    "uniform": Initializer.uniform,
    "normal": Initializer.normal,
    "glorot_uniform": Initializer.glorot_uniform,
    "from_rank0": Initializer.from_rank0,
}


def _as_initializer(value):
    """Accepts an Initializer, a kind name, or (kind, *params).

    Tuples keep declarations one line long, as a user writes them.
    """
    if isinstance(value, Initializer):
        return value
    if isinstance(value, str):
        value = (value,)
    if (isinstance(value, (tuple, list)) and value and
            value[0] in _INITIALIZERS):
        return _INITIALIZERS[value[0]](*value[1:])
    raise InvalidArgumentError(
        "an initializer is an Initializer, one of %s, or (kind, params...); "
        "got %r" % (sorted(_INITIALIZERS), value))


def tensor_spec(name, shape, initializer="zeros", weight_decay=True,
                assigned=False):
    """A TensorSpec from plain values; shape () declares a scalar.
    `assigned`: a buffer, whose pushes carry its value and set it (a sync
    step's weighted mean over the ranks), with no optimizer."""
    return TensorSpec(str(name), [int(d) for d in shape],
                      _as_initializer(initializer), bool(weight_decay),
                      bool(assigned))


def _as_spec(item):
    """A TensorSpec from a TensorSpec or a (name, shape, init, wd) tuple."""
    if isinstance(item, TensorSpec):
        return item
    return tensor_spec(*item)


class Step:
    """One step's push, fed tensor by tensor as gradients become ready.

    Every declared tensor must be sent before finish(); a step that is
    dropped unfinished is cancelled and applies nothing anywhere. An array
    passed to send() must not change until the step finishes (it is read
    from the client's threads, without a copy).
    """

    def __init__(self, client, native_step, cursor):
        self._client = client
        self._step = native_step
        self._cursor = cursor
        self._replay = _replays.is_replay(cursor, client.cursor)

    def send(self, tensor, gradient):
        """Queues the gradient of `tensor` (its id or name)."""
        self._step.send(self._client._id(tensor), gradient)

    def finish(self):
        """Waits until every shard took the push."""
        self._step.finish()
        self._finished()

    def _finished(self):
        self._client.replays.finished(self._replay, self._cursor)
        self._client.cursor = self._cursor

    def finish_with_pull(self):
        """Waits for the push and the next step's weights; returns their
        version. The weights land in ``client.weights``."""
        version = self._step.finish_with_pull()
        self._finished()
        self._client.version = version
        return version


class Client:
    """A connection to every shard (ps::ParameterClient).

    Without arguments, it connects where the launcher's environment says
    (PS_SERVERS, PS_RANK, PS_JOB_ID). The authentication files (paths;
    see ClientOptions in client/parameter_client.h) default to PS_TLS_CA,
    PS_TLS_CERT, PS_TLS_KEY, PS_TLS_SERVER_NAME and PS_TOKEN_FILE, also
    when `servers` is given. Timeouts are in seconds. Shards on this host
    are reached over the Unix socket they announce, unless
    `local_transport` is False (then gRPC, as for shards elsewhere). Calls
    wait on the network with the GIL released.
    """

    def __init__(self, servers=None, rank=None, job_id=None,
                 connect_timeout=None, retry_timeout=None, tls_ca_file=None,
                 tls_cert_file=None, tls_key_file=None, tls_server_name=None,
                 token_file=None, local_transport=True):
        if isinstance(servers, str):
            servers = [s for s in servers.split(",") if s]
        self._native = _native.connect(
            servers=servers, rank=rank, job_id=job_id,
            connect_timeout=connect_timeout, retry_timeout=retry_timeout,
            local_transport=local_transport, tls_ca_file=tls_ca_file, tls_cert_file=tls_cert_file,
            tls_key_file=tls_key_file, tls_server_name=tls_server_name,
            token_file=token_file)
        self.registration = None
        self.version = 0
        # (epoch, examples_done) after the last step the servers took.
        self.cursor = (0, 0)
        # Pushes the servers skip as replays (a cursor that did not move).
        self.replays = _replays.ReplayWatch(self.rank)
        self._weights = []
        self._ids = {}
        self._collectives = None

    @property
    def rank(self):
        """This worker's rank; rank 0 declares the model."""
        return self._native.rank

    @property
    def mode(self):
        """The servers' consistency mode ("sync", "ssp", "async")."""
        self._require_declared()
        return self.registration.mode

    def declare(self, tensors, planned_steps, seed=1, optimizer=None,
                max_examples_per_push=0):
        """Declares the model; every rank must declare the same.

        `tensors`: TensorSpecs or (name, shape[, initializer[,
        weight_decay]]) tuples. `planned_steps` spans the servers' learning
        rate schedule. `optimizer`: an OptimizerSpec the servers build
        (FailedPreconditionError if one was started with an optimizer flag
        that says otherwise); None: the servers' flags choose.
        `max_examples_per_push`: this rank's batch size; the servers refuse
        a push whose num_examples is larger (0: no bound). Returns the
        Registration (mode, next_step, ...).
        """
        specs = [_as_spec(t) for t in tensors]
        if optimizer is not None and not isinstance(optimizer, OptimizerSpec):
            raise InvalidArgumentError(
                "optimizer is an OptimizerSpec or None, got %r" % (optimizer,))
        self.registration = self._native.declare(
            specs, int(planned_steps), int(seed), optimizer,
            int(max_examples_per_push))
        self._weights = self._native.weights()
        self.cursor = (self.registration.epoch,
                       self.registration.examples_done)
        self._ids = {spec.name: i for i, spec in enumerate(specs)}
        return self.registration

    @property
    def model(self):
        """The declared TensorSpecs, in order."""
        return self._native.model()

    @property
    def weights(self):
        """The weight buffers as arrays, in declaration order (views)."""
        return self._weights

    def weight(self, name):
        """The weight buffer of tensor `name` (a view)."""
        return self._weights[self._id(name)]

    def tensor_id(self, name):
        """The id of tensor `name`; NotFoundError if it is not declared."""
        return self._native.tensor_id(name)

    def broadcast(self, values=None):
        """Every rank gets rank 0's values of the from_rank0 tensors.

        Collective: every rank calls it (it ends with a barrier). On rank 0,
        `values` (a list in declaration order or a dict by name; default:
        what ``weights`` hold) is uploaded first. Returns ``weights``.
        """
        if values is not None:
            self._copy_in(values)
        self._native.broadcast()
        return self._weights

    def pull(self, step):
        """Fills ``weights`` once the servers allow `step`; returns the
        weights' version."""
        self.version = self._native.pull(int(step))
        return self.version

    def pull_final(self, step):
        """The weights once every rank has finished training."""
        self.version = self._native.pull_final(int(step))
        return self.version

    def start_step(self, step, pull_after=True, base_version=None,
                   num_examples=1, epoch=None, examples_done=None,
                   learning_rate=None):
        """Opens step `step`'s push (see Step).

        `num_examples` weights this rank's gradient in a sync step.
        `learning_rate` (finite, >= 0) is applied to this gradient instead
        of the servers' schedule (a scheduler's value for the step). The
        data cursor (`epoch`, `examples_done`: the position after this
        step) must advance from step to step, or the servers take the push
        for a replay of one they applied and skip it; by default it
        advances by `num_examples` from ``cursor``, the position after the
        last step the servers took (a restarted rank gets it back from
        declare()).
        """
        if base_version is None:
            base_version = self.version
        if epoch is None:
            epoch = self.cursor[0]
        if examples_done is None:
            examples_done = (self.cursor[1] if epoch == self.cursor[0]
                             else 0) + int(num_examples)
        native = self._native.start_step(
            step=int(step), base_version=int(base_version),
            num_examples=int(num_examples), epoch=int(epoch),
            examples_done=int(examples_done), pull_after=bool(pull_after),
            learning_rate=(None if learning_rate is None
                           else float(learning_rate)))
        return Step(self, native, (int(epoch), int(examples_done)))

    def push(self, step, gradients, **step_info):
        """Pushes every tensor's gradient (list or dict by name)."""
        s = self.start_step(step, pull_after=False, **step_info)
        for tensor, gradient in self._items(gradients):
            s.send(tensor, gradient)
        s.finish()

    def push_pull(self, step, gradients, **step_info):
        """Pushes step `step` and fills ``weights`` for step + 1 in one
        call per shard; returns their version."""
        s = self.start_step(step, pull_after=True, **step_info)
        for tensor, gradient in self._items(gradients):
            s.send(tensor, gradient)
        return s.finish_with_pull()

    def set_compression(self, tensor, kind, topk_ratio=0.01):
        """How `tensor` (a name or id) travels from now on: "none"
        (float32), "bf16" or "fp16" (gradients and weights, half the
        bytes; the servers keep float32), or "topk" (the `topk_ratio`
        largest of each gradient plus what earlier pushes did not send;
        weights float32). ps::ParameterClient::SetCompression."""
        tensor_id = tensor if isinstance(tensor, int) else self._id(tensor)
        self._native.set_compression(tensor_id, kind, float(topk_ratio))

    def barrier(self):
        """Waits for every live rank's barrier."""
        self._native.barrier()

    def collectives(self):
        """The job's collectives, served by the same servers on a
        connection of their own (client/collectives.h), with or without a
        declared model: ``allreduce(name, op, array)`` (op 0 sum, 1
        average, 2 min, 3 max), ``allgather(name, array)`` -> (rows, first
        dimension per rank), ``broadcast(name, root_rank, array)``,
        ``broadcast_bytes(name, root_rank, data)``, ``barrier()``,
        ``join()`` -> last rank to join, and ``start_allreduce``,
        ``start_allgather``, ``start_broadcast``, whose handle has
        ``done()`` and ``wait()``. Float32 NumPy arrays in, new arrays out;
        an empty name is the kind's default. Connected once, on first use.
        """
        if self._collectives is None:
            self._collectives = self._native.collectives()
        return self._collectives

    def read_optimizer_state(self):
        """The servers' optimizer state (ParameterClient::
        ReadOptimizerState): {"kind": "adam" or "sgd", "version": int,
        "tensors": [by declared id: {"update_count": int, "vectors":
        {name: float32 array of the tensor's shape}}]}, vectors "m" and "v"
        (Adam), "momentum" (SGD with momentum), none otherwise."""
        self._require_declared()
        return self._native.read_optimizer_state()

    def write_optimizer_state(self, state, at_version=None):
        """Rank 0: replaces the servers' optimizer state with `state`
        (shaped as read_optimizer_state's), leaving the weights; with
        `at_version`, each shard applies it only at that version
        (AbortedError otherwise). Each shard takes all of its part or none
        and keeps it across its restarts (it checkpoints it first)."""
        self._require_declared()
        self._native.write_optimizer_state(
            state, None if at_version is None else int(at_version))

    def finish(self):
        """Tells the shards this rank is done; warns if its pushes were
        skipped as replays more than once in a row."""
        self.replays.warn_at_finish()
        self._native.finish()

    def close(self):
        """Closes the connections (``weights`` stay readable)."""
        self._collectives = None
        self._native.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _require_declared(self):
        if self.registration is None:
            raise FailedPreconditionError(
                "paramserver: declare the model first")

    def _id(self, tensor):
        if isinstance(tensor, numbers.Integral):
            return int(tensor)
        self._require_declared()
        try:
            return self._ids[tensor]
        except KeyError:
            raise NotFoundError(
                'no tensor "%s" in the declared model' % tensor) from None

    def _items(self, values):
        if isinstance(values, dict):
            return values.items()
        values = list(values)
        self._require_declared()
        if len(values) != len(self._weights):
            raise InvalidArgumentError(
                "%d arrays for a model of %d tensors" %
                (len(values), len(self._weights)))
        return enumerate(values)

    def _copy_in(self, values):
        for tensor, value in self._items(values):
            target = self._weights[self._id(tensor)]
            if np.shape(value) != target.shape:
                raise InvalidArgumentError(
                    "values of %s have shape %s, declared %s" %
                    (tensor, np.shape(value), target.shape))
            target[...] = value


def worker_place():
    """(rank, num_workers, local_rank, local_num_workers) as the launcher's
    environment says (PS_RANK, PS_NUM_WORKERS, PS_LOCAL_RANK,
    PS_LOCAL_NUM_WORKERS), or, without those, srun's or mpirun's: the
    environment Client() reads its rank from. InvalidArgumentError naming
    every variable that is missing, or the one that is malformed."""
    return tuple(_native.worker_place())


def load_model(path):
    """{name: float32 array} of the model file at `path`, in the order it
    was saved. NotFoundError for a missing file; Error (DATA_LOSS) for a
    damaged one."""
    return dict(_native.read_model(str(path)))


def save_model(path, tensors):
    """Writes `tensors` ({name: array} or (name, array) pairs; converted to
    float32) as a model file at `path`, atomically: the format of the C++
    worker's --save_model, which its predict tool reads. Names are
    printable ASCII without spaces, as in a declaration."""
    items = tensors.items() if hasattr(tensors, "items") else tensors
    pairs = []
    for name, array in items:
        values = np.asarray(array)
        if not (np.issubdtype(values.dtype, np.floating) or
                np.issubdtype(values.dtype, np.integer) or
                values.dtype == np.bool_):
            raise InvalidArgumentError("%s: cannot save dtype %s as float32"
                                       % (name, values.dtype))
        converted = values.astype(np.float32)
        if not np.issubdtype(values.dtype, np.floating) and not np.array_equal(
                converted.astype(values.dtype), values):
            raise InvalidArgumentError("%s holds integers that float32 cannot "
                                       "hold exactly" % name)
        pairs.append((str(name), converted))
    _native.save_model(str(path), pairs)


def load_checkpoint(directory):
    """({name: float32 array}, version) of the model in the servers'
    checkpoints in `directory`: every shard's slices at the newest version
    all shards wrote. NotFoundError without checkpoints;
    FailedPreconditionError when the shards share no version."""
    tensors, version = _native.read_checkpoint(str(directory))
    return dict(tensors), version
