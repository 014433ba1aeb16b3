"""paramserver.torch.pipeline against real servers: a model cut into
stages trains, step by step, as the unsplit model does on the same global
batches; bad splits and a killed neighbour fail with errors that say why.

Run by //tests:python_torch_pipeline_test on Debian's /usr/bin/python3.

The bound. Each step t is redone in float64 from the weights the pipelined
run had before it, on the same global batch (the unsplit model, plain
PyTorch): an exact step. The pipelined run computes the same sums in
float32, in another order (micro-batches, a sum over replicas and stages
on the servers). By running error analysis (Higham, Accuracy and
Stability of Numerical Algorithms, 2nd ed., sections 3.1 and 3.5), each
float32 gradient element lies within gamma_N = N u / (1 - N u), u = 2^-24,
times the same computation on absolute values (G_abs below: the backward
pass with |W|, |activations| and each derivative's terms taken
absolutely), where N is the longest chain of roundings an element goes
through: the forward's dot products (sum of fan-ins), the softmax's sum
(classes), the backward's dot products (sum of fan-outs), the sum over
the global batch, the servers' sum over R x K ranks, and a few single
operations (exp, log, division, scaling, the update); times 2 because a
forward error reaches the gradient through derivatives of modulus at most
1 (tanh, softmax) as well as the backward's own. So per element:

    |w_pipelined - w_exact| <= lr * 2 * gamma_N * G_abs + 2 u |w_exact|

(the last term: the update's own rounding). A gradient that is halved
(the K-scaling forgotten) or misses a micro-batch lands outside this
bound for most elements, which the test checks too, so the bound can fail.
"""

import signal

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import python_launch
import python_torch_pipeline_program as program

PROGRAM = "tests/python_torch_pipeline_program.py"
U = 2.0 ** -24


def launch(tmp_path, stages, replicas, micro_batches, schedule):
    job = python_launch.run(
        PROGRAM, [tmp_path, stages, micro_batches, schedule],
        ["--num_servers=2", "--num_workers=%d" % (stages * replicas),
         "--mode=sync", "--optimizer=sgd", "--lr_schedule=constant"])
    return job, [dict(np.load(tmp_path / ("rank%d.npz" % r)))
                 for r in range(stages * replicas)]


def _linears(model):
    return [m for m in model if isinstance(m, torch.nn.Linear)]


def exact_step(weights, x, y):
    """(weights after one float64 SGD step of the unsplit model on (x, y)
    from `weights`, G_abs), both {name: array}."""
    model = program.make_model().double()
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(torch.from_numpy(weights[n]))
    x, y = x.double(), y
    # Forward, keeping each Linear's input.
    inputs, h = [], x
    for m in model:
        if isinstance(m, torch.nn.Linear):
            inputs.append(h)
        h = m(h)
    loss = F.cross_entropy(h, y)
    model.zero_grad()
    loss.backward()
    after = {n: (p - program.LR * p.grad).detach().numpy()
             for n, p in model.named_parameters()}
    # The backward on absolute values.
    with torch.no_grad():
        batch = x.shape[0]
        p = torch.softmax(h, dim=1)
        delta = (p + F.one_hot(y, p.shape[1]).double()) / batch
        g_abs = {}
        linears = _linears(model)
        names = [n.rsplit(".", 1)[0] for n, _ in model.named_parameters()
                 if n.endswith("weight")]
        for i in reversed(range(len(linears))):
            g_abs[names[i] + ".weight"] = (delta.T @ inputs[i].abs()).numpy()
            g_abs[names[i] + ".bias"] = delta.sum(0).numpy()
            if i:
                a = inputs[i]  # tanh's output: its derivative is 1 - a^2.
                delta = (delta @ linears[i].weight.abs()) * (1 + a * a)
    return after, g_abs


def chain_length(replicas, stages):
    model = program.make_model()
    linears = _linears(model)
    return (sum(m.in_features for m in linears) + program.CLASSES +
            sum(m.out_features for m in linears) +
            program.BATCH * replicas + replicas * stages + 8)


def check_steps(ranks, stages, replicas):
    """Every rank holds the same weights after every step, each step
    within the bound of the exact step from the weights before it; and
    the two mistakes fall outside it."""
    x, y = program.make_data(program.STEPS * program.BATCH * replicas)
    n = chain_length(replicas, stages)
    gamma = n * U / (1 - n * U)
    names = [k.split("/", 1)[1] for k in ranks[0] if k.startswith("init/")]
    worst = 0.0
    before = {name: ranks[0]["init/" + name] for name in names}
    for step in range(program.STEPS):
        xs, ys = program.global_batch(x, y, step, replicas)
        expected, g_abs = exact_step(before, xs, ys)
        got = {name: ranks[0]["%d/%s" % (step, name)] for name in names}
        for other in ranks[1:]:
            for name in names:
                np.testing.assert_array_equal(
                    other["%d/%s" % (step, name)], got[name])
        # A step whose gradient misses half of itself (the K-scaling
        # forgotten), and one that misses the last micro-batch's quarter.
        halved = {k: (before[k] + expected[k]) / 2 for k in names}
        missing = {k: before[k] + 0.75 * (expected[k] - before[k])
                   for k in names}
        for name in names:
            bound = (program.LR * 2 * gamma * g_abs[name] +
                     2 * U * np.abs(expected[name]))
            error = np.abs(got[name].astype(np.float64) - expected[name])
            assert np.all(error <= bound), (
                "step %d, %s: %g > bound %g" % (
                    step, name, np.max(error - bound), np.max(bound)))
            worst = max(worst, float(np.max(error / bound)))
            for wrong in (halved, missing):
                outside = np.abs(wrong[name] - expected[name]) > bound
                assert outside.mean() >= 0.5, (step, name, outside.mean())
        before = got
    return worst


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("replicas", [1, 2])
def test_two_stages_train_as_the_unsplit_model(tmp_path, schedule,
                                               replicas):
    job, ranks = launch(tmp_path, 2, replicas, 4, schedule)
    worst = check_steps(ranks, 2, replicas)
    print("worst |error| / bound: %.3g" % worst)
    for r in range(2 * replicas):
        result = job.result(r)
        assert (result["stage"], result["replica"]) == (r % 2, r // 2)
        assert bool(result["losses"]) == (r % 2 == 1)
    # Stage 0 owns the first Linear, stage 1 the other two (balanced by
    # parameter count: 132 against 156 + 52).
    assert job.result(0)["own"] == ["0.weight", "0.bias"]
    assert job.result(1)["own"] == ["2.weight", "2.bias", "4.weight",
                                    "4.bias"]


def test_worker_placement_steps_each_stage_alike(tmp_path, monkeypatch):
    # The servers sum the gradients (zeros for the other stages'); every
    # rank's own torch SGD steps on the mean, other stages' tensors too.
    monkeypatch.setenv("PIPELINE_PLACEMENT", "worker")
    job, ranks = launch(tmp_path, 2, 2, 2, "1f1b")
    assert job.result(0)["placement"] == "worker"
    check_steps(ranks, 2, 2)


def test_three_stages_of_one_micro_batch_and_gpipe_equals_1f1b(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    _, gpipe = launch(tmp_path / "a", 3, 1, 3, "gpipe")
    _, one_f_one_b = launch(tmp_path / "b", 3, 1, 3, "1f1b")
    check_steps(gpipe, 3, 1)
    # The same sums in the same order: bit for bit.
    for key, value in gpipe[0].items():
        np.testing.assert_array_equal(value, one_f_one_b[0][key], key)


def test_more_stages_than_modules_is_refused(tmp_path):
    job = python_launch.run(
        PROGRAM, [tmp_path, 6, 1, "gpipe"],
        ["--num_servers=1", "--num_workers=2", "--mode=sync",
         "--optimizer=sgd"], expect_success=False)
    assert job.returncode != 0
    assert "cannot split 5 modules into 6 stages" in job.output, job.output


def test_a_killed_neighbour_is_named(tmp_path):
    # Without the launcher (which would stop the job when a worker dies):
    # stage 1 kills itself as step 2 begins; stage 0, waiting for the
    # gradient of its activations, must fail naming it, not hang.
    server, port, log = python_launch.start_server(tmp_path, 2,
                                                   ["--mode=sync"])
    workers = []
    try:
        workers = python_launch.start_workers(
            PROGRAM, [tmp_path, 2, 2, "1f1b", 1, 2], 2, port)
        outputs = [w.communicate(timeout=python_launch.TIMEOUT_S)[0]
                   .decode(errors="replace") for w in workers]
        assert workers[1].returncode == -signal.SIGKILL, outputs[1]
        assert workers[0].returncode != 0, outputs[0]
        assert "NeighbourError" in outputs[0], outputs[0]
        # Closed or reset, depending on what its socket still held.
        assert "stage 1 (rank 1)" in outputs[0], outputs[0]
        assert "did it die?" in outputs[0], outputs[0]
    finally:
        python_launch.stop(workers + [server], log)


def test_the_fashion_mnist_example_trains_two_stages_by_two_replicas():
    job = python_launch.run(
        "examples/pipeline_fashion_mnist.py",
        ["--stages", "2", "--micro-batches", "4", "--limit-batches", "40",
         "--test-batch-size", "250"],
        ["--num_servers=1", "--num_workers=4", "--mode=sync",
         "--optimizer=sgd", "--lr_schedule=constant", "--max_restarts=0"])
    line = job.line_with("[worker 0] final test accuracy:")
    assert line, job.output
    # Trained: well above chance (10%) after 40 steps.
    assert float(line.rsplit(" ", 1)[1]) > 0.4, line
    assert "replicas 2, micro-batches 4, 1f1b" in job.output
