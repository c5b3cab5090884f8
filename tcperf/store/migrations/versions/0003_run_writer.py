"""Schema 3: runs.writer, the host and process that write a run (JSON), so that a run whose writer died reads
'incomplete' rather than 'running' forever (tcperf.store._status). Older runs have none: they read as stored.

Revision ID: 0003
Revises: 0002
"""
import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("writer", sa.Text))
    op.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
