"""ce_* control tables -> one immutable, validated ConfigSnapshot; packs (YAML) in and out."""

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
from convengine.config_loader.snapshot import ConfigSnapshot, scope_matches

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
