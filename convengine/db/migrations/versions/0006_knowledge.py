"""knowledge bases

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04 00:00:00

``ce_knowledge_base`` / ``_document`` / ``_chunk`` hold documents split into passages with
their embeddings; lexical search uses a generated ``tsvector`` column with a GIN index on
PostgreSQL and an FTS5 table kept in step by triggers on SQLite.
"""

from alembic import op

from convengine.db.models import KNOWLEDGE_MODELS

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

FTS_LANGUAGE = "english"
SQLITE_FTS = (
    ("CREATE VIRTUAL TABLE IF NOT EXISTS ce_knowledge_fts USING fts5(title, text, content='ce_knowledge_chunk', "
    "content_rowid='chunk_id', tokenize='porter unicode61')"),
    ("CREATE TRIGGER IF NOT EXISTS ce_knowledge_chunk_ai AFTER INSERT ON ce_knowledge_chunk BEGIN "
    "INSERT INTO ce_knowledge_fts(rowid, title, text) VALUES (new.chunk_id, new.title, new.text); END"),
    ("CREATE TRIGGER IF NOT EXISTS ce_knowledge_chunk_ad AFTER DELETE ON ce_knowledge_chunk BEGIN "
    "INSERT INTO ce_knowledge_fts(ce_knowledge_fts, rowid, title, text) VALUES ('delete', old.chunk_id, old.title, "
    "old.text); END"),
    ("CREATE TRIGGER IF NOT EXISTS ce_knowledge_chunk_au AFTER UPDATE ON ce_knowledge_chunk BEGIN "
    "INSERT INTO ce_knowledge_fts(ce_knowledge_fts, rowid, title, text) VALUES ('delete', old.chunk_id, old.title, "
    "old.text); INSERT INTO ce_knowledge_fts(rowid, title, text) VALUES (new.chunk_id, new.title, new.text); END"),
)
POSTGRES_FTS = (
    ("ALTER TABLE ce_knowledge_chunk ADD COLUMN IF NOT EXISTS tsv tsvector GENERATED ALWAYS AS "
    f"(to_tsvector('{FTS_LANGUAGE}', coalesce(title, '') || ' ' || text)) STORED"),
    "CREATE INDEX IF NOT EXISTS ix_ce_knowledge_chunk_tsv ON ce_knowledge_chunk USING gin (tsv)",
)


def upgrade() -> None:
    bind = op.get_bind()
    for model in KNOWLEDGE_MODELS:
        model.__table__.create(bind, checkfirst=True)
    for statement in POSTGRES_FTS if bind.dialect.name == "postgresql" else SQLITE_FTS:
        bind.exec_driver_sql(statement)


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        bind.exec_driver_sql("DROP TABLE IF EXISTS ce_knowledge_fts")
    for model in reversed(KNOWLEDGE_MODELS):
        model.__table__.drop(bind, checkfirst=True)
