"""The store's one schema, in SQLAlchemy Core: the same tables on SQLite and PostgreSQL.

JSON fields are TEXT holding JSON (not JSONB), so a SQLite file made by tcperf 0.1 keeps its exact columns. Times
are unix seconds as floats. `alembic_version` is Alembic's own table, declared here so that a new store is made
and stamped with the latest revision without loading Alembic; migrations/ holds how older stores get here.
"""
from __future__ import annotations

from sqlalchemy import Column, Float, ForeignKey, Index, Integer, MetaData, String, Table, Text, text

SCHEMA_VERSION = 3                       # = the newest migration, migrations/versions/000N_*.py
HEAD = f"{SCHEMA_VERSION:04d}"           # its Alembic revision id

metadata = MetaData()

meta = Table("meta", metadata,
             Column("key", Text, primary_key=True),
             Column("value", Text, nullable=False))

runs = Table(
    "runs", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("kind", Text, nullable=False),            # run | bench | ceilings | models | advise | lab
    Column("command", Text, nullable=False),         # the command line as typed, password masked
    Column("tcperf_version", Text, nullable=False),
    Column("device", Text, nullable=False),          # 'NVIDIA H200' or the CPU model
    Column("env", Text, nullable=False),             # JSON: tcperf.env.collect()
    Column("started", Float, nullable=False),        # unix time
    Column("finished", Float),                       # NULL while running or when killed
    Column("status", Text, nullable=False, server_default=text("'running'")),  # running | done | interrupted | failed
    Column("warnings", Text, nullable=False, server_default=text("'[]'")),     # JSON list of run-level warnings
    Column("uid", Text),                             # a run's identity in every store it is pushed to (0002)
    Column("writer", Text),                          # JSON {host, pid} of the process writing it (0003)
    Index("runs_uid", "uid", unique=True),
    sqlite_autoincrement=True,
)

results = Table(
    "results", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", Integer, ForeignKey("runs.id"), nullable=False),
    Column("op", Text, nullable=False),              # gemm | conv | ... | model | lab.vector_add | advise.verdict
    Column("suite", Text, nullable=False, server_default=text("''")),
    Column("case_key", Text, nullable=False),        # identity for comparisons: op|shape|precision
    Column("shape", Text, nullable=False),           # JSON of the op's parameters
    Column("precision", Text, nullable=False),
    Column("status", Text, nullable=False),          # ok | wrong | skipped | error | oom | timeout
    Column("error", Float),                          # relative-norm error against float64
    Column("tolerance", Float),
    Column("median_ms", Float), Column("iqr_ms", Float), Column("min_ms", Float), Column("mean_ms", Float),
    Column("n", Integer),
    Column("samples", Text, nullable=False, server_default=text("'[]'")),   # JSON list of raw samples, ms
    Column("flops", Float), Column("bytes", Float), Column("tflops", Float), Column("gbps", Float),
    Column("metrics", Text, nullable=False, server_default=text("'{}'")),   # JSON: verdict, kernels, throughput...
    Column("warnings", Text, nullable=False, server_default=text("'[]'")),
    Column("message", Text, nullable=False, server_default=text("''")),     # why skipped / wrong / failed
    Column("created", Float, nullable=False),
    Index("results_run", "run_id"),
    sqlite_autoincrement=True,
)

alembic_version = Table("alembic_version", metadata,
                        Column("version_num", String(32), primary_key=True))
