"""paramserver.torch's gradient edits (clipping) and accumulation against
real servers, through the launcher, over the same-host socket and over
gRPC: Horovod's synchronize()/skip_synchronize() pattern and
backward_passes_per_step match single-process PyTorch; an edit or an
accumulation without them is refused, never half-applied.

Run by //tests:python_torch_edits_test as python_torch_test.py is, whose
single-process reference and weight check it shares.
"""

import re

import numpy as np
import pytest

import python_launch
from python_torch_test import (PROGRAM, TWO_BY_TWO, check_weights,
                               single_process)


# Gradient edits and accumulation, over the same-host socket and over gRPC:
# what the servers receive must not depend on the transport. check_weights'
# bound holds for both: clipping scales the mean gradient by
# CLIP_NORM / |mean|, whose rounding is relative (about 1e-7) as the mean's
# is; two passes' sums double the gradient and its rounding alike, still
# two orders below 2e-5 after 20 steps at learning rate 0.1.
TRANSPORTS = ["socket", "grpc"]


def run_edits(tmp_path, how, placement, passes, declared_passes, transport,
              expect_success=True):
    # Server placement: the servers run the declared SGD (with momentum and
    # weight decay); worker placement declares plain summation.
    server_flags = (["--momentum=0.9", "--weight_decay=0.01"]
                    if placement == "server" else [])
    if transport == "grpc":
        server_flags.append("--nolocal_transport")
    flags = ["--server_flags=" + " ".join(server_flags)] if server_flags \
        else []
    return python_launch.run(
        PROGRAM, ["edits", tmp_path, how, placement, passes,
                  declared_passes],
        TWO_BY_TWO + ["--mode=sync", "--optimizer=sgd"] + flags,
        expect_success=expect_success)


def differs_from_the_plain_step(**edit):
    """The edit's reference is far from the plain one (beyond check_weights'
    bound), so a lost edit fails check_weights."""
    plain, edited = single_process("sgd"), single_process("sgd", **edit)
    return any(not np.allclose(plain[n], edited[n], rtol=0, atol=1e-3)
               for n in plain)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_clipping_between_synchronize_and_step_matches_single_process(
        tmp_path, transport):
    # Horovod's pattern: the mean gradient is clipped, as one process clips
    # the gradient of the combined batch.
    assert differs_from_the_plain_step(clip=True)
    job = run_edits(tmp_path, "clip_pattern", "worker", 1, 1, transport)
    # Named for what it is (an AttributeError names 'DistributedSGD'),
    # and still an SGD for schedulers and isinstance().
    assert job.result(0)["class"] == "DistributedSGD"
    assert job.result(0)["is_sgd"]
    check_weights(tmp_path, "sgd", clip=True)


@pytest.mark.parametrize("transport,placement", [("socket", "server"),
                                                ("grpc", "worker")])
def test_clipping_after_backward_without_the_pattern_is_refused(
        tmp_path, transport, placement):
    # The hooks pushed the unclipped gradients: step() refuses, showing
    # the pattern, instead of applying some of the clipping or none.
    job = run_edits(tmp_path, "clip_then_step", placement, 1, 1, transport,
                    expect_success=False)
    assert job.returncode != 0
    line = job.line_with("FailedPreconditionError: ")
    assert "changed after backward() pushed it" in line, job.output
    assert "optimizer.synchronize()" in job.output
    assert "with optimizer.skip_synchronize():" in job.output
    if placement == "server":
        assert "with placement='worker'" in job.output


def test_synchronize_is_refused_with_server_placement(tmp_path):
    job = run_edits(tmp_path, "clip_pattern", "server", 1, 1, "socket",
                    expect_success=False)
    assert job.returncode != 0
    assert "synchronize() needs placement='worker'" in job.line_with(
        "FailedPreconditionError: "), job.output


@pytest.mark.parametrize("transport,placement", [
    ("socket", "server"), ("grpc", "server"), ("grpc", "worker")])
def test_accumulation_over_backward_passes_per_step_matches_single_process(
        tmp_path, transport, placement):
    # Each rank sums two passes' gradients, as one process sums the
    # combined batches' (the mean over ranks of sums is the sum of means).
    assert differs_from_the_plain_step(passes=2)
    run_edits(tmp_path, "step", placement, 2, 2, transport)
    check_weights(tmp_path, "sgd", passes=2)


def test_accumulation_without_backward_passes_per_step_is_refused(
        tmp_path):
    job = run_edits(tmp_path, "step", "server", 2, 1, "grpc",
                    expect_success=False)
    assert job.returncode != 0
    line = job.line_with("FailedPreconditionError: ")
    assert re.search(r"accumulated the gradient of \S+ 2 times", line), \
        job.output
    assert "backward_passes_per_step=N" in line, line


def test_a_step_before_the_last_backward_pass_is_refused(tmp_path):
    job = run_edits(tmp_path, "step", "server", 1, 2, "socket",
                    expect_success=False)
    assert job.returncode != 0
    line = job.line_with("FailedPreconditionError: ")
    assert "step() after 1 backward passes" in line, job.output
