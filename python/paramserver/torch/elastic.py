"""Horovod's ``hvd.elastic`` (run, State, ObjectState, TorchState): not
supported yet. Each name raises at once, saying what to use instead: our
crash survival, where the launcher restarts a killed worker
(--max_restarts) and the servers keep the weights, the optimizer's state
and where each rank was in its data.
"""

_INSTEAD = (
    "paramserver: hvd.elastic.%s is not supported: a worker the launcher "
    "restarts (--max_restarts) goes on from what the servers recorded: the "
    "weights and optimizer state are theirs, and "
    "opt.resume_position(steps_per_epoch) gives the restarted rank's loop "
    "the (epoch, step) to resume from (examples/pytorch_fashion_mnist.py "
    "does it); drop the @hvd.elastic.run wrapper and the State object")


def run(func):
    """Refuses, at decoration time."""
    raise NotImplementedError(_INSTEAD % "run")


class State:
    """Refuses, when created."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError(_INSTEAD % type(self).__name__)


class ObjectState(State):
    pass


class TorchState(ObjectState):
    pass
