"""The order in which a stage runs its micro-batches' forward and backward
passes, for the pipeline schedules.

- "gpipe" (Huang et al., 2019): every forward, then every backward in the
  same order; a stage keeps all M micro-batches' activations.
- "1f1b" (PipeDream-Flush, Narayanan et al., 2021): stage s of K runs
  min(K - s - 1, M) forwards to fill the pipeline, then alternates one
  forward and one backward, then drains the backwards; a stage keeps at
  most K - s micro-batches' activations.

Both compute the same gradients, summed over the micro-batches in the
same order (0 to M - 1), so a step's result is the same bit for bit.
Pure: no tensors, no sockets.
"""

FORWARD = "F"
BACKWARD = "B"
SCHEDULES = ("gpipe", "1f1b")


def schedule(name, stage, stages, micro_batches):
    """[(FORWARD or BACKWARD, micro-batch)] for `stage` of `stages`."""
    if name not in SCHEDULES:
        raise ValueError("paramserver.pipeline: schedule is one of %s, got "
                         "%r" % (", ".join(SCHEDULES), name))
    if not 0 <= stage < stages:
        raise ValueError("paramserver.pipeline: stage %d of %d" %
                         (stage, stages))
    if micro_batches < 1:
        raise ValueError("paramserver.pipeline: micro_batches must be >= "
                         "1, got %r" % (micro_batches,))
    m = micro_batches
    if name == "gpipe":
        return ([(FORWARD, i) for i in range(m)] +
                [(BACKWARD, i) for i in range(m)])
    warmup = min(stages - stage - 1, m)
    order = [(FORWARD, i) for i in range(warmup)]
    for i in range(m - warmup):
        order.append((FORWARD, warmup + i))
        order.append((BACKWARD, i))
    order += [(BACKWARD, i) for i in range(m - warmup, m)]
    return order


def peak_activations(order):
    """The most micro-batches whose activations `order` keeps at once."""
    live = peak = 0
    for kind, _ in order:
        live += 1 if kind == FORWARD else -1
        peak = max(peak, live)
    return peak
