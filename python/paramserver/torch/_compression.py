"""Horovod's gradient compression (horovod/torch/compression.py):
``Compression.none`` and ``Compression.fp16``.

fp16 rounds each floating tensor to float16 before the collective and
casts the result back to the tensor's dtype after, as Horovod's does, so a
script gets the same precision it got there. The servers' wire carries
float32 either way: the rounding is kept, the bandwidth saving is not.
"""

import torch


class Compressor:
    """compress(tensor) -> (tensor, ctx); decompress(tensor, ctx)."""

    @staticmethod
    def compress(tensor):
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends tensors as they are."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class FP16Compressor(Compressor):
    """Rounds floating tensors to float16 and back."""

    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating_point:
            return tensor.type(torch.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        if ctx is not None and tensor.dtype != ctx:
            return tensor.type(ctx)
        return tensor


class Compression:
    """The compressors a script names: hvd.Compression.none, .fp16."""
    none = NoneCompressor
    fp16 = FP16Compressor
