"""The workflow graph runtime: workflows (``ce_flow`` rows of kind ``workflow`` with their
``ce_flow_node`` / ``ce_flow_edge`` rows) compiled once per configuration version into LangGraph graphs
and walked from their trigger or root agent through agents, knowledge, router and decision branches,
tool nodes, sub-workflows and end nodes (see docs/workflows.md)."""
