"""Schema 2: runs.uid, a run's identity in every store it is pushed to (`tcperf push` copies a run once).

Revision ID: 0002
Revises: 0001
"""
import uuid

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("uid", sa.Text))
    runs = sa.table("runs", sa.column("id", sa.Integer), sa.column("uid", sa.Text))
    conn = op.get_bind()
    for (run_id,) in conn.execute(sa.select(runs.c.id)).all():
        conn.execute(runs.update().where(runs.c.id == run_id).values(uid=uuid.uuid4().hex))
    op.create_index("runs_uid", "runs", ["uid"], unique=True)
    op.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
