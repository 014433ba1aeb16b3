"""Horovod's PyTorch synthetic benchmark, through our servers.

Written as Horovod's is (horovod/examples/pytorch/pytorch_synthetic_benchmark.py):
the same calls in the same order (broadcasts after wrapping the optimizer,
as there), and only the import line differs. A torchvision model by
--model when torchvision is installed; else (Debian's torch has none) a
small ResNet defined here, "resnet_small". Run it as the launcher's
workers:

    bazel build //python:paramserver //deploy/local:launch //server
    PYTHONPATH=$PWD/bazel-bin/python/site bazel-bin/deploy/local/launch \\
        --num_servers=2 --num_workers=2 --optimizer=sgd \\
        -- /usr/bin/python3 examples/horovod_synthetic_benchmark.py \\
        --image-size 64
"""

import argparse
import timeit

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

import paramserver.torch as hvd  # import horovod.torch as hvd

try:
    from torchvision import models
except ImportError:
    models = None

# Benchmark settings
parser = argparse.ArgumentParser(
    description="PyTorch Synthetic Benchmark",
    formatter_class=argparse.ArgumentDefaultsHelpFormatter)
parser.add_argument("--fp16-allreduce", action="store_true", default=False,
                    help="use fp16 compression during allreduce")
parser.add_argument("--model", type=str,
                    default="resnet50" if models else "resnet_small",
                    help="model to benchmark")
parser.add_argument("--batch-size", type=int, default=32,
                    help="input batch size")
parser.add_argument("--image-size", type=int, default=224,
                    help="height and width of the synthetic images")
parser.add_argument("--num-warmup-batches", type=int, default=10,
                    help="number of warm-up batches that don't count "
                         "towards benchmark")
parser.add_argument("--num-batches-per-iter", type=int, default=10,
                    help="number of batches per benchmark iteration")
parser.add_argument("--num-iters", type=int, default=10,
                    help="number of benchmark iterations")


class Block(nn.Module):
    """A ResNet basic block."""

    def __init__(self, channels_in, channels, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(channels_in, channels, 3, stride, 1,
                               bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.shortcut = nn.Sequential()
        if stride != 1 or channels_in != channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(channels_in, channels, 1, stride, bias=False),
                nn.BatchNorm2d(channels))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNetSmall(nn.Module):
    """An 8-layer ResNet for 1000 classes (torchvision's resnet18 shape at
    a quarter of its width), for when torchvision is absent."""

    def __init__(self, num_classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 7, 2, 3, bias=False),
                                  nn.BatchNorm2d(16), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        self.layers = nn.Sequential(Block(16, 16, 1), Block(16, 32, 2),
                                    Block(32, 64, 2), Block(64, 128, 2))
        self.fc = nn.Linear(128, num_classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


args = parser.parse_args()

hvd.init()
torch.set_num_threads(1)

# Set up standard model.
if args.model == "resnet_small":
    model = ResNetSmall()
else:
    model = getattr(models, args.model)()

# By default, Adasum doesn't need scaling up learning rate.
lr_scaler = hvd.size()

optimizer = optim.SGD(model.parameters(), lr=0.01 * lr_scaler)

# Horovod: (optional) compression algorithm.
compression = (hvd.Compression.fp16 if args.fp16_allreduce
               else hvd.Compression.none)

# Horovod: wrap optimizer with DistributedOptimizer.
optimizer = hvd.DistributedOptimizer(optimizer,
                                     named_parameters=model.named_parameters(),
                                     compression=compression,
                                     op=hvd.Average)

# Horovod: broadcast parameters & optimizer state.
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)

# Set up fixed fake data
data = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
target = torch.LongTensor(args.batch_size).random_() % 1000


def benchmark_step():
    optimizer.zero_grad()
    output = model(data)
    loss = F.cross_entropy(output, target)
    loss.backward()
    optimizer.step()


def log(s, nl=True):
    if hvd.rank() != 0:
        return
    print(s, end="\n" if nl else "", flush=True)


device = "CPU"
log("Model: %s" % args.model)
log("Batch size: %d" % args.batch_size)
log("Number of %ss: %d" % (device, hvd.size()))

# Warm-up
log("Running warmup...")
timeit.timeit(benchmark_step, number=args.num_warmup_batches)

# Benchmark
log("Running benchmark...")
img_secs = []
for x in range(args.num_iters):
    time = timeit.timeit(benchmark_step, number=args.num_batches_per_iter)
    img_sec = args.batch_size * args.num_batches_per_iter / time
    log("Iter #%d: %.1f img/sec per %s" % (x, img_sec, device))
    img_secs.append(img_sec)

# Results
img_sec_mean = np.mean(img_secs)
img_sec_conf = 1.96 * np.std(img_secs)
log("Img/sec per %s: %.1f +-%.1f" % (device, img_sec_mean, img_sec_conf))
log("Total img/sec on %d %s(s): %.1f +-%.1f" %
    (hvd.size(), device, hvd.size() * img_sec_mean,
     hvd.size() * img_sec_conf))
