"""The results store: round trips, durability under SIGKILL and Ctrl-C, and concurrent writers."""
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from tcperf.errors import UserError
from tcperf.store import SCHEMA_VERSION, Store, case_key

ENV = {"cpu": {"model": "test cpu"}}


def test_round_trip(db_path):
    s = Store(db_path)
    run = s.start_run("bench", "tcperf bench x", ENV)
    s.add_result(run, {"op": "gemm", "shape": {"m": 2, "n": 3, "k": 4}, "precision": "bf16", "status": "ok",
                       "median_ms": 1.5, "samples": [1.4, 1.5, 1.6], "metrics": {"label": "2x3x4"}})
    s.finish_run(run, warnings=["unstable"])
    [r] = s.results(run)
    assert r["shape"] == {"m": 2, "n": 3, "k": 4} and r["samples"] == [1.4, 1.5, 1.6]
    assert r["case_key"] == case_key("gemm", {"k": 4, "m": 2, "n": 3}, "bf16")
    got = s.run()
    assert got["id"] == run and got["status"] == "done" and got["warnings"] == ["unstable"]
    assert got["env"] == ENV and got["device"] == "test cpu"


def test_missing_run_is_a_user_error(db_path):
    s = Store(db_path)
    with pytest.raises(UserError, match="no runs yet"):
        s.run()
    with pytest.raises(UserError, match="no run 7"):
        s.run(7)


def test_newer_schema_is_refused(db_path):
    Store(db_path)
    with sqlite3.connect(db_path) as db:
        db.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION + 1),))
    with pytest.raises(UserError, match="newer than this tcperf"):
        Store(db_path)


def test_a_file_that_is_not_a_database_is_a_user_error(tmp_path):
    bad = tmp_path / "bad.db"
    bad.write_text("this is not sqlite " * 100)
    with pytest.raises(UserError, match="cannot use results store"):
        Store(bad)


WRITER = textwrap.dedent("""
    import sys
    from tcperf.store import Store
    s = Store(sys.argv[1])
    run = s.start_run("bench", "writer", {"cpu": {"model": "w"}})
    for i in range(int(sys.argv[2])):
        s.add_result(run, {"op": "gemm", "shape": {"i": i}, "precision": "fp32", "status": "ok", "median_ms": 1.0})
    s.finish_run(run)
""")


def test_two_concurrent_writers_both_succeed(db_path):
    Store(db_path)
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, db_path, "150"]) for _ in range(2)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    s = Store(db_path)
    runs = s.runs()
    assert len(runs) == 2 and all(r["n_results"] == 150 and r["status"] == "done" for r in runs)


MEASURER = textwrap.dedent("""
    import sys, torch
    sys.path.insert(0, sys.argv[2])
    from tcperf.store import Store
    from tcperf.runner import TimingConfig, run_cases
    s = Store(sys.argv[1])
    run = s.start_run("bench", "measurer", {"cpu": {"model": "m"}})
    cases = [{"op": "fake_ops:GOOD", "shape": {"n": 1000 + i}, "precision": "fp32"} for i in range(200)]
    try:
        run_cases(cases, torch.device("cpu"), timing=TimingConfig(warmup_ms=1, rep_ms=20),
                  on_result=lambda r: s.add_result(run, r))
        s.finish_run(run)
    except KeyboardInterrupt:
        s.finish_run(run, "interrupted")
""")


def _start_measuring(db_path) -> subprocess.Popen:
    tests = os.path.dirname(__file__)
    return subprocess.Popen([sys.executable, "-c", MEASURER, db_path, tests], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _wait_for_results(db_path, n, timeout=90):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with sqlite3.connect(db_path, timeout=5) as db:
                if db.execute("SELECT COUNT(*) FROM results").fetchone()[0] >= n:
                    return
        except sqlite3.OperationalError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"fewer than {n} results after {timeout} s")


@pytest.mark.parametrize("sig,status", [(signal.SIGKILL, "running"), (signal.SIGINT, "interrupted")])
def test_killed_run_keeps_every_finished_case(db_path, sig, status):
    Store(db_path)
    proc = _start_measuring(db_path)
    _wait_for_results(db_path, 5)
    os.killpg(proc.pid, sig)            # the parent and its worker, as a terminal's Ctrl-C or a kill -9 would
    proc.wait(timeout=60)
    s = Store(db_path)                  # still opens, schema intact
    with sqlite3.connect(db_path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    run = s.run()
    results = s.results(run["id"])
    assert len(results) >= 5 and all(r["status"] == "ok" and r["median_ms"] > 0 for r in results)
    assert run["status"] == status
