"""Horovod's MNIST CNN on Fashion-MNIST, cut into pipeline stages across
workers (paramserver.torch.pipeline), each stage's parameters on our
servers. Run it as the launcher's workers, R replicas of K stages being
R x K workers:

    bazel build //python:paramserver //deploy/local:launch //server
    PYTHONPATH=$PWD/bazel-bin/python/site bazel-bin/deploy/local/launch \\
        --num_servers=1 --num_workers=4 --mode=sync --optimizer=sgd \\
        --lr_schedule=constant \\
        -- /usr/bin/python3 examples/pipeline_fashion_mnist.py --stages 2

(--stages and --micro-batches default to the launcher's
PS_PIPELINE_STAGES and PS_MICRO_BATCHES.) Every stage of
a replica reads the same batches (the same sampler): stage 0 uses the
images, the last stage the labels. The test set goes through the stages
too; the replicas' counts are summed with hvd.allreduce, and rank 0
prints the accuracy and the median time of a training step.
"""

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data.distributed

import paramserver.torch as hvd
from horovod_fashion_mnist import fashion_mnist  # The IDX reader.
from paramserver.torch.pipeline import Pipeline

parser = argparse.ArgumentParser(description="Pipelined Fashion-MNIST")
parser.add_argument("--stages", type=int, default=None,
                    help="pipeline stages (default: $PS_PIPELINE_STAGES)")
parser.add_argument("--split", default=None,
                    help="comma-separated child indices where stages begin "
                         "(default: balanced by parameter count; 3 balances "
                         "2 stages' compute best)")
parser.add_argument("--micro-batches", type=int, default=None,
                    help="(default: $PS_MICRO_BATCHES, else 1)")
parser.add_argument("--schedule", default="1f1b", choices=["gpipe", "1f1b"])
parser.add_argument("--batch-size", type=int, default=64,
                    help="per replica, split into the micro-batches")
parser.add_argument("--test-batch-size", type=int, default=1000)
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--momentum", type=float, default=0.5)
parser.add_argument("--seed", type=int, default=42)
parser.add_argument("--log-interval", type=int, default=100)
parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
parser.add_argument("--limit-batches", type=int, default=0,
                    help="train at most this many batches an epoch and test "
                         "on as many (0: all), for a quick run")


def make_model():
    """Horovod's CNN (without dropout) as an nn.Sequential, so that it can
    be cut between any two children."""
    return nn.Sequential(
        nn.Conv2d(1, 10, kernel_size=5), nn.MaxPool2d(2), nn.ReLU(),
        nn.Conv2d(10, 20, kernel_size=5), nn.MaxPool2d(2), nn.ReLU(),
        nn.Flatten(), nn.Linear(320, 50), nn.ReLU(), nn.Linear(50, 10))


def batches(dataset, pipe, batch_size, epoch, seed):
    """This replica's shard, the same on each of its stages."""
    sampler = torch.utils.data.distributed.DistributedSampler(
        dataset, num_replicas=pipe.replicas, rank=pipe.replica, seed=seed)
    sampler.set_epoch(epoch)
    return torch.utils.data.DataLoader(dataset, batch_size=batch_size,
                                       sampler=sampler)


def train(pipe, optimizer, dataset, epoch, args, step_times):
    pipe.module.train()
    for i, (data, target) in enumerate(batches(dataset, pipe,
                                               args.batch_size, epoch,
                                               args.seed)):
        if args.limit_batches and i == args.limit_batches:
            break
        start = time.perf_counter()
        optimizer.zero_grad()
        loss = pipe.train_step(data, target, F.cross_entropy)
        optimizer.step()
        step_times.append(time.perf_counter() - start)
        if loss is not None and i % args.log_interval == 0:
            print("Train Epoch: %d batch %d replica %d\tLoss: %.6f" %
                  (epoch, i, pipe.replica, loss), flush=True)


def test(pipe, dataset, args):
    """The test set's accuracy over every replica's shard."""
    pipe.module.eval()
    counts = torch.zeros(2)  # Correct, seen (exact in float32).
    for i, (data, target) in enumerate(batches(dataset, pipe,
                                               args.test_batch_size, 0,
                                               args.seed)):
        if args.limit_batches and i == args.limit_batches:
            break
        output = pipe.predict(data)
        if output is not None:  # The last stage.
            counts[0] += (output.argmax(1) == target).sum().item()
            counts[1] += len(target)
    counts = hvd.allreduce(counts, op=hvd.Sum, name="test_counts")
    return float(counts[0] / counts[1])


def main():
    args = parser.parse_args()
    hvd.init()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    split = [int(i) for i in args.split.split(",")] if args.split else None
    pipe = Pipeline(make_model(), stages=args.stages, split=split,
                    micro_batches=args.micro_batches, schedule=args.schedule)
    optimizer = hvd.DistributedOptimizer(
        torch.optim.SGD(pipe.parameters(), lr=args.lr,
                        momentum=args.momentum),
        named_parameters=pipe.named_parameters(),
        backward_passes_per_step=pipe.micro_batches)
    train_set = fashion_mnist(args.data_dir, train=True)
    test_set = fashion_mnist(args.data_dir, train=False)
    step_times = []
    for epoch in range(1, args.epochs + 1):
        train(pipe, optimizer, train_set, epoch, args, step_times)
        accuracy = test(pipe, test_set, args)
        if hvd.rank() == 0:
            print("Test set after epoch %d: Accuracy: %.2f%%" %
                  (epoch, 100 * accuracy), flush=True)
    if hvd.rank() == 0:
        # The first steps connect and warm up: left out.
        steady = sorted(step_times[5:]) or step_times
        print("Stages %d, replicas %d, micro-batches %d, %s: step time "
              "median %.1f ms over %d steps" % (
                  pipe.stages, pipe.replicas, pipe.micro_batches,
                  pipe.schedule_name, 1000 * steady[len(steady) // 2],
                  len(steady)), flush=True)
        # The launcher's summary reads this line (common/progress_line).
        print("final test accuracy: %.4f" % accuracy, flush=True)
    pipe.close()
    hvd.shutdown()


if __name__ == "__main__":
    main()
