"""docs/notebooks/memory.ipynb runs from top to bottom (its cells assert what the text claims)."""

import pathlib

import nbformat
from nbclient import NotebookClient

NOTEBOOK = pathlib.Path(__file__).resolve().parents[2] / "docs" / "notebooks" / "memory.ipynb"


def test_memory_notebook_runs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    # The plan displays as the memory report's pictures.
    assert any("<svg" in o.get("data", {}).get("text/html", "") for o in outputs)
