"""A shared store on a real PostgreSQL server (pgserver.py): push, reading commands that read the same on both
back ends, `compare --baseline-db`, `tcperf db upgrade`, passwords masked, and bad input as one line, exit 2."""
import json
import re
import shutil
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

import pgserver
from tcperf.records import Result
from tcperf.cli import main
from tcperf.commands.common import command_line
from tcperf.store import HEAD, SCHEMA_VERSION, Store, migrate

V1_STORE = Path(__file__).parent / "data" / "store-v1.db"     # made by tcperf 0.1: runs 1 3 5 7 11 12
V1_IDS = [1, 3, 5, 7, 11, 12]


@pytest.fixture
def pg():
    """A new, empty database on the session's PostgreSQL server (its URL carries the password)."""
    return pgserver.database_or_skip()


@pytest.fixture
def local(tmp_path):
    """A copy of a store made by tcperf 0.1 (upgraded when first opened)."""
    db = tmp_path / "local.db"
    shutil.copy(V1_STORE, db)
    return str(db)


def tcperf(capsys, *argv) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def pushed(capsys, *argv) -> dict:
    rc, out, err = tcperf(capsys, "push", *argv, "--json")
    assert rc == 0, err
    return json.loads(out)


def test_push_remaps_ids_and_copies_once(capsys, local, pg):
    first = pushed(capsys, "--db", local, "--to", pg)
    assert [(r["run"], r["as"], r["action"]) for r in first["runs"]] == [
        (old, new, "copied") for new, old in enumerate(V1_IDS, start=1)]
    assert "s3cret" not in json.dumps(first) and first["to"].endswith(f"/{pg.rsplit('/', 1)[1]}")
    again = pushed(capsys, "--db", local, "--to", pg)
    assert {r["action"] for r in again["runs"]} == {"already there"}
    remote, here = Store(pg), Store(local)
    assert [r["n_results"] for r in remote.runs()] == [r["n_results"] for r in here.runs()]
    assert sum(r["n_results"] for r in remote.runs()) == 101


def test_a_run_pushed_unfinished_is_completed_by_the_next_push(capsys, local, pg):
    pushed(capsys, "--db", local, "--to", pg, 11)               # run 11 was killed: 'running', 35 results
    here = Store(local)
    here.add_result(11, Result.from_row({"op": "model", "precision": "bf16", "status": "ok", "median_ms": 2.0}))
    here.finish_run(11, "interrupted")
    [again] = pushed(capsys, "--db", local, "--to", pg, 11)["runs"]
    assert again["action"] == "updated" and again["as"] == 1
    [run] = Store(pg).runs()
    assert run["n_results"] == 36 and run["status"] == "interrupted" and run["uid"] == here.run(11)["uid"]


READERS = [("runs", "--json"), ("show", 4, "--json"), ("show", 2), ("export", 1, "--format", "json"),
           ("export", 1, "--format", "csv"), ("export", 3, "--format", "mlperf"), ("export", 2, "--format", "flat-csv"),
           ("compare", 1, 2), ("compare", 3, 4, "--json", "--fail-if-slower", "5%")]


def test_every_reading_command_reads_the_same_on_both_back_ends(capsys, local, pg, tmp_path):
    """The 0.1 store pushed to PostgreSQL, then from there to a new SQLite file: both hold runs 1-6, same ids."""
    copy = str(tmp_path / "copy.db")
    pushed(capsys, "--db", local, "--to", pg)
    pushed(capsys, "--db", pg, "--to", copy)
    for argv in READERS:
        on_pg, on_sqlite = tcperf(capsys, *argv, "--db", pg), tcperf(capsys, *argv, "--db", copy)
        assert on_pg == on_sqlite and on_pg[0] in (0, 1) and on_pg[1], argv
    for db, name in ((pg, "pg.html"), (copy, "sqlite.html")):
        assert tcperf(capsys, "report", 2, 3, 4, "--db", db, "--out", tmp_path / name)[0] == 0
    made = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d")      # the report's own 'made at' minute differs
    assert made.sub("", (tmp_path / "pg.html").read_text()) == made.sub("", (tmp_path / "sqlite.html").read_text())


def test_compare_takes_its_baseline_from_another_store(capsys, local, pg):
    pushed(capsys, "--db", local, "--to", pg, 5, 1)             # local run 1 is run 2 on the server
    rc, across, err = tcperf(capsys, "compare", 2, 1, "--db", local, "--baseline-db", pg, "--json")
    rc_one, within, _ = tcperf(capsys, "compare", 1, 1, "--db", local, "--json")
    assert rc == rc_one == 0, err
    a, b = json.loads(across), json.loads(within)
    assert a["run_a"] == 2 and b["run_a"] == 1 and a["pairs"] == b["pairs"] and a["pairs"]


def test_a_stored_command_line_has_its_password_masked(pg, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["tcperf", "bench", "--db", pg])      # as typed, password and all
    store = Store(pg)
    run = store.run(store.start_run("bench", command_line(), {"cpu": {"model": "c"}}))
    assert pgserver.PASSWORD not in run["command"] and "tcperf:***@127.0.0.1" in run["command"]


def test_an_older_shared_store_waits_for_db_upgrade(capsys, pg):
    from alembic import command
    eng = create_engine(pg)
    with eng.begin() as conn:
        command.upgrade(migrate.config(conn), "0001")          # a store made by a tcperf of schema 1
        conn.execute(text("INSERT INTO runs (kind, command, tcperf_version, device, env, started) "
                          "VALUES ('bench', 'tcperf bench', '0.1.0', 'cpu', '{}', 1.0)"))
    eng.dispose()
    rc, _, err = tcperf(capsys, "runs", "--db", pg)
    assert rc == 2 and "older than this tcperf's" in err and "tcperf db upgrade" in err
    rc, out, _ = tcperf(capsys, "db", "upgrade", "--db", pg)
    assert rc == 0 and f"schema 1 -> {SCHEMA_VERSION}" in out and pgserver.PASSWORD not in out
    assert Store(pg).upgraded == (HEAD, HEAD) and len(Store(pg).run()["uid"]) == 32
    rc, out, _ = tcperf(capsys, "db", "status", "--db", pg)
    assert rc == 0 and f"(postgresql): schema {SCHEMA_VERSION}, 1 run(s)" in out


def _closed_port() -> int:
    return pgserver._free_port()         # free now: nothing listens there


BAD = {
    "unreachable server": (lambda pg: f"postgresql+psycopg://tcperf:s3cret-pw@127.0.0.1:{_closed_port()}/x",
                           "cannot use results store"),
    "wrong password": (lambda pg: pg.replace(pgserver.PASSWORD, "wrong-pw"), "password authentication failed"),
    "no such database": (lambda pg: pg.rsplit("/", 1)[0] + "/nosuchdb", 'database "nosuchdb" does not exist'),
    "unsupported dialect": (lambda pg: "mysql://ann:s3cret-pw@127.0.0.1/tcperf", "unsupported database 'mysql'"),
    "other driver": (lambda pg: pg.replace("+psycopg", "+asyncpg"), "unsupported database"),
    "not a URL": (lambda pg: "postgresql://ann:s3cret-pw@127.0.0.1:notaport/db", "not a database URL"),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_store_is_one_line_exit_2_and_nothing_written(capsys, pg, local, case):
    url, expect = BAD[case][0](pg), BAD[case][1]
    for argv in (("runs", "--db", url), ("push", "--db", local, "--to", url), ("compare", 1, 3, "--db", local,
                                                                               "--baseline-db", url)):
        rc, out, err = tcperf(capsys, *argv)
        assert rc == 2 and expect in err and err.count("\n") == 1 and err.startswith("tcperf: "), (argv, err)
        assert "s3cret" not in err and "wrong-pw" not in err
    assert Store(pg).run_ids() == []


def test_a_newer_shared_store_is_refused_and_left_alone(capsys, pg, local):
    Store(pg)
    eng = create_engine(pg)
    with eng.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0007'"))
    rc, _, err = tcperf(capsys, "push", "--db", local, "--to", pg)
    assert rc == 2 and f"schema 7, newer than this tcperf's {SCHEMA_VERSION}; upgrade tcperf" in err
    assert err.count("\n") == 1
    with eng.connect() as conn:
        assert conn.scalar(text("SELECT count(*) FROM runs")) == 0
        assert conn.scalar(text("SELECT version_num FROM alembic_version")) == "0007"
    eng.dispose()
    assert tcperf(capsys, "db", "upgrade", "--db", pg)[0] == 2


def test_without_psycopg_a_postgres_url_says_what_to_install(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)
    rc, _, err = tcperf(capsys, "runs", "--db", "postgresql://ann@127.0.0.1/tcperf")
    assert rc == 2 and "pip install 'tcperf[postgres]'" in err
