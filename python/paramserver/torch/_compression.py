"""Horovod's gradient compression (horovod/torch/compression.py):
``Compression.none`` and ``Compression.fp16``; ours adds ``Compression.bf16``
(bfloat16: float32's range, 8 significant bits), which Horovod lacks.

fp16 rounds each floating tensor to float16 before the collective and
casts the result back to the tensor's dtype after, as Horovod's does, so a
script gets the same precision it got there. With placement='server' (and
no gradient_predivide_factor) the wire carries float16 too, both ways
(set_wire_compression): the servers keep float32 weights, and the weights
pulled are float16-rounded. Otherwise the servers' wire carries float32:
the rounding is kept, the bandwidth saving is not. bf16 does the same with
bfloat16.
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

    wire = "none"

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class FP16Compressor(Compressor):
    """Rounds floating tensors to float16 and back."""

    wire = "fp16"
    dtype = torch.float16

    @classmethod
    def compress(cls, tensor):
        if tensor.dtype.is_floating_point:
            return tensor.type(cls.dtype), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        if ctx is not None and tensor.dtype != ctx:
            return tensor.type(ctx)
        return tensor


class BF16Compressor(FP16Compressor):
    """Rounds floating tensors to bfloat16 and back."""

    wire = "bf16"
    dtype = torch.bfloat16


class Compression:
    """The compressors a script names: hvd.Compression.none, .fp16, .bf16."""
    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor


def set_wire_compression(client, compression, placement, predivide_factor):
    """Has the client send every declared tensor's gradient, and take its
    weights, as `compression.wire` says (the C++ client's
    ps::Compression), where that means what the compressor means: with
    placement='server' and no predivide factor (which must apply before
    the rounding)."""
    wire = getattr(compression, "wire", "none")
    if wire == "none" or placement != "server" or predivide_factor != 1.0:
        return
    for tensor_id in range(len(client.model)):
        client.set_compression(tensor_id, wire)
