"""Pushes the servers will skip as replays, seen from the worker.

The servers take a push whose data cursor (epoch, examples done in it) does
not move past the rank's last one for a replay of a batch they have, and
acknowledge it without applying it. One in a row is normal (a restarted
rank sending again a push it had no answer for); more means the cursor is
stuck (examples_done left at the batch size, an epoch gone back), and
training goes on while the weights do not move. ReplayWatch tells the
script so, with a RuntimeWarning at the second in a row and again at
finish, and counts them for the metrics.
"""

import warnings


def is_replay(cursor, last):
    """Whether a push at `cursor` ((epoch, examples_done)) does not move
    past `last`, the rank's cursor the servers hold: the servers' rule."""
    return tuple(cursor) <= tuple(last)


class ReplayWatch:
    """Counts a rank's finished pushes and those that were replays."""

    def __init__(self, rank):
        self._rank = rank
        self.pushes = 0
        self.replays = 0
        self.in_a_row = 0
        self.stuck = False  # Two or more in a row happened.

    def finished(self, replay, cursor):
        """Records a finished push; warns at the second replay in a row."""
        self.pushes += 1
        if not replay:
            self.in_a_row = 0
            return
        self.replays += 1
        self.in_a_row += 1
        if self.in_a_row == 2:
            self.stuck = True
            warnings.warn(
                "paramserver: rank %d's last 2 pushes were skipped by the "
                "servers as replays: their data cursor (epoch %d, "
                "examples_done %d) does not move past the one the servers "
                "hold, so they apply nothing; advance examples_done (or the "
                "epoch) with every step" % ((self._rank,) + tuple(cursor)),
                RuntimeWarning, stacklevel=4)

    def warn_at_finish(self):
        """At the rank's end: a RuntimeWarning if pushes were skipped more
        than once in a row, so the job does not end as if it trained."""
        if self.stuck:
            warnings.warn(
                "paramserver: rank %d finished with %d of its %d pushes "
                "skipped by the servers as replays (not applied)" %
                (self._rank, self.replays, self.pushes), RuntimeWarning,
                stacklevel=3)
