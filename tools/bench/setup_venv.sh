#!/usr/bin/env bash
# Create (or reuse) the benchmark venv at <repo>/.venv-bench with torch, torchvision, numpy, safetensors.
# The venv is git-ignored and only used by tools/bench; CI never needs it.
# Prints the venv's python path as its last stdout line. With CRUMB_BENCH_PYTHON set (a machine
# whose python already has torch, such as the offline GPU machine), prints that instead.
set -euo pipefail

if [[ -n "${CRUMB_BENCH_PYTHON:-}" ]]; then
  "$CRUMB_BENCH_PYTHON" -c 'import torch; print("torch", torch.__version__)' >&2
  command -v "$CRUMB_BENCH_PYTHON"
  exit 0
fi

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
venv="$repo/.venv-bench"
py="$venv/bin/python"

if [[ ! -x "$py" ]]; then
  echo "creating $venv" >&2
  python3 -m venv "$venv"
fi

# Idempotent: a working torch means there is nothing to do (and no network).
if ! "$py" -c 'import torch, torchvision, numpy, safetensors' >/dev/null 2>&1; then
  echo "installing torch, torchvision, numpy and safetensors into $venv (default index)" >&2
  "$py" -m pip install --upgrade pip >&2
  "$py" -m pip install torch torchvision numpy safetensors >&2
fi

"$py" -c 'import torch; print("torch", torch.__version__)' >&2
echo "$py"
