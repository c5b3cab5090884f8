"""Schema 1: the store of tcperf 0.1 (sqlite3), as it was; such a file is stamped 0001, not rebuilt.

Revision ID: 0001
"""
import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

F, T = sa.Float, sa.Text


def upgrade() -> None:
    op.create_table("meta", sa.Column("key", T, primary_key=True), sa.Column("value", T, nullable=False))
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("kind", T, nullable=False), sa.Column("command", T, nullable=False),
        sa.Column("tcperf_version", T, nullable=False), sa.Column("device", T, nullable=False),
        sa.Column("env", T, nullable=False), sa.Column("started", F, nullable=False), sa.Column("finished", F),
        sa.Column("status", T, nullable=False, server_default=sa.text("'running'")),
        sa.Column("warnings", T, nullable=False, server_default=sa.text("'[]'")),
        sqlite_autoincrement=True)
    op.create_table(
        "results",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), nullable=False),
        sa.Column("op", T, nullable=False), sa.Column("suite", T, nullable=False, server_default=sa.text("''")),
        sa.Column("case_key", T, nullable=False), sa.Column("shape", T, nullable=False),
        sa.Column("precision", T, nullable=False), sa.Column("status", T, nullable=False),
        *[sa.Column(c, F) for c in ("error", "tolerance", "median_ms", "iqr_ms", "min_ms", "mean_ms")],
        sa.Column("n", sa.Integer), sa.Column("samples", T, nullable=False, server_default=sa.text("'[]'")),
        *[sa.Column(c, F) for c in ("flops", "bytes", "tflops", "gbps")],
        sa.Column("metrics", T, nullable=False, server_default=sa.text("'{}'")),
        sa.Column("warnings", T, nullable=False, server_default=sa.text("'[]'")),
        sa.Column("message", T, nullable=False, server_default=sa.text("''")),
        sa.Column("created", F, nullable=False),
        sqlite_autoincrement=True)
    op.create_index("results_run", "results", ["run_id"])
    op.execute("INSERT INTO meta (key, value) VALUES ('schema_version', '1')")
