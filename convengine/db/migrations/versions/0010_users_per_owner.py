"""users belong to the caller that names them

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-10 00:00:00

Long-term properties were kept under the user id alone, so two API keys naming the same user id
shared (and overwrote) one user. They now live under the conversation owner's namespace
(``("convengine", "owners", <digest of the owner>, "users", <digest of the user id>, "properties")``);
host code's users (no owner) keep ``("convengine", "users", <digest of the user id>, "properties")``.

This moves what is stored: the properties of a user id that owned conversations named are copied
to each of those owners (an owner that already has its own value keeps it), and the unscoped copy is
deleted unless a conversation without owner (host code's) names that user too. Nothing is lost and
no owner gets a user it never named. The store's table (``store``, made by LangGraph's own
``setup()``) exists only once an engine used long-term memory; without it there is nothing to move.
"""

import hashlib

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

STORE = "store"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:40]


def _host_prefix(user_id: str) -> str:
    return ".".join(("convengine", "users", _digest(user_id), "properties"))


def _owner_prefix(owner: str, user_id: str) -> str:
    return ".".join(("convengine", "owners", _digest(owner), "users", _digest(user_id), "properties"))


def upgrade() -> None:
    bind = op.get_bind()
    inspector = sa.inspect(bind)
    if not inspector.has_table(STORE) or not inspector.has_table("ce_conversation"):
        return
    store = sa.Table(STORE, sa.MetaData(), autoload_with=bind)
    conversation = sa.table("ce_conversation", sa.column("owner_id", sa.Text), sa.column("user_id", sa.Text))
    pairs = bind.execute(sa.select(conversation.c.owner_id, conversation.c.user_id).distinct().where(
        conversation.c.owner_id.is_not(None), conversation.c.user_id.is_not(None))).all()
    hosted = {r[0] for r in bind.execute(sa.select(conversation.c.user_id).distinct().where(
        conversation.c.owner_id.is_(None), conversation.c.user_id.is_not(None)))}
    others = [c for c in store.c if c.name != "prefix"]
    moved: set[str] = set()
    for owner, user_id in pairs:
        old, new = _host_prefix(user_id), _owner_prefix(owner, user_id)
        present = {r[0] for r in bind.execute(sa.select(store.c.key).where(store.c.prefix == new))}
        rows = bind.execute(sa.select(*others).where(store.c.prefix == old)).mappings().all()
        fresh = [{**dict(row), "prefix": new} for row in rows if row["key"] not in present]
        if fresh:
            bind.execute(store.insert(), fresh)
        moved.add(user_id)
    for user_id in moved - hosted:
        bind.execute(store.delete().where(store.c.prefix == _host_prefix(user_id)))


def downgrade() -> None:
    """The owners' copies stay where they are (a downgraded engine reads the unscoped namespace only)."""
