"""Saved models between C++ and Python, with the real binaries.

Run by //tests:python_saved_model_test on Debian's /usr/bin/python3. A C++
worker job saves its model (--save_model) and the servers checkpoint it;
both load into NumPy by tensor name, hold the same bits, and a model saved
from Python is the same file, which the C++ predict tool reads. A PyTorch
job's model goes the other way (tests/python_torch_program.py saves it).
"""

import numpy as np
import pytest
import torch

import paramserver
import paramserver.torch as ps
import python_launch
import python_torch_program as program

MODEL = "784-8-10"
NAMES = ["fc0.weight", "fc0.bias", "fc1.weight", "fc1.bias"]
SHAPES = [(784, 8), (8,), (8, 10), (10,)]


@pytest.fixture(scope="module")
def cpp_job(tmp_path_factory):
    """A C++ worker's model file and the servers' checkpoint directory."""
    out = tmp_path_factory.mktemp("cpp")
    python_launch.run_cpp_worker(
        ["--num_servers=2", "--num_workers=1", "--model=" + MODEL,
         "--epochs=1", "--max_steps=6",
         "--save_model=%s" % (out / "worker.model"),
         "--checkpoint_dir=%s" % (out / "checkpoints")])
    return out


def test_a_cpp_workers_model_loads_by_name(cpp_job):
    saved = paramserver.load_model(cpp_job / "worker.model")
    assert list(saved) == NAMES
    assert [a.shape for a in saved.values()] == SHAPES
    assert all(a.dtype == np.float32 for a in saved.values())
    # Trained: the biases left their zeros.
    assert np.any(saved["fc0.bias"] != 0)


def test_the_servers_checkpoints_hold_the_same_model(cpp_job):
    checkpointed, version = paramserver.load_checkpoint(
        cpp_job / "checkpoints")
    assert version == 6
    saved = paramserver.load_model(cpp_job / "worker.model")
    assert list(checkpointed) == NAMES
    for name in NAMES:
        np.testing.assert_array_equal(checkpointed[name], saved[name], name)
    # And as a PyTorch state_dict.
    state = ps.load_model(str(cpp_job / "checkpoints"))
    assert torch.equal(state["fc1.bias"], torch.from_numpy(saved["fc1.bias"]))


def test_a_model_saved_from_python_is_the_workers_format(cpp_job, tmp_path):
    saved = paramserver.load_model(cpp_job / "worker.model")
    again = tmp_path / "again.model"
    paramserver.save_model(again, saved)
    assert again.read_bytes() == (cpp_job / "worker.model").read_bytes()
    # The C++ predict tool reads it and classifies as the worker's model.
    accuracies = [python_launch.predict(MODEL, path)
                  for path in (cpp_job / "worker.model", again)]
    assert accuracies[0] == accuracies[1]
    assert accuracies[0].startswith("accuracy: ")


def test_save_model_refuses_what_the_format_cannot_hold(tmp_path):
    with pytest.raises(paramserver.InvalidArgumentError, match="byte 0x20"):
        paramserver.save_model(tmp_path / "m", {"a b": np.zeros(2)})
    with pytest.raises(paramserver.InvalidArgumentError, match="exactly"):
        paramserver.save_model(tmp_path / "m", {"n": np.array([2**25 + 1])})
    with pytest.raises(paramserver.NotFoundError):
        paramserver.load_model(tmp_path / "missing")
    with pytest.raises(paramserver.NotFoundError, match="no checkpoint"):
        paramserver.load_checkpoint(tmp_path)
    damaged = tmp_path / "damaged"
    paramserver.save_model(damaged, {"w": np.ones(64)})
    data = bytearray(damaged.read_bytes())
    data[-40] ^= 0xFF
    damaged.write_bytes(bytes(data))
    with pytest.raises(paramserver.Error) as raised:
        paramserver.load_model(damaged)
    assert raised.value.code == "DATA_LOSS"


def test_a_pytorch_runs_model_and_checkpoints_load_back(tmp_path):
    """A PyTorch job with buffers: rank 0's saved model and the servers'
    final checkpoint both load into a fresh module as its state_dict."""
    python_launch.run(
        "tests/python_torch_program.py", ["save", tmp_path],
        ["--num_servers=2", "--num_workers=2", "--mode=sync",
         "--optimizer=sgd", "--checkpoint_dir=%s" % (tmp_path / "ckpt")])
    trained = torch.load(tmp_path / "trained.pt")
    # Rank 0's file holds its whole state_dict, buffers as it trained them.
    model = program.WithBuffers()
    model.load_state_dict(ps.load_model(str(tmp_path / "rank0.model")))
    for name, value in model.state_dict().items():
        assert torch.equal(value, trained[name]), name
    assert model.norm.num_batches_tracked.item() == 3
    # The servers hold every rank's trained parameters; buffers only as
    # rank 0 broadcast them.
    model = program.WithBuffers()
    model.load_state_dict(ps.load_model(str(tmp_path / "ckpt")))
    for name, value in model.named_parameters():
        assert torch.equal(value, trained[name]), name
    # What the state_dict holds, by name, as the servers were declared.
    assert list(ps.load_model(str(tmp_path / "ckpt"))) == [
        "fc.weight", "fc.bias", "norm.weight", "norm.bias", "frozen",
        "norm.running_mean", "norm.running_var", "norm.num_batches_tracked"]
