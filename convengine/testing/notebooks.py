"""What the notebooks under ``notebooks/`` share: the example packs, a scratch folder, graphs drawn inline.

Each notebook starts with ``nb = notebook_setup()``. Graphs are SVG drawn by the web console's
renderer (no Graphviz, no network); Jupyter shows the returned :class:`Svg` as a picture.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from convengine.console.graphs import chain_graph_svg, flow_graph_svg, state_graph_svg, turn_graph_svg
from convengine.engine import Engine

_MARKER = Path("examples") / "support_desk.yaml"


@dataclass(frozen=True)
class Svg:
    """An SVG picture: Jupyter renders it (``_repr_svg_``); ``str()`` is the document."""

    text: str

    def _repr_svg_(self) -> str:
        return self.text

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class NotebookSetup:
    examples: Path
    """The example packs (their ``*_tasks.py`` and ``*_scripted.py`` modules are importable)."""
    workdir: Path
    """A fresh temporary folder for the notebook's databases."""

    def database(self, name: str) -> str:
        """A SQLite URL for a database file ``name`` in :attr:`workdir`."""
        return f"sqlite:///{self.workdir / name}"


def find_examples(start: Path | None = None) -> Path:
    """``examples/`` of the checkout ``start`` (default: the working directory) is in or below, else
    of the checkout convengine is installed from, else the copy bundled with the package."""
    package = Path(__file__).resolve().parent.parent
    here = (start or Path.cwd()).resolve()
    for base in [here, *here.parents, package.parent]:
        if (base / _MARKER).is_file():
            return base / "examples"
    if (package / "_examples" / _MARKER.name).is_file():
        return package / "_examples"
    raise FileNotFoundError("examples/ not found: run from the convengine checkout or install convengine")


def notebook_setup() -> NotebookSetup:
    """Find the example packs, make their Python modules importable, and make a scratch folder."""
    examples = find_examples()
    if str(examples) not in sys.path:
        sys.path.insert(0, str(examples))
    return NotebookSetup(examples, Path(tempfile.mkdtemp(prefix="convengine-notebook-")))


def turn_graph(engine: Engine, highlight: Iterable[str] = ()) -> Svg:
    """The engine's compiled turn graph (conditional edges dashed), ``highlight`` steps emphasised."""
    return Svg(turn_graph_svg(engine.graph, highlight))


def state_graph(engine: Engine) -> Svg:
    """The configuration's states: ``ce_state_graph`` transitions (solid) and SET_STATE rules (dashed)."""
    return Svg(state_graph_svg(engine.snapshot))


def flow_graph(engine: Engine, flow_code: str) -> Svg:
    """One conversation flow of the configuration, node by node."""
    return Svg(flow_graph_svg(engine.snapshot, flow_code))


def chain_graph(engine: Engine, chain_code: str) -> Svg:
    """One chain of the configuration, step by step (a ``decide`` step's branches labelled)."""
    return Svg(chain_graph_svg(engine.snapshot, chain_code))
