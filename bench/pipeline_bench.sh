#!/bin/bash
# Pipeline parallelism (issue 34): the cnn preset unsplit against 2 stages at
# M = 1, 4 and 8 micro-batches, with 1 replica and with 2, through the local
# launcher. Prints one line per run: wall time, the workers' time per step
# (worker 0's log: compute, which for a stage includes waiting on its
# neighbours, and communication with the servers), the final test
# accuracy, and for each stage of replica 0 how long it waited for its
# neighbours (the bubble as it saw it). bench/README.md has the figures and how to read them.
#
#   bazel build //deploy/local:launch //server //worker
#   bench/pipeline_bench.sh [STEPS] [OUT_DIR]
#
# PIPELINE_BENCH_FLAGS adds launcher flags to every run (for example
# "--device=cuda --data_dir=DIR" on a GPU machine); BAZEL_BIN names the
# folder holding deploy/local/launch, server/server and worker/worker.
set -euo pipefail
steps=${1:-60}
out=${2:-/tmp/pipeline_bench}
bin=${BAZEL_BIN:-bazel-bin}
read -r -a extra <<<"${PIPELINE_BENCH_FLAGS:-}"
mkdir -p "$out"
run() {  # name workers stages micro_batches
  local name=$1 workers=$2 stages=$3 micro=$4
  local dir="$out/$name"
  rm -rf "$dir"
  local load
  load=$(cut -d' ' -f1 /proc/loadavg)
  "$bin/deploy/local/launch" --num_servers=1 --num_workers="$workers" \
    --pipeline_stages="$stages" --micro_batches="$micro" --model=cnn \
    --batch_size=64 --epochs=1 --max_steps="$steps" --log_every=1000 \
    --nocheckpoints "${extra[@]}" \
    --server_binary="$bin/server/server" --worker_binary="$bin/worker/worker" \
    --run_dir="$dir" --output=stream >"$dir.out" 2>&1 || true
  local wall per_step accuracy
  wall=$(grep -o 'wall time: [0-9.]*s' "$dir.out" | head -1)
  per_step=$(grep -ho 'time per step: .*' "$dir/logs/worker-0.log" | head -1)
  accuracy=$(grep -o 'final test accuracy: [0-9.]*' "$dir.out" | head -1)
  echo "$name: load before $load, $wall, worker 0 $per_step, $accuracy"
  # Each stage of replica 0: how long it waited for its neighbours.
  for ((s = 0; s < stages && stages > 1; ++s)); do
    echo "  stage $s: $(grep -ho 'waited for neighbours .*' \
      "$dir/logs/worker-$s.log" | head -1)"
  done
}
run unsplit_1x64 1 1 1
for m in 1 4 8; do run "stages2_1x64_micro$m" 2 2 "$m"; done
run unsplit_2x64 2 1 1
for m in 1 4 8; do run "stages2_2x64_micro$m" 4 2 "$m"; done
