"""Conversation flows: graphs of typed nodes stored in ``ce_flow`` / ``ce_flow_node`` /
``ce_flow_edge``, validated at load, compiled to LangGraph subgraphs and walked by the turn
graph's ``flow`` step. See docs/flows.md."""
