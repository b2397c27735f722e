"""The public surface is explicit: ``convengine.__all__`` is sorted and complete, and importing the
package stays cheap (its heavy dependencies load when a name that needs them is first used)."""

from __future__ import annotations

import subprocess
import sys

import convengine


def test_all_is_sorted_and_every_name_exists() -> None:
    assert convengine.__all__ == sorted(convengine.__all__)
    for name in convengine.__all__:
        assert hasattr(convengine, name), name


def test_all_lists_every_public_member() -> None:
    public = {
        name
        for name in dir(convengine)
        if not name.startswith("_") and not isinstance(getattr(convengine, name), type(convengine))
    }
    assert public == set(convengine.__all__)


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        convengine.NoSuchThing  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:
        raise AssertionError("convengine.NoSuchThing resolved")


HEAVY = ("langgraph", "sqlalchemy", "alembic", "pydantic", "fastapi", "langchain_core")


def loaded_after(code: str) -> set[str]:
    probe = f"{code}\nimport sys\nprint(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    return {name.split(".")[0] for name in out.split()}


def test_importing_the_package_or_the_cli_loads_no_heavy_dependency() -> None:
    assert loaded_after("import convengine").isdisjoint(HEAVY)
    assert loaded_after("import convengine.cli.app").isdisjoint(HEAVY)


def test_help_answers_without_the_engine() -> None:
    done = subprocess.run([sys.executable, "-m", "convengine.cli", "--help"], capture_output=True, text=True, check=True)
    assert "serve" in done.stdout and "pack" in done.stdout


def test_a_name_loads_its_module_on_first_use() -> None:
    assert {"langgraph", "sqlalchemy"} <= loaded_after("import convengine\nconvengine.Engine")
