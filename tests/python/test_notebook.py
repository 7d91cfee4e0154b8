"""docs/notebooks/memory.ipynb runs from top to bottom (its cells assert what the text claims)."""

import pathlib

import nbformat
from nbclient import NotebookClient

NOTEBOOK = pathlib.Path(__file__).resolve().parents[2] / "docs" / "notebooks" / "memory.ipynb"


def test_the_committed_notebook_shows_its_outputs():
    """Readers see the pictures without running it: every code cell that displays something holds its output
    (tools/python/execute_notebook.py writes them), and none is an error."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    silent = [cell for cell in code if cell.source.lstrip().startswith("assert") or "def show" in cell.source]
    for cell in code:
        assert cell.outputs or cell in silent, f"no output committed for:\n{cell.source[:200]}"
        assert not [o for o in cell.outputs if o.output_type == "error"], cell.source[:200]
    assert sum("image/svg+xml" in o.get("data", {}) for cell in code for o in cell.outputs) >= 3


def test_memory_notebook_runs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    # The plan displays as the memory report's pictures.
    assert any("<svg" in o.get("data", {}).get("text/html", "") for o in outputs)
