"""paramserver.torch against real servers, through the launcher.

Run by //tests:python_torch_test on Debian's /usr/bin/python3 with
python3-torch (installed by scripts/install_deps.sh: no skipping here).
The equivalence tests redo the workers' training in this process, as
single-process PyTorch at the combined batch, and compare within float32
rounding: a dropped, doubled or unweighted push lands far outside it.
"""

import os
import subprocess

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import python_launch
import python_torch_program as program

PROGRAM = "tests/python_torch_program.py"
TWO_BY_TWO = ["--num_servers=2", "--num_workers=2"]


def single_process(optimizer_name, ranks=2, passes=1, clip=False):
    """The workers' STEPS steps in one process at batch BATCH * ranks,
    each accumulating `passes` backward passes, clipped if `clip`."""
    torch.set_num_threads(1)
    model = program.make_model(seed=7)
    opt, scheduler = program.make_optimizer(optimizer_name, model)
    batch = program.BATCH * ranks
    x, y = program.make_data(program.STEPS * passes * batch)
    for step in range(program.STEPS):
        opt.zero_grad()
        for j in range(passes):
            begin = (step * passes + j) * batch
            F.cross_entropy(model(x[begin:begin + batch]),
                            y[begin:begin + batch]).backward()
        if clip:
            program.clip(model)
        opt.step()
        if scheduler is not None:
            scheduler.step()
    return {n: p.detach().numpy() for n, p in model.named_parameters()}


def check_equivalence(tmp_path, optimizer_name, placement, flags):
    job = python_launch.run(
        PROGRAM, ["equivalence", tmp_path, optimizer_name, placement],
        TWO_BY_TWO + ["--mode=sync"] + flags)
    assert job.result(0)["placement"] == placement
    assert "parameters are still those" not in job.output  # They trained.
    check_weights(tmp_path, optimizer_name)
    return job


def check_weights(tmp_path, optimizer_name, num_ranks=2, **reference_args):
    """The ranks' saved weights against single-process PyTorch."""
    reference = single_process(optimizer_name, num_ranks, **reference_args)
    ranks = [np.load(tmp_path / ("rank%d.npz" % r)) for r in range(num_ranks)]
    initial = {n: p.detach().numpy()
               for n, p in program.make_model(seed=7).named_parameters()}
    for name, expected in reference.items():
        # Every rank holds the same weights, bit for bit.
        for other in ranks[1:]:
            np.testing.assert_array_equal(ranks[0][name], other[name])
        # Rounding differs (the servers average two means of 32, PyTorch
        # takes one mean of 64); a lost or doubled rank's share does not:
        # it moves weights by about the learning rate's order.
        np.testing.assert_allclose(ranks[0][name], expected, rtol=0,
                                   atol=2e-5, err_msg=name)
        assert not np.allclose(expected, initial[name], atol=1e-3), name


# The launcher passes --optimizer to the servers whether given or not, so
# the tests give the one the script declares; the servers take the rest of
# the declared optimizer (momentum, weight decay, betas) from the
# declaration. Flags that agree with the declaration are accepted.


def test_server_side_sgd_with_momentum_matches_single_process(tmp_path):
    check_equivalence(tmp_path, "sgd", "server", [
        "--optimizer=sgd", "--lr_schedule=constant",
        "--server_flags=--momentum=0.9 --weight_decay=0.01"])


def test_server_side_adam_matches_single_process(tmp_path):
    check_equivalence(tmp_path, "adam", "server",
                      ["--optimizer=adam", "--lr_schedule=constant"])


def test_a_learning_rate_scheduler_takes_effect_on_the_servers(tmp_path):
    # StepLR halves the rate every 5 steps; each push carries it, in place
    # of the servers' own schedule (the launcher's default, cosine).
    job = check_equivalence(tmp_path, "sgd+step", "server",
                            ["--optimizer=sgd"])
    assert job.result(0)["lr"] == 0.1 * 0.5 ** 4


def test_an_async_push_is_applied_at_its_learning_rate(tmp_path):
    # One worker in async mode steps as one process does: each push is
    # applied at the rate StepLR set for it.
    job = python_launch.run(
        PROGRAM, ["equivalence", tmp_path, "sgd+step", "server"],
        ["--num_servers=2", "--num_workers=1", "--mode=async",
         "--optimizer=sgd"])
    assert job.result(0)["lr"] == 0.1 * 0.5 ** 4
    check_weights(tmp_path, "sgd+step", num_ranks=1)


def test_worker_side_adam_matches_single_process(tmp_path):
    # The servers average gradients (declared SGD at learning rate 1);
    # Adam steps on the workers.
    check_equivalence(tmp_path, "adam", "worker", ["--optimizer=sgd"])


def test_buffers_are_broadcast_and_only_trainables_pushed(tmp_path):
    job = python_launch.run(
        PROGRAM, ["declaration", tmp_path],
        TWO_BY_TWO + ["--mode=sync", "--optimizer=sgd"])
    found = [job.result(r) for r in (0, 1)]
    # Trainable parameters first, then what only needs broadcasting.
    assert found[0]["declared"] == [
        "fc.weight", "fc.bias", "norm.weight", "norm.bias", "frozen",
        "norm.running_mean", "norm.running_var", "norm.num_batches_tracked"]
    assert found[0]["state"] == found[1]["state"]
    assert found[1]["state"]["norm.num_batches_tracked"] == 3  # Rank 0's.
    for f in found:
        assert f["frozen_unchanged"]
        # Buffers keep their updates: each step's pull gives every rank the
        # ranks' mean of them.
        assert f["buffers_trained_locally"] == 5
        # A tensor broadcast after the declaration gets rank 0's values
        # (it was refused before; Horovod's benchmark broadcasts there).
        assert f["late_broadcast"] == [0.0, 0.0]
        assert "param_groups[0]['momentum'] changed from 0 to 0.5" in \
            f["momentum_change"]
        refused = f["refused"]
        for name, text in [("rmsprop", "not RMSprop"),
                           ("nesterov", "nesterov=True"),
                           ("group_lrs", "the param_groups' lr differ"),
                           ("amsgrad", "amsgrad=True")]:
            assert refused[name] is not None, name
            assert text in refused[name], refused[name]
            assert "use placement='worker'" in refused[name], refused[name]


def test_what_would_make_every_push_a_replay_is_refused(tmp_path):
    # The servers skip a push whose data cursor does not move past the
    # rank's last one: an earlier epoch, or no examples, would freeze the
    # weights while the job reports success.
    job = python_launch.run(PROGRAM, ["replay", tmp_path],
                            ["--num_servers=1", "--num_workers=1",
                             "--optimizer=sgd"])
    found = job.result(0)
    assert "set_epoch(0), but the servers recorded epoch 1" in \
        found["earlier_epoch"], found
    assert "num_examples is 0" in found["no_examples"], found


@pytest.mark.parametrize("placement", ["server", "worker"])
def test_a_rank_whose_weights_never_changed_warns_at_shutdown(tmp_path,
                                                             placement):
    job = python_launch.run(PROGRAM, ["untrained", tmp_path, placement],
                            ["--num_servers=1", "--num_workers=2",
                             "--mode=sync", "--optimizer=sgd"])
    for rank in (0, 1):
        assert ("rank %d took 3 steps, and its parameters are still those"
                % rank) in job.output, job.output


def check_converges(tmp_path, flags):
    job = python_launch.run(
        PROGRAM, ["converge", tmp_path],
        TWO_BY_TWO + ["--optimizer=sgd"] + flags)
    for rank in (0, 1):
        result = job.result(rank)
        assert result["before"] > 0.1
        assert result["after"] < 1e-3, result
    return job.result(0)["mode"]


def test_ssp_converges(tmp_path):
    assert check_converges(tmp_path, ["--mode=ssp", "--staleness=2"]) == "ssp"


def test_async_converges(tmp_path):
    assert check_converges(tmp_path, ["--mode=async"]) == "async"


def test_a_server_flag_that_says_otherwise_is_an_error(tmp_path):
    job = python_launch.run(
        PROGRAM, ["mismatch", tmp_path],
        ["--num_servers=1", "--num_workers=1", "--optimizer=sgd",
         "--server_flags=--weight_decay=0.5"], expect_success=False)
    assert job.returncode != 0
    line = job.line_with("FailedPreconditionError: ")
    assert "rank 0 declares the optimizer adam(learning_rate 0.01" in line, \
        job.output
    assert "--optimizer=sgd where it declares adam" in line, line
    assert "--weight_decay=0.5 where it declares 0" in line, line


def test_auto_placement_steps_on_the_workers_in_sync_mode_only(tmp_path):
    job = python_launch.run(
        PROGRAM, ["auto_placement", tmp_path],
        ["--num_servers=1", "--num_workers=1", "--mode=async",
         "--optimizer=sgd"], expect_success=False)
    assert job.returncode != 0
    line = job.line_with("FailedPreconditionError: placement='worker'")
    assert "averages gradients in sync mode only" in line, job.output
    assert "--mode=async" in line, line


def test_a_killed_worker_restarts_where_it_stopped(tmp_path):
    """Without the launcher (which ends a job when a worker dies): a server
    started without optimizer flags (it takes the declared SGD) and two
    workers started here. Rank 1 is killed before step 12 and restarted;
    its epoch loop resumes at epoch 2's third step (5 steps an epoch), and
    the job ends as single-process PyTorch does."""
    server, port, log = python_launch.start_server(tmp_path, 2,
                                                   ["--mode=sync"])
    workers = []
    try:
        env = dict(os.environ, PS_NUM_WORKERS="2", PS_LOCAL_NUM_WORKERS="2",
                   PS_NUM_SERVERS="1", OMP_NUM_THREADS="1",
                   PS_SERVERS="127.0.0.1:%d" % port)

        def start(rank):
            return subprocess.Popen(
                [python_launch.PYTHON, python_launch.runfile(PROGRAM),
                 "equivalence", str(tmp_path), "sgd", "server", "12"],
                env=dict(env, PS_RANK=str(rank), PS_LOCAL_RANK=str(rank)),
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

        workers = [start(0), start(1)]
        python_launch.wait_for(tmp_path / "stopped", workers + [server])
        workers[1].kill()
        workers[1].wait()
        workers[1] = start(1)
        outputs = [w.communicate(timeout=python_launch.TIMEOUT_S)[0]
                   .decode(errors="replace") for w in workers]
        for w, output in zip(workers, outputs):
            assert w.returncode == 0, output
        assert '"resumed_at": [2, 2]' in outputs[1], outputs[1]
        assert '"resumed_at": [0, 0]' in outputs[0], outputs[0]
        assert server.wait(timeout=python_launch.TIMEOUT_S) == 0
    finally:
        for p in workers + [server]:
            if p.poll() is None:
                p.kill()
                p.wait()
        log.close()
    check_weights(tmp_path, "sgd")

