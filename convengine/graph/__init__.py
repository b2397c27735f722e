"""The turn graph: node names, the step plan, the node wrapper and the builder."""
