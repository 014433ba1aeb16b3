"""The paramserver module (python/native_module.cc) against real servers.

Run by //tests:python_client_test on Debian's /usr/bin/python3; the jobs
go through the real launcher (python_launch.py), the rest needs no server.
"""

import socket

import numpy as np
import pytest

import paramserver
from paramserver import _server_config
import python_launch

PROGRAM = "tests/python_client_program.py"
SGD = ["--optimizer=sgd", "--learning_rate=%g" % 0.5,
       "--lr_schedule=constant", "--server_flags=--momentum=0"]


def expected_weights():
    """The sync arithmetic of python_client_program.sync_arithmetic in
    float32, as the servers do it: w -= lr * mean over ranks."""
    import python_client_program as program
    w = [np.arange(6, dtype=np.float32).reshape(2, 3) / 16,
         np.full(3, 0.25, np.float32)]
    seen = [[x.tolist() for x in w]]
    for step in range(3):
        grads = [program.gradients(rank, step) for rank in (0, 1)]
        for t in range(2):
            mean = ((grads[0][t].astype(np.float64) + grads[1][t]) / 2)
            w[t] = w[t] - np.float32(program.LEARNING_RATE) * \
                mean.astype(np.float32)
        seen.append([x.tolist() for x in w])
    return seen


def test_sync_steps_apply_the_mean_gradient_bit_for_bit():
    job = python_launch.run(PROGRAM, ["sync_arithmetic"],
                            ["--num_servers=2", "--num_workers=2",
                             "--mode=sync"] + SGD)
    expected = expected_weights()
    for rank in (0, 1):
        result = job.result(rank)
        assert result["weights"] == expected, "rank %d" % rank
        assert result["same_buffers"], "pulls must fill the same arrays"
        assert result["mode"] == "sync"
        assert result["model"] == [
            "TensorSpec('w', [2,3], Initializer.from_rank0(), "
            "weight_decay=True)",
            "TensorSpec('b', [3], Initializer.constant(0.25), "
            "weight_decay=False)"]


def test_errors_are_exceptions_with_the_servers_message():
    job = python_launch.run(PROGRAM, ["errors"],
                            ["--num_servers=2", "--num_workers=2",
                             "--mode=sync"] + SGD)
    found = job.result(0)
    found.update(job.result(1))

    def check(case, cls, code, *texts):
        got = found[case]
        assert got is not None, "%s raised nothing" % case
        assert got[:2] == [cls, code], (case, got)
        for text in texts:
            assert text in got[2], (case, got[2])
        return got

    # The server's own comparison, naming the tensor and both sides.
    check("mismatch", "FailedPreconditionError", "FAILED_PRECONDITION",
          '"w"', "[3,2]", "[2,3]", "rank 0")
    check("pull_before_declare", "FailedPreconditionError",
          "FAILED_PRECONDITION", "Declare")
    bad = check("bad_declaration", "InvalidArgumentError", "INVALID_ARGUMENT",
                "w")
    assert bad[3], "InvalidArgumentError is a ValueError"
    check("bad_initializer", "InvalidArgumentError", "INVALID_ARGUMENT",
          "xavier")
    missing = check("unknown_name", "NotFoundError", "NOT_FOUND", "nope")
    assert missing[4], "NotFoundError is a LookupError"
    check("pull_before_broadcast", "FailedPreconditionError",
          "FAILED_PRECONDITION", "Broadcast")
    check("wrong_size", "InvalidArgumentError", "INVALID_ARGUMENT", "w")
    check("missing_tensor", "InvalidArgumentError", "INVALID_ARGUMENT",
          '"b"', "not sent")
    check("send_after_finish", "FailedPreconditionError",
          "FAILED_PRECONDITION", "finished")
    # Refused by a server, which names the tensor, element and value.
    nan = found["nan_gradient"]
    assert nan is not None and nan[0] == "InvalidArgumentError", nan
    assert "w" in nan[2] and "nan" in nan[2].lower(), nan[2]
    assert found["weights_after"] is not None


def test_bad_options_raise_without_servers(monkeypatch):
    for name in ("PS_SERVERS", "PS_RANK", "PS_NUM_WORKERS", "PS_JOB_ID"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(paramserver.InvalidArgumentError, match="PS_"):
        paramserver.Client()
    with pytest.raises(ValueError, match="no port"):
        paramserver.Client(servers="localhost")
    with pytest.raises(paramserver.InvalidArgumentError, match=">= 0"):
        paramserver.Client(servers="127.0.0.1:1", connect_timeout=-1)


def test_an_unreachable_server_is_a_connection_error():
    # A port nobody listens on: bound, never listened.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = "127.0.0.1:%d" % s.getsockname()[1]
        with pytest.raises(ConnectionError) as raised:
            paramserver.Client(servers=[address], connect_timeout=0.2)
    assert isinstance(raised.value, paramserver.UnavailableError)
    assert raised.value.code == "UNAVAILABLE"
    assert address in str(raised.value)


def test_tensor_specs_from_tuples():
    spec = paramserver.tensor_spec("fc.w", [3, 4], ("uniform", -1, 1), False)
    assert spec.shape == (3, 4) and spec.num_elements == 12
    assert spec.initializer.kind == "uniform"
    assert spec.initializer == paramserver.Initializer.uniform(-1, 1)
    assert not spec.weight_decay
    assert paramserver.tensor_spec("s", ()).shape == ()


def test_server_config_from_the_launchers_flags():
    argv = ["bazel-bin/deploy/local/launch", "--num_workers=2",
            "--optimizer", "sgd", "--learning_rate=0.1",
            "--server_flags=--momentum=0.5 --weight_decay=1e-4",
            "--", "/usr/bin/python3", "train.py", "--optimizer=adam"]
    config = _server_config.from_launcher_command(argv)
    assert config["optimizer"] == "sgd"
    assert config["learning_rate"] == 0.1
    assert config["momentum"] == 0.5
    assert config["weight_decay"] == 1e-4
    assert config["lr_schedule"] == "constant"  # The launcher's default.
    defaults = _server_config.from_launcher_command(["launch", "--", "x"])
    assert defaults["optimizer"] == "adam"
    assert defaults["learning_rate"] == 0.001  # --learning_rate=0: servers'.
    # --server_flags come after the launcher's own flags, so they win.
    override = _server_config.from_launcher_command(
        ["launch", "--learning_rate=0.1",
         "--server_flags=--learning_rate=0.2", "--", "x"])
    assert override["learning_rate"] == 0.2


def test_server_config_from_the_environment():
    assert _server_config.from_environment({}) is None
    config = _server_config.from_environment(
        {"PS_OPTIMIZER": "sgd", "PS_MOMENTUM": "0"})
    assert config["optimizer"] == "sgd" and config["momentum"] == 0.0
    assert config["learning_rate"] == 0.001
