"""Horovod's PyTorch MNIST example, on Fashion-MNIST, through our servers.

Written as a Horovod script is (horovod/examples/pytorch/pytorch_mnist.py):
the same calls in the same order, and only the import line differs; with
``import horovod.torch as hvd`` it runs under ``horovodrun`` as it is.
Torchvision is not needed: the IDX files are read here (Debian's
dataset-fashion-mnist). Run it as the launcher's workers:

    bazel build //python:paramserver //deploy/local:launch //server
    PYTHONPATH=$PWD/bazel-bin/python/site bazel-bin/deploy/local/launch \\
        --num_servers=2 --num_workers=2 --optimizer=sgd \\
        -- /usr/bin/python3 examples/horovod_fashion_mnist.py --epochs 1

Both broadcasts (parameters and optimizer state) come before the
optimizer is wrapped, as in Horovod's example; the test metrics are
averaged over the ranks with hvd.allreduce.
"""

import argparse
import gzip
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data.distributed

import paramserver.torch as hvd  # import horovod.torch as hvd

parser = argparse.ArgumentParser(description="PyTorch Fashion-MNIST Example")
parser.add_argument("--batch-size", type=int, default=64, metavar="N",
                    help="input batch size for training (default: 64)")
parser.add_argument("--test-batch-size", type=int, default=1000, metavar="N",
                    help="input batch size for testing (default: 1000)")
parser.add_argument("--epochs", type=int, default=10, metavar="N",
                    help="number of epochs to train (default: 10)")
parser.add_argument("--lr", type=float, default=0.01, metavar="LR",
                    help="learning rate (default: 0.01)")
parser.add_argument("--momentum", type=float, default=0.5, metavar="M",
                    help="SGD momentum (default: 0.5)")
parser.add_argument("--seed", type=int, default=42, metavar="S",
                    help="random seed (default: 42)")
parser.add_argument("--log-interval", type=int, default=100, metavar="N",
                    help="batches to wait before logging training status")
parser.add_argument("--fp16-allreduce", action="store_true", default=False,
                    help="use fp16 compression during allreduce")
parser.add_argument("--gradient-predivide-factor", type=float, default=1.0,
                    help="apply gradient predivide factor in optimizer")
parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist",
                    help="directory of the Fashion-MNIST IDX files")
parser.add_argument("--limit-batches", type=int, default=0,
                    help="train at most this many batches an epoch and test "
                         "on as many (0: all), for a quick run")


def read_idx(path):
    """An IDX file (gzip'd or not) as a NumPy array of its shape."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big")
             for i in range(dims)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def fashion_mnist(data_dir, train):
    """What torchvision.datasets.FashionMNIST with ToTensor and Normalize
    gives: a dataset of ([1, 28, 28] float32, label)."""
    split = "train" if train else "t10k"

    def find(stem):
        for name in (stem + ".gz", stem):
            if os.path.exists(os.path.join(data_dir, name)):
                return os.path.join(data_dir, name)
        raise FileNotFoundError("no %s(.gz) in %s" % (stem, data_dir))
    images = read_idx(find("%s-images-idx3-ubyte" % split))
    labels = read_idx(find("%s-labels-idx1-ubyte" % split))
    x = (torch.from_numpy(images.astype(np.float32)) / 255 - 0.2860) / 0.3530
    return torch.utils.data.TensorDataset(
        x.unsqueeze(1), torch.from_numpy(labels.astype(np.int64)))


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.view(-1, 320)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


def train(epoch):
    model.train()
    # Horovod: set epoch to sampler for shuffling.
    train_sampler.set_epoch(epoch)
    for batch_idx, (data, target) in enumerate(train_loader):
        if args.limit_batches and batch_idx == args.limit_batches:
            break
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        if batch_idx % args.log_interval == 0:
            # Horovod: use train_sampler to determine the number of examples
            # in this worker's partition.
            print("Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}".format(
                epoch, batch_idx * len(data), len(train_sampler),
                100. * batch_idx / len(train_loader), loss.item()),
                flush=True)


def metric_average(val, name):
    tensor = torch.tensor(val)
    avg_tensor = hvd.allreduce(tensor, name=name)
    return avg_tensor.item()


def test():
    model.eval()
    test_loss = 0.
    test_accuracy = 0.
    seen = 0
    for batch_idx, (data, target) in enumerate(test_loader):
        if args.limit_batches and batch_idx == args.limit_batches:
            break
        output = model(data)
        # sum up batch loss
        test_loss += F.nll_loss(output, target, reduction="sum").item()
        # get the index of the max log-probability
        pred = output.data.max(1, keepdim=True)[1]
        test_accuracy += pred.eq(target.data.view_as(pred)).cpu().float().sum()
        seen += len(data)

    # Horovod: use test_sampler to determine the number of examples in
    # this worker's partition.
    test_loss /= seen
    test_accuracy /= seen

    # Horovod: average metric values across workers.
    test_loss = metric_average(test_loss, "avg_loss")
    test_accuracy = metric_average(test_accuracy, "avg_accuracy")

    # Horovod: print output only on first rank.
    if hvd.rank() == 0:
        print("\nTest set: Average loss: {:.4f}, Accuracy: {:.2f}%\n".format(
            test_loss, 100. * test_accuracy), flush=True)


if __name__ == "__main__":
    args = parser.parse_args()

    # Horovod: initialize library.
    hvd.init()
    torch.manual_seed(args.seed)

    # Horovod: limit # of CPU threads to be used per worker.
    torch.set_num_threads(1)

    train_dataset = fashion_mnist(args.data_dir, train=True)
    # Horovod: use DistributedSampler to partition the training data.
    train_sampler = torch.utils.data.distributed.DistributedSampler(
        train_dataset, num_replicas=hvd.size(), rank=hvd.rank())
    train_loader = torch.utils.data.DataLoader(
        train_dataset, batch_size=args.batch_size, sampler=train_sampler)

    test_dataset = fashion_mnist(args.data_dir, train=False)
    # Horovod: use DistributedSampler to partition the test data.
    test_sampler = torch.utils.data.distributed.DistributedSampler(
        test_dataset, num_replicas=hvd.size(), rank=hvd.rank())
    test_loader = torch.utils.data.DataLoader(
        test_dataset, batch_size=args.test_batch_size, sampler=test_sampler)

    model = Net()

    # Horovod: scale learning rate by the number of GPUs.
    lr_scaler = hvd.size()
    optimizer = optim.SGD(model.parameters(), lr=args.lr * lr_scaler,
                          momentum=args.momentum)

    # Horovod: broadcast parameters & optimizer state.
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    # Horovod: (optional) compression algorithm.
    compression = (hvd.Compression.fp16 if args.fp16_allreduce
                   else hvd.Compression.none)

    # Horovod: wrap optimizer with DistributedOptimizer.
    optimizer = hvd.DistributedOptimizer(
        optimizer, named_parameters=model.named_parameters(),
        compression=compression, op=hvd.Average,
        gradient_predivide_factor=args.gradient_predivide_factor)

    for epoch in range(1, args.epochs + 1):
        train(epoch)
        test()
