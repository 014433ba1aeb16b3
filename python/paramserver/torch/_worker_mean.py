"""Worker placement's mean gradient: each trainable gradient, weighted by
the rank's batch (DistributedOptimizer.num_examples), allreduced by the
servers' collective service (client/collectives.h) as soon as its hook
fires, so that the reduction overlaps the rest of backward; finish() then
divides the sums by the ranks' total of examples.

The servers sum in rank order, so every rank gets the same mean, bit for
bit. Each tensor's collective is named after it, so ranks whose hooks fire
in different orders still pair up. Not thread-safe (autograd runs hooks on
the thread that called backward).
"""

import numpy as np

_SUM = 0  # The native op code of a sum.


class GradientMean:
    """The collectives of one step's gradients, by trainable index."""

    def __init__(self, collectives, names, shapes, reduction):
        """`reduction`: a _reduction.Reduction for placement 'worker'."""
        self._collectives = collectives
        self._reduction = reduction
        self._names = ["paramserver.grad.%s" % n for n in names]
        self._shapes = [tuple(s) for s in shapes]
        self._pending = {}
        # Collectives of cancelled steps: they complete once the other
        # ranks make them; dropping them here would wait for that.
        self._abandoned = []

    def send(self, i, gradient, num_examples):
        """Starts tensor i's sum with `gradient` (a tensor, or None for
        zeros) as self._reduction sends it (times num_examples for a
        mean); reads a copy, so later edits of the gradient change
        nothing."""
        if gradient is None:
            values = np.zeros(self._shapes[i], np.float32)
        else:
            values = self._reduction.outgoing(gradient, num_examples)
        self._pending[i] = self._collectives.start_allreduce(
            self._names[i], _SUM, values)

    def sent(self, i):
        return i in self._pending

    def cancel(self):
        self._abandoned.extend(self._pending.values())
        self._pending = {}
        self._abandoned = [p for p in self._abandoned if not p.done()]

    def finish(self, num_examples):
        """The ranks' reduction of every tensor sent, in index order: by
        default the mean, each rank's gradient weighted by its examples."""
        total = self._collectives.allreduce(
            "paramserver.examples", _SUM,
            np.array(num_examples, dtype=np.float32))
        pending, self._pending = self._pending, {}
        return [self._reduction.result(pending[i].wait(), total)
                for i in sorted(pending)]
