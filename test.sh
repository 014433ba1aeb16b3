#!/usr/bin/env bash
# The test command: installs whatever is missing, builds everything and runs
# every test (unit, multi-process, Kubernetes manifest checks).
#   ./test.sh            all tests
#   ./test.sh //server/... other Bazel target patterns
set -euo pipefail
cd "$(dirname "$0")"

scripts/install_deps.sh

targets=("$@")
(( ${#targets[@]} )) || targets=(//...)

status=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
bazel test "${targets[@]}" 2>&1 | tee "$log" || status=$?

# One closing line that any CI reads: "N passed, N failed".
passed=$(grep -cE '^//.* (PASSED|\(cached\) PASSED)' "$log" || true)
failed=$(grep -cE '^//.* (FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD)' "$log" || true)

if [[ -x deploy/validate/run_checks.sh && $# -eq 0 ]]; then
  if ! deploy/validate/run_checks.sh; then
    status=1
    failed=$((failed + 1))
  else
    passed=$((passed + 1))
  fi
fi

if [[ "${CI:-}" == true ]]; then
  bazel shutdown >/dev/null 2>&1 || true
fi
echo "tests: ${passed} passed, ${failed} failed"
exit "$status"
