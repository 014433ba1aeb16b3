"""How a DistributedOptimizer's gradients are reduced: Horovod's
``compression``, ``op`` and ``gradient_predivide_factor``, checked against
the placement.

Placement "worker" (the ranks' gradients are summed by the servers'
collective service, and each worker steps):

- ``op=hvd.Average`` (the default): the mean, each rank's gradient weighted
  by its ``num_examples``; ``op=hvd.Sum``: the plain sum of the ranks'
  gradients, as Horovod's.
- ``gradient_predivide_factor=f`` (Average only, as Horovod): each gradient
  is divided by f before the sum and the sum multiplied by f after, so the
  mean is the same but the summed values are f times smaller.
- ``compression=hvd.Compression.fp16``: the gradient sent and the reduced
  result are each rounded to float16, both directions as Horovod's; the
  servers' wire carries float32, so the precision is Horovod's and the
  bandwidth is not halved.

Placement "server" (the servers average and run the optimizer):

- ``op``: only ``hvd.Average``, which is what the servers do; ``Sum``
  would need the servers' optimizer to step on the sum, and is refused
  naming placement='worker'.
- ``gradient_predivide_factor``: the servers' mean is unchanged (they sum
  in float32); with fp16 compression, the gradient is divided by f before
  its float16 rounding and multiplied back after, which is what the factor
  is for (keeping large gradients in float16's range).
- ``compression=fp16``: the pushed gradient is rounded to float16; the
  weights the servers send back are float32.

``op=hvd.Adasum`` (and Min, Max, Product) is refused in both.
"""

import numpy as np
import torch

from paramserver.torch._collectives import Adasum, Average, ReduceOp, Sum
from paramserver.torch._compression import Compression


def _is_compressor(compression):
    return (hasattr(compression, "compress") and
            hasattr(compression, "decompress"))


class Reduction:
    """A step's per-gradient arithmetic around the reduction. Immutable."""

    def __init__(self, placement, compression=Compression.none, op=None,
                 gradient_predivide_factor=1.0):
        """Raises ValueError (NotImplementedError for Adasum) for what
        `placement` cannot honour, saying what to use instead."""
        if op is None:
            op = Average
        if op is Adasum:
            Adasum.check()  # Raises, naming the alternatives.
        if not isinstance(op, ReduceOp) or op not in (Average, Sum):
            raise ValueError(
                "paramserver: DistributedOptimizer's op is hvd.Average or "
                "hvd.Sum, got %r" % (op,))
        factor = float(gradient_predivide_factor)
        if not np.isfinite(factor) or factor <= 0:
            raise ValueError(
                "paramserver: gradient_predivide_factor must be a finite "
                "number > 0, got %r" % (gradient_predivide_factor,))
        if factor != 1.0 and op is not Average:
            raise ValueError(
                "paramserver: gradient_predivide_factor needs op=hvd.Average "
                "(as in Horovod), got op=%r" % (op,))
        if placement == "server" and op is not Average:
            raise ValueError(
                "paramserver: op=hvd.Sum with placement='server': the "
                "servers' optimizer steps on the ranks' mean gradient. Use "
                "op=hvd.Average with a learning rate hvd.size() times "
                "larger, or placement='worker' (sync mode), where the ranks' "
                "summed gradient goes into .grad")
        if not _is_compressor(compression):
            raise ValueError(
                "paramserver: compression is hvd.Compression.none or "
                "hvd.Compression.fp16 (or a class with compress and "
                "decompress), got %r" % (compression,))
        self.placement = placement
        self.op = op
        self.factor = factor
        self._compression = compression
        self._identity = (factor == 1.0 and
                          compression is Compression.none)

    def _round_trip(self, tensor):
        compressed, ctx = self._compression.compress(tensor)
        return self._compression.decompress(compressed, ctx)

    def outgoing(self, gradient, num_examples=1):
        """What this rank sends for `gradient` (a tensor): a float32 array
        that nothing the script does later changes."""
        g = gradient.detach()
        if self._identity and self.placement == "server":
            return g.numpy().copy()
        if self.placement == "worker" and self.op is Average:
            g = g.to(torch.float32) * float(num_examples)
        if self.factor != 1.0:
            g = g / self.factor
        g = self._round_trip(g)
        if self.placement == "server" and self.factor != 1.0:
            g = g * self.factor  # The servers take the gradient itself.
        return np.ascontiguousarray(g.numpy(), dtype=np.float32)

    def result(self, summed, total_examples):
        """Worker placement: the gradient a rank steps on, from the ranks'
        sum of outgoing() values and their total of examples."""
        if self.op is Average:
            reduced = summed / total_examples
            if self.factor != 1.0:
                reduced = reduced * np.float32(self.factor)
        else:
            reduced = summed
        if self._compression is Compression.none:
            return reduced
        return self._round_trip(torch.from_numpy(
            np.ascontiguousarray(reduced, dtype=np.float32))).numpy()
