"""A paramserver.torch worker's Prometheus metrics, served on
$PS_METRICS_PORT (the launcher's --metrics_port_base + num_servers + rank,
the port our C++ worker serves on), with the C++ worker's names
(worker/worker_metrics.h), every series labelled rank="<rank>":

  ps_worker_steps_total, ps_worker_examples_total
  ps_worker_step_phase_seconds_total{phase="compute"|"communication"|
                                     "waiting"}
  ps_worker_examples_per_second   over the last second or more
  ps_worker_loss                  the last loss the script reported
  ps_worker_epoch                 1-based
  ps_worker_replayed_pushes_total pushes the servers skipped as replays
                                  (paramserver._replays)

The phases of a DistributedOptimizer step: "communication" is the time
spent handing gradients to the client (in autograd's hooks and in step()),
"waiting" the time step() blocks for the servers' result (which includes
waiting for slower ranks), "compute" the rest of the step's wall time
(data, forward, backward, the script's own work). Examples are
``opt.num_examples`` per step; the loss is what ``report_loss`` was given.

Updated by the training thread; served by a daemon thread; a lock guards
the numbers.
"""

import contextlib
import http.server
import threading
import time

_PHASES = ("compute", "communication", "waiting")


class WorkerMetrics:
    """The numbers, and the clock that splits a step into phases."""

    def __init__(self, rank, clock=time.monotonic):
        self._rank = rank
        self._clock = clock
        self._lock = threading.Lock()
        self._steps = 0
        self._examples = 0
        self._seconds = dict.fromkeys(_PHASES, 0.0)
        self._rate = 0.0
        self._loss = None
        self._epoch = 0
        self._replayed = 0
        self._step_start = clock()
        self._in_phases = 0.0  # This step's communication + waiting.
        self._window = (clock(), 0)

    @contextlib.contextmanager
    def phase(self, name):
        """Counts the time inside as `name` ("communication", "waiting")."""
        start = self._clock()
        try:
            yield
        finally:
            spent = self._clock() - start
            self._in_phases += spent
            with self._lock:
                self._seconds[name] += spent

    def step_done(self, examples, epoch, replayed=0):
        """Ends a step: what was not communication or waiting since the
        last one is compute. `replayed`: the rank's pushes skipped as
        replays so far."""
        now = self._clock()
        compute = max(0.0, now - self._step_start - self._in_phases)
        self._step_start, self._in_phases = now, 0.0
        with self._lock:
            self._steps += 1
            self._examples += int(examples)
            self._seconds["compute"] += compute
            self._epoch = int(epoch) + 1
            self._replayed = int(replayed)
            start, done = self._window
            done += int(examples)
            if now - start >= 1.0:
                self._rate = done / (now - start)
                start, done = now, 0
            self._window = (start, done)

    def report_loss(self, loss):
        with self._lock:
            self._loss = float(loss)

    def text(self):
        """The Prometheus text exposition."""
        label = 'rank="%d"' % self._rank
        with self._lock:
            lines = [
                "# TYPE ps_worker_steps_total counter",
                "ps_worker_steps_total{%s} %d" % (label, self._steps),
                "# TYPE ps_worker_examples_total counter",
                "ps_worker_examples_total{%s} %d" % (label, self._examples),
                "# TYPE ps_worker_step_phase_seconds_total counter"]
            lines += ['ps_worker_step_phase_seconds_total{%s,phase="%s"} %r'
                      % (label, p, self._seconds[p]) for p in _PHASES]
            lines += [
                "# TYPE ps_worker_examples_per_second gauge",
                "ps_worker_examples_per_second{%s} %r" % (label, self._rate),
                "# TYPE ps_worker_epoch gauge",
                "ps_worker_epoch{%s} %d" % (label, self._epoch),
                "# TYPE ps_worker_replayed_pushes_total counter",
                "ps_worker_replayed_pushes_total{%s} %d" % (label,
                                                          self._replayed)]
            if self._loss is not None:
                lines += ["# TYPE ps_worker_loss gauge",
                          "ps_worker_loss{%s} %r" % (label, self._loss)]
        return "\n".join(lines) + "\n"


class MetricsServer:
    """Serves `metrics`.text() at http://0.0.0.0:port/metrics until
    close()."""

    def __init__(self, metrics, port):
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404)
                    return
                body = metrics.text().encode()
                self.send_response(200)
                self.send_header("Content-Type",
                                 "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *unused):
                pass  # Scrapes are not the job's output.

        self._httpd = http.server.ThreadingHTTPServer(("", port), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        name="ps-metrics", daemon=True)
        self._thread.start()

    @property
    def port(self):
        return self._httpd.server_address[1]

    def close(self):
        self._httpd.shutdown()
        self._httpd.server_close()
