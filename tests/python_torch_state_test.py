"""paramserver.torch's buffers and optimizer state against real servers,
through the launcher: average_buffers gives every rank the ranks' mean of
BatchNorm's statistics, which the saved model holds, and each step leaves
the ranks' mean on every rank and in the servers' checkpoints; the wrapped
optimizer's state_dict round-trips with either placement (with
placement='server' through the servers, which hold the state).

Run by //tests:python_torch_state_test on Debian's /usr/bin/python3.
"""

import pytest
import torch

import paramserver.torch as ps
import python_launch
import python_torch_state_program as program

PROGRAM = "tests/python_torch_state_program.py"
FLAGS = ["--num_servers=2", "--num_workers=2", "--mode=sync",
         "--optimizer=sgd"]


def test_buffers_are_averaged_across_ranks_and_saved(tmp_path):
    python_launch.run(PROGRAM, ["buffers", tmp_path],
                      FLAGS + ["--checkpoint_dir=%s" % (tmp_path / "ckpt")])
    # Every step pushed each rank's buffers; the servers kept their mean
    # (in their checkpoints too) and every rank pulled it.
    stepped = [torch.load(tmp_path / ("stepped%d.pt" % r)) for r in (0, 1)]
    checkpointed = ps.load_model(str(tmp_path / "ckpt"))
    for name in stepped[0]:
        assert torch.equal(stepped[0][name], stepped[1][name]), name
        assert torch.equal(checkpointed[name].to(stepped[0][name].dtype),
                           stepped[0][name]), name
    assert stepped[0]["norm.num_batches_tracked"].item() == 3
    assert stepped[0]["norm.running_mean"].abs().sum() > 0
    before = [torch.load(tmp_path / ("before%d.pt" % r)) for r in (0, 1)]
    after = [torch.load(tmp_path / ("after%d.pt" % r)) for r in (0, 1)]
    # The ranks had drifted apart (own data, own batch counts)...
    assert not torch.equal(before[0]["norm.running_mean"],
                           before[1]["norm.running_mean"])
    assert before[0]["norm.num_batches_tracked"].item() == 3
    assert before[1]["norm.num_batches_tracked"].item() == 4
    for name in before[0]:
        # ...and now hold the same bits, the ranks' mean.
        assert torch.equal(after[0][name], after[1][name]), name
        mean = (before[0][name].double() + before[1][name].double()) / 2
        if before[0][name].dtype.is_floating_point:
            torch.testing.assert_close(after[0][name].double(), mean,
                                       rtol=1e-6, atol=0)
        else:
            assert after[0][name].item() == round(mean.item()), name
    # The saved model holds them.
    model = program.WithNorm()
    model.load_state_dict(ps.load_model(str(tmp_path / "model")))
    for name, value in model.named_buffers():
        assert torch.equal(value, after[0][name]), name


def test_a_worker_placed_optimizers_state_round_trips(tmp_path):
    job = python_launch.run(PROGRAM,
                            ["optimizer_state", tmp_path, "worker"], FLAGS)
    for rank in (0, 1):
        found = job.result(rank)
        assert found["tensors_with_state"] == 2  # Adam's moments.
        assert found["round_trip"]
        assert found["note"] is None
        assert found["plain_refused"] is None


def test_a_server_placed_optimizers_state_round_trips(tmp_path):
    job = python_launch.run(
        PROGRAM, ["optimizer_state", tmp_path, "server"],
        ["--num_servers=2", "--num_workers=2", "--mode=sync",
         "--optimizer=adam"])
    for rank in (0, 1):
        found = job.result(rank)
        # Adam's moments and step of both tensors, read from the servers.
        assert found["tensors_with_state"] == 2
        assert found["note"]["step"] == 2
        assert found["note"]["version"] == 2
        assert found["round_trip"]
        # A plain torch Adam's state maps onto the servers' and reads back.
        assert found["plain_refused"] is None
        assert found["plain_loaded"]
