#!/usr/bin/env bash
# The Python module's tests: `pip install .` into a venv (.venv-py, git-ignored), then pytest over
# tests/python (which compares with build/train, or $CRUMB_TRAIN: build it first, tools/setup.sh build) and the
# notebook docs/notebooks/memory.ipynb executed end to end. torch and torchvision are there for the
# comparisons with PyTorch (crumb.from_torch, state_dict).
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=.venv-py
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
py="$venv/bin/python"
if ! "$py" -c 'import numpy, pytest, nbclient, nbformat, ipykernel, safetensors, torch, torchvision' >/dev/null 2>&1; then
  "$py" -m pip install -q --upgrade pip
  # From the default index (its Linux torch brings CUDA's libraries, ~5 GB; about 2 minutes here).
  "$py" -m pip install -q numpy pytest nbclient nbformat ipykernel safetensors torch torchvision
fi
# As a user installs it (docs/python.md): the build folder in ~/.cache/crumb, compiled with ccache where
# it is installed (tools/python/pip_backend.py), so a second run with nothing changed takes seconds.
"$py" -m pip install -q .
# From outside the tree, so `import crumb` is the installed package.
repo=$PWD
(cd /tmp && CRUMB_TRAIN="${CRUMB_TRAIN:-$repo/build/train}" "$repo/$py" -m pytest -q -p no:cacheprovider "$repo/tests/python")
