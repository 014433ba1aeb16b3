"""What one step has taken of each trainable gradient, so that an edit the
push would miss is refused instead of half-applied.

A gradient is pushed from its autograd hook once backward has accumulated
it ``backward_passes_per_step`` times, as a copy: what the servers receive
is fixed then, over every transport. Whatever the script does to that
gradient before step() (clipping, unscaling) would not reach the servers,
so step() compares each pushed gradient's tensor and version counter (torch
bumps it at every in-place change) with the ones pushed, and refuses a
change with a message that shows Horovod's pattern. Passes are counted per
tensor: backward more often than ``backward_passes_per_step`` before step(),
or step() before the last pass, is refused too.

Pure bookkeeping, no servers: the checks return the message (None when all
is well) and the optimizer cancels its step with it.
"""

EDIT_PATTERN = (
    "edit gradients between synchronize() and step(), as in Horovod:\n"
    "    loss.backward()\n"
    "    optimizer.synchronize()\n"
    "    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n"
    "    with optimizer.skip_synchronize():\n"
    "        optimizer.step()")


def _edit_advice(placement):
    if placement == "worker":
        return EDIT_PATTERN
    return (EDIT_PATTERN + "\nwith placement='worker' (in placement='server' "
            "the servers average the gradients and step, so the mean "
            "gradient is never on the worker to edit)")


class StepGradients:
    """Per trainable tensor: backward passes since the last step, and the
    gradient tensor and version pushed. Not thread-safe (autograd runs hooks
    on the thread that called backward)."""

    def __init__(self, names, passes_per_step, placement):
        self._names = list(names)
        self._passes_per_step = int(passes_per_step)
        if self._passes_per_step < 1:
            raise ValueError("backward_passes_per_step must be >= 1, got %r"
                             % (passes_per_step,))
        self._placement = placement
        self.reset()

    def reset(self):
        """A new step: nothing counted, nothing pushed."""
        self._passes = [0] * len(self._names)
        self._pushed = {}  # index -> (gradient tensor or None, version)

    def backward_pass(self, i):
        """Counts a pass of backward that accumulated tensor i's gradient.
        Returns (push now, error message or None)."""
        self._passes[i] += 1
        if self._passes[i] > self._passes_per_step:
            return False, (
                "paramserver: backward() accumulated the gradient of %s %d "
                "times before step(), and backward_passes_per_step is %d: "
                "the gradient after pass %d was already pushed; this step "
                "was cancelled. For gradient accumulation over N passes, "
                "pass backward_passes_per_step=N to DistributedOptimizer" %
                (self._names[i], self._passes[i], self._passes_per_step,
                 self._passes_per_step))
        return self._passes[i] == self._passes_per_step, None

    def pushed(self, i, gradient):
        """Records that tensor i's push took `gradient` (a tensor, or None
        for zeros) as it is now."""
        self._pushed[i] = (gradient, None if gradient is None
                           else gradient._version)

    def was_pushed(self, i):
        return i in self._pushed

    def incomplete(self):
        """The error of a step() before the last backward pass, or None.
        A tensor that some passes did not reach has fewer passes; the
        step is incomplete only if no tensor reached the last."""
        most = max(self._passes, default=0)
        if 0 < most < self._passes_per_step:
            return ("paramserver: step() after %d backward passes, but "
                    "backward_passes_per_step is %d; this step was "
                    "cancelled. Call backward() %d times per step(), or "
                    "create the DistributedOptimizer with "
                    "backward_passes_per_step=%d" %
                    (most, self._passes_per_step, self._passes_per_step,
                     most))
        return None

    def edited(self, gradients):
        """The error if a pushed gradient changed since its push, or None.
        `gradients`: each trainable tensor's current .grad."""
        for i, (before, version) in sorted(self._pushed.items()):
            if before is None:
                continue  # Zeros, pushed by step() itself.
            now = gradients[i]
            if now is not before or now._version != version:
                return ("paramserver: the gradient of %s changed after "
                        "backward() pushed it to the servers (clipping, "
                        "unscaling or another edit before step() would not "
                        "reach them); this step was cancelled. To %s" %
                        (self._names[i], _edit_advice(self._placement)))
        return None
