#!/usr/bin/env bash
# Installs every Debian package the project needs, and only what is missing.
# Safe to run again: it asks apt only when a package is absent.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap bazel-rules-java
  g++ pkg-config zlib1g-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libspdlog-dev libfmt-dev libgtest-dev libgmock-dev libopenblas-dev
  dataset-fashion-mnist
  # The launcher's --auth=tls|mtls and tests/tls_test make certificates with it.
  openssl
  # The launcher plots each run's loss and test accuracy (curves.png) with it.
  gnuplot-nox
  # The fuzz targets (fuzz/): clang and its libFuzzer and sanitizer runtimes.
  clang-14 libclang-rt-14-dev
  # The Python module and its PyTorch layer (python/): Debian's interpreter
  # (/usr/bin/python3), never pip, since no other registry is reachable.
  python3-dev pybind11-dev python3-numpy python3-pytest python3-torch
  # Metrics: the /metrics endpoints (prometheus-cpp) and the real Prometheus
  # server tests/prometheus_metrics_test scrapes them with (the test starts
  # its own; where systemd runs, the package's service also starts on :9090).
  prometheus-cpp-dev prometheus
  # Test hosts (tests/hosts/): namespaces, veth links and a bridge shaped by
  # tc (ip, tc), and iperf3 for the raw TCP baseline of a link.
  iproute2 iperf3
  # Schedulers (tests/scheduler/): Debian's real Slurm (munge, slurmctld and
  # slurmd, started and stopped by the tests) and Open MPI's mpirun.
  slurm-wlm munge openmpi-bin
  # The all-reduce mode (--mode=allreduce) averages gradients with Gloo.
  libgloo-dev
)
# The Kubernetes manifest checker (deploy/validate) is a Go program built
# against Debian's Kubernetes API packages, and Debian's kustomize renders the
# overlays. Bookworm has neither, so fetch_deps.sh unpacks them (with Go 1.23
# from bookworm-backports) into deploy/validate/.deps from Debian's archive,
# leaving the system's apt configuration alone. The image build skips it.
if [[ "${PS_SKIP_K8S_CHECK_DEPS:-0}" != 1 ]]; then
  bash "$(dirname "${BASH_SOURCE[0]}")/../deploy/validate/fetch_deps.sh"
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if (( ${#missing[@]} == 0 )); then
  exit 0
fi
echo "install_deps: installing ${missing[*]}" >&2
SUDO=""
if [[ "$(id -u)" != 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
