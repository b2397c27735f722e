"""python nodes: a pack author's script run behind an operating-system boundary.

:mod:`.host` finds what this host offers (bubblewrap namespaces and a seccomp allow-list, checked
once per process), :mod:`.child` is the program the sandboxed interpreter runs, :mod:`.runner`
runs one script bounded in time and output, :mod:`.node` is the flow node. docs/security.md says
what the boundary holds and what a host needs.
"""

from __future__ import annotations

from convengine._internal.sandbox.host import Boundary, boundary
from convengine._internal.sandbox.runner import STRICT, WEAK, SandboxMode, run_script

__all__ = ["STRICT", "WEAK", "Boundary", "SandboxMode", "boundary", "refusal", "run_script"]


def refusal(mode: str) -> str | None:
    """Why python nodes cannot run under ``flows.python-sandbox`` ``mode`` on this host; None when they can."""
    problem = boundary().problem
    if mode == WEAK or problem is None:
        return None
    return (f"python nodes run behind an operating-system sandbox this host cannot set up ({problem}); "
            "install bubblewrap and libseccomp (scripts/setup does as root), or set "
            "flows.python-sandbox: weak to accept a weaker sandbox")
