"""The main job's MLP under PyTorch's DistributedDataParallel (gloo).

The baseline our C++ job (./run.sh's main job: MLP 784-256-128-10, Adam at
0.001 with a cosine decay to 0 over the planned steps, batch 64 per worker,
sync) is compared with across test hosts (bench/multi_host.sh's `ddp`
layout, bench/README.md). It does what our worker does as far as PyTorch
lets it:

- the same initial weights: Glorot-uniform weights and zero biases drawn
  by common/initializer.cc's counter-based generator from --seed;
- the same data: Fashion-MNIST's pixels normalised as worker/idx_reader.cc
  does (in float32, the same operations), and each epoch's batches cut
  from worker/dataset.cc's seeded permutation (SplitMix64, Fisher-Yates),
  worker r taking the r-th run of --batch_size of each global batch, the
  last one split evenly;
- the same update: the mean of the ranks' gradients (DDP's allreduce; ours
  weighs by examples, the same while batches are equal, as they are here),
  then Adam (0.9, 0.999, 1e-8) at 0.5 lr (1 + cos(pi t / T)), T the planned
  steps; the servers keep Adam's state in double, PyTorch in float32.

One process per host, started like torchrun's workers: RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT in the environment (GLOO_SOCKET_IFNAME names
the interface across hosts). Rank 0 evaluates on the test set after the
last step and prints one line

  RESULT {"wall_s": ..., "train_s": ..., "steps": ..., "test_accuracy": ...,
          "first_loss": ..., "last_loss": ..., "model_bytes": ...,
          "world_size": ...}

(wall_s from this script's start, imports included; train_s the steps
alone), and every rank prints `WEIGHTS rank R sha256 H` of its final
weights, which DDP keeps equal. Run with Debian's interpreter:

  RANK=0 WORLD_SIZE=2 MASTER_ADDR=10.0.0.1 MASTER_PORT=29500 \\
      /usr/bin/python3 bench/ddp_mlp_job.py --epochs=2
"""

import time

START = time.monotonic()

# pylint: disable=wrong-import-position
import argparse
import gzip
import hashlib
import json
import math
import os
import sys

import numpy as np

MASK64 = (1 << 64) - 1
PIXEL_MEAN = np.float32(0.2860)  # worker/idx_reader.h
PIXEL_STD = np.float32(0.3530)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="784-256-128-10",
                   help="layer sizes, as deploy/local/launch's --model")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch_size", type=int, default=64,
                   help="examples per worker per step")
    p.add_argument("--learning_rate", type=float, default=0.001)
    p.add_argument("--lr_schedule", default="cosine",
                   choices=["constant", "cosine"],
                   help="cosine: to 0 over the planned steps")
    p.add_argument("--seed", type=int, default=1,
                   help="of the initial weights and the data order")
    p.add_argument("--max_steps", type=int, default=0,
                   help="stop after this many steps (0: every epoch); the "
                        "cosine spans the steps planned")
    p.add_argument("--eval_examples", type=int, default=0,
                   help="rank 0 evaluates on the first N test examples "
                        "(0: all)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch's math threads per process")
    p.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
    args = p.parse_args(argv)
    try:
        args.layers = [int(s) for s in args.model.split("-")]
    except ValueError:
        p.error("--model must be layer sizes such as 784-256-128-10, got %r"
                % args.model)
    if len(args.layers) < 2 or min(args.layers) < 1:
        p.error("--model needs at least 2 layer sizes, each >= 1, got %r"
                % args.model)
    if args.layers[0] != 784 or args.layers[-1] != 10:
        p.error("--model must take 784 pixels and give 10 classes, got %r"
                % args.model)
    for name, low in (("epochs", 1), ("batch_size", 1), ("max_steps", 0),
                      ("eval_examples", 0), ("threads", 1), ("seed", 0)):
        if getattr(args, name) < low:
            p.error("--%s must be >= %d, got %d"
                    % (name, low, getattr(args, name)))
    if args.seed > MASK64:
        p.error("--seed must be below 2^64, got %d" % args.seed)
    if not math.isfinite(args.learning_rate) or args.learning_rate <= 0:
        p.error("--learning_rate must be finite and > 0, got %r"
                % args.learning_rate)
    return args


def environment():
    """(rank, world size) from torchrun's variables; exits 2 naming the
    first one missing or off."""
    values = {}
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        if not os.environ.get(name):
            sys.exit("ddp_mlp_job: %s is not set (set RANK, WORLD_SIZE, "
                     "MASTER_ADDR and MASTER_PORT, as torchrun does)" % name)
        values[name] = os.environ[name]
    try:
        rank, world = int(values["RANK"]), int(values["WORLD_SIZE"])
        port = int(values["MASTER_PORT"])
    except ValueError:
        sys.exit("ddp_mlp_job: RANK, WORLD_SIZE and MASTER_PORT must be "
                 "whole numbers, got %r, %r, %r" % (
                     values["RANK"], values["WORLD_SIZE"],
                     values["MASTER_PORT"]))
    if world < 1 or not 0 <= rank < world or not 0 < port < 65536:
        sys.exit("ddp_mlp_job: need 0 <= RANK < WORLD_SIZE and MASTER_PORT "
                 "in [1, 65535], got RANK=%d WORLD_SIZE=%d MASTER_PORT=%d"
                 % (rank, world, port))
    return rank, world


# -- worker/dataset.cc and common/initializer.cc, in Python ------------------

class SplitMix64:
    """worker/dataset.cc's generator (Steele, Lea, Flood 2014)."""

    def __init__(self, seed):
        self.state = seed & MASK64

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def below(self, bound):
        """Uniform in [0, bound): Lemire's multiply-and-reject."""
        m = (self.next() >> 32) * bound
        low = m & 0xFFFFFFFF
        if low < bound:
            threshold = ((1 << 32) - bound) % bound
            while low < threshold:
                m = (self.next() >> 32) * bound
                low = m & 0xFFFFFFFF
        return m >> 32


def permutation(num_examples, seed, epoch):
    """EpochSharder::Permutation: epoch `epoch`'s order of the examples."""
    rng = SplitMix64(SplitMix64(SplitMix64(seed).next() ^ epoch).next())
    order = list(range(num_examples))
    for i in range(num_examples - 1, 0, -1):
        j = rng.below(i + 1)
        order[i], order[j] = order[j], order[i]
    return order


def block(num_examples, world, batch_size, step, rank):
    """EpochSharder::BlockStart and BlockSize: where worker `rank`'s
    examples of step `step` lie in the epoch's order."""
    global_batch = world * batch_size
    start = step * global_batch
    if start + global_batch <= num_examples:
        return start + rank * batch_size, batch_size
    remaining = num_examples - start
    base, extra = divmod(remaining, world)
    return (start + rank * base + min(rank, extra),
            base + (1 if rank < extra else 0))


def mix(x):
    """common/initializer.cc's Mix on uint64 arrays (wrapping)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def glorot_uniform(seed, tensor_id, fan_in, fan_out):
    """InitializeSlice's kGlorotUniform for a whole [fan_in, fan_out]
    tensor, in the same float32 operations."""
    with np.errstate(over="ignore"):
        stream = mix(np.uint64(seed) ^ mix(np.uint64(tensor_id + 1)))
        bits = mix(stream ^ np.arange(fan_in * fan_out, dtype=np.uint64))
    unit = ((bits >> np.uint64(40)).astype(np.float32) *
            np.float32(2.0 / 16777216.0) - np.float32(1.0))
    limit = np.sqrt(np.float32(6.0) / np.float32(fan_in + fan_out),
                    dtype=np.float32)
    return (limit * unit).reshape(fan_in, fan_out)


def read_idx(data_dir, stem):
    """An IDX file (gzipped or not) as a uint8 array of its shape."""
    for name in (stem + ".gz", stem):
        path = os.path.join(data_dir, name)
        if os.path.exists(path):
            opener = gzip.open if name.endswith(".gz") else open
            with opener(path, "rb") as f:
                data = f.read()
            dims = data[3]
            shape = [int.from_bytes(data[4 + 4 * d:8 + 4 * d], "big")
                     for d in range(dims)]
            return np.frombuffer(data, np.uint8, offset=4 + 4 * dims
                                 ).reshape(shape)
    sys.exit("ddp_mlp_job: no %s(.gz) in %s (Debian's dataset-fashion-mnist)"
             % (stem, data_dir))


def load(data_dir, split):
    """(images [N, 784] float32 normalised as LoadLabeledImages does,
    labels int64)."""
    images = read_idx(data_dir, "%s-images-idx3-ubyte" % split)
    labels = read_idx(data_dir, "%s-labels-idx1-ubyte" % split)
    table = (np.arange(256, dtype=np.float32) / np.float32(255.0) -
             PIXEL_MEAN) / PIXEL_STD
    return (table[images.reshape(len(images), -1)],
            labels.astype(np.int64))


# -- the job -----------------------------------------------------------------

def make_model(torch, layers, seed):
    """Linear layers with ReLU between, weights as our worker starts them
    (tensor 2l is fc<l>.weight [in, out]: PyTorch's is its transpose)."""
    modules = []
    for l, (fan_in, fan_out) in enumerate(zip(layers, layers[1:])):
        linear = torch.nn.Linear(fan_in, fan_out)
        with torch.no_grad():
            linear.weight.copy_(torch.from_numpy(
                glorot_uniform(seed, 2 * l, fan_in, fan_out).T.copy()))
            linear.bias.zero_()
        modules.append(linear)
        if l + 2 < len(layers):
            modules.append(torch.nn.ReLU())
    return torch.nn.Sequential(*modules)


def main(argv):
    args = parse_args(argv)
    rank, world = environment()
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel
    torch.set_num_threads(args.threads)

    x_train, y_train = load(args.data_dir, "train")
    n = len(x_train)
    x_train, y_train = torch.from_numpy(x_train), torch.from_numpy(y_train)
    steps_per_epoch = -(-n // (world * args.batch_size))
    planned = steps_per_epoch * args.epochs
    if args.max_steps > 0:
        planned = min(planned, args.max_steps)

    dist.init_process_group("gloo")
    model = DistributedDataParallel(make_model(torch, args.layers, args.seed))
    opt = torch.optim.Adam(model.parameters(), lr=args.learning_rate,
                           betas=(0.9, 0.999), eps=1e-8)

    train_start = time.monotonic()
    first_loss = last_loss = None
    step = 0
    for epoch in range(args.epochs):
        order = torch.tensor(permutation(n, args.seed, epoch))
        for k in range(steps_per_epoch):
            if step == planned:
                break
            if args.lr_schedule == "cosine":
                for group in opt.param_groups:
                    group["lr"] = 0.5 * args.learning_rate * (
                        1 + math.cos(math.pi * step / planned))
            begin, size = block(n, world, args.batch_size, k, rank)
            indices = order[begin:begin + size]
            loss = F.cross_entropy(model(x_train[indices]), y_train[indices])
            opt.zero_grad()
            loss.backward()
            opt.step()
            last_loss = loss.item()
            if first_loss is None:
                first_loss = last_loss
            step += 1
    train_s = time.monotonic() - train_start

    weights = torch.cat([p.detach().reshape(-1)
                         for p in model.module.parameters()])
    print("WEIGHTS rank %d sha256 %s" % (
        rank, hashlib.sha256(weights.numpy().tobytes()).hexdigest()),
        flush=True)
    if rank == 0:
        x_test, y_test = load(args.data_dir, "t10k")
        if args.eval_examples > 0:
            x_test, y_test = x_test[:args.eval_examples], \
                y_test[:args.eval_examples]
        with torch.no_grad():
            predicted = model.module(torch.from_numpy(x_test)).argmax(1)
        accuracy = float((predicted == torch.from_numpy(y_test)
                          ).double().mean())
        print("RESULT " + json.dumps({
            "wall_s": round(time.monotonic() - START, 3),
            "train_s": round(train_s, 3),
            "steps": step,
            "test_accuracy": round(accuracy, 4),
            "first_loss": first_loss,
            "last_loss": last_loss,
            "model_bytes": 4 * weights.numel(),
            "world_size": world,
        }), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
