"""The results store: SQLite (standard library), WAL mode, one transaction per write.

Every measured case is written the moment it finishes, so a run killed with SIGKILL or Ctrl-C keeps every case it
completed and leaves a readable file; two processes writing the same file at once both succeed (WAL + busy timeout).

Where: --db PATH, else $TCPERF_DB, else $XDG_DATA_HOME/tcperf/results.db (~/.local/share/tcperf/results.db).

    store = Store.open()                  # default path
    run_id = store.start_run("bench", "tcperf bench ...", env)
    store.add_result(run_id, {"op": "gemm", "precision": "bf16", "status": "ok", "median_ms": 1.4, ...})
    store.finish_run(run_id)
"""
from __future__ import annotations

import json
import os
import sqlite3
import time
from contextlib import closing
from pathlib import Path

from .errors import UserError

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,              -- run | bench | ceilings | models | advise | lab
    command TEXT NOT NULL,           -- the command line as typed
    tcperf_version TEXT NOT NULL,
    device TEXT NOT NULL,            -- 'NVIDIA H200' or the CPU model
    env TEXT NOT NULL,               -- JSON: tcperf.env.collect()
    started REAL NOT NULL,           -- unix time
    finished REAL,                   -- NULL while running or when killed
    status TEXT NOT NULL DEFAULT 'running',   -- running | done | interrupted | failed
    warnings TEXT NOT NULL DEFAULT '[]'       -- JSON list of run-level warnings
);
CREATE TABLE IF NOT EXISTS results (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id INTEGER NOT NULL REFERENCES runs(id),
    op TEXT NOT NULL,                -- gemm | conv | ... | model | lab.vector_add | advise.verdict
    suite TEXT NOT NULL DEFAULT '',
    case_key TEXT NOT NULL,          -- identity for comparisons: op|shape|precision
    shape TEXT NOT NULL,             -- JSON of the op's parameters
    precision TEXT NOT NULL,
    status TEXT NOT NULL,            -- ok | wrong | skipped | error | oom | timeout
    error REAL,                      -- relative-norm error against float64
    tolerance REAL,
    median_ms REAL, iqr_ms REAL, min_ms REAL, mean_ms REAL, n INTEGER,
    samples TEXT NOT NULL DEFAULT '[]',       -- JSON list of raw samples, ms
    flops REAL, bytes REAL, tflops REAL, gbps REAL,
    metrics TEXT NOT NULL DEFAULT '{}',       -- JSON: everything else (verdict, kernels, throughput, ...)
    warnings TEXT NOT NULL DEFAULT '[]',
    message TEXT NOT NULL DEFAULT '',         -- why skipped / wrong / failed
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS results_run ON results(run_id);
"""

RESULT_COLUMNS = ("op", "suite", "case_key", "shape", "precision", "status", "error", "tolerance",
                  "median_ms", "iqr_ms", "min_ms", "mean_ms", "n", "samples", "flops", "bytes", "tflops",
                  "gbps", "metrics", "warnings", "message")
_JSON_COLUMNS = {"shape": "{}", "samples": "[]", "metrics": "{}", "warnings": "[]", "env": "{}"}


def default_path() -> Path:
    if os.environ.get("TCPERF_DB"):
        return Path(os.environ["TCPERF_DB"])
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "tcperf" / "results.db"


def case_key(op: str, shape: dict, precision: str) -> str:
    """The identity two runs' results are paired by: 'gemm|k=8192,m=8192,n=8192|bf16'."""
    return f"{op}|{','.join(f'{k}={shape[k]}' for k in sorted(shape))}|{precision}"


class Store:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with closing(self._connect()) as db, db:
                db.executescript(_SCHEMA)
                self._check_version(db)
        except sqlite3.DatabaseError as e:
            raise UserError(f"cannot use results store {self.path}: {e}") from None

    @classmethod
    def open(cls, path: str | os.PathLike | None = None) -> "Store":
        return cls(path or default_path())

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30)
        db.row_factory = sqlite3.Row
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA busy_timeout=30000")
        return db

    def _check_version(self, db: sqlite3.Connection) -> None:
        row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if row is None:
            db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        elif int(row[0]) > SCHEMA_VERSION:
            raise UserError(f"{self.path} has schema {row[0]}, newer than this tcperf's {SCHEMA_VERSION}; upgrade tcperf")

    def _write(self, sql: str, params) -> int:
        with closing(self._connect()) as db, db:      # `with db`: one transaction, committed or rolled back
            return db.execute(sql, params).lastrowid

    def _read(self, sql: str, params=()) -> list[dict]:
        with closing(self._connect()) as db:
            return [_decode(dict(r)) for r in db.execute(sql, params).fetchall()]

    # --- runs ---------------------------------------------------------------------------------------------------
    def start_run(self, kind: str, command: str, env: dict) -> int:
        from . import __version__
        device = env.get("gpu", {}).get("name") or env.get("cpu", {}).get("model", "unknown")
        return self._write(
            "INSERT INTO runs (kind, command, tcperf_version, device, env, started) VALUES (?,?,?,?,?,?)",
            (kind, command, __version__, device, json.dumps(env, default=str), time.time()))

    def finish_run(self, run_id: int, status: str = "done", warnings: list[str] = ()) -> None:
        self._write("UPDATE runs SET finished=?, status=?, warnings=? WHERE id=?",
                    (time.time(), status, json.dumps(list(warnings)), run_id))

    def runs(self, limit: int = 50) -> list[dict]:
        return self._read("SELECT runs.*, (SELECT COUNT(*) FROM results WHERE run_id=runs.id) AS n_results "
                          "FROM runs ORDER BY id DESC LIMIT ?", (limit,))

    def run(self, run_id: int | None = None) -> dict:
        """One run (the latest when run_id is None); UserError when there is none."""
        if run_id is None:
            rows = self._read("SELECT * FROM runs ORDER BY id DESC LIMIT 1")
        else:
            rows = self._read("SELECT * FROM runs WHERE id=?", (run_id,))
        if not rows:
            raise UserError(f"no run {run_id} in {self.path}" if run_id is not None else f"no runs yet in {self.path}")
        return rows[0]

    # --- results ------------------------------------------------------------------------------------------------
    def add_result(self, run_id: int, result: dict) -> int:
        row = {c: result.get(c) for c in RESULT_COLUMNS}
        row["shape"] = row["shape"] or {}
        row["case_key"] = row["case_key"] or case_key(row["op"], row["shape"], row["precision"])
        row["suite"] = row["suite"] or ""
        row["message"] = row["message"] or ""
        for col, empty in _JSON_COLUMNS.items():
            if col in row:
                row[col] = json.dumps(row[col] if row[col] is not None else json.loads(empty), default=str)
        cols = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        return self._write(f"INSERT INTO results (run_id, created, {cols}) VALUES (?, ?, {marks})",
                           (run_id, time.time(), *row.values()))

    def results(self, run_id: int) -> list[dict]:
        return self._read("SELECT * FROM results WHERE run_id=? ORDER BY id", (run_id,))

    def ceilings(self, device: str) -> dict:
        """This device's measured ceilings from `tcperf ceilings` runs: per precision, the best figure of the
        latest run that measured it, {precision: TFLOPS (TOPS for int8), "bandwidth": GB/s}; {} when none was."""
        rows = self._read("SELECT results.run_id, results.precision, results.tflops, results.gbps FROM results "
                          "JOIN runs ON runs.id = results.run_id WHERE runs.kind = 'ceilings' AND runs.device = ? "
                          "AND results.op = 'ceiling' AND results.status = 'ok' ORDER BY results.run_id DESC",
                          (device,))
        latest: dict = {}
        out: dict = {}
        for r in rows:
            value = r["gbps"] if r["precision"] == "bandwidth" else r["tflops"]
            if not value or latest.setdefault(r["precision"], r["run_id"]) != r["run_id"]:
                continue
            out[r["precision"]] = max(value, out.get(r["precision"], 0.0))
        return out


def _decode(row: dict) -> dict:
    for col in _JSON_COLUMNS:
        if col in row and isinstance(row[col], str):
            row[col] = json.loads(row[col])
    return row
