"""The paramserver module (python/native_module.cc) against real servers.

Run by //tests:python_client_test on Debian's /usr/bin/python3; the jobs
go through the real launcher (python_launch.py), the rest needs no server.
"""

import socket
import warnings

import numpy as np
import pytest

import paramserver
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


def bfloat16(x):
    """x rounded to bfloat16 (nearest, ties to even), as float32."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7fff + ((bits >> 16) & 1)) >> 16 << 16
    return rounded.astype(np.uint32).view(np.float32)


def test_compressed_tensors_travel_as_set():
    job = python_launch.run(PROGRAM, ["compressed"],
                            ["--num_servers=2", "--num_workers=2",
                             "--mode=sync"] + SGD)
    import python_client_program as program
    lr = np.float32(program.LEARNING_RATE)
    grads = [program.compressed_gradients(rank) for rank in (0, 1)]
    # w: each rank's gradient rounded on the way, the servers' float32
    # update, the result rounded on the way back.
    w = np.arange(6, dtype=np.float32).reshape(2, 3) / 16
    mean_w = ((bfloat16(grads[0][0]).astype(np.float64) +
               bfloat16(grads[1][0])) / 2).astype(np.float32)
    expected_w = bfloat16(w - lr * mean_w)
    # b: each rank sends its largest element (index 2) only.
    sent = [np.where(np.arange(3) == 2, g[1], 0).astype(np.float32)
            for g in grads]
    expected_b = np.float32(0.25) - lr * (
        (sent[0].astype(np.float64) + sent[1]) / 2).astype(np.float32)
    for rank in (0, 1):
        result = job.result(rank)
        assert result["weights"] == [expected_w.tolist(),
                                     expected_b.tolist()], "rank %d" % rank
        assert result["bad"][0][0] == "InvalidArgumentError"
        assert "none, bf16, fp16 or topk" in result["bad"][0][2]
        assert "topk_ratio" in result["bad"][1][2]


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


def test_a_stuck_data_cursor_warns_and_is_counted():
    job = python_launch.run(PROGRAM, ["stuck_cursor"],
                            ["--num_servers=1", "--num_workers=1",
                             "--mode=sync"] + SGD)
    found = job.result(0)
    # The first push is applied; the servers skip the rest, unapplied.
    initial, first = found["weights"][:2]
    assert first != initial
    assert found["weights"][1:] == [first] * 4, found
    assert found["replays"] == 3
    assert "replayed pushes acknowledged, not applied: 3" in job.output
    assert "rank 0's last 2 pushes were skipped by the servers as " \
        "replays" in job.output, job.output
    assert "(epoch 0, examples_done 32)" in job.output
    assert "rank 0 finished with 3 of its 4 pushes skipped" in job.output


def test_one_replay_is_quiet_and_two_in_a_row_warn():
    assert paramserver._replays.is_replay((0, 32), (0, 32))
    assert paramserver._replays.is_replay((0, 64), (1, 0))
    assert not paramserver._replays.is_replay((1, 0), (0, 64))
    watch = paramserver._replays.ReplayWatch(rank=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        watch.finished(True, (0, 32))  # A restarted rank's push again.
        watch.finished(False, (0, 64))
        watch.finished(True, (0, 64))
        watch.warn_at_finish()  # Never two in a row: nothing to say.
    with pytest.warns(RuntimeWarning, match="rank 2's last 2 pushes"):
        watch.finished(True, (0, 64))
    assert (watch.pushes, watch.replays, watch.in_a_row) == (4, 3, 2)
    with pytest.warns(RuntimeWarning, match="3 of its 4 pushes"):
        watch.warn_at_finish()


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
    # Declared optimizers: checked by the client, by the servers' flags,
    # and against rank 0's declaration.
    check("bad_optimizer", "InvalidArgumentError", "INVALID_ARGUMENT",
          "momentum must be in [0, 1), got 1.5")
    check("optimizer_against_flags", "FailedPreconditionError",
          "FAILED_PRECONDITION", "rank 0 declares the optimizer adam",
          "--optimizer=sgd where it declares adam")
    check("optimizer_mismatch", "FailedPreconditionError",
          "FAILED_PRECONDITION", "optimizer: sgd(learning_rate 0.5",
          "declared by rank 1, none (the servers' flags) by rank 0")
    check("bad_learning_rate", "InvalidArgumentError", "INVALID_ARGUMENT",
          "learning_rate nan is not finite and >= 0")


def test_tls_settings_apply_to_servers_named_in_the_program():
    job = python_launch.run(PROGRAM, ["explicit_servers"],
                            ["--num_servers=2", "--num_workers=1",
                             "--auth=tls"] + SGD)
    found = job.result(0)
    assert found["trained"] == 1
    # Told to speak plaintext, the client cannot reach the TLS servers.
    assert found["plaintext"][1] == "UNAVAILABLE", found["plaintext"]


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


def test_optimizer_specs():
    sgd = paramserver.OptimizerSpec.sgd(0.1, momentum=0.9, weight_decay=1e-4)
    assert sgd.kind == "sgd"
    assert sgd.learning_rate == np.float32(0.1)
    assert sgd.momentum == np.float32(0.9)
    assert repr(sgd) == ("OptimizerSpec(sgd(learning_rate 0.1, weight_decay "
                         "0.0001, momentum 0.9))")
    # Only what the kind uses counts.
    assert sgd == paramserver.OptimizerSpec.sgd(0.1, 0.9, 1e-4)
    assert sgd != paramserver.OptimizerSpec.adam(0.1, weight_decay=1e-4)
    adam = paramserver.OptimizerSpec.adam(1e-3)
    assert (adam.beta1, adam.beta2) == (np.float32(0.9), np.float32(0.999))
