"""Plumbing shared by the layers above, not part of the public API: bounded regexes and JSON text,
JSON Schema checks, finite numbers, storable strings, checks of a turn's request, lazy imports,
the portal to blocking code and the python node's operating-system sandbox."""
