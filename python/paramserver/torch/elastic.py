"""Horovod's ``hvd.elastic`` on our crash survival: ``run``, ``State``,
``ObjectState``, ``TorchState``.

A script written for Horovod's elastic mode runs unchanged::

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, EPOCHS):
            for state.batch in range(state.batch, STEPS_PER_EPOCH):
                ...  # one step of opt
                if state.batch % 10 == 0:
                    state.commit()
            state.batch = 0

    state = hvd.elastic.TorchState(model, opt, epoch=0, batch=0)
    train(state)

How it differs from Horovod, and why: in Horovod every rank keeps its
last commit in memory; when a rank dies the survivors roll back to it and
a new rank gets it from rank 0 (``sync()``). Here the servers hold the
weights, the optimizer's state and, for every rank, the step it finished
last with its data cursor (epoch, examples done in it), durable across a
SIGKILL. So the surviving ranks never roll back (in sync mode they wait
for the restarted rank at the servers), and a rank the launcher restarts
(--max_restarts) resumes from its own last finished step: ``sync()`` sets
``state.epoch`` to the epoch the servers recorded and ``state.batch`` to
the batches done in it (examples done / ``opt.num_examples``, rounded up).
Every example of an epoch is thus trained once: none is lost, none is
repeated (a commit older than the servers' record would repeat steps the
servers already applied). This needs the loop to assign ``state.epoch`` and
``state.batch`` as above (assigning ``state.epoch`` tells the servers the
epoch, as ``opt.set_epoch``), a constant ``opt.num_examples`` within an
epoch but its last batch, and ``placement='server'`` (with 'worker' the
servers hold no weights for a restarted rank to resume from).

``commit()`` keeps a copy of the state in memory, as Horovod's;
``restore()`` puts it back if no step was taken since (the servers cannot
take steps back, so after steps it raises). Other extras than epoch and
batch start, on a restarted rank, at the values the script gives the
constructor. The world never changes size (a restarted rank takes its old
rank), so reset callbacks are kept but never called.
"""

import copy
import functools

import paramserver

# The extras a restarted rank takes from the servers' record.
_EPOCH, _BATCH = "epoch", "batch"


def run(func):
    """Horovod's decorator: ``func(state, ...)`` runs after
    ``state.sync()``. No retry loop: the surviving ranks of a job whose
    rank died see no error (the servers wait for the restarted rank), and
    the restarted rank runs the script from the top."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        state.sync()
        return func(state, *args, **kwargs)

    return wrapper


class State:
    """Horovod's base class: commit(), restore(), sync(), reset
    callbacks. Subclasses say what save() and restore() hold."""

    def __init__(self):
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        """Kept for Horovod's scripts; never called here (the world keeps
        its size: a restarted rank takes its old rank)."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        for callback in self._reset_callbacks:
            callback()

    def commit(self):
        """Keeps a copy of the state in memory, for restore()."""
        self.save()

    def check_host_updates(self):
        """Horovod raises HostsUpdatedInterrupt here; our hosts do not
        change under a running job."""

    def save(self):
        raise NotImplementedError

    def restore(self):
        raise NotImplementedError

    def sync(self):
        raise NotImplementedError


class ObjectState(State):
    """Extras given as keyword arguments, readable and assignable as
    attributes (``state.epoch``). `bcast_object` is Horovod's argument;
    extras are not broadcast here (every rank constructs the same)."""

    def __init__(self, bcast_object=None, **kwargs):
        object.__setattr__(self, "_names", list(kwargs))
        super().__init__()
        for name, value in kwargs.items():
            setattr(self, name, value)
        self._saved_extras = None
        self.save()

    def _extras(self):
        return {name: getattr(self, name) for name in self._names}

    def save(self):
        self._saved_extras = copy.deepcopy(self._extras())

    def restore(self):
        for name, value in copy.deepcopy(self._saved_extras).items():
            setattr(self, name, value)

    def sync(self):
        pass


class TorchState(ObjectState):
    """Horovod's TorchState(model, optimizer, **extras) for a
    DistributedOptimizer with placement='server': see the module's
    docstring for what commit(), restore() and sync() mean here."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        if optimizer is None or not hasattr(optimizer, "resume_position"):
            raise ValueError(
                "paramserver: hvd.elastic.TorchState needs the "
                "hvd.DistributedOptimizer (the servers record where its rank "
                "is), got %r" % type(optimizer).__name__)
        if optimizer._placement != "server":
            raise paramserver.FailedPreconditionError(
                "paramserver: hvd.elastic.TorchState needs placement='server': "
                "with placement='worker' the servers hold no weights, so a "
                "restarted rank would have nothing to resume from")
        object.__setattr__(self, "model", model)
        object.__setattr__(self, "optimizer", optimizer)
        object.__setattr__(self, "_constructed", False)
        self._saved_step = optimizer.step_number
        super().__init__(**kwargs)
        self._constructed = True

    def __setattr__(self, name, value):
        object.__setattr__(self, name, value)
        if name == _EPOCH and self._constructed:
            # The servers' record of where this rank is: the next pushes'
            # epoch (and examples done in it from 0 on a new epoch).
            self.optimizer.set_epoch(int(value))

    def save(self):
        super().save()
        self._saved_step = self.optimizer.step_number

    def restore(self):
        """The last commit's extras, if no step was taken since; raises
        otherwise: the servers applied those steps and keep them."""
        taken = self.optimizer.step_number - self._saved_step
        if taken:
            raise paramserver.FailedPreconditionError(
                "paramserver: restore() after %d steps since the last "
                "commit: the servers applied them and cannot take them back; "
                "a restarted rank resumes from the servers' record of its "
                "last step (sync())" % taken)
        super().restore()

    def sync(self):
        """On a rank the servers know steps of (restarted): ``epoch`` and
        ``batch`` from their record of its last finished step, so that its
        loop resumes at the next batch. On a new rank: nothing (the
        DistributedOptimizer gave every rank rank 0's weights)."""
        registration = self.optimizer.registration
        if registration.next_step == 0:
            return
        if _EPOCH in self._names:
            object.__setattr__(self, _EPOCH, int(registration.epoch))
        if _BATCH in self._names:
            per_batch = max(1, int(self.optimizer.num_examples))
            done = int(registration.examples_done)
            object.__setattr__(self, _BATCH, -(-done // per_batch))
        self.save()


class ElasticSampler:
    """Refuses, naming what to use instead."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError(
            "paramserver: hvd.elastic.ElasticSampler is not supported: use "
            "torch.utils.data.distributed.DistributedSampler(dataset, "
            "num_replicas=hvd.size(), rank=hvd.rank()) and skip the first "
            "state.batch batches of the epoch a restarted rank resumes in")
