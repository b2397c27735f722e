"""Every notebook under notebooks/ executes cleanly, offline."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks() -> None:
    assert [n.name for n in NOTEBOOKS] == ["01_quickstart.ipynb", "02_rules_and_state_graph.ipynb",
                                           "03_slot_filling.ipynb", "04_tools_and_planner.ipynb", "05_knowledge.ipynb",
                                           "06_memory.ipynb", "07_flows.ipynb", "08_workflows.ipynb", "09_chains.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[n.stem for n in NOTEBOOKS])
def test_notebook_executes(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(notebook, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    errors = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors


def _outputs(path: Path) -> list[dict[str, object]]:
    notebook = nbformat.read(path, as_version=4)
    return [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[n.stem for n in NOTEBOOKS])
def test_notebook_is_stored_executed_with_a_picture(path: Path) -> None:
    """Read on GitHub or in Jupyter without running anything: outputs stored, a graph drawn as SVG,
    nothing of the machine that ran it (paths) in them."""
    notebook = nbformat.read(path, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert all(cell.get("execution_count") for cell in code), "run scripts/make_notebooks.py"
    outputs = _outputs(path)
    assert not [o for o in outputs if o.get("output_type") == "error"]
    pictures = [o["data"]["image/svg+xml"] for o in outputs if "image/svg+xml" in o.get("data", {})]  # type: ignore[index, operator]
    assert pictures and all(str(p).startswith("<svg") and 'class="node"' in str(p) for p in pictures)
    stored = repr(outputs)
    assert str(ROOT) not in stored and "/tmp/" not in stored


def test_notebooks_share_one_setup_helper() -> None:
    for path in NOTEBOOKS:
        notebook = nbformat.read(path, as_version=4)
        first = next(cell.source for cell in notebook.cells if cell.cell_type == "code")
        assert "notebook_setup()" in first and len(first.splitlines()) <= 5, (path.name, first)
        assert "def find_examples" not in "".join(cell.source for cell in notebook.cells)


def test_the_setup_finds_the_examples_from_anywhere_and_graphs_draw(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from convengine import Engine
    from convengine.testing.notebooks import (
        find_examples,
        flow_graph,
        notebook_setup,
        state_graph,
        turn_graph,
    )

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", list(__import__("sys").path))
    nb = notebook_setup()
    assert nb.examples == find_examples(ROOT / "notebooks") and (nb.examples / "pizza.yaml").is_file()
    engine = Engine.open(nb.database("graphs.db"), pack=nb.examples / "flows_assistant.yaml")
    try:
        flow = flow_graph(engine, "LOAN")._repr_svg_()
        assert 'data-node="ask_amount: entity"' in flow and ">escalate<" in flow
        with pytest.raises(KeyError, match="LOAN"):
            flow_graph(engine, "NO_SUCH_FLOW")
        turn = str(turn_graph(engine, highlight=["rules"]))
        assert 'data-node="rules"' in turn and turn.count("#ffe9a8") == 1  # one step highlighted
        assert "<svg" in str(state_graph(engine))
    finally:
        engine.close()
