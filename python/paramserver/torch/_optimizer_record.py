"""What the servers record of a rank, as DistributedOptimizer's methods:
its epoch and step (where a restarted rank resumes), whether its steps
changed anything, and the optimizer's state_dict (the servers' state in
torch's layout, _optimizer_state). Mixed into the class
DistributedOptimizer() builds (see _optimizer.py).
"""

import warnings
import zlib

import numpy as np

import paramserver
from paramserver.torch import _optimizer_state


class ServerRecord:
    """Methods of the Distributed<Optimizer> class; they read its
    _client, _trainable, _placement, _step_number, _epoch and
    registration."""
    def set_epoch(self, epoch):
        """Tells the servers which epoch the next steps' batches come from,
        as DistributedSampler.set_epoch: with ``num_examples`` they record
        where in the data each rank is, for a restarted rank to resume.
        An epoch before the one the servers recorded is refused: they would
        take its pushes for replays of batches they have, and apply none."""
        recorded = self._client.cursor[0]
        if int(epoch) < recorded:
            raise paramserver.FailedPreconditionError(
                "paramserver: set_epoch(%d), but the servers recorded epoch "
                "%d for this rank: its pushes would be skipped as replays. A "
                "restarted rank resumes from resume_position()" %
                (int(epoch), recorded))
        self._epoch = int(epoch)

    def pull_final(self):
        """Server placement: puts into the parameters the weights once every
        rank has finished (in ssp and async, others may still be training
        after this rank's last step)."""
        if self._placement != "server":
            raise paramserver.FailedPreconditionError(
                "paramserver: pull_final is for placement='server'")
        self._client.pull_final(self._step_number)

    def _trainable_crc(self):
        crc = 0
        for _, p in self._trainable:
            crc = zlib.crc32(np.ascontiguousarray(p.detach().numpy()), crc)
        return crc

    def warn_if_untrained(self):
        """A RuntimeWarning if this rank took steps but its parameters are
        still those it started with: the servers applied nothing (pushes
        skipped as replays of batches they had, or a learning rate of 0).
        shutdown() calls it, so such a job does not end as if it trained."""
        steps = self._step_number - self._first_step
        if steps > 0 and self._trainable_crc() == self._start_crc:
            warnings.warn(
                "paramserver: rank %d took %d steps, and its parameters are "
                "still those it started with: the servers applied none of "
                "them (pushes skipped as replays of batches they had? a "
                "learning rate of 0?)" % (self._client.rank, steps),
                RuntimeWarning, stacklevel=3)

    @property
    def resume_step(self):
        """The steps the servers recorded for this rank when it declared:
        0 in a new job; for a restarted rank, where it stopped."""
        return self.registration.next_step

    def resume_position(self, steps_per_epoch):
        """(epoch, step within it) to resume a loop of `steps_per_epoch`
        steps per epoch from: (0, 0) in a new job."""
        if steps_per_epoch < 1:
            raise ValueError("steps_per_epoch must be >= 1, got %r" %
                             (steps_per_epoch,))
        return divmod(self.resume_step, int(steps_per_epoch))

    def state_dict(self):
        """The wrapped optimizer's state_dict. Placement 'worker': its real
        state (momentum, Adam moments). Placement 'server': the servers'
        state (read from every shard, at this rank's step in sync mode) in
        the wrapped torch optimizer's layout (see _optimizer_state), so
        that torch.save keeps it and load_state_dict, here or on a plain
        torch optimizer, resumes it; "paramserver" says at which step and
        server version it was read."""
        sd = super(self.__class__, self).state_dict()
        if self._placement == "server":
            server = self._client.read_optimizer_state()
            sd["state"] = _optimizer_state.to_torch(
                server, self._trainable, self._param_indices())
            sd["paramserver"] = {"placement": "server",
                                 "step": self._step_number,
                                 "version": server["version"]}
        return sd

    def load_state_dict(self, state_dict):
        """Placement 'worker': the wrapped optimizer's load_state_dict.
        Placement 'server': the param_groups are taken as torch takes them
        (the learning rate; other hyper-parameters must stay those
        declared, which the next step checks), and the state, in torch's
        layout (from state_dict() here or of a plain torch optimizer of the
        same kind and parameters), is written to the servers by rank 0,
        between steps (in sync mode at its step: before any update of it;
        AbortedError if that step was applied already); other ranks may
        call it too, and check it but write nothing. Rank 0's call alone
        may come with Horovod's ``if hvd.rank() == 0:`` pattern; a rank that
        reads the state back waits for rank 0's call to return first
        (a barrier)."""
        state_dict = {k: v for k, v in state_dict.items()
                      if k != "paramserver"}
        if self._placement != "server":
            super(self.__class__, self).load_state_dict(state_dict)
            return
        super(self.__class__, self).load_state_dict(
            {"state": {}, "param_groups": state_dict["param_groups"]})
        server = self._client.read_optimizer_state()
        server = _optimizer_state.from_torch(
            state_dict.get("state", {}), server, self._trainable,
            self._param_indices())
        if self._client.rank == 0:
            self._client.write_optimizer_state(
                server, at_version=self._step_number
                if self._client.mode == "sync" else None)

    def _param_indices(self):
        return _optimizer_state.param_indices(self.param_groups,
                                              self._trainable)

    @property
    def step_number(self):
        """Steps this rank has finished (the servers' clock for it)."""
        return self._step_number
