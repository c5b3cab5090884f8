"""The results store, on both back ends (a SQLite file and a real PostgreSQL server, see pgserver.py): round
trips, durability under SIGKILL and Ctrl-C, 8 concurrent writers, schema versions and migrations."""
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select, text

import pgserver
from conftest import commands_in_one_process
from tcperf.records import Result
from tcperf.errors import UserError
from tcperf.store import HEAD, SCHEMA_VERSION, Store, case_key, mask, migrate
from tcperf.store.schema import metadata

ENV = {"cpu": {"model": "test cpu"}}
V1_STORE = Path(__file__).parent / "data" / "store-v1.db"     # made by tcperf 0.1's sqlite3 store


@pytest.fixture(params=["sqlite", "postgresql"])
def where(request, db_path):
    """A new, empty store's place: a SQLite path, or a PostgreSQL URL (a fresh database on the test server)."""
    return db_path if request.param == "sqlite" else pgserver.database_or_skip()


def _sql(where: str, statement: str):
    """Run SQL on the store directly, behind tcperf's back."""
    url = where if "://" in where else f"sqlite:///{where}"
    eng = create_engine(url)
    with eng.begin() as conn:
        rows = conn.execute(text(statement)).all() if statement.lstrip().upper().startswith("SELECT") else None
        if rows is None:
            conn.execute(text(statement))
    eng.dispose()
    return rows


def test_round_trip(where):
    s = Store(where)
    run = s.start_run("bench", "tcperf bench x", ENV)
    s.add_result(run, Result.from_row({"op": "gemm", "shape": {"m": 2, "n": 3, "k": 4}, "precision": "bf16", "status": "ok",
                       "median_ms": 1.5, "samples": [1.4, 1.5, 1.6], "metrics": {"label": "2x3x4"}}))
    s.finish_run(run, warnings=["unstable"])
    [r] = s.results(run)
    assert r["shape"] == {"m": 2, "n": 3, "k": 4} and r["samples"] == [1.4, 1.5, 1.6]
    assert r["case_key"] == case_key("gemm", {"k": 4, "m": 2, "n": 3}, "bf16")
    got = s.run()
    assert got["id"] == run and got["status"] == "done" and got["warnings"] == ["unstable"]
    assert got["env"] == ENV and got["device"] == "test cpu"
    [listed] = s.runs()
    assert listed["n_results"] == 1 and listed["uid"] == got["uid"]


def test_ceilings_take_the_latest_run_per_precision(where):
    s = Store(where)
    for tflops in (500.0, 600.0):
        run = s.start_run("ceilings", "tcperf ceilings", {"gpu": {"name": "G"}})
        s.add_result(run, Result.from_row({"op": "ceiling", "precision": "bf16", "status": "ok", "tflops": tflops}))
        s.add_result(run, Result.from_row({"op": "ceiling", "precision": "bandwidth", "status": "ok", "gbps": tflops * 4}))
        s.finish_run(run)
    assert s.ceilings("G") == {"bf16": 600.0, "bandwidth": 2400.0} and s.ceilings("other") == {}


def test_missing_run_is_a_user_error(where):
    s = Store(where)
    with pytest.raises(UserError, match="no runs yet"):
        s.run()
    with pytest.raises(UserError, match="no run 7"):
        s.run(7)


def test_password_is_masked_in_stored_command_and_env(where):
    s = Store(where)
    url = "postgresql+psycopg://ann:hunter2@db.lab:5432/tcperf"
    run = s.start_run("bench", f"tcperf bench --db {url}", {**ENV, "db": url})
    got = s.run(run)
    assert "hunter2" not in got["command"] + str(got["env"]) and "ann:***@db.lab" in got["command"]
    assert mask("x sqlite:///a.db postgresql://ann@h/db") == "x sqlite:///a.db postgresql://ann@h/db"
    assert mask("postgresql://ann:pa/ss@h/db") == "postgresql://ann:***@h/db"


def test_newer_schema_is_refused_and_nothing_written(where):
    Store(where)
    _sql(where, f"UPDATE meta SET value='{SCHEMA_VERSION + 1}' WHERE key='schema_version'")
    with pytest.raises(UserError, match="newer than this tcperf"):
        Store(where)
    _sql(where, f"UPDATE meta SET value='{SCHEMA_VERSION}' WHERE key='schema_version'")
    _sql(where, "UPDATE alembic_version SET version_num='0099'")
    with pytest.raises(UserError, match="schema 99, newer than this tcperf"):
        Store(where)
    assert _sql(where, "SELECT version_num FROM alembic_version") == [("0099",)]


def test_migrations_make_exactly_the_schema(where):
    """Alembic from an empty database to the head gives the tables schema.py makes (what a new store gets)."""
    from alembic import command
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext
    from alembic.script import ScriptDirectory
    url = where if "://" in where else f"sqlite:///{where}"
    eng = create_engine(url)
    with eng.begin() as conn:
        command.upgrade(migrate.config(conn), "head")
    with eng.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), metadata) == []
        assert conn.scalar(text("SELECT value FROM meta")) == str(SCHEMA_VERSION)
    eng.dispose()
    assert ScriptDirectory.from_config(migrate.config()).get_current_head() == HEAD
    assert Store(where).upgraded == (HEAD, HEAD)


def test_a_tcperf_01_store_opens_upgraded(tmp_path):
    db = tmp_path / "old.db"
    shutil.copy(V1_STORE, db)
    with sqlite3.connect(db) as old:
        before = old.execute("SELECT * FROM results ORDER BY id").fetchall()
        ids = [r[0] for r in old.execute("SELECT id FROM runs ORDER BY id")]
    s = Store(db)
    assert s.upgraded == ("0001", HEAD)
    assert [r["id"] for r in s.runs()][::-1] == ids and all(len(r["uid"]) == 32 for r in s.runs())
    with sqlite3.connect(db) as new:
        assert new.execute("SELECT * FROM results ORDER BY id").fetchall() == before
        assert new.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    run = s.start_run("bench", "tcperf bench", ENV)
    assert run == max(ids) + 1 and Store(db).upgraded == (HEAD, HEAD)


class Contended:
    """A sqlite3 connection whose switch to WAL meets another process making the same new file: 'locked' twice."""
    def __init__(self, path, failures=2, error="database is locked"):
        self.conn, self.failures, self.error = sqlite3.connect(path), failures, error

    def execute(self, sql):
        if sql == "PRAGMA journal_mode=WAL" and self.failures:
            self.failures -= 1
            raise sqlite3.OperationalError(self.error)
        return self.conn.execute(sql)


def test_switching_a_new_file_to_wal_waits_out_another_process(tmp_path):
    from tcperf.store.location import _wal
    conn = Contended(tmp_path / "new.db")
    _wal(conn)
    assert conn.failures == 0 and conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with pytest.raises(sqlite3.OperationalError, match="disk I/O"):
        _wal(Contended(tmp_path / "other.db", error="disk I/O error"))


def test_a_file_that_is_not_a_database_is_a_user_error(tmp_path):
    bad = tmp_path / "bad.db"
    bad.write_text("this is not sqlite " * 100)
    with pytest.raises(UserError, match="cannot use results store"):
        Store(bad)


WRITER = textwrap.dedent("""
    import sys
    from tcperf.records import Result
    from tcperf.store import Store
    s = Store(sys.argv[1])
    run = s.start_run("bench", "writer", {"cpu": {"model": "w"}})
    for i in range(int(sys.argv[2])):
        s.add_result(run, Result("gemm", {"i": i}, "fp32", median_ms=1.0))
    s.finish_run(run)
""")


def test_eight_concurrent_writers_all_succeed(where):
    """Eight processes open the same new store at once (its tables are made once) and write 40 results each."""
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, where, "40"]) for _ in range(8)]
    assert [p.wait(timeout=120) for p in procs] == [0] * 8
    runs = Store(where).runs()
    assert len(runs) == 8 and all(r["n_results"] == 40 and r["status"] == "done" for r in runs)


MEASURER = textwrap.dedent("""
    import signal, sys, torch
    # Ctrl-C as a terminal delivers it, whatever this process inherited: a background job ignores SIGINT, and a
    # library in the test process may have blocked it (the child inherits both; once, in CI, the run read "done")
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    sys.path.insert(0, sys.argv[2])
    from tcperf.store import Store
    from tcperf.records import Case, Job, TimingConfig
    from tcperf.runner import run_cases
    s = Store(sys.argv[1])
    run = s.start_run("bench", "measurer", {"cpu": {"model": "m"}})
    cases = [Case("fake_ops:GOOD", {"n": 1000 + i}, "fp32") for i in range(200)]
    try:
        run_cases(cases, torch.device("cpu"), Job(TimingConfig(warmup_ms=1, rep_ms=20)),
                  on_result=lambda r: s.add_result(run, r))
        s.finish_run(run)
    except KeyboardInterrupt:
        s.finish_run(run, "interrupted")
""")


def _start_measuring(where) -> subprocess.Popen:
    tests = os.path.dirname(__file__)
    return subprocess.Popen([sys.executable, "-c", MEASURER, where, tests], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _wait_for_results(store: Store, n, timeout=90):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = store.runs(1)
        if runs and runs[0]["n_results"] >= n:
            return
        time.sleep(0.2)
    raise AssertionError(f"fewer than {n} results after {timeout} s")


def test_a_run_whose_writer_lives_reads_running(where):
    s = Store(where)
    run_id = s.start_run("bench", "tcperf bench", {})
    assert s.run(run_id)["status"] == "running" and s.run(run_id)["writer"]["pid"] == os.getpid()


@pytest.mark.parametrize("sig,status", [(signal.SIGKILL, "incomplete"), (signal.SIGINT, "interrupted")])
def test_killed_run_keeps_every_finished_case(where, sig, status):
    if sig == signal.SIGINT and "://" in where:
        pytest.skip("Ctrl-C is handled the same whatever the back end: tested on SQLite")
    store = Store(where)
    proc = _start_measuring(where)
    _wait_for_results(store, 5)
    os.killpg(proc.pid, sig)            # the parent and its worker, as a terminal's Ctrl-C or a kill -9 would
    proc.wait(timeout=60)
    s = Store(where)                    # still opens, schema intact
    if "://" not in where:
        with sqlite3.connect(where) as db:
            assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    run = s.run()
    results = s.results(run["id"])
    assert len(results) >= 5 and all(r["status"] == "ok" and r["median_ms"] > 0 for r in results)
    assert run["status"] == status and (run["finished"] is None) == (status == "incomplete")   # its writer is gone
    assert s.runs(1)[0]["status"] == status


def test_an_empty_file_given_as_the_store_becomes_one_and_says_so(tmp_path):
    """Issue 58: `--db` naming an existing empty file (`touch results.db`, or a wrong path) silently became a new
    store. It still does, with one line on stderr, once; a store already made says nothing."""
    empty = tmp_path / "results.db"
    empty.touch()
    ran = commands_in_one_process([["runs", "--db", str(empty)]] * 2)      # the file says whether it was empty
    for (code, out, err), expected in zip(ran, (f"{empty} was an empty file: made it a new tcperf results store\n",
                                               "")):
        assert code == 0 and err == expected and "0 run(s)" in out
    assert Store(empty).runs() == []
