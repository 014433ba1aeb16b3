#!/usr/bin/env bash
# Runs one libFuzzer binary for a bounded time, starting from its seed corpus.
# Exits non-zero on any crash, sanitizer report, broken invariant or timeout;
# the input that did it is left in the test's outputs
# (bazel-testlogs/fuzz/<test>/test.outputs/outputs.zip).
#   run_fuzzer.sh FUZZER SEED_CORPUS_DIR SECONDS [libFuzzer flags...]
set -euo pipefail
fuzzer=$1 seeds=$2 seconds=$3
shift 3
artifacts=${TEST_UNDECLARED_OUTPUTS_DIR:-$(mktemp -d)}
# New inputs go to the first directory: a scratch one, not the sources.
scratch=${TEST_TMPDIR:-$(mktemp -d)}/corpus
mkdir -p "$scratch"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
# -verbosity=0 -print_funcs=0: no line per new input or function; reports
# and final stats still print.
exec "$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -verbosity=0 -print_funcs=0 -print_final_stats=1 \
  -artifact_prefix="$artifacts/" "$@" "$scratch" "$seeds"
