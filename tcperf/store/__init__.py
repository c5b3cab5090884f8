"""The results store: a SQLite file (the default) or a shared PostgreSQL database, one transaction per write.

Every measured case is written the moment it finishes, so a run killed with SIGKILL or Ctrl-C keeps every case it
completed (the run reads 'incomplete' once its writer, recorded as host and pid, is gone); many processes, on one
host or many, may write to one store at once. Where: --db PATH_OR_URL (a path is SQLite, a URL such as
postgresql+psycopg://ann@db.lab/tcperf a server), else $TCPERF_DB, else $XDG_DATA_HOME/tcperf/results.db. A SQLite
file this process may not write is opened read-only: a command that would write says so before it measures.

    store = Store.open()                  # default place
    run_id = store.start_run("bench", "tcperf bench ...", env)
    store.add_result(run_id, Result("gemm", {"m": 8192, "n": 8192, "k": 8192}, "bf16", median_ms=1.4, ...))
    store.finish_run(run_id)
"""
from __future__ import annotations

import json
import os
import socket
import sys
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.exc import DBAPIError, IntegrityError

from ..errors import UserError
from ..records import Result
from . import location, migrate
from .location import mask
from .schema import HEAD, SCHEMA_VERSION, results, runs

__all__ = ["Store", "SCHEMA_VERSION", "HEAD", "RESULT_COLUMNS", "case_key", "default_location", "mask"]

RESULT_COLUMNS = ("op", "suite", "case_key", "shape", "precision", "status", "error", "tolerance",
                  "median_ms", "iqr_ms", "min_ms", "mean_ms", "n", "samples", "flops", "bytes", "tflops",
                  "gbps", "metrics", "warnings", "message")
_JSON_COLUMNS = {"shape": "{}", "samples": "[]", "metrics": "{}", "warnings": "[]", "env": "{}", "writer": "{}"}


def default_location() -> str:
    """$TCPERF_DB (a path or a URL), else the default SQLite file."""
    if os.environ.get("TCPERF_DB"):
        return os.environ["TCPERF_DB"]
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return str(Path(base) / "tcperf" / "results.db")


def case_key(op: str, shape: dict, precision: str) -> str:
    """The identity two runs' results are paired by: 'gemm|k=8192,m=8192,n=8192|bf16'."""
    return f"{op}|{','.join(f'{k}={shape[k]}' for k in sorted(shape))}|{precision}"


class Store:
    def __init__(self, path: str | os.PathLike, *, upgrade: bool | None = None):
        """path: a SQLite file's path or a SQLAlchemy URL. upgrade: apply migrations to an older store; None = only
        to a SQLite file (a shared server's schema changes by `tcperf db upgrade`)."""
        self.url = location.where(path)
        self.where = location.shown(self.url)             # printable: a path, or the URL with its password masked
        self.dialect = self.url.get_backend_name()        # sqlite | postgresql
        self.path = Path(self.url.database) if self.dialect == "sqlite" else None
        self.read_only = False                            # True: opened read-only, see _open
        empty = self.path is not None and self.path.is_file() and self.path.stat().st_size == 0
        self._use(location.engine(self.url))
        self.upgraded = self._open(self.dialect == "sqlite" if upgrade is None else upgrade)
        if empty and not self.read_only:     # `touch results.db`, or a wrong path: not silently (issue 58)
            print(f"{self.where} was an empty file: made it a new tcperf results store", file=sys.stderr)

    @classmethod
    def open(cls, path: str | os.PathLike | None = None, **kw) -> "Store":
        return cls(path or default_location(), **kw)

    def _use(self, engine) -> None:
        self.engine = engine
        self._writer = engine.execution_options(write=True)

    def _open(self, upgrade: bool) -> tuple[str | None, str]:
        """_prepare; a SQLite file this process may not write that SQLite cannot open as usual is opened read-only
        (runs, show, export and report work; a write is refused in one line), else the last error, one line."""
        try:
            opened = self._prepare(upgrade)
            self.read_only = not location.may_write(self.url)    # SQLite opened it read-only by itself
            return opened
        except UserError as first:
            error = first
        for engine in location.read_only_engines(self.url):
            self._use(engine)
            self.read_only = True
            try:
                return self._prepare(False)
            except UserError as e:
                error = e
        raise error

    def writable(self) -> "Store":
        """This store; one line if it was opened read-only (a command that writes later says so before it measures)."""
        if self.read_only:
            raise UserError(f"cannot write results store {self.where}: it is read-only here (a read-only mount or "
                            f"another user's file); give --db a store you may write")
        return self

    def _prepare(self, upgrade: bool) -> tuple[str | None, str]:
        """(revision found, revision now); a read first, the write lock only when something is to be done."""
        with self._connection() as conn:
            revision, version = migrate.state(conn)
        migrate.check_not_newer(revision, version, self.where)
        if revision == HEAD:
            return revision, HEAD
        with self._transaction() as conn:
            return migrate.prepare(conn, self.where, upgrade)

    @contextmanager
    def _connection(self):
        with self._one_line_errors(), self.engine.connect() as conn:
            yield conn

    @contextmanager
    def _transaction(self):
        """One write transaction: committed whole or rolled back."""
        with self._one_line_errors(), self.writable()._writer.begin() as conn:
            yield conn

    @contextmanager
    def _one_line_errors(self):
        """A database error (but a duplicate key) becomes one line naming the store, password masked."""
        try:
            yield
        except IntegrityError:
            raise
        except DBAPIError as e:
            raise UserError(f"cannot use results store {self.where}: {location.reason(e, self.url)}") from None

    def _write(self, stmt) -> int | None:
        with self._transaction() as conn:
            done = conn.execute(stmt)
            return done.inserted_primary_key[0] if stmt.is_insert else None

    def _read(self, stmt) -> list[dict]:
        with self._connection() as conn:
            return [_decode(dict(r._mapping)) for r in conn.execute(stmt)]

    # --- runs ---------------------------------------------------------------------------------------------------
    def start_run(self, kind: str, command: str, env: dict) -> int:
        from ..version import __version__
        device = env.get("gpu", {}).get("name") or env.get("cpu", {}).get("model", "unknown")
        writer = {"host": socket.gethostname(), "pid": os.getpid()}       # see _status
        return self._write(insert(runs).values(
            kind=kind, command=mask(command), tcperf_version=__version__, device=device,
            env=mask(json.dumps(env, default=str)), started=time.time(), uid=uuid.uuid4().hex,
            writer=json.dumps(writer)))

    def finish_run(self, run_id: int, status: str = "done", warnings: list[str] = ()) -> None:
        self._write(update(runs).where(runs.c.id == run_id).values(
            finished=time.time(), status=status, warnings=json.dumps(list(warnings))))

    def runs(self, limit: int = 50) -> list[dict]:
        n = select(func.count()).where(results.c.run_id == runs.c.id).scalar_subquery().label("n_results")
        return [_status(r) for r in self._read(select(runs, n).order_by(runs.c.id.desc()).limit(limit))]

    def run(self, run_id: int | None = None) -> dict:
        """One run (the latest when run_id is None); UserError when there is none."""
        latest = select(runs).order_by(runs.c.id.desc()).limit(1)
        rows = self._read(latest if run_id is None else select(runs).where(runs.c.id == run_id))
        if not rows:
            raise UserError(f"no run {run_id} in {self.where}" if run_id is not None else f"no runs yet in {self.where}")
        return _status(rows[0])

    def run_ids(self) -> list[int]:
        """Every run's id, oldest first."""
        with self._connection() as conn:
            return list(conn.scalars(select(runs.c.id).order_by(runs.c.id)))

    # --- results ------------------------------------------------------------------------------------------------
    def add_result(self, run_id: int, result: Result) -> int:
        """One measured row, written now (its own transaction)."""
        given = result.to_row()
        row = {c: given.get(c) for c in RESULT_COLUMNS}
        row["shape"] = row["shape"] or {}
        row["case_key"] = row["case_key"] or case_key(row["op"], row["shape"], row["precision"])
        row["suite"] = row["suite"] or ""
        row["message"] = row["message"] or ""
        for col, empty in _JSON_COLUMNS.items():
            if col in row:
                row[col] = json.dumps(row[col] if row[col] is not None else json.loads(empty), default=str)
        return self._write(insert(results).values(run_id=run_id, created=time.time(), **row))

    def results(self, run_id: int) -> list[dict]:
        return self._read(select(results).where(results.c.run_id == run_id).order_by(results.c.id))

    def ceilings(self, device: str) -> dict:
        """This device's measured ceilings from `tcperf ceilings` runs: per precision, the best figure of the
        latest run that measured it, {precision: TFLOPS (TOPS for int8), "bandwidth": GB/s}; {} when none was."""
        rows = self._read(
            select(results.c.run_id, results.c.precision, results.c.tflops, results.c.gbps)
            .join(runs, runs.c.id == results.c.run_id)
            .where(runs.c.kind == "ceilings", runs.c.device == device, results.c.op == "ceiling",
                   results.c.status == "ok")
            .order_by(results.c.run_id.desc()))
        latest, out = {}, {}                   # precision -> the latest run that measured it, its best figure
        for r in rows:
            value = r["gbps"] if r["precision"] == "bandwidth" else r["tflops"]
            if not value or latest.setdefault(r["precision"], r["run_id"]) != r["run_id"]:
                continue
            out[r["precision"]] = max(value, out.get(r["precision"], 0.0))
        return out

    # --- copying runs between stores (tcperf push) --------------------------------------------------------------
    def export_run(self, run_id: int) -> tuple[dict, list[dict]]:
        """A run and its results as stored (JSON fields as text), for import_run into another store."""
        with self._connection() as conn:
            run = conn.execute(select(runs).where(runs.c.id == run_id)).mappings().first()
            if run is None:
                raise UserError(f"no run {run_id} in {self.where}")
            rows = conn.execute(select(results).where(results.c.run_id == run_id).order_by(results.c.id))
            return dict(run), [dict(r) for r in rows.mappings()]

    def import_run(self, run: dict, rows: list[dict]) -> tuple[int, str]:
        """Store another store's run under a new id, once: matched by uid, (id, 'copied' | 'updated' |
        'already there'). A run pushed before and changed since (it finished, it has more results) is replaced."""
        try:
            return self._import(run, rows)
        except IntegrityError:               # another host pushed the same run just now: it is there
            return self._import(run, rows)

    def _import(self, run: dict, rows: list[dict]) -> tuple[int, str]:
        with self._transaction() as conn:
            n = select(func.count()).where(results.c.run_id == runs.c.id).scalar_subquery()
            found = conn.execute(select(runs.c.id, runs.c.status, runs.c.finished, n.label("n"))
                                 .where(runs.c.uid == run["uid"])).first()
            fields = _without_id(run)
            if found and (found.status, found.finished, found.n) == (run["status"], run["finished"], len(rows)):
                return found.id, "already there"
            if found:
                conn.execute(delete(results).where(results.c.run_id == found.id))
                conn.execute(update(runs).where(runs.c.id == found.id).values(**fields))
                run_id, action = found.id, "updated"
            else:
                run_id, action = conn.execute(insert(runs).values(**fields)).inserted_primary_key[0], "copied"
            if rows:
                conn.execute(insert(results), [{**_without_id(r), "run_id": run_id} for r in rows])
            return run_id, action


def _without_id(row: dict) -> dict:
    return {k: v for k, v in row.items() if k != "id"}


def _status(run: dict) -> dict:
    """A run still 'running' whose writer was on this host and is gone (killed, crashed) reads 'incomplete': its
    finished results are kept, no more will come. A writer on another host cannot be checked: 'running'."""
    writer = run.get("writer") or {}
    if run["status"] == "running" and writer.get("host") == socket.gethostname() and not _alive(writer.get("pid")):
        return {**run, "status": "incomplete"}
    return run


def _alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ProcessLookupError, TypeError, ValueError):
        return False
    except PermissionError:       # someone else's process: alive
        return True
    return True


def _decode(row: dict) -> dict:
    """JSON cells as Python. A cell that is not the JSON its column holds (a garbled or hand-edited file) reads as
    its column's empty value and the row's warnings say so: every reader goes on, and the store is left as it is."""
    unreadable = [col for col in _JSON_COLUMNS if col in row and not _decoded(row, col)]
    if unreadable:
        row["warnings"] = [*(row.get("warnings") or []),
                           *(f"stored {col} unreadable (not the JSON it should hold): shown empty" for col in unreadable)]
    return row


def _decoded(row: dict, col: str) -> bool:
    """row[col] from JSON text to a dict or list (None stays None); False, and the empty value, if it cannot be."""
    if not isinstance(row[col], str):
        return True
    empty = json.loads(_JSON_COLUMNS[col])
    try:
        value = json.loads(row[col])
    except ValueError:
        value = ...                                  # neither None nor the column's type: unreadable
    row[col] = value if value is None or type(value) is type(empty) else empty
    return row[col] is value
