#!/usr/bin/env bash
# Validates the Kubernetes manifests offline: renders every overlay under
# deploy/k8s/overlays with Debian's kustomize and checks it with pscheck
# (strict decoding into the Kubernetes API types, the API server's validators
# and our cross-object rules; see pscheck/main.go). Then renders every broken
# fixture under deploy/validate/fixtures and expects pscheck to FAIL on it with
# the message in the fixture's `expect` file, so the check is known to bite;
# the valid variants in fixtures/ok-* must pass, so it does not bite too much.
# A fixture with folders run-*/ is several runs for one namespace, checked
# together (pscheck -runs). Workers that run the user's program are checked
# against the variables common/worker_environment.cc reads.
# Fetches its tools first (fetch_deps.sh). Ends with "N passed, M failed" and
# exits nonzero on any surprise.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
deps="${PS_K8S_DEPS_DIR:-$here/.deps}"

if ! bash "$here/fetch_deps.sh"; then
  echo "run_checks: could not fetch the checker's dependencies" >&2
  echo "0 passed, 1 failed"
  exit 1
fi

# GOPATH mode over Debian's Go source packages: no module downloads.
export GOROOT="$deps/root/usr/lib/go-1.23"
export GOPATH="$deps/root/usr/share/gocode"
export GO111MODULE=off GOTOOLCHAIN=local GOFLAGS= GOCACHE="$deps/gocache"
kustomize="$deps/root/usr/bin/kustomize"
pscheck="$deps/bin/pscheck"
if ! (cd "$here/pscheck" && "$GOROOT/bin/go" build -o "$pscheck" . && "$GOROOT/bin/go" vet .); then
  echo "run_checks: pscheck does not build" >&2
  echo "0 passed, 1 failed"
  exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
passed=0
failed=0
pass() { passed=$((passed + 1)); echo "PASS $1"; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; }

worker_env="$repo/common/worker_environment.cc"

# A fixture of several runs meant for one namespace has a folder per run
# (run-*/); each is rendered and checked, then all together (pscheck -runs).
is_runs() { compgen -G "$1/run-*/kustomization.yaml" >/dev/null; }
# Renders and checks the runs of a fixture into $work/log; the status is
# pscheck's, or 1 with kustomize's error in $work/log.
check_runs() {
  local files=() run
  for run in "$1"/run-*/; do
    files+=("$work/$(basename "$run").yaml")
    if ! "$kustomize" build "$run" >"${files[-1]}" 2>"$work/log"; then
      echo "kustomize build $(basename "$run") failed" >>"$work/log"
      return 2
    fi
  done
  "$pscheck" -worker-environment="$worker_env" -runs "${files[@]}" >"$work/log" 2>&1
}

# Good overlays, and the valid variants (fixtures/ok-*), must render and pass.
for dir in "$repo"/deploy/k8s/overlays/*/ "$here"/fixtures/ok-*/; do
  name="$(basename "$(dirname "$dir")") $(basename "$dir")"
  if is_runs "$dir"; then
    if check_runs "$dir"; then
      pass "$name"
    else
      fail "$name: pscheck found problems:"
      sed 's/^/    /' "$work/log"
    fi
    continue
  fi
  out="$work/good.yaml"
  if ! "$kustomize" build "$dir" >"$out" 2>"$work/err"; then
    fail "$name: kustomize build failed: $(cat "$work/err")"
  elif "$pscheck" -worker-environment="$worker_env" "$out" >"$work/log" 2>&1; then
    pass "$name"
  else
    fail "$name: pscheck found problems:"
    sed 's/^/    /' "$work/log"
  fi
done

# Broken fixtures must render (unless given as a raw manifest) and then fail
# with the expected message.
for dir in "$here"/fixtures/*/; do
  [[ "$(basename "$dir")" == ok-* ]] && continue
  name="fixture $(basename "$dir")"
  out="$work/fixture.yaml"
  if is_runs "$dir"; then
    check_runs "$dir"
    case $? in
      0) fail "$name: pscheck accepted broken runs"; continue ;;
      2) fail "$name: $(cat "$work/log")"; continue ;;
    esac
  else
    if [[ -f "$dir/manifest.yaml" ]]; then
      cp "$dir/manifest.yaml" "$out"
    elif ! "$kustomize" build "$dir" >"$out" 2>"$work/err"; then
      fail "$name: kustomize build failed: $(cat "$work/err")"
      continue
    fi
    if "$pscheck" -worker-environment="$worker_env" "$out" >"$work/log" 2>&1; then
      fail "$name: pscheck accepted a broken manifest"
      continue
    fi
  fi
  missing=""
  while IFS= read -r expected; do
    [[ -z "$expected" ]] && continue
    grep -qF -- "$expected" "$work/log" || missing+="      $expected"$'\n'
  done <"$dir/expect"
  if [[ -z "$missing" ]]; then
    pass "$name"
  else
    fail "$name: pscheck failed, but without the expected message:"
    printf '%s' "$missing"
    echo "    it said:"
    sed 's/^/      /' "$work/log"
  fi
done

# The image builds offline: no `# syntax=` line (BuildKit would fetch that
# frontend from Docker Hub), and no NVIDIA_VISIBLE_DEVICES=all (every GPU of
# the node, outside the device plugin's accounting, for every container).
dockerfile="$repo/deploy/docker/Dockerfile"
if grep -qiE '^#[[:space:]]*syntax[[:space:]]*=' "$dockerfile"; then
  fail "Dockerfile: has a '# syntax=' line: an offline build would fetch it from Docker Hub"
elif grep -qE 'NVIDIA_VISIBLE_DEVICES[= ]+all' "$dockerfile"; then
  fail "Dockerfile: sets NVIDIA_VISIBLE_DEVICES=all: every container sees every GPU of its node"
else
  pass "Dockerfile"
fi

# Every file of ours that the manifests run from the image is put there by
# the Dockerfile (the server's entrypoint, the example PyTorch program).
missing=""
for file in $(grep -rhoE '/usr/(local/bin|share/paramserver)/[A-Za-z0-9_./-]+' "$repo/deploy/k8s" | sort -u); do
  grep -qF -- "$(basename "$file")" "$dockerfile" || missing+=" $file"
done
if [[ -n "$missing" ]]; then
  fail "Dockerfile: the manifests run files the image lacks:$missing"
else
  pass "Dockerfile provides what the manifests run"
fi

echo "$passed passed, $failed failed"
((failed == 0))
