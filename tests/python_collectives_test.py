"""paramserver.torch's Horovod collectives against real servers
(python_collectives_program.py): each collective against a numpy reference
with 1, 2 and 3 ranks and 1 and 2 servers, mismatches refused on every
rank, a restarted rank's repeated collective, async handles.

Run by //tests:python_collectives_test on Debian's /usr/bin/python3.
"""

import os
import subprocess

import pytest

import python_launch

PROGRAM = "tests/python_collectives_program.py"


def run(scenario, servers, workers):
    job = python_launch.run(PROGRAM, [scenario],
                            ["--num_servers=%d" % servers,
                             "--num_workers=%d" % workers])
    return [job.result(r) for r in range(workers)]


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_every_collective_matches_numpy_bit_for_bit(workers):
    digests = {}
    for servers in (1, 2):
        results = run("collectives", servers, workers)
        for rank, result in enumerate(results):
            wrong = [case for case, (ok, _) in result.items() if not ok]
            assert not wrong, "servers %d rank %d: %s differ: %s" % (
                servers, rank, wrong, result)
            # Every rank got the same bytes.
            assert result == results[0], (servers, rank)
        digests[servers] = results[0]
    # And where the pieces went does not change them.
    assert digests[1] == digests[2]


def test_mismatches_are_refused_on_every_rank_naming_the_rank():
    for result in run("mismatch", 2, 3):
        kind, message = result["shape"]
        assert kind == "FailedPreconditionError", result
        assert "rank 1 sends shape [4], not [3]" in message, message
        kind, message = result["root"]
        assert kind == "InvalidArgumentError", result
        assert "unknown root rank 6" in message, message
        kind, message = result["adasum"]
        assert "hvd.Average" in message, message
        assert result["after"] == 3.0


def test_a_restarted_rank_repeating_a_collective_gets_the_same_result(
        tmp_path):
    """Without the launcher (which ends a job when a worker dies): rank 1
    dies after its allreduce; started again, it repeats the call with other
    values, alone, and gets what it got the first time."""
    server, port, log = python_launch.start_server(tmp_path, 2)
    workers = []
    try:
        env = dict(os.environ, PS_NUM_WORKERS="2", PS_LOCAL_NUM_WORKERS="2",
                   PS_NUM_SERVERS="1", OMP_NUM_THREADS="1",
                   PS_SERVERS="127.0.0.1:%d" % port)

        def start(rank):
            return subprocess.Popen(
                [python_launch.PYTHON, python_launch.runfile(PROGRAM),
                 "restart", str(tmp_path)],
                env=dict(env, PS_RANK=str(rank), PS_LOCAL_RANK=str(rank)),
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

        workers = [start(0), start(1)]
        first = workers[1].communicate(timeout=python_launch.TIMEOUT_S)[0]
        assert workers[1].returncode == 3, first.decode(errors="replace")
        workers[1] = start(1)
        outputs = [w.communicate(timeout=python_launch.TIMEOUT_S)[0]
                   .decode(errors="replace") for w in workers]
        for w, output in zip(workers, outputs):
            assert w.returncode == 0, output
        assert '"same_as_first": true' in outputs[1], outputs[1]
        digest = [line for line in outputs[0].splitlines()
                  if "RESULT" in line]
        assert digest and digest[0].split('"digest": ')[1][:42] in outputs[1]
    finally:
        for p in workers + [server]:
            if p.poll() is None:
                p.kill()
                p.wait()
        log.close()
