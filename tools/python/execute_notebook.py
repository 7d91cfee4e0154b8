#!/usr/bin/env python3
"""Executes docs/notebooks/memory.ipynb (or the notebooks given) top to bottom with the installed crumb module
and writes it back with its outputs, so that readers see the pictures without running it:
    .venv-py/bin/python tools/python/execute_notebook.py
tests/python/test_notebook.py runs it again (its cells assert what the text claims) and checks that the
committed copy holds an output for every cell that displays one."""
import pathlib
import sys

import nbformat
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parents[2]


def execute(path: pathlib.Path) -> None:
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    for cell in nb.cells:  # no machine-specific run metadata (timings, kernel ids) in the committed file
        cell.metadata.pop("execution", None)
    nbformat.write(nb, path)
    print(f"executed {path.relative_to(ROOT)}")


if __name__ == "__main__":
    for arg in sys.argv[1:] or [str(ROOT / "docs" / "notebooks" / "memory.ipynb")]:
        execute(pathlib.Path(arg).resolve())
