#!/usr/bin/env bash
# The checks that need a GPU, for a GPU machine without bazel.
#
#   scripts/gpu_checks.sh bundle OUT_DIR [--with-cuda-libs]
#       On the build machine: builds the binaries below (-c opt, our code
#       linked statically) and copies them to OUT_DIR/bin, with the shared
#       libraries they load (ldd) in OUT_DIR/lib, except glibc's, the CUDA
#       driver's (libcuda: the GPU machine's own) and, unless
#       --with-cuda-libs, the CUDA toolkit's (cudart, cuBLAS, NCCL: about 800
#       MB; the binaries look for them in /usr/local/cuda/lib64 too, and the
#       workers run without NCCL, on Gloo, where libnccl.so.2 is missing).
#       Without them the bundle is about 70 MB, 13 MB as
#       `tar -cJf bundle.tar.xz -C "$(dirname OUT_DIR)" "$(basename OUT_DIR)"`.
#
#   scripts/gpu_checks.sh run BUNDLE_DIR --data_dir=DIR [--out=DIR]
#                              [--max_steps=N]
#       On the GPU machine: runs the CUDA test binaries with PS_REQUIRE_CUDA=1
#       (a skip is a failure there), then the main job with one worker in
#       --mode=allreduce --device=cuda: NCCL without and with fp16
#       compression, and Gloo on the same GPU, each printing its time per
#       step and final test accuracy; then bench/pipeline_bench.sh on the
#       GPU (the cnn preset unsplit against 2 stages, every process on the
#       one GPU). DIR holds Fashion-MNIST's four
#       *-ubyte(.gz) files. Logs go to --out (default: a new temporary
#       directory). Exit status 0 when every check passed.
set -euo pipefail

TESTS=(
  kernels/cuda_backend_test
  kernels/device_test
  kernels/cuda_util_test
  allreduce/nccl_group_test
)
BINARIES=(worker/worker allreduce/coordinator server/server deploy/local/launch)

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
}

bundle() {
  local out="" with_cuda=0
  for arg in "$@"; do
    case "$arg" in
      --with-cuda-libs) with_cuda=1 ;;
      -*) usage ;;
      *) out="$arg" ;;
    esac
  done
  [[ -n "$out" ]] || usage
  local targets=()
  for t in "${TESTS[@]}" "${BINARIES[@]}"; do targets+=("//${t%/*}:${t##*/}"); done
  bazel build -c opt --dynamic_mode=off "${targets[@]}"
  local bin
  bin="$(bazel info -c opt bazel-bin)"
  mkdir -p "$out/bin" "$out/lib"
  for t in "${TESTS[@]}" "${BINARIES[@]}"; do
    install -m 755 "$bin/$t" "$out/bin/${t##*/}"
  done
  # Every library the binaries load, by the name the loader asks for.
  ldd "$out"/bin/* | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' |
    sort -u | while read -r name path; do
      case "$name" in
        libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | \
          ld-linux*.so.* | libcuda.so.* | libnvidia*) continue ;;
        libcudart.so.* | libcublas*.so.* | libnccl.so.*)
          [[ $with_cuda == 1 ]] || continue ;;
      esac
      cp -L "$path" "$out/lib/$name"
    done
  # NCCL is loaded with dlopen (allreduce/nccl_group.cc): ldd does not list it.
  if [[ $with_cuda == 1 ]]; then
    cp -L "${CUDA_PATH:-/usr/local/cuda}/lib64/libnccl.so.2" "$out/lib/"
  fi
  cp "$0" "$out/gpu_checks.sh"
  cp "$(dirname "$0")/../bench/pipeline_bench.sh" "$out/pipeline_bench.sh"
  du -sh "$out"
  echo "bundle ready: copy $out to the GPU machine and run" \
    "$out/gpu_checks.sh run $out --data_dir=DIR"
}

# The worker of the main job, alone in allreduce mode, with a coordinator;
# prints the log's summary lines (steps, time per step, accuracy).
train() {
  local name="$1"
  shift
  local log="$OUT/$name.log" port_file="$OUT/$name.port"
  rm -f "$port_file"
  "$BUNDLE/bin/coordinator" --num_workers=1 --job_id="gpu-$name" \
    --port_file="$port_file" --host=127.0.0.1 >"$OUT/$name.coordinator.log" 2>&1 &
  local coordinator=$!
  for _ in $(seq 100); do [[ -s "$port_file" ]] && break; sleep 0.1; done
  local start end status=0
  start=$(date +%s.%N)
  "$BUNDLE/bin/worker" --mode=allreduce --rank=0 --num_workers=1 \
    --job_id="gpu-$name" --servers="127.0.0.1:$(cat "$port_file")" \
    --allreduce_host=127.0.0.1 --device=cuda --data_dir="$DATA_DIR" \
    --model=784-256-128-10 --optimizer=adam --learning_rate=0.001 \
    --batch_size=64 --epochs=1 --max_steps="$MAX_STEPS" --seed=1 \
    "$@" >"$log" 2>&1 || status=$?
  end=$(date +%s.%N)
  kill "$coordinator" 2>/dev/null || true
  wait "$coordinator" 2>/dev/null || true
  grep -E "joined the all-reduce ring|training in|trained|time per step|final test accuracy|error" \
    "$log" | tail -8
  local accuracy
  accuracy=$(grep -o "final test accuracy: [0-9.]*" "$log" | awk '{print $4}')
  if [[ $status != 0 || -z "$accuracy" ]]; then
    echo "FAIL $name (exit $status): see $log"
    return 1
  fi
  echo "$name: $(awk -v s="$start" -v e="$end" 'BEGIN {printf "%.1f", e - s}') s" \
    "wall for the run, accuracy $accuracy"
}

# The pipeline bench with every worker on the GPU, through the launcher,
# which looks for the binaries where bazel puts them.
pipeline() {
  local tree="$OUT/bazel-bin"
  mkdir -p "$tree/deploy/local" "$tree/server" "$tree/worker"
  ln -sf "$BUNDLE/bin/launch" "$tree/deploy/local/launch"
  ln -sf "$BUNDLE/bin/server" "$tree/server/server"
  ln -sf "$BUNDLE/bin/worker" "$tree/worker/worker"
  BAZEL_BIN="$tree" PIPELINE_BENCH_FLAGS="--device=cuda --data_dir=$DATA_DIR" \
    bash "$BUNDLE/pipeline_bench.sh" "${PIPELINE_STEPS:-200}" "$OUT/pipeline" |
    tee "$OUT/pipeline.txt"
  # Every run ends with its accuracy.
  grep -q "load before" "$OUT/pipeline.txt" &&
    ! grep "load before" "$OUT/pipeline.txt" | grep -qv "final test accuracy"
}

run() {
  BUNDLE="" DATA_DIR="" OUT="" MAX_STEPS=0
  for arg in "$@"; do
    case "$arg" in
      --data_dir=*) DATA_DIR="${arg#*=}" ;;
      --out=*) OUT="${arg#*=}" ;;
      --max_steps=*) MAX_STEPS="${arg#*=}" ;;
      -*) usage ;;
      *) BUNDLE="$arg" ;;
    esac
  done
  [[ -n "$BUNDLE" && -n "$DATA_DIR" ]] || usage
  BUNDLE="$(cd "$BUNDLE" && pwd)"
  OUT="${OUT:-$(mktemp -d /tmp/gpu_checks.XXXXXX)}"
  mkdir -p "$OUT"
  export LD_LIBRARY_PATH="$BUNDLE/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PS_REQUIRE_CUDA=1
  command -v nvidia-smi >/dev/null && nvidia-smi -L
  local missing
  missing=$(ldd "$BUNDLE"/bin/* | grep "not found" | sort -u || true)
  if [[ -n "$missing" ]]; then
    echo "libraries not found (bundle with --with-cuda-libs?):" >&2
    echo "$missing" >&2
    exit 1
  fi
  local failed=0
  for t in "${TESTS[@]}"; do
    local name="${t##*/}"
    if "$BUNDLE/bin/$name" >"$OUT/$name.log" 2>&1; then
      echo "PASS $name ($(grep -c '^\[       OK' "$OUT/$name.log") tests;" \
        "$(grep -c '^\[  SKIPPED' "$OUT/$name.log" || true) skip lines)"
    else
      echo "FAIL $name: see $OUT/$name.log"
      grep -m 10 -E "Failure|FAILED" "$OUT/$name.log" || true
      failed=1
    fi
  done
  train nccl --allreduce_backend=nccl || failed=1
  train nccl-fp16 --allreduce_backend=nccl --allreduce_compression=fp16 || failed=1
  train gloo-on-gpu --allreduce_backend=gloo || failed=1
  pipeline || failed=1
  echo "logs: $OUT"
  exit "$failed"
}

case "${1:-}" in
  bundle) shift; bundle "$@" ;;
  run) shift; run "$@" ;;
  *) usage ;;
esac
