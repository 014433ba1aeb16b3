#!/usr/bin/env bash
# The main job: trains the MLP on Fashion-MNIST with 2 parameter servers and
# 2 workers as local processes (Adam, cosine learning-rate decay), shows a
# progress line and prints a summary with the final test accuracy; the run's
# directory (runs/...) keeps every log, the checkpoints and the curves.
# Installs whatever is missing, builds, runs.
#   ./run.sh                                   the README's main job
#   ./run.sh --mode=ssp --staleness=2 --epochs=5
#   ./run.sh --resume=runs/<run>               go on with a stopped run
#   ./run.sh --extend=runs/<run> --epochs=15   train a run further
#   ./run.sh --helpfull                        every launcher flag
# Exit code: 0 when training succeeded, 1 when a process failed, 2 on bad
# flags, 130 on Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")"

# The Kubernetes manifest checker's packages are for the tests only.
PS_SKIP_K8S_CHECK_DEPS=1 scripts/install_deps.sh
bazel build //deploy/local:launch //server //worker
# exec: Ctrl-C and SIGTERM reach the launcher itself, which stops the cluster.
# The main job decays the learning rate (the launcher's and the servers'
# default is a constant one); a later --lr_schedule wins. A run resumed or
# extended keeps its own schedule (run.txt).
if [[ " $* " =~ \ --(resume|extend)[=\ ] ]]; then
  exec bazel-bin/deploy/local/launch "$@"
fi
exec bazel-bin/deploy/local/launch --lr_schedule=cosine "$@"
