#!/bin/bash
# Pipeline parallelism (issue 34): the cnn preset unsplit against 2 stages at
# M = 1, 4 and 8 micro-batches under each schedule (gpipe, 1f1b), with 1
# replica and with 2, through the local launcher, and the two splits
# (--stage_split=bytes, compute) at M = 4. Prints one line per run: wall
# time, the workers' time per step (worker 0's log: compute, which for a
# stage includes waiting on its neighbours, and communication with the
# servers), the final test accuracy, and for each stage of replica 0 how
# long it waited for its neighbours (the bubble as it saw it).
# bench/README.md has the figures and how to read them.
#
#   bazel build //deploy/local:launch //server //worker
#   bench/pipeline_bench.sh [STEPS] [OUT_DIR] [all|split] [ROUNDS]
#
# "split" runs only the split comparison: K=2, M=4, 1 replica, bytes and
# compute in turn, ROUNDS times each (default 4), alternating so that a
# change of the machine's load falls on both.
#
# PIPELINE_BENCH_FLAGS adds launcher flags to every run (for example
# "--device=cuda --data_dir=DIR" on a GPU machine); BAZEL_BIN names the
# folder holding deploy/local/launch, server/server and worker/worker.
set -euo pipefail
steps=${1:-60}
out=${2:-/tmp/pipeline_bench}
what=${3:-all}
rounds=${4:-4}
bin=${BAZEL_BIN:-bazel-bin}
read -r -a extra <<<"${PIPELINE_BENCH_FLAGS:-}"
mkdir -p "$out"
run() {  # name workers stages micro_batches [schedule [split]]
  local name=$1 workers=$2 stages=$3 micro=$4
  local schedule=${5:-gpipe} split=${6:-bytes}
  local dir="$out/$name"
  rm -rf "$dir"
  local load
  load=$(cut -d' ' -f1 /proc/loadavg)
  "$bin/deploy/local/launch" --num_servers=1 --num_workers="$workers" \
    --pipeline_stages="$stages" --micro_batches="$micro" \
    --pipeline_schedule="$schedule" --stage_split="$split" --model=cnn \
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
if [[ $what == split ]]; then
  for ((r = 1; r <= rounds; ++r)); do
    for split in bytes compute; do
      run "split_${split}_round$r" 2 2 4 gpipe "$split"
    done
  done
  exit 0
fi
for replicas in 1 2; do
  run "unsplit_${replicas}x64" "$replicas" 1 1
  for m in 1 4 8; do
    for schedule in gpipe 1f1b; do
      run "stages2_${replicas}x64_micro${m}_$schedule" $((2 * replicas)) 2 \
        "$m" "$schedule"
    done
  done
  for schedule in gpipe 1f1b; do
    run "stages2_${replicas}x64_micro4_${schedule}_compute" \
      $((2 * replicas)) 2 4 "$schedule" compute
  done
done
