"""Tensors between neighbouring pipeline stages, over a TCP socket of
their own (never through the servers).

One connection (TCP; a Unix socket works alike) per pair of neighbours
of a replica: the earlier stage connects to the later one's listener. Each direction carries one kind of
tensor (activations forward, their gradients backward), so frames arrive
in the order they were sent, and each is checked against what the
receiver's schedule expects.

A frame (little-endian)::

    magic   4 bytes  b"PSPF"
    kind    u8       0: activation, 1: gradient
    dtype   u8       index in _DTYPES
    ndim    u8
    pad     u8
    step    u64
    micro   u32      the micro-batch
    nbytes  u64      = prod(shape) * itemsize
    shape   ndim x u64
    data    nbytes   the tensor's bytes, C order

A hello frame opens each connection: magic b"PSPH", then the connecting
rank, its stage and replica, and the job's stage count (4 x u32), which
the listener checks.

Sends go through one thread per connection, so that two neighbours
sending to each other at once (1F1B) never block on full socket buffers;
receives block the caller, up to `timeout_s`. A peer that closes, resets
or stays silent past the timeout raises NeighbourError naming its stage
and rank. Not thread-safe beyond that: one schedule drives a channel.
"""

import queue
import socket
import struct
import threading

import numpy as np
import torch

ACTIVATION = 0
GRADIENT = 1
_KIND_NAMES = {ACTIVATION: "activation", GRADIENT: "gradient"}

_MAGIC = b"PSPF"
_HELLO = b"PSPH"
_HEADER = struct.Struct("<4sBBBBQIQ")
_HELLO_FORMAT = struct.Struct("<4sIIII")
_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16,
           torch.int64, torch.int32, torch.uint8, torch.bool]
# Refuses a frame claiming more (a corrupt length would otherwise make the
# receiver allocate it).
MAX_FRAME_BYTES = 1 << 34


class NeighbourError(RuntimeError):
    """A neighbouring stage's worker failed, left or sent something its
    schedule did not expect."""


class Peer:
    """Who is at the other end: for error messages."""

    def __init__(self, stage, rank):
        self.stage = stage
        self.rank = rank

    def __str__(self):
        return "stage %d (rank %d)" % (self.stage, self.rank)


def encode_header(kind, step, micro, tensor):
    """The frame header for `tensor` (contiguous, of a dtype in _DTYPES)."""
    shape = tuple(tensor.shape)
    nbytes = tensor.numel() * tensor.element_size()
    return (_HEADER.pack(_MAGIC, kind, _DTYPES.index(tensor.dtype),
                         len(shape), 0, step, micro, nbytes) +
            struct.pack("<%dQ" % len(shape), *shape))


def _recv_exactly(sock, n, peer, what):
    """n bytes from `sock`, raising NeighbourError on EOF."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        try:
            k = sock.recv_into(view[got:], n - got)
        except socket.timeout:
            raise NeighbourError(
                "paramserver.pipeline: %s sent no %s within the timeout "
                "(is it alive?)" % (peer, what)) from None
        except OSError as e:
            raise NeighbourError(
                "paramserver.pipeline: the connection to %s failed while "
                "reading its %s: %s (did it die?)" % (peer, what, e)) from None
        if k == 0:
            raise NeighbourError(
                "paramserver.pipeline: %s closed its connection while this "
                "worker waited for its %s (did it die?)" % (peer, what))
        got += k
    return buf


def read_frame(sock, peer):
    """(kind, step, micro, tensor) of the next frame; raises
    NeighbourError on a closed connection or a malformed frame."""
    what = "next tensor"
    raw = _recv_exactly(sock, _HEADER.size, peer, what)
    magic, kind, dtype, ndim, _, step, micro, nbytes = _HEADER.unpack(raw)
    if magic != _MAGIC or kind not in _KIND_NAMES or dtype >= len(_DTYPES):
        raise NeighbourError("paramserver.pipeline: a malformed frame from "
                             "%s (magic %r, kind %d, dtype %d)" %
                             (peer, magic, kind, dtype))
    shape = struct.unpack("<%dQ" % ndim,
                          _recv_exactly(sock, 8 * ndim, peer, what))
    dt = _DTYPES[dtype]
    itemsize = torch.empty((), dtype=dt).element_size()
    numel = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if nbytes != numel * itemsize or nbytes > MAX_FRAME_BYTES:
        raise NeighbourError("paramserver.pipeline: a frame from %s says %d "
                             "bytes for shape %s of %s" %
                             (peer, nbytes, shape, dt))
    data = _recv_exactly(sock, nbytes, peer, _KIND_NAMES[kind])
    tensor = torch.frombuffer(data, dtype=dt) if nbytes else torch.empty(
        0, dtype=dt)
    return kind, step, micro, tensor.reshape(shape)


class Channel:
    """One connected neighbour: send() queues a tensor for the sending
    thread, recv() waits for the next frame and checks its tag."""

    def __init__(self, sock, peer, timeout_s):
        self._sock = sock
        self.peer = peer
        sock.settimeout(timeout_s)
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            # A micro-batch's frame is waited for: no Nagle delay.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._queue = queue.Queue()
        self._send_error = None
        self._thread = threading.Thread(target=self._send_loop, daemon=True)
        self._thread.start()

    def send(self, kind, step, micro, tensor):
        """Queues `tensor` (detached, made contiguous) for the neighbour;
        raises the error of an earlier send that failed."""
        self._check_send()
        tensor = tensor.detach().contiguous()
        self._queue.put((encode_header(kind, step, micro, tensor), tensor))

    def recv(self, kind, step, micro, shape=None, dtype=None):
        """The neighbour's next tensor, which must be of `kind` for `step`
        and `micro` (and `shape`, `dtype` where given)."""
        self._check_send()
        got_kind, got_step, got_micro, tensor = read_frame(self._sock,
                                                           self.peer)
        expected = (_KIND_NAMES[kind], step, micro)
        got = (_KIND_NAMES[got_kind], got_step, got_micro)
        if got != expected:
            raise NeighbourError(
                "paramserver.pipeline: %s sent the %s of step %d, micro-batch "
                "%d where this worker's schedule expects the %s of step %d, "
                "micro-batch %d" % ((self.peer,) + got + expected))
        if shape is not None and tuple(tensor.shape) != tuple(shape):
            raise NeighbourError(
                "paramserver.pipeline: %s sent a %s of shape %s; expected %s"
                % (self.peer, got[0], tuple(tensor.shape), tuple(shape)))
        if dtype is not None and tensor.dtype != dtype:
            raise NeighbourError(
                "paramserver.pipeline: %s sent a %s of %s; expected %s" %
                (self.peer, got[0], tensor.dtype, dtype))
        return tensor

    def flush(self):
        """Waits until every queued tensor was written."""
        self._queue.join()
        self._check_send()

    def close(self):
        """Stops the sending thread after what was queued, then closes."""
        self._queue.put(None)
        self._thread.join()
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()

    def _check_send(self):
        if self._send_error is not None:
            raise self._send_error

    def _send_loop(self):
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                if self._send_error is not None:
                    continue  # Drop: the failure is reported once.
                header, tensor = item
                try:
                    self._sock.sendall(header)
                    if tensor.numel():
                        # The tensor's own bytes, without a copy.
                        self._sock.sendall(memoryview(
                            tensor.view(torch.uint8).reshape(-1).numpy()))
                except OSError as e:
                    self._send_error = NeighbourError(
                        "paramserver.pipeline: sending to %s failed: %s "
                        "(did it die?)" % (self.peer, e))
            finally:
                self._queue.task_done()


def hello(rank, stage, replica, stages):
    """The first frame of a connection."""
    return _HELLO_FORMAT.pack(_HELLO, rank, stage, replica, stages)


def read_hello(sock, peer):
    """(rank, stage, replica, stages) of a connecting neighbour."""
    raw = _recv_exactly(sock, _HELLO_FORMAT.size, peer, "hello")
    magic, rank, stage, replica, stages = _HELLO_FORMAT.unpack(raw)
    if magic != _HELLO:
        raise NeighbourError("paramserver.pipeline: %s opened with %r, not "
                             "a pipeline hello" % (peer, magic))
    return rank, stage, replica, stages
