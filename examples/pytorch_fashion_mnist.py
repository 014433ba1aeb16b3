"""A small CNN on Fashion-MNIST, trained through the parameter servers.

An ordinary single-process PyTorch script plus the lines marked "ps:"
(Horovod's conventions). Run it as the launcher's workers (see README.md):

    bazel build //python:paramserver //deploy/local:launch //server
    PYTHONPATH=$PWD/bazel-bin/python/site bazel-bin/deploy/local/launch \\
        --num_servers=2 --num_workers=2 \\
        -- /usr/bin/python3 examples/pytorch_fashion_mnist.py

The servers run the torch.optim.Adam wrapped here (the declaration carries
it), at the learning rate CosineAnnealingLR sets for each step (every push
carries it). Every rank trains on its shard of each epoch; rank 0
evaluates on the test set after each epoch and prints "final test
accuracy: X" at the end, which the launcher's summary repeats (the line
is defined in common/progress_line.h). A rank the launcher restarts goes on
from the epoch and step the servers recorded for it, so it trains no step
twice.
"""

import argparse
import gzip
import os
import time
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import paramserver.torch as ps  # ps:

MEAN, STD = 0.2860, 0.3530  # Of the Fashion-MNIST training images.


def read_idx(path):
    """An IDX file (gzip'd or not) as a NumPy array of its shape."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big")
             for i in range(dims)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(data_dir, split):
    """(images as normalised float32 [N, 1, 28, 28], labels as int64)."""
    def find(stem):
        for name in (stem + ".gz", stem):
            if os.path.exists(os.path.join(data_dir, name)):
                return os.path.join(data_dir, name)
        raise FileNotFoundError("no %s(.gz) in %s (Debian's "
                                "dataset-fashion-mnist)" % (stem, data_dir))
    images = read_idx(find("%s-images-idx3-ubyte" % split))
    labels = read_idx(find("%s-labels-idx1-ubyte" % split))
    x = (torch.from_numpy(images.astype(np.float32)) / 255 - MEAN) / STD
    return x.unsqueeze(1), torch.from_numpy(labels.astype(np.int64))


class Net(nn.Module):
    """Two 3x3 convolutions with pooling, then two linear layers."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def evaluate(model, x, y):
    model.eval()
    with torch.no_grad():
        correct = sum((model(x[i:i + 1000]).argmax(1) == y[i:i + 1000])
                      .sum().item() for i in range(0, len(x), 1000))
    model.train()
    return correct / len(x)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data_dir", default="/usr/share/datasets/"
                        "fashion-mnist")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--batch_size", type=int, default=32,
                        help="examples per worker per step")
    parser.add_argument("--lr", type=float, default=0.001)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    ps.init()  # ps:
    # ps: the workers share this host's cores (with the servers).
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // ps.local_size()))
    torch.manual_seed(args.seed)
    train_x, train_y = load(args.data_dir, "train")
    test_x, test_y = load(args.data_dir, "t10k")

    model = Net()
    ps.broadcast_parameters(model.state_dict(), root_rank=0)  # ps:
    steps_per_epoch = len(train_x) // (ps.size() * args.batch_size)
    optimizer = ps.DistributedOptimizer(  # ps:
        torch.optim.Adam(model.parameters(), lr=args.lr),
        named_parameters=model.named_parameters(),
        planned_steps=args.epochs * steps_per_epoch)
    optimizer.num_examples = args.batch_size  # ps: weight in a sync step
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(
        optimizer, T_max=args.epochs * steps_per_epoch)
    # ps: a restarted rank resumes where the servers recorded it: (0, 0) in
    # a new job. Its scheduler catches up with the steps already taken.
    start_epoch, start_step = optimizer.resume_position(steps_per_epoch)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Detected call of")
        for _ in range(optimizer.resume_step):
            scheduler.step()

    start = time.time()
    for epoch in range(start_epoch, args.epochs):
        # The same permutation on every rank; each takes its own slice, and
        # every rank makes the same number of steps.
        order = torch.randperm(len(train_x),
                               generator=torch.Generator().manual_seed(epoch))
        shard = order[ps.rank()::ps.size()]  # ps:
        optimizer.set_epoch(epoch)  # ps: where each rank is in the data
        loss_sum = 0.0
        first = start_step if epoch == start_epoch else 0  # ps:
        for step in range(first, steps_per_epoch):
            batch = shard[step * args.batch_size:(step + 1) * args.batch_size]
            optimizer.zero_grad()
            loss = F.cross_entropy(model(train_x[batch]), train_y[batch])
            loss.backward()
            optimizer.step()
            scheduler.step()
            loss_sum += loss.item()
            ps.report_loss(loss)  # ps: for the metrics (--metrics_port_base)
        line = "epoch %d: mean loss %.4f, %.1f s" % (
            epoch + 1, loss_sum / (steps_per_epoch - first),
            time.time() - start)
        if ps.rank() == 0:
            line += ", test accuracy %.4f" % evaluate(model, test_x, test_y)
        print(line, flush=True)

    if ps.rank() == 0:
        optimizer.pull_final()  # ps: every rank's last update (ssp, async)
        print("final test accuracy: %.4f" % evaluate(model, test_x, test_y),
              flush=True)
    ps.shutdown()  # ps:


if __name__ == "__main__":
    main()
