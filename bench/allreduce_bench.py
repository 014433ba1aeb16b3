"""Allreduce through the parameter servers' collectives beside PyTorch's own
torch.distributed.all_reduce (gloo), on this machine, 2 processes.

  gloo    torch.distributed.init_process_group("gloo"), 2 processes on
          127.0.0.1, dist.all_reduce (sum) of the tensor
  ours    deploy/local/launch --num_servers=N --num_workers=2, each worker
          paramserver.torch's hvd.allreduce(tensor, op=hvd.Sum, name=...)

Two sizes: a scalar (latency: the metric average a script makes per epoch)
and 4 MiB of float32 (throughput). Each run times --iters calls after
--warmup and reports the median call of rank 0; the bench repeats both
ways --repeats times, alternating, and prints every run and the medians.
Run with Debian's interpreter after
`bazel build -c opt //python:paramserver //deploy/local:launch //server`:

    /usr/bin/python3 bench/allreduce_bench.py [--repeats=5 --num_servers=1]
"""

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = "/usr/bin/python3"
SIZES = {"scalar": 1, "4MiB": 1 << 20}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--role", default="bench", choices=["bench", "gloo",
                                                       "ours"])
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--big_iters", type=int, default=40)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--num_servers", type=int, default=1)
    p.add_argument("--bazel_bin", default=os.path.join(ROOT, "bazel-bin"))
    return p.parse_args()


def timed(call, iters, warmup):
    """Median seconds of `call()` over `iters` calls after `warmup`."""
    for _ in range(warmup):
        call()
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(reduce_sum, args):
    import torch
    out = {}
    for label, n in SIZES.items():
        tensor = torch.ones(n) if n > 1 else torch.tensor(1.0)
        iters = args.iters if n == 1 else args.big_iters
        out[label] = timed(lambda: reduce_sum(tensor, label), iters,
                           args.warmup)
    return out


def run_gloo(args):
    import torch.distributed as dist
    dist.init_process_group("gloo")
    result = measure(lambda t, _: dist.all_reduce(t), args)
    if dist.get_rank() == 0:
        print("RESULT " + json.dumps(result), flush=True)
    dist.destroy_process_group()


def run_ours(args):
    import paramserver.torch as hvd
    hvd.init()
    result = measure(
        lambda t, label: hvd.allreduce(t, op=hvd.Sum, name=label), args)
    if hvd.rank() == 0:
        print("RESULT " + json.dumps(result), flush=True)
    hvd.shutdown()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_args(args):
    return ["--iters=%d" % args.iters, "--big_iters=%d" % args.big_iters,
            "--warmup=%d" % args.warmup]


def result_of(output):
    for line in output.splitlines():
        if "RESULT " in line:
            return json.loads(line.split("RESULT ", 1)[1])
    raise RuntimeError("no result:\n" + output)


def bench_gloo(args):
    port = free_port()
    procs = []
    for rank in range(2):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2",
                   OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen(
            [PYTHON, __file__, "--role=gloo"] + child_args(args), env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    outputs = [p.communicate()[0].decode() for p in procs]
    return result_of(outputs[0])


def bench_ours(args):
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.path.join(args.bazel_bin, "python", "site"))
    run_dir = tempfile.mkdtemp(prefix="allreduce_bench_")
    proc = subprocess.run(
        [os.path.join(args.bazel_bin, "deploy", "local", "launch"),
         "--server_binary=" + os.path.join(args.bazel_bin, "server",
                                           "server"),
         "--num_servers=%d" % args.num_servers, "--num_workers=2",
         "--run_dir=" + run_dir,
         "--", PYTHON, __file__, "--role=ours"] + child_args(args),
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        check=False)
    shutil.rmtree(run_dir, ignore_errors=True)
    return result_of(proc.stdout.decode())


def main():
    args = parse_args()
    if args.role == "gloo":
        return run_gloo(args)
    if args.role == "ours":
        return run_ours(args)
    runs = {"gloo": [], "ours": []}
    for r in range(args.repeats):
        for way, bench in (("gloo", bench_gloo), ("ours", bench_ours)):
            result = bench(args)
            runs[way].append(result)
            print("round %d %-4s " % (r, way) + "  ".join(
                "%s %.3f ms" % (k, v * 1e3) for k, v in result.items()),
                flush=True)
    print("medians over %d rounds, %d servers:" % (args.repeats,
                                                   args.num_servers))
    for label, n in SIZES.items():
        med = {w: statistics.median(x[label] for x in runs[w]) for w in runs}
        line = "  %-6s gloo %.3f ms  ours %.3f ms  ours/gloo %.2fx" % (
            label, med["gloo"] * 1e3, med["ours"] * 1e3,
            med["ours"] / med["gloo"])
        if n > 1:
            line += "  (gloo %.0f MiB/s, ours %.0f MiB/s of tensor)" % (
                n * 4 / med["gloo"] / 2 ** 20, n * 4 / med["ours"] / 2 ** 20)
        print(line)


if __name__ == "__main__":
    sys.exit(main())
