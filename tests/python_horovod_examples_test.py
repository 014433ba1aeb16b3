"""The Horovod-style examples (examples/horovod_*.py), briefly, through the
launcher: they run to the end with only their import line differing from
Horovod's, and print what Horovod's print. Also checks that claim: the
scripts' only paramserver line is the import.

Run by //tests:python_horovod_examples_test on Debian's /usr/bin/python3
(Fashion-MNIST from Debian's dataset-fashion-mnist).
"""

import re

import python_launch

FLAGS = ["--num_servers=2", "--num_workers=2", "--mode=sync",
         "--optimizer=sgd", "--max_restarts=0"]
EXAMPLES = ["examples/horovod_fashion_mnist.py",
            "examples/horovod_synthetic_benchmark.py"]


def test_only_the_import_line_names_paramserver():
    for path in EXAMPLES:
        code = [line for line in open(python_launch.runfile(path))
                if not line.lstrip().startswith("#")]
        code = "".join(code)
        code = code[code.index('"""', 3) + 3:]  # After the docstring.
        assert re.findall(r".*paramserver.*", code) == [
            "import paramserver.torch as hvd  # import horovod.torch as hvd"
        ], path


def test_the_mnist_example_trains_and_averages_its_metrics():
    job = python_launch.run(EXAMPLES[0], ["--epochs", "2",
                                          "--limit-batches", "20",
                                          "--log-interval", "10",
                                          "--test-batch-size", "100"], FLAGS)
    tests = re.findall(r"\[worker 0\] Test set: Average loss: ([0-9.]+), "
                       r"Accuracy: ([0-9.]+)%", job.output)
    assert len(tests) == 2, job.output
    # Only rank 0 prints the averaged metrics, as in Horovod's.
    assert "[worker 1] Test set" not in job.output
    losses = [float(loss) for loss, _ in tests]
    accuracies = [float(a) for _, a in tests]
    # Trained: the loss falls from about ln(10) = 2.30, the accuracy rises
    # well above chance (10%).
    assert losses[1] < losses[0] < 2.30, tests
    assert accuracies[1] > 25, tests
    assert "Train Epoch: 2 [640/30000" in job.output


def test_the_synthetic_benchmark_reports_its_throughput():
    job = python_launch.run(EXAMPLES[1], ["--image-size", "32",
                                          "--batch-size", "8",
                                          "--num-warmup-batches", "1",
                                          "--num-batches-per-iter", "2",
                                          "--num-iters", "2"], FLAGS)
    assert "[worker 0] Model: resnet_small" in job.output
    assert len(re.findall(r"\[worker 0\] Iter #\d: [0-9.]+ img/sec per CPU",
                          job.output)) == 2, job.output
    assert re.search(r"\[worker 0\] Total img/sec on 2 CPU\(s\): [0-9.]+",
                     job.output), job.output
    # 1 warm-up + 2 x 2 steps on each rank, every one applied.
    assert "worker 1: clock 5" in job.output
    assert "replayed pushes acknowledged, not applied: 0" in job.output
