"""Every notebook under notebooks/ executes cleanly, offline."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks() -> None:
    assert [n.name for n in NOTEBOOKS] == ["01_quickstart.ipynb", "02_rules_and_state_graph.ipynb",
                                           "03_slot_filling.ipynb", "04_tools_and_planner.ipynb", "05_knowledge.ipynb",
                                           "06_memory.ipynb", "07_flows.ipynb", "09_chains.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[n.stem for n in NOTEBOOKS])
def test_notebook_executes(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(notebook, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    errors = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors
