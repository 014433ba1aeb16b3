"""Steps per second of paramserver.torch beside PyTorch's own
DistributedDataParallel, and what our layer adds to a step.

The same model (examples/pytorch_fashion_mnist.py's CNN), data
(Fashion-MNIST), batch per worker and optimizer (Adam), one after the other
on this machine, each process on one thread:

  single  one process, a plain PyTorch loop: the per-step baseline
  ddp     DistributedDataParallel, gloo backend, 2 processes, 127.0.0.1
  ours    deploy/local/launch --num_servers=N --num_workers=2 (sync),
          paramserver.torch's DistributedOptimizer, Adam on the servers;
          the workers reach the servers over the same-host transport
  grpc    ours with ps.init(local_transport=False): gRPC over TCP, as
          workers on other hosts reach the servers

The roles ddp and ours are also the workers of //bench:torch_ring_vs_ddp_bench
(on test hosts; ours there in sync-PS or --mode=allreduce, as its
environment says), which reads rank 0's RESULT: steps/s, the model's bytes
and, with --eval_examples, the test accuracy.

Each reports steps per second over --steps steps after --warmup; the bench
prints every run, the medians over --repeats rounds, ours / ddp, and our
per-step time minus single's. Run with Debian's interpreter after
`bazel build //python:paramserver //deploy/local:launch //server`:

    /usr/bin/python3 bench/pytorch_ddp_bench.py [--repeats=3 --steps=200]
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = "/usr/bin/python3"


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--role", default="bench",
                   choices=["bench", "single", "ddp", "ours"])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--num_servers", type=int, default=2,
                   help="parameter servers of ours")
    p.add_argument("--local_transport", type=int, default=1,
                   help="ours: 1 the same-host transport, 0 gRPC")
    p.add_argument("--compression", default="none",
                   choices=["none", "fp16", "bf16"],
                   help="ours: paramserver.torch's Compression, which the "
                        "wire to the servers carries both ways")
    p.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--eval_examples", type=int, default=0,
                   help="ddp, ours: rank 0 reports the test accuracy on "
                        "this many test examples after training (0: none)")
    p.add_argument("--bazel_bin", default=os.path.join(ROOT, "bazel-bin"))
    return p.parse_args()


# -- the workers ------------------------------------------------------------

def train(args, rank, world, step_fn, model):
    """Runs warmup + steps batches of this rank's share; returns steps/s
    over the timed steps."""
    import torch.nn.functional as F
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import pytorch_fashion_mnist as example
    x, y = example.load(args.data_dir, "train")
    total = args.warmup + args.steps
    start = None
    for step in range(total):
        if step == args.warmup:
            start = time.perf_counter()
        begin = ((step * world + rank) * args.batch_size) % (
            len(x) - args.batch_size)
        loss = F.cross_entropy(model(x[begin:begin + args.batch_size]),
                               y[begin:begin + args.batch_size])
        step_fn(loss)
    return args.steps / (time.perf_counter() - start)


def role_single(args):
    import torch
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import pytorch_fashion_mnist as example
    torch.set_num_threads(1)
    torch.manual_seed(1)
    model = example.Net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(loss):
        opt.zero_grad()
        loss.backward()
        opt.step()

    print("RESULT " + json.dumps(
        {"steps_per_s": train(args, 0, 1, step, model)}), flush=True)


def role_ddp(args):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import pytorch_fashion_mnist as example
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1)
    model = DistributedDataParallel(example.Net())
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(loss):
        opt.zero_grad()
        loss.backward()
        opt.step()

    rate = train(args, rank, world, step, model)
    dist.barrier()
    if rank == 0:
        rank0_result(args, rate, model.module)
    dist.destroy_process_group()


def role_ours(args):
    import torch
    import paramserver.torch as ps
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import pytorch_fashion_mnist as example
    torch.set_num_threads(1)
    ps.init(local_transport=bool(args.local_transport))
    torch.manual_seed(1)
    model = example.Net()
    ps.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = ps.DistributedOptimizer(torch.optim.Adam(model.parameters(),
                                                   lr=1e-3),
                                  named_parameters=model.named_parameters(),
                                  compression=getattr(ps.Compression,
                                                      args.compression))

    def step(loss):
        opt.zero_grad()
        loss.backward()
        opt.step()

    rate = train(args, ps.rank(), ps.size(), step, model)
    if ps.rank() == 0:
        rank0_result(args, rate, model)
    ps.shutdown()


def rank0_result(args, rate, model):
    """Rank 0's RESULT: steps/s, the model's float32 bytes and, with
    --eval_examples, the test accuracy on that many test examples."""
    result = {"steps_per_s": rate,
              "model_bytes": 4 * sum(p.numel() for p in model.parameters())}
    if args.eval_examples > 0:
        sys.path.insert(0, os.path.join(ROOT, "examples"))
        import pytorch_fashion_mnist as example
        x, y = example.load(args.data_dir, "t10k")
        n = args.eval_examples
        result["accuracy"] = example.evaluate(model, x[:n], y[:n])
    print("RESULT " + json.dumps(result), flush=True)


# -- the bench --------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_argv(args, role):
    return [PYTHON, os.path.abspath(__file__), "--role=" + role,
            "--steps=%d" % args.steps, "--warmup=%d" % args.warmup,
            "--batch_size=%d" % args.batch_size, "--data_dir=" + args.data_dir]


def result_of(output, what):
    for line in output.splitlines():
        if "RESULT " in line:
            return json.loads(line.split("RESULT ", 1)[1])["steps_per_s"]
    raise RuntimeError("%s reported no result:\n%s" % (what, output))


def run(argv, env, what):
    proc = subprocess.run(argv, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=1800, check=False)
    output = proc.stdout.decode(errors="replace")
    if proc.returncode != 0:
        raise RuntimeError("%s failed (exit %d):\n%s" % (
            what, proc.returncode, output))
    return output


def environment(args):
    # The example's module imports paramserver.torch, so every role needs it.
    # One math thread per process, as torchrun and our launcher set for
    # several workers on a host: OpenBLAS otherwise starts one per core,
    # which spin between calls (torch.set_num_threads does not stop them).
    return dict(os.environ, OMP_NUM_THREADS="1",
                PYTHONPATH=os.path.join(args.bazel_bin, "python", "site"))


def measure_single(args):
    return result_of(run(worker_argv(args, "single"), environment(args),
                         "single"), "single")


def measure_ddp(args):
    env = dict(environment(args), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port()), WORLD_SIZE="2")
    procs = [subprocess.Popen(worker_argv(args, "ddp"),
                              env=dict(env, RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for r in (0, 1)]
    outputs = [p.communicate(timeout=1800)[0].decode(errors="replace")
               for p in procs]
    for p, output in zip(procs, outputs):
        if p.returncode != 0:
            raise RuntimeError("ddp failed:\n" + output)
    return result_of(outputs[0], "ddp")


def measure_ours(args, local_transport=True):
    env = environment(args)
    argv = [os.path.join(args.bazel_bin, "deploy", "local", "launch"),
            "--num_servers=%d" % args.num_servers, "--num_workers=2",
            "--"] + worker_argv(args, "ours") + [
                "--local_transport=%d" % local_transport]
    return result_of(run(argv, env, "ours"), "ours")


def bench(args):
    measures = (("single", measure_single), ("ddp", measure_ddp),
                ("ours", measure_ours),
                ("grpc", lambda a: measure_ours(a, local_transport=False)))
    runs = {name: [] for name, _ in measures}
    for i in range(args.repeats):
        for name, measure in measures:
            runs[name].append(measure(args))
        print("round %d: %s steps/s" % (i + 1, ", ".join(
            "%s %.1f" % (name, runs[name][-1]) for name, _ in measures)),
            flush=True)
    median = {k: statistics.median(v) for k, v in runs.items()}
    print("median steps/s over %d rounds (%d steps at batch %d per worker): "
          "%s" % (args.repeats, args.steps, args.batch_size, ", ".join(
              "%s %.1f" % (name, median[name]) for name, _ in measures)))
    print("ours / ddp: %.2fx (over gRPC: %.2fx)" % (
        median["ours"] / median["ddp"], median["grpc"] / median["ddp"]))
    ms = {k: 1000 / v for k, v in median.items()}
    print("per-step time: single %.2f ms, ddp %.2f ms, ours %.2f ms (over "
          "gRPC %.2f ms); ours adds %.2f ms over single" % (
              ms["single"], ms["ddp"], ms["ours"], ms["grpc"],
              ms["ours"] - ms["single"]))


def main():
    args = parse_args()
    {"bench": bench, "single": role_single, "ddp": role_ddp,
     "ours": role_ours}[args.role](args)


if __name__ == "__main__":
    main()
