"""DistributedOptimizer's Horovod arguments compression, op and
gradient_predivide_factor (paramserver.torch._reduction), without servers:
what each placement sends and steps on, through worker placement's
GradientMean over a fake collective service that sums like the servers'.

Run by //tests:python_torch_units_test's sibling
//tests:python_torch_reduction_test on Debian's /usr/bin/python3.
"""

import numpy as np
import pytest
import torch

import paramserver.torch as hvd
from paramserver.torch._reduction import Reduction
from paramserver.torch._worker_mean import GradientMean


class _Done:
    def __init__(self, value):
        self._value = value

    def done(self):
        return True

    def wait(self):
        return self._value


class FakeCollectives:
    """Sums each named contribution with the other ranks' (given up front),
    in rank order, as the servers do; ops must be sums."""

    def __init__(self, others, other_examples):
        self._others = others  # name -> list of the other ranks' arrays.
        self._other_examples = other_examples

    def start_allreduce(self, name, op, values):
        assert op == 0
        total = values.copy()
        for other in self._others[name]:
            total = total + other
        return _Done(total)

    def allreduce(self, name, op, values):
        assert (name, op) == ("paramserver.examples", 0)
        return values + np.float32(sum(self._other_examples))


def reduce_two_ranks(reduction, grads, examples):
    """Rank 0's reduced gradient of a job whose ranks send `grads` with
    `examples`, each rank's contribution made by `reduction`."""
    sent = [reduction.outgoing(g, n) for g, n in zip(grads, examples)]
    mean = GradientMean(FakeCollectives({"paramserver.grad.w": sent[1:]},
                                        examples[1:]),
                        ["w"], [grads[0].shape], reduction)
    mean.send(0, grads[0], examples[0])
    return mean.finish(examples[0])[0]


GRADS = [torch.tensor([1.0, -3.0, 1000.0]), torch.tensor([3.0, 5.0, 1e-4])]


def test_average_weights_each_rank_by_its_examples():
    got = reduce_two_ranks(Reduction("worker"), GRADS, [1, 3])
    expected = (GRADS[0].numpy() * 1 + GRADS[1].numpy() * 3) / 4
    np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_sum_is_the_plain_sum_whatever_the_examples():
    got = reduce_two_ranks(Reduction("worker", op=hvd.Sum), GRADS, [1, 3])
    np.testing.assert_allclose(got, GRADS[0].numpy() + GRADS[1].numpy(),
                               rtol=1e-6)


def test_the_predivide_factor_keeps_the_mean_and_shrinks_what_is_summed():
    reduction = Reduction("worker", gradient_predivide_factor=4.0)
    np.testing.assert_allclose(reduction.outgoing(GRADS[0], 2),
                               GRADS[0].numpy() * 2 / 4)
    got = reduce_two_ranks(reduction, GRADS, [2, 2])
    np.testing.assert_allclose(got, (GRADS[0] + GRADS[1]).numpy() / 2,
                               rtol=1e-6)


def test_fp16_rounds_what_is_sent_and_what_comes_back():
    reduction = Reduction("worker", compression=hvd.Compression.fp16)
    sent = reduction.outgoing(torch.tensor([1.0001, 1e-8]), 1)
    assert sent.dtype == np.float32
    np.testing.assert_array_equal(sent, np.float16([1.0001, 1e-8]))
    got = reduce_two_ranks(reduction, GRADS, [1, 1])
    f16 = [g.half().float() for g in GRADS]
    np.testing.assert_array_equal(
        got, ((f16[0] + f16[1]).numpy() / 2).astype(np.float16))
    # Differs from the uncompressed mean: the rounding happened.
    assert not np.array_equal(got, reduce_two_ranks(Reduction("worker"),
                                                    GRADS, [1, 1]))


def test_server_placement_pushes_the_gradient_itself():
    g = torch.tensor([0.1, 70000.0])
    np.testing.assert_array_equal(Reduction("server").outgoing(g),
                                  g.numpy())
    fp16 = Reduction("server", compression=hvd.Compression.fp16)
    assert np.isinf(fp16.outgoing(g)[1])  # Beyond float16's range...
    scaled = Reduction("server", compression=hvd.Compression.fp16,
                       gradient_predivide_factor=4.0)
    # ...which the factor is for: divided before rounding, multiplied after.
    np.testing.assert_allclose(scaled.outgoing(g), g.numpy(), rtol=1e-3)


def test_a_pushed_gradient_is_a_copy():
    g = torch.ones(2)
    sent = Reduction("server").outgoing(g)
    g.mul_(5)
    np.testing.assert_array_equal(sent, [1, 1])


@pytest.mark.parametrize("kwargs, error, message", [
    ({"op": hvd.Adasum}, NotImplementedError, "op=hvd.Average"),
    ({"op": hvd.Min}, ValueError, "hvd.Average or hvd.Sum"),
    ({"op": hvd.Sum, "gradient_predivide_factor": 2.0}, ValueError,
     "needs op=hvd.Average"),
    ({"gradient_predivide_factor": 0.0}, ValueError, "> 0"),
    ({"compression": "fp16"}, ValueError, "Compression.fp16"),
])
def test_what_no_placement_honours_is_refused(kwargs, error, message):
    for placement in ("worker", "server"):
        with pytest.raises(error, match=message):
            Reduction(placement, **kwargs)


def test_sum_on_the_servers_is_refused_naming_the_alternatives():
    with pytest.raises(ValueError, match="placement='worker'") as raised:
        Reduction("server", op=hvd.Sum)
    assert "hvd.size() times" in str(raised.value)


def test_distributed_optimizer_refuses_before_init():
    # The arguments are checked before anything needs the servers.
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="op=hvd.Sum with placement='server'"):
        hvd.DistributedOptimizer(opt, model.named_parameters(), op=hvd.Sum)
    with pytest.raises(TypeError, match="num_groups"):
        hvd.DistributedOptimizer(opt, model.named_parameters(), num_groups=2)
    # Horovod's positional order: compression, backward_passes_per_step, op.
    with pytest.raises(ValueError, match="hvd.Average or hvd.Sum"):
        hvd.DistributedOptimizer(opt, model.named_parameters(),
                                 hvd.Compression.none, 1, hvd.Max,
                                 placement="worker")
