#!/usr/bin/env bash
# Installs what Crumb needs (Debian packages), then configures and builds it into build/ (or $1).
# Safe to run again: installs only what is missing, rebuilds only what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${1:-build}"
shift || true

# python3: the report and kernel-benchmark checks (standard library only). Open MPI: data-parallel
# training (mpirun -np N train) and its tests.
# python3-venv, python3-dev: the Python module and its tests (tools/python/test.sh); qemu-user: those
# tests run it on older emulated CPUs. ccache: a build compiles only what no earlier one did (this one,
# another checkout's, pip install .'s).
packages=(cmake ninja-build g++ libeigen3-dev zlib1g-dev libgtest-dev libbenchmark-dev python3 python3-venv python3-dev
          dataset-fashion-mnist openmpi-bin libopenmpi-dev ccache qemu-user)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
      -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache "$@" >/dev/null
cmake --build "$build_dir"
