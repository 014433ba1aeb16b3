#!/usr/bin/env bash
# Smoke test of //bench:compression_bench: a tiny run prints a row for
# every pass and none failed. Nothing here asserts a speed.
set -euo pipefail
out=$("$1" --sizes=4K --topk_ratios=0.5 --min_time_ms=0)
for pass in "memcpy" "bfloat16 encode" "bfloat16 decode" "float16 encode" \
    "float16 decode" "select, nth_element" "select, sampled" \
    "top-k 50% encode"; do
  if ! grep -q "| 4K | .*$pass" <<< "$out"; then
    echo "no row for \"$pass\" in:"; echo "$out"; exit 1
  fi
done
if grep -q "failed" <<< "$out"; then echo "$out"; exit 1; fi
# A bad size or ratio is refused before anything runs, naming the flag.
for bad in "--sizes=4X" "--sizes=6" "--topk_ratios=2" "--min_time_ms=-1"; do
  rc=0; err=$("$1" "$bad" 2>&1 >/dev/null) || rc=$?
  flag=${bad%%=*}
  if [[ $rc -ne 2 || "$err" != *"${flag#--}"* ]]; then
    echo "$bad: exit $rc, stderr: $err"; exit 1
  fi
done
