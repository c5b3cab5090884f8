"""Bring a store to this tcperf's schema, or refuse it with one line.

A store at the latest revision costs one read. Otherwise, holding the write lock (SQLite: BEGIN IMMEDIATE;
PostgreSQL: an advisory lock, so eight hosts opening a new database at once make its tables once):
  empty database            -> the tables of schema.py, stamped with the latest revision (Alembic not loaded)
  a tcperf 0.1 SQLite file  -> stamped 0001 (its tables are exactly 0001's), then upgraded
  an older revision         -> upgraded by Alembic: SQLite files always, a shared PostgreSQL store only by
                               `tcperf db upgrade` (hosts still on the older tcperf will then need to upgrade)
  a newer revision          -> refused: this tcperf cannot know its columns
"""
from __future__ import annotations

from sqlalchemy import Connection, inspect, select

from ..errors import UserError
from .schema import HEAD, SCHEMA_VERSION, alembic_version, meta, metadata

_LOCK = 0x7463706572660001          # pg_advisory_xact_lock key: 'tcperf' + 1


def state(conn: Connection) -> tuple[str | None, int | None]:
    """(Alembic revision, meta.schema_version) of the store; (None, None) for an empty database."""
    tables = set(inspect(conn).get_table_names())
    revision = conn.scalar(select(alembic_version.c.version_num)) if "alembic_version" in tables else None
    version = conn.scalar(select(meta.c.value).where(meta.c.key == "schema_version")) if "meta" in tables else None
    if revision is None and "runs" in tables:
        revision = "0001"                    # tcperf 0.1 kept no revision; its schema is 0001
    return revision, int(version) if version is not None else None


def check_not_newer(revision: str | None, version: int | None, where: str) -> None:
    newest = max(_number(revision), version or 0)
    if newest > SCHEMA_VERSION:
        raise UserError(f"{where} has schema {newest}, newer than this tcperf's {SCHEMA_VERSION}; upgrade tcperf")


def _number(revision: str | None) -> int:
    try:
        return int(revision or 0)
    except ValueError:                       # a revision id this tcperf never wrote: a newer one
        return SCHEMA_VERSION + 1


def prepare(conn: Connection, where: str, upgrade: bool) -> tuple[str | None, str]:
    """Inside a write transaction: make, stamp or upgrade the store; (revision before, revision after)."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_LOCK})")
    revision, version = state(conn)
    check_not_newer(revision, version, where)
    if revision is None:
        create(conn)
    elif revision != HEAD:
        if not upgrade:
            raise UserError(f"{where} has schema {_number(revision)}, older than this tcperf's {SCHEMA_VERSION}: "
                            f"run `tcperf db upgrade --db {where}` first")
        run_alembic(conn, revision)
    return revision, HEAD


def create(conn: Connection) -> None:
    metadata.create_all(conn)
    conn.execute(meta.insert().values(key="schema_version", value=str(SCHEMA_VERSION)))
    conn.execute(alembic_version.insert().values(version_num=HEAD))


def run_alembic(conn: Connection, revision: str) -> None:
    from alembic import command
    cfg = config(conn)
    if not inspect(conn).has_table("alembic_version"):
        command.stamp(cfg, revision)
    command.upgrade(cfg, "head")


def config(conn: Connection | None = None):
    """Alembic's configuration, from the package (no alembic.ini): migrations/ beside this file."""
    from alembic.config import Config
    cfg = Config()
    cfg.set_main_option("script_location", "tcperf.store:migrations")
    cfg.attributes["connection"] = conn
    return cfg
