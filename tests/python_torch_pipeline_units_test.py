"""paramserver.torch.pipeline's parts that need no servers: the schedules
(_pipeline_schedule), where a model is cut (_pipeline_split) and the
framed socket between stages (_pipeline_channel).

Run by //tests:python_torch_pipeline_units_test on Debian's
/usr/bin/python3; the pipeline against real servers is
python_torch_pipeline_test.py's.
"""

import socket
import struct

import pytest
import torch

from paramserver.torch import _pipeline_channel as channel
from paramserver.torch._pipeline_schedule import (BACKWARD, FORWARD,
                                                  peak_activations, schedule)
from paramserver.torch._pipeline_split import (as_sequential,
                                               balanced_points, split_points,
                                               stage_modules,
                                               stage_of_parameters)

# -- schedules --------------------------------------------------------------


@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
@pytest.mark.parametrize("stages,micro", [(1, 1), (2, 1), (2, 4), (4, 8),
                                          (4, 2)])
def test_every_micro_batch_runs_forward_then_backward_once(name, stages,
                                                           micro):
    for stage in range(stages):
        order = schedule(name, stage, stages, micro)
        forwards = [m for k, m in order if k == FORWARD]
        backwards = [m for k, m in order if k == BACKWARD]
        # In order, so gradients are summed alike in both schedules.
        assert forwards == list(range(micro))
        assert backwards == list(range(micro))
        for m in range(micro):
            assert order.index((FORWARD, m)) < order.index((BACKWARD, m))


def test_1f1b_bounds_the_activations_kept_and_gpipe_keeps_all():
    for stage in range(4):
        assert peak_activations(schedule("gpipe", stage, 4, 8)) == 8
        assert peak_activations(schedule("1f1b", stage, 4, 8)) == 4 - stage


def test_1f1b_of_two_stages_alternates():
    assert schedule("1f1b", 0, 2, 3) == [
        (FORWARD, 0), (FORWARD, 1), (BACKWARD, 0), (FORWARD, 2),
        (BACKWARD, 1), (BACKWARD, 2)]
    assert schedule("1f1b", 1, 2, 3) == [
        (FORWARD, 0), (BACKWARD, 0), (FORWARD, 1), (BACKWARD, 1),
        (FORWARD, 2), (BACKWARD, 2)]


def test_bad_schedules_are_refused():
    with pytest.raises(ValueError, match="gpipe, 1f1b"):
        schedule("interleaved", 0, 2, 2)
    with pytest.raises(ValueError, match="micro_batches"):
        schedule("gpipe", 0, 2, 0)


# -- splits -----------------------------------------------------------------


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(),
                               torch.nn.Linear(8, 8), torch.nn.ReLU(),
                               torch.nn.Linear(8, 2))


def test_balanced_points_minimise_the_largest_stage():
    assert balanced_points([5, 0, 5, 0, 5], 3) == [1, 3]
    assert balanced_points([10, 1, 1, 1], 2) == [1]
    assert balanced_points([1, 1, 1, 1], 4) == [1, 2, 3]


def test_stages_keep_the_whole_models_names():
    model = mlp()
    points = split_points(model, 2, [3])
    first, second = (stage_modules(model, points, s) for s in range(2))
    assert [n for n, _ in first.named_parameters()] == [
        "0.weight", "0.bias", "2.weight", "2.bias"]
    assert [n for n, _ in second.named_parameters()] == ["4.weight",
                                                         "4.bias"]
    owner = stage_of_parameters(model, points)
    assert owner == {"0.weight": 0, "0.bias": 0, "2.weight": 0,
                     "2.bias": 0, "4.weight": 1, "4.bias": 1}
    x = torch.randn(3, 4)
    assert torch.equal(second(first(x)), model(x))


def test_a_list_is_one_stage_per_module():
    sequential, points = as_sequential([torch.nn.Linear(2, 2),
                                        torch.nn.Linear(2, 2)])
    assert points == [1]
    assert [n for n, _ in sequential.named_parameters()][0] == "0.weight"


def test_bad_splits_are_refused_naming_why():
    with pytest.raises(ValueError, match="cannot split 5 modules into 6"):
        split_points(mlp(), 6)
    with pytest.raises(ValueError, match="strictly increasing"):
        split_points(mlp(), 3, [3, 3])
    with pytest.raises(ValueError, match="need 1 split points"):
        split_points(mlp(), 2, [1, 2])
    with pytest.raises(TypeError, match="nn.Sequential"):
        as_sequential(torch.nn.Linear(2, 2))


# -- the channel --------------------------------------------------------------


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    left = channel.Channel(a, channel.Peer(1, 3), timeout_s=30)
    right = channel.Channel(b, channel.Peer(0, 2), timeout_s=30)
    yield left, right
    left.close()
    right.close()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64,
                                   torch.bfloat16, torch.int64])
def test_a_tensor_arrives_as_sent(pair, dtype):
    left, right = pair
    t = (torch.randn(3, 5) * 10).to(dtype)
    left.send(channel.ACTIVATION, 7, 2, t.t())  # Not contiguous.
    got = right.recv(channel.ACTIVATION, 7, 2, (5, 3), dtype)
    assert torch.equal(got, t.t())


def test_a_tag_the_schedule_does_not_expect_is_refused(pair):
    left, right = pair
    left.send(channel.ACTIVATION, 7, 1, torch.zeros(2))
    with pytest.raises(channel.NeighbourError,
                       match="stage 0 \\(rank 2\\) sent the activation of "
                       "step 7, micro-batch 1 where .* expects the "
                       "activation of step 7, micro-batch 0"):
        right.recv(channel.ACTIVATION, 7, 0)


def test_a_shape_or_dtype_the_schedule_does_not_expect_is_refused(pair):
    left, right = pair
    left.send(channel.GRADIENT, 1, 0, torch.zeros(2, 3))
    with pytest.raises(channel.NeighbourError, match="of shape \\(2, 3\\)"):
        right.recv(channel.GRADIENT, 1, 0, (3, 2))
    left.send(channel.GRADIENT, 1, 0, torch.zeros(2, dtype=torch.float64))
    with pytest.raises(channel.NeighbourError, match="torch.float64"):
        right.recv(channel.GRADIENT, 1, 0, (2,), torch.float32)


def test_a_closed_neighbour_is_named():
    a, b = socket.socketpair()
    receiver = channel.Channel(a, channel.Peer(1, 5), timeout_s=30)
    b.close()
    with pytest.raises(channel.NeighbourError,
                       match="stage 1 \\(rank 5\\) closed its connection"):
        receiver.recv(channel.GRADIENT, 0, 0)
    receiver.close()


def test_a_silent_neighbour_times_out_naming_it():
    a, b = socket.socketpair()
    receiver = channel.Channel(a, channel.Peer(2, 9), timeout_s=0.05)
    with pytest.raises(channel.NeighbourError,
                       match="stage 2 \\(rank 9\\) sent no .* within the "
                       "timeout"):
        receiver.recv(channel.ACTIVATION, 0, 0)
    receiver.close()
    b.close()


@pytest.mark.parametrize("header", [
    b"XXXX" + bytes(24),  # Not a frame.
    # A length that disagrees with the shape.
    struct.pack("<4sBBBBQIQ", b"PSPF", 0, 0, 1, 0, 0, 0, 12) +
    struct.pack("<Q", 2),
])
def test_a_malformed_frame_is_refused(header):
    a, b = socket.socketpair()
    receiver = channel.Channel(a, channel.Peer(0, 0), timeout_s=30)
    b.sendall(header)
    with pytest.raises(channel.NeighbourError, match="frame from stage 0"):
        receiver.recv(channel.ACTIVATION, 0, 0)
    receiver.close()
    b.close()


# -- Pipeline's checks before any communication -------------------------------


def test_pipeline_refuses_a_bad_split_before_connecting(monkeypatch):
    from paramserver.torch.pipeline import Pipeline
    monkeypatch.delenv("PS_PIPELINE_STAGES", raising=False)
    with pytest.raises(ValueError, match="cannot split 5 modules into 6"):
        Pipeline(mlp(), stages=6)
    with pytest.raises(ValueError, match="a list of 2 stage modules for 3"):
        Pipeline([torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)], stages=3)
    with pytest.raises(ValueError, match="how many stages"):
        Pipeline(mlp())
    monkeypatch.setenv("PS_PIPELINE_STAGES", "7")
    with pytest.raises(ValueError, match="into 7 stages"):
        Pipeline(mlp())
    with pytest.raises(ValueError, match="gpipe, 1f1b"):
        Pipeline(mlp(), stages=2, schedule="zb")
