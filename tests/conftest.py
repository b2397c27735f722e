"""Shared fixtures: every backend-dependent test runs on SQLite and on a real PostgreSQL.

PostgreSQL comes from ``CONVENGINE_TEST_PG_URL`` (``.ci/run`` starts a server and sets it).
Each test gets a fresh database cloned from a migrated template. Without the variable the
PostgreSQL variants are skipped locally, but ``CONVENGINE_REQUIRE_PG=1`` (set by CI) turns
that skip into a failure, so CI never skips PostgreSQL silently.
"""

from __future__ import annotations

import atexit
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from convengine.db import create_sync_engine, parse_database_url, upgrade

PG_URL = os.environ.get("CONVENGINE_TEST_PG_URL", "").strip()
REQUIRE_PG = os.environ.get("CONVENGINE_REQUIRE_PG", "") == "1"
ONLY_BACKEND = os.environ.get("CONVENGINE_TEST_BACKEND", "").strip()
TEMPLATE_DB = f"convengine_test_template_{os.getpid()}"
"""Per test session, so two sessions on one server do not drop each other's template."""
PACKS = Path(__file__).parent / "packs"
EXAMPLES = Path(__file__).parent.parent / "examples"

BACKENDS = [b for b in ("sqlite", "postgres") if not ONLY_BACKEND or b == ONLY_BACKEND]


def _admin_url() -> sa.URL:
    return parse_database_url(PG_URL).sync_url.set(database="postgres")


_template_ready = False


def _ensure_template() -> None:
    global _template_ready
    if _template_ready:
        return
    admin = sa.create_engine(_admin_url(), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f"DROP DATABASE IF EXISTS {TEMPLATE_DB} WITH (FORCE)"))
        conn.execute(sa.text(f"CREATE DATABASE {TEMPLATE_DB}"))
    admin.dispose()
    upgrade(parse_database_url(str(_pg_url_for(TEMPLATE_DB))))
    _template_ready = True
    atexit.register(_drop_template)


def _drop_template() -> None:
    admin = sa.create_engine(_admin_url(), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f"DROP DATABASE IF EXISTS {TEMPLATE_DB} WITH (FORCE)"))
    admin.dispose()


def _pg_url_for(database: str) -> str:
    return parse_database_url(PG_URL).sync_url.set(drivername="postgresql", database=database).render_as_string(
        hide_password=False
    )


def new_postgres_database(*, migrated: bool = True) -> str:
    """Create a fresh database on the test server and return its URL."""
    if not PG_URL:
        if REQUIRE_PG:
            pytest.fail("CONVENGINE_REQUIRE_PG=1 but CONVENGINE_TEST_PG_URL is not set")
        pytest.skip("PostgreSQL not configured (set CONVENGINE_TEST_PG_URL)")
    name = f"ce_test_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(_admin_url(), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        if migrated:
            _ensure_template()
            conn.execute(sa.text(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE_DB}"))
        else:
            conn.execute(sa.text(f"CREATE DATABASE {name}"))
    admin.dispose()
    return _pg_url_for(name)


def drop_postgres_database(url: str) -> None:
    name = parse_database_url(url).sync_url.database
    admin = sa.create_engine(_admin_url(), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
    admin.dispose()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="session")
def migrated_sqlite_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated once per session; each test gets a copy (migrating costs ~0.4 s a test)."""
    path = tmp_path_factory.mktemp("sqlite_template") / "migrated.db"
    upgrade(parse_database_url(f"sqlite:///{path}"))
    return path


@pytest.fixture
def db_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """A migrated, empty database URL on the current backend."""
    if backend == "sqlite":
        target = tmp_path / "convengine.db"
        shutil.copyfile(request.getfixturevalue("migrated_sqlite_file"), target)
        yield f"sqlite:///{target}"
        return
    url = new_postgres_database()
    yield url
    drop_postgres_database(url)


@pytest.fixture
def sqlite_db_url(tmp_path: Path, migrated_sqlite_file: Path) -> str:
    """A migrated, empty SQLite database only: for a single turn's step logic, whose storage the
    two-backend tests already cover (keeps CI time down)."""
    target = tmp_path / "convengine.db"
    shutil.copyfile(migrated_sqlite_file, target)
    return f"sqlite:///{target}"


@pytest.fixture
def empty_db_url(backend: str, tmp_path: Path) -> Iterator[str]:
    """A database URL with no tables at all (for migration tests)."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'empty.db'}"
        return
    url = new_postgres_database(migrated=False)
    yield url
    drop_postgres_database(url)


@pytest.fixture
def sync_engine(db_url: str) -> Iterator[sa.Engine]:
    engine = create_sync_engine(parse_database_url(db_url))
    yield engine
    engine.dispose()


@pytest.fixture(scope="module")
def sqlite_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """One engine on a SQLite file, shared by a module's tests that only need any engine."""
    from convengine.engine import Engine
    from tests.helpers import pack

    path = tmp_path_factory.mktemp("shared") / "shared.db"
    engine = Engine.open(f"sqlite:///{path}", pack=pack())
    yield engine
    engine.close()
