"""paramserver.torch in the launcher's --mode=allreduce: the workers'
Gloo ring through the real launcher and coordinator.

Equivalence: 2 workers at batch 32 against one process at batch 64, per
step, at the weights the ring had at that step. Both gradients are float32
computations of the same exact (float64) gradient, each within the bound
derived in `gradient_bound`; a rank's share lost, doubled or unweighted
moves the gradient by about its own size, far outside it.
"""

import os
import signal
import subprocess
import time

import numpy as np
import torch
import torch.nn.functional as F

import python_launch
import python_torch_allreduce_program as program
from python_torch_program import (BATCH, CLASSES, FEATURES, HIDDEN,
                                  make_data, make_model, make_optimizer)

PROGRAM = "tests/python_torch_allreduce_program.py"
RING = ["--mode=allreduce", "--num_workers=2"]
U = 2.0 ** -24  # float32's unit roundoff.


def run_ring(out_dir, *args, flags=()):
    job = python_launch.run(PROGRAM, ["equivalence", out_dir] + list(args),
                            RING + list(flags))
    for rank in (0, 1):
        assert job.result(rank)["mode"] == "allreduce"
    return job


def load(out_dir):
    ranks = [dict(np.load(os.path.join(out_dir, "rank%d.npz" % r)))
             for r in (0, 1)]
    # The replicas hold the same bits at every step.
    assert ranks[0].keys() == ranks[1].keys()
    for key in ranks[0]:
        np.testing.assert_array_equal(ranks[0][key], ranks[1][key], key)
    return ranks[0]


def gradient(weights, x, y, dtype):
    """{name: gradient} of the batch's mean loss at `weights`."""
    model = make_model(seed=0).to(dtype)
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(torch.from_numpy(weights[n]).to(dtype))
    F.cross_entropy(model(x.to(dtype)), y).backward()
    return {n: p.grad.detach().numpy() for n, p in model.named_parameters()}


def gradient_bound(weights, x, y):
    """{name: elementwise bound} on |float32 gradient - exact gradient|.

    First-order rounding analysis (Higham, ch. 3): a float32 dot product of
    length n errs by at most gamma_n = n u / (1 - n u) times the dot product
    of the absolute values. The gradient of the mean loss is a chain of such
    products (the forward pass over FEATURES and HIDDEN, softmax over
    CLASSES, the backward pass over CLASSES and the batch's sum over B),
    each adding its gamma, times the same chain computed on absolute values
    (|W|, |x|, |p| + onehot; |tanh'| <= 1): M below. The elementwise
    functions (tanh, exp, log, division by B) add a few u each; they are
    counted as 10 more terms, and the whole doubled for the first-order
    terms' neglected products. The ring's gradient (two batches of 32
    summed once) is one such computation, PyTorch's at 64 another."""
    w = {n: np.abs(v.astype(np.float64)) for n, v in weights.items()}
    xs = np.abs(x.numpy().astype(np.float64))
    batch = xs.shape[0]
    a = np.abs(np.tanh(x.numpy().astype(np.float64) @
                       weights["0.weight"].astype(np.float64).T +
                       weights["0.bias"].astype(np.float64)))
    z = a @ weights["2.weight"].astype(np.float64).T + \
        weights["2.bias"].astype(np.float64)
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    dz = p + np.eye(CLASSES)[y.numpy()]
    dh = dz @ w["2.weight"]  # |W2|^T |dz|, per example.
    magnitude = {
        "2.weight": dz.T @ a / batch, "2.bias": dz.sum(axis=0) / batch,
        "0.weight": dh.T @ xs / batch, "0.bias": dh.sum(axis=0) / batch}
    length = batch + FEATURES + HIDDEN + 2 * CLASSES + 10
    gamma = length * U / (1 - length * U)
    return {n: 2 * gamma * m for n, m in magnitude.items()}


def test_two_workers_at_32_match_one_process_at_64_per_step(tmp_path):
    run_ring(tmp_path, "sgd")
    saved = load(tmp_path)
    x, y = make_data(program.STEPS * BATCH * 2)
    initial = {n: p.detach().numpy() for n, p in
               make_model(seed=7).named_parameters()}
    for step in range(program.STEPS):
        weights = {n: saved["%d/%s/w" % (step, n)] for n in initial}
        begin, end = step * 2 * BATCH, (step + 1) * 2 * BATCH
        one = gradient(weights, x[begin:end], y[begin:end], torch.float32)
        exact = gradient(weights, x[begin:end], y[begin:end], torch.float64)
        bound = gradient_bound(weights, x[begin:end], y[begin:end])
        # Each rank's own gradient at batch 32, as the worker computed it.
        halves = [gradient(weights, x[b:b + BATCH], y[b:b + BATCH],
                           torch.float32) for b in (begin, begin + BATCH)]
        for n in initial:
            ring = saved["%d/%s/g" % (step, n)]
            where = "step %d, %s" % (step, n)
            # 32 g0 and 32 g1 are exact, their sum is one rounding, and /64
            # is exact: the ring's mean is the float32 mean of the halves.
            np.testing.assert_array_equal(
                ring, (np.float32(32) * halves[0][n] +
                       np.float32(32) * halves[1][n]) / np.float32(64),
                where)
            assert np.all(np.abs(ring - exact[n]) <= bound[n]), where
            assert np.all(np.abs(one[n] - exact[n]) <= bound[n]), where
            # The bound is tight enough that a lost rank would fail it.
            assert not np.all(np.abs(halves[0][n] - exact[n]) <= bound[n])
    # The steps are PyTorch's SGD (momentum, weight decay) applied to those
    # gradients: replayed in this process, the same bits at every step.
    model = make_model(seed=7)
    opt, _ = make_optimizer("sgd", model)
    for step in range(program.STEPS):
        for n, p in model.named_parameters():
            np.testing.assert_array_equal(
                p.detach().numpy(), saved["%d/%s/w" % (step, n)])
            p.grad = torch.from_numpy(saved["%d/%s/g" % (step, n)])
        opt.step()
    for n, p in model.named_parameters():
        np.testing.assert_array_equal(p.detach().numpy(),
                                      saved["final/%s" % n])
        assert not np.allclose(initial[n], saved["final/%s" % n], atol=1e-3)


def test_reruns_are_bit_identical(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    run_ring(first, "adam")
    run_ring(second, "adam")
    a, b = load(first), load(second)
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], key)


def test_a_killed_worker_restarts_the_ring_from_the_last_checkpoint(
        tmp_path):
    # SGD with momentum and StepLR: the checkpoint's momentum, and the
    # script's scheduler catching up over resume_step. No timing: rank 1 waits before step 13 until killed; rank 0 wrote
    # the checkpoint of step 10 before step 11 could complete on rank 1.
    killed, whole = tmp_path / "killed", tmp_path / "whole"
    killed.mkdir()
    whole.mkdir()
    log = open(tmp_path / "launch.txt", "wb")
    env = dict(os.environ, PYTHONPATH=python_launch.runfile("python/site") +
               ":" + os.path.dirname(python_launch.runfile(PROGRAM)),
               OMP_NUM_THREADS="1")
    launch = subprocess.Popen(
        [python_launch.runfile("deploy/local/launch"),
         "--server_binary=" + python_launch.runfile("server/server"),
         "--checkpoint_dir=%s" % (tmp_path / "checkpoints")] + RING +
        ["--", python_launch.PYTHON, python_launch.runfile(PROGRAM),
         "equivalence", str(killed), "sgd+step", "13", "5"],
        stdout=log, stderr=subprocess.STDOUT, env=env)
    python_launch.wait_for(killed / "stopped", [launch])
    output = (tmp_path / "launch.txt").read_text()
    pid = int(output.split("started worker 1 (pid ")[1].split(")")[0])
    os.kill(pid, signal.SIGKILL)
    assert launch.wait(timeout=python_launch.TIMEOUT_S) == 0
    job = python_launch.Job(0, (tmp_path / "launch.txt").read_text())
    # The survivor's step failed (its peer gone), and both were restarted
    # (the survivor's step is 13 or 14: rank 1 may die before rank 0 has
    # all of step 13).
    assert "[worker 0] paramserver.torch: rank 0: the ring broke in step " \
        in job.output
    assert "restarts: 2 of" in job.output
    assert ("[worker 0] paramserver.torch: the ring resumes after step 10 "
            in job.output)
    # Steps 10 to 12 were trained twice: the ring resumed at step 10.
    for rank in (0, 1):
        assert job.result(rank)["resumed_at"] == 10
        assert job.result(rank)["steps"] == program.STEPS
        # StepLR caught up: not the rate of step 10 halved on from there.
        assert job.result(rank)["lr"] == 0.1 * 0.5 ** 4
    # And ended on the bits of a ring that was never killed.
    run_ring(whole, "sgd+step", flags=["--checkpoint_dir=%s" %
                                       (tmp_path / "other")])
    a, b = load(killed), load(whole)
    for key in a:
        if key.startswith("final/"):
            np.testing.assert_array_equal(a[key], b[key], key)


def test_what_the_mode_cannot_do_is_refused_by_name(tmp_path):
    job = python_launch.run(PROGRAM, ["refusals", tmp_path], RING)
    found = job.result(0)
    assert "compression" in found["fp16"]
    assert "collectives" in found["allreduce"]
