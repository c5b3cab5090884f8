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

from ..errors import UserError, os_reason

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
        _make_folder(url)
        return _sqlite_engine(url)
    return _postgres_engine(url)


def _make_folder(url: URL) -> None:
    """A new SQLite store's folder, made here, or one line naming the store and why it cannot be (a file in the way,
    no permission, a read-only disk): nothing is made then."""
    folder = Path(url.database).parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as e:
        raise UserError(f"cannot use results store {shown(url)}: {os_reason(e)}") from None
    except OSError as e:
        raise UserError(f"cannot use results store {shown(url)}: cannot make folder {folder}: {os_reason(e)}") from None


def read_only_engines(url: URL) -> list[Engine]:
    """Engines that read a SQLite file this process may not write (a read-only mount, another user's file), best
    first; [] for a file it may write or one that is not there. mode=ro sees what writers elsewhere add, but opens a
    WAL file only where it can make or read the -shm file beside it; immutable=1 needs no -shm file (nor locks) but
    would not see results still in a -wal file, so it is offered only where there is none."""
    path = Path(url.database)
    if url.get_backend_name() != "sqlite" or not path.is_file() or _writable(path):
        return []
    wal = path.with_name(path.name + "-wal")
    modes = ["ro"] + (["immutable"] if not (wal.exists() and wal.stat().st_size) else [])
    return [_sqlite_engine(URL.create("sqlite", database=path.resolve().as_uri(), query={
        "uri": "true", **({"mode": "ro"} if mode == "ro" else {"immutable": "1"})}), wal=False) for mode in modes]


def may_write(url: URL) -> bool:
    """False for a SQLite file this process may not write (SQLite opens it read-only by itself where it can)."""
    path = Path(url.database or "")
    return url.get_backend_name() != "sqlite" or not path.is_file() or os.access(path, os.W_OK)


def _writable(path: Path) -> bool:
    """The file and its folder (SQLite makes its -wal and -shm files there) may be written."""
    return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)


def _sqlite_engine(url: URL, wal: bool = True) -> Engine:
    """wal: put a new file in WAL mode (a read-only engine must not try: that is a write)."""
    eng = create_engine(url, poolclass=NullPool, connect_args={"timeout": 30})

    @event.listens_for(eng, "connect")
    def _pragmas(dbapi_connection, _record):
        dbapi_connection.isolation_level = None      # we say BEGIN ourselves (below), sqlite3 does not guess
        dbapi_connection.execute("PRAGMA busy_timeout=30000")
        if wal:
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
