"""bench/ddp_mlp_job.py: the DDP baseline of the main job.

Its transcriptions of our worker's data order and initial weights, its
refusals of bad flags and environments, and two ranks on 127.0.0.1 training
a few steps: the RESULT line's fields, the loss going down, the accuracy
above chance and both ranks ending on the same weights. Run by
//bench:ddp_mlp_job_test on Debian's /usr/bin/python3.
"""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ddp_mlp_job as job  # pylint: disable=wrong-import-position

SCRIPT = os.path.join(HERE, "ddp_mlp_job.py")
PYTHON = "/usr/bin/python3"


def test_permutation_is_the_workers():
    # worker/dataset_test.cc's PermutationIsPinned.
    assert job.permutation(10, 42, 0) == [5, 1, 9, 6, 7, 2, 4, 0, 8, 3]
    assert job.permutation(10, 42, 1) == [8, 9, 1, 7, 6, 4, 3, 2, 0, 5]


def test_blocks_cover_the_epoch_once_and_split_the_last_batch_evenly():
    n, world, batch = 1001, 3, 64
    seen = []
    steps = -(-n // (world * batch))
    for step in range(steps):
        for rank in range(world):
            begin, size = job.block(n, world, batch, step, rank)
            seen.extend(range(begin, begin + size))
    assert seen == list(range(n))
    # 1001 = 5 * 192 + 41: the last step gives 14, 14, 13.
    assert [job.block(n, world, batch, 5, r)[1] for r in range(3)] == [
        14, 14, 13]


def test_initial_weights_are_glorot_uniform_and_reproducible():
    w = job.glorot_uniform(1, 0, 784, 256)
    limit = np.sqrt(6.0 / (784 + 256))
    assert w.shape == (784, 256) and w.dtype == np.float32
    assert np.all(np.abs(w) <= limit)
    assert abs(float(w.std()) - limit / np.sqrt(3)) < 0.01 * limit
    np.testing.assert_array_equal(w, job.glorot_uniform(1, 0, 784, 256))
    assert not np.array_equal(w, job.glorot_uniform(2, 0, 784, 256))
    assert not np.array_equal(w[:128, :128],
                              job.glorot_uniform(1, 2, 256, 128)[:128])


def test_model_takes_the_workers_weights_transposed_and_zero_biases():
    import torch
    model = job.make_model(torch, [784, 256, 128, 10], seed=1)
    linears = [m for m in model if isinstance(m, torch.nn.Linear)]
    assert [tuple(m.weight.shape) for m in linears] == [
        (256, 784), (128, 256), (10, 128)]
    np.testing.assert_array_equal(linears[1].weight.detach().numpy(),
                                  job.glorot_uniform(1, 2, 256, 128).T)
    assert all(float(m.bias.abs().sum()) == 0 for m in linears)


def run(args, env):
    return subprocess.run([PYTHON, SCRIPT] + args, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=300, check=False)


@pytest.mark.parametrize("flag, message", [
    ("--batch_size=0", "--batch_size must be >= 1, got 0"),
    ("--epochs=-1", "--epochs must be >= 1, got -1"),
    ("--learning_rate=nan", "--learning_rate must be finite and > 0"),
    ("--model=784-x-10", "--model must be layer sizes"),
    ("--model=100-10", "--model must take 784 pixels and give 10 classes"),
    ("--lr_schedule=step", "invalid choice: 'step'"),
])
def test_bad_flags_are_refused_by_name(flag, message):
    proc = run([flag], dict(os.environ))
    assert proc.returncode == 2
    assert message in proc.stdout.decode()


def test_missing_or_bad_environment_is_named():
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    proc = run([], env)
    assert proc.returncode == 1
    assert "RANK is not set" in proc.stdout.decode()
    proc = run([], dict(env, RANK="2", WORLD_SIZE="2", MASTER_ADDR="x",
                        MASTER_PORT="1"))
    assert proc.returncode == 1
    assert "need 0 <= RANK < WORLD_SIZE" in proc.stdout.decode()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_ranks_train_and_report():
    env = dict(os.environ, MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port()), WORLD_SIZE="2",
               OMP_NUM_THREADS="1")
    procs = [subprocess.Popen(
        [PYTHON, SCRIPT, "--max_steps=30", "--eval_examples=1000"],
        env=dict(env, RANK=str(rank)), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT) for rank in (0, 1)]
    outputs = [p.communicate(timeout=300)[0].decode() for p in procs]
    for p, output in zip(procs, outputs):
        assert p.returncode == 0, output
    results = [line.split("RESULT ", 1)[1] for line in
               outputs[0].splitlines() if line.startswith("RESULT ")]
    assert len(results) == 1, outputs[0]
    assert "RESULT " not in outputs[1]
    result = json.loads(results[0])
    assert set(result) == {"wall_s", "train_s", "steps", "test_accuracy",
                           "first_loss", "last_loss", "model_bytes",
                           "world_size"}
    assert result["steps"] == 30
    assert result["world_size"] == 2
    assert result["model_bytes"] == 4 * (784 * 256 + 256 + 256 * 128 + 128 +
                                         128 * 10 + 10)
    assert 0 < result["train_s"] < result["wall_s"]
    # From about ln 10 = 2.3; 30 Adam steps reach about 0.7 accuracy.
    assert result["last_loss"] < 0.5 * result["first_loss"]
    assert 0.4 < result["test_accuracy"] <= 1
    hashes = [[line.split()[-1] for line in output.splitlines()
               if line.startswith("WEIGHTS rank %d " % rank)]
              for rank, output in enumerate(outputs)]
    assert len(hashes[0]) == 1 and hashes[0] == hashes[1]
