"""hvd.elastic on paramserver.torch through the launcher: a rank killed
with SIGKILL mid-epoch is restarted by the launcher and resumes at the
servers' record of its last step while the other rank waits for it; both
end with the same steps, and the weights are single-process PyTorch's
(every example trained once: none lost, none repeated).

Run by //tests:python_torch_elastic_test on Debian's /usr/bin/python3.
"""

import paramserver
import paramserver.torch as hvd
import pytest
import torch

import python_launch
import python_torch_program as program
from python_torch_test import check_weights

PROGRAM = "tests/python_torch_elastic_program.py"
KILL_AT = 12  # Epoch 2's third step (5 steps an epoch).


def test_a_rank_killed_mid_epoch_resumes_at_its_last_step(tmp_path):
    job = python_launch.run(
        PROGRAM, [tmp_path, KILL_AT],
        ["--num_servers=2", "--num_workers=2", "--mode=sync",
         "--optimizer=sgd",
         # The surviving rank waits for the restarted one, however slowly
         # it starts, rather than going on without it.
         "--server_flags=--worker_timeout=600s"])
    assert "worker 1" in job.line_with("killed by signal 9 (SIGKILL)"), \
        job.output
    survivor, restarted = job.result(0), job.result(1)
    assert not survivor["restarted"] and restarted["restarted"]
    assert survivor["resumed_at"] == [0, 0]
    assert restarted["resumed_at"] == [2, 2], job.output
    assert survivor["trained"] == program.STEPS
    assert restarted["trained"] == program.STEPS - KILL_AT
    assert survivor["steps"] == restarted["steps"] == program.STEPS
    # The last commit, the last step's (batch 0 was assigned after it).
    last = program.STEPS_PER_EPOCH - 1
    assert survivor["restored_batch"] == restarted["restored_batch"] == last
    check_weights(tmp_path, "sgd")


class _FakeOptimizer:
    """What TorchState reads of a DistributedOptimizer, without servers."""

    class registration:
        next_step, epoch, examples_done = 7, 1, 70

    _placement = "server"
    num_examples = 32
    step_number = 7

    def __init__(self):
        self.epochs = []

    def resume_position(self, steps_per_epoch):
        return divmod(self.step_number, steps_per_epoch)

    def set_epoch(self, epoch):
        self.epochs.append(epoch)


def test_sync_takes_the_servers_record_rounding_a_short_batch_up():
    opt = _FakeOptimizer()
    state = hvd.elastic.TorchState(None, opt, epoch=0, batch=0, best=0.5)
    assert opt.epochs == []  # Constructing tells the servers nothing.
    state.sync()
    assert (state.epoch, state.batch, state.best) == (1, 3, 0.5)
    state.epoch = 2
    assert opt.epochs == [2]


def test_restore_after_a_step_is_refused():
    opt = _FakeOptimizer()
    state = hvd.elastic.TorchState(None, opt, epoch=0, batch=0)
    state.batch = 4
    state.restore()
    assert state.batch == 0
    opt.step_number += 1
    with pytest.raises(paramserver.FailedPreconditionError,
                       match="cannot take them back"):
        state.restore()


def test_worker_placement_is_refused_naming_server():
    opt = _FakeOptimizer()
    opt._placement = "worker"
    with pytest.raises(paramserver.FailedPreconditionError,
                       match="placement='server'"):
        hvd.elastic.TorchState(None, opt)


def test_run_syncs_before_the_function():
    calls = []

    class Recorder(hvd.elastic.ObjectState):
        def sync(self):
            calls.append("sync")

    @hvd.elastic.run
    def train(state, value):
        calls.append(value)
        return value * 2

    assert train(Recorder(epoch=0), 21) == 42
    assert calls == ["sync", 21]
