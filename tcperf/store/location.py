"""Where a store is: a path (a SQLite file) or a SQLAlchemy URL, and the engine that reaches it.

    where("~/results.db")                              -> sqlite:////home/me/results.db
    where("postgresql://ann:pw@db.lab/tcperf")         -> postgresql+psycopg://ann:***@db.lab/tcperf (shown)
    mask("tcperf push --to postgresql://ann:pw@h/db")  -> 'tcperf push --to postgresql://ann:***@h/db'

SQLite keeps tcperf 0.1's guarantees: WAL, synchronous=NORMAL, a 30 s busy timeout, one transaction a write
(BEGIN IMMEDIATE, so two writers queue instead of failing), and a fresh connection for every operation, as the
sqlite3 store had. PostgreSQL keeps one pooled connection a process (a login costs ~10 ms of password hashing),
checked before each use so that a server restart between two results costs nothing, and dropped in a forked child.
"""
from __future__ import annotations

import os
import re
import sqlite3
import time
import weakref
from pathlib import Path

from sqlalchemy import create_engine, event
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.pool import NullPool

from ..errors import UserError

DIALECTS = {"sqlite": "sqlite", "postgresql": "postgresql+psycopg", "postgres": "postgresql+psycopg"}
_PASSWORD = re.compile(r"(\w[\w+.-]*://[^:/@\s]*):[^@\s]*@")


def mask(text: str) -> str:
    """Every URL's password in text replaced by ***."""
    return _PASSWORD.sub(r"\1:***@", text)


def is_url(where: str) -> bool:
    return "://" in where


def where(given: str | os.PathLike) -> URL:
    """The SQLAlchemy URL for a --db value: a URL as given (postgresql:// means psycopg 3), a path as SQLite."""
    if not is_url(str(given)):
        return URL.create("sqlite", database=str(Path(given).expanduser()))
    try:
        url = make_url(str(given))
    except (ArgumentError, ValueError):
        raise UserError(f"not a database URL: {mask(str(given))}") from None
    dialect, _, driver = url.drivername.partition("+")
    if dialect not in DIALECTS or (dialect == "postgresql" and driver not in ("", "psycopg")):
        raise UserError(f"unsupported database {url.drivername!r} in {shown(url)}; give a path (SQLite) "
                        f"or postgresql+psycopg://USER@HOST/DB")
    return url.set(drivername=DIALECTS[dialect])


def shown(url: URL) -> str:
    """The URL as it may be printed or stored: password masked; a SQLite file as its path."""
    if url.get_backend_name() == "sqlite":
        return url.database or ":memory:"
    return url.render_as_string(hide_password=True)


def engine(url: URL) -> Engine:
    if url.get_backend_name() == "sqlite":
        return _sqlite_engine(url)
    return _postgres_engine(url)


def _sqlite_engine(url: URL) -> Engine:
    Path(url.database).parent.mkdir(parents=True, exist_ok=True)
    eng = create_engine(url, poolclass=NullPool, connect_args={"timeout": 30})

    @event.listens_for(eng, "connect")
    def _pragmas(dbapi_connection, _record):
        dbapi_connection.isolation_level = None      # we say BEGIN ourselves (below), sqlite3 does not guess
        dbapi_connection.execute("PRAGMA busy_timeout=30000")
        _wal(dbapi_connection)
        dbapi_connection.execute("PRAGMA synchronous=NORMAL")

    @event.listens_for(eng, "begin")
    def _begin(conn):
        # a writer takes the write lock up front: it waits (busy timeout) rather than failing half-way
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("write") else "BEGIN")
    return eng


def _wal(dbapi_connection, patience_s: float = 30.0) -> None:
    """Put the file in WAL mode (once: the file keeps it). Switching fails with 'database is locked' now and then
    while other processes open the same new file, busy timeout or not (eight processes opening new files on two
    cores: 15 failures in 2,400 opens), so a locked switch is tried again until the busy timeout's 30 s are up."""
    deadline = time.monotonic() + patience_s
    while True:
        try:
            if dbapi_connection.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                dbapi_connection.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def _postgres_engine(url: URL) -> Engine:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise UserError("a PostgreSQL store needs psycopg: pip install 'tcperf[postgres]'") from None
    args = {"application_name": "tcperf"}
    if "connect_timeout" not in url.query:
        args["connect_timeout"] = 10                # an unreachable host fails in seconds, not minutes
    eng = create_engine(url, pool_size=1, max_overflow=4, pool_pre_ping=True, connect_args=args)
    _SERVER_ENGINES.add(eng)
    return eng


def _forget_connections_in_child() -> None:
    """A forked child must not use (or close) its parent's server connections; it opens its own."""
    for eng in list(_SERVER_ENGINES):
        eng.dispose(close=False)


_SERVER_ENGINES: "weakref.WeakSet[Engine]" = weakref.WeakSet()
os.register_at_fork(after_in_child=_forget_connections_in_child)


def reason(error: BaseException, url: URL) -> str:
    """A database error as one line, with no password in it (the driver's first line, not SQLAlchemy's wrapper)."""
    text = str(getattr(error, "orig", None) or error)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    line = lines[0] if lines else type(error).__name__
    if url.password:
        line = line.replace(str(url.password), "***")
    return mask(line)
