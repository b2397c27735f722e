"""A pack author's names reach Graphviz's dot only as quoted labels: a state named to close the
quote and add statements draws as one node with that name, adding no edge, attribute or file."""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET

import pytest

from convengine.console.graphs import Edge, render_svg

SVG = "{http://www.w3.org/2000/svg}"
HOSTILE = 'A" ]; n0 -> n0 [label="PWNED"]; n9 [shape=none, image="/etc/passwd'
BACKSLASHED = 'B\\" ] ; n1 -> n1; x [label=\\"'


@pytest.mark.parametrize("name", [HOSTILE, BACKSLASHED])
def test_a_hostile_state_name_is_one_node_and_adds_no_edge(name: str) -> None:
    if shutil.which("dot") is None:
        pytest.skip("no Graphviz dot (scripts/setup installs it)")
    svg = ET.fromstring(render_svg([name, "IDLE"], [Edge("IDLE", name, name)], title=name))
    assert svg.get("data-layout") == "dot"
    nodes = [g for g in svg.iter(f"{SVG}g") if g.get("class") == "node"]
    edges = [g for g in svg.iter(f"{SVG}g") if g.get("class") == "edge"]
    assert sorted(g.get("data-node") or "" for g in nodes) == sorted([name, "IDLE"])
    assert len(edges) == 1
    texts = [t.text for t in svg.iter(f"{SVG}text")]
    assert texts.count(name) == 2 and "PWNED" not in texts  # the node's label and the edge's
    assert not list(svg.iter(f"{SVG}image"))
