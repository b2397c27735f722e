"""ce_* control tables -> one immutable, validated ConfigSnapshot; packs (YAML) in and out."""

from __future__ import annotations

from typing import TYPE_CHECKING

from convengine._internal.lazy import lazy_names

if TYPE_CHECKING:  # the names below, for type checkers and the import-graph checks; at run time each
    # loads on first use, so importing one submodule does not run the others (see convengine/_internal/lazy.py)
    from convengine.config.snapshot import ConfigSnapshot, scope_matches
    from convengine.config_loader.build import Extensions, SnapshotInput, build_snapshot
    from convengine.config_loader.loader import (
        SnapshotHolder,
        export_pack,
        import_pack,
        load_snapshot,
        read_control_rows,
        validate_pack,
    )
    from convengine.config_loader.packs import dump_pack, read_pack

__all__ = [
    "ConfigSnapshot",
    "Extensions",
    "SnapshotHolder",
    "SnapshotInput",
    "build_snapshot",
    "dump_pack",
    "export_pack",
    "import_pack",
    "load_snapshot",
    "read_control_rows",
    "read_pack",
    "scope_matches",
    "validate_pack",
]

__getattr__, __dir__ = lazy_names(__name__, {
    "ConfigSnapshot": "convengine.config.snapshot",
    "Extensions": "build",
    "SnapshotHolder": "loader",
    "SnapshotInput": "build",
    "build_snapshot": "build",
    "dump_pack": "packs",
    "export_pack": "loader",
    "import_pack": "loader",
    "load_snapshot": "loader",
    "read_control_rows": "loader",
    "read_pack": "packs",
    "scope_matches": "convengine.config.snapshot",
    "validate_pack": "loader",
})
