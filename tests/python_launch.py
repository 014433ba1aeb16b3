"""Runs a Python program as the launcher's workers, for the Python tests.

The real launcher and server binaries from the test's runfiles, on
127.0.0.1 with ports the servers pick, as tests/launch_program_test.cc
runs them. Programs report with lines "RESULT <json>", which run() collects
by rank.
"""

import json
import os
import re
import subprocess
import sys
import time

PYTHON = "/usr/bin/python3"
# A generous bound: a job here takes seconds; only a hang reaches it.
TIMEOUT_S = 180

_RESULT = re.compile(r"^\[worker (\d+)\] RESULT (.*)$")


def runfile(path):
    """A path in the runfiles tree (the test's working directory)."""
    full = os.path.abspath(path)
    if not os.path.exists(full):
        raise FileNotFoundError("%s is not in the test's runfiles" % path)
    return full


class Job:
    """What a launch printed and how it ended."""

    def __init__(self, returncode, output):
        self.returncode = returncode
        self.output = output
        self.results = {}
        for line in output.splitlines():
            m = _RESULT.match(line)
            if m:
                self.results.setdefault(int(m.group(1)), []).append(
                    json.loads(m.group(2)))

    def result(self, rank, index=-1):
        """The rank's `index`th RESULT (the last by default)."""
        assert rank in self.results, "rank %d reported nothing:\n%s" % (
            rank, self.output)
        return self.results[rank][index]

    def line_with(self, text):
        """The first output line containing `text`, or ""."""
        for line in self.output.splitlines():
            if text in line:
                return line
        return ""


def run(program, args=(), flags=(), expect_success=True):
    """Launches `program` (a path in runfiles) with `args` as every worker;
    `flags` go to the launcher."""
    return _launch(list(flags) + ["--", PYTHON, runfile(program)] +
                   [str(a) for a in args], expect_success)


def run_cpp_worker(flags):
    """Launches our C++ worker (//worker) with the launcher's `flags`."""
    return _launch(["--worker_binary=" + runfile("worker/worker")] +
                   list(flags), True)


def predict(model, path):
    """The C++ predict tool's line for model file `path` of MLP `model`."""
    proc = subprocess.run(
        [runfile("worker/predict"), "--model=" + model,
         "--model_file=%s" % path], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, timeout=TIMEOUT_S, check=False)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return proc.stdout.decode().strip()


def _launch(args, expect_success):
    argv = [runfile("deploy/local/launch"),
            "--server_binary=" + runfile("server/server")]
    if not expect_success:
        # The failure under test is final: restarts would only repeat it.
        argv.append("--max_restarts=0")
    argv += args
    env = dict(os.environ)
    env["PYTHONPATH"] = runfile("python/site")
    # One thread per worker: the jobs share two cores with the servers.
    env.setdefault("OMP_NUM_THREADS", "1")
    proc = subprocess.run(argv, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=TIMEOUT_S,
                          check=False)
    job = Job(proc.returncode, proc.stdout.decode(errors="replace"))
    if expect_success and job.returncode != 0:
        sys.stdout.write(job.output)
        raise AssertionError("the launch failed (exit %d): %s" % (
            job.returncode, job.line_with("result:")))
    return job


def report(value):
    """For programs: one RESULT line, flushed so that it precedes exit."""
    print("RESULT " + json.dumps(value), flush=True)


def wait_for(path, processes, deadline_s=120):
    """Until `path` exists; fails if a process exits first. Only a hang
    reaches the deadline."""
    deadline = time.monotonic() + deadline_s
    while not os.path.exists(path):
        for p in processes:
            assert p.poll() is None, "%s exited: %s" % (p.args, p.returncode)
        assert time.monotonic() < deadline, "no %s" % path
        time.sleep(0.05)


def start_server(tmp_path, num_workers, flags=()):
    """One server of one shard, started without the launcher (which ends a
    job when a worker dies), for tests that kill and restart workers
    themselves: (process, port, log file). A rank killed is restarted, not
    given up for dead, however slowly its new process starts."""
    port_file = tmp_path / "port"
    log = open(tmp_path / "log.txt", "w")
    server = subprocess.Popen(
        [runfile("server/server"), "--server_index=0", "--num_servers=1",
         "--num_workers=%d" % num_workers, "--port=0", "--host=127.0.0.1",
         "--port_file=%s" % port_file, "--worker_timeout=600s"] +
        list(flags), stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(port_file, [server])
    except BaseException:
        server.kill()
        server.wait()
        log.close()
        raise
    return server, int(port_file.read_text()), log


def start_workers(program, args, num_workers, port):
    """`num_workers` processes of `program` (a path in runfiles) with
    `args`, as the ranks of the server start_server() gave `port`, without
    the launcher; their output is piped. Stop them with stop()."""
    env = dict(os.environ, PS_NUM_WORKERS=str(num_workers),
               PS_LOCAL_NUM_WORKERS=str(num_workers), PS_NUM_SERVERS="1",
               OMP_NUM_THREADS="1", PS_SERVERS="127.0.0.1:%d" % port,
               PYTHONPATH=runfile("python/site"))
    return [subprocess.Popen(
        [PYTHON, runfile(program)] + [str(a) for a in args],
        env=dict(env, PS_RANK=str(rank), PS_LOCAL_RANK=str(rank)),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for rank in range(num_workers)]


def stop(processes, log):
    """Kills what is still running of `processes`, then closes `log`."""
    for p in processes:
        if p.poll() is None:
            p.kill()
            p.wait()
    log.close()
