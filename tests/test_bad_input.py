"""Bad input (issue 34): one line on stderr, exit status 2, never a traceback; a command that never started stores
no run, and nothing already stored is lost. Every test starts from a real SQLite store holding one run."""
import contextlib
import functools
import json
import math
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import types

import pytest
import torch

import tcperf

from conftest import commands_in_one_process, commands_side_by_side
from tcperf.records import Result
from tcperf.advisor import api
from tcperf.cli import main
from tcperf.errors import UserError
from tcperf.store import Store


@pytest.fixture
def stored(db_path):
    return one_run_store(db_path)


def one_run_store(db_path) -> str:
    """A store holding one finished run of one result."""
    store = Store.open(db_path)
    run_id = store.start_run("bench", "tcperf bench --suite quick", {"cpu": {"model": "test cpu"}})
    store.add_result(run_id, Result.from_row({"op": "gemm", "precision": "fp32", "status": "ok", "shape": {"m": 8, "n": 8, "k": 8},
                              "median_ms": 1.0, "iqr_ms": 0.1, "metrics": {"iters": 3}}))
    store.finish_run(run_id)
    return db_path


def rows(db_path) -> tuple[list, list]:
    """Every stored row, read past tcperf: what must not change."""
    with contextlib.closing(sqlite3.connect(db_path)) as conn:       # closed: no -wal or -shm file left behind
        return (conn.execute("SELECT * FROM runs ORDER BY id").fetchall(),
                conn.execute("SELECT * FROM results ORDER BY id").fetchall())


def one_line(capsys, rc: int, *words: str) -> str:
    """The single stderr line of a refused command, checked for exit 2 and the words it must name."""
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("tcperf: "), (rc, err)
    assert all(w in err[0] for w in words), err[0]
    return err[0]


def refused(ran: tuple[int, str, str], *words: str) -> str:
    """one_line() for a command run in a process of its own: (exit code, stdout, stderr)."""
    code, _, err = ran
    err = err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("tcperf: "), (code, err)
    assert all(w in err[0] for w in words), err[0]
    return err[0]


@functools.cache
def _unshare_works() -> bool:
    with tempfile.TemporaryDirectory() as folder:
        try:
            return subprocess.run(["unshare", "-rm", "sh", "-c", _RO_MOUNT, folder], capture_output=True,
                                  timeout=60).returncode == 0
        except (OSError, subprocess.SubprocessError):
            return False


_RO_MOUNT = 'mount --bind -o ro "$0" "$0" && exec "$@"'      # $0: the folder; "$@": the command, if any
# each folder before "--" on a read-only mount of its own, then the command after it
_RO_MOUNTS = 'while [ "$1" != -- ]; do mount --bind -o ro "$1" "$1" || exit 1; shift; done; shift; exec "$@"'


def read_only(folders: list, argvs: list[list[str]]) -> list[tuple[int, str, str]]:
    """Each `tcperf argv` in turn, in one fresh process that sees each of `folders` as on a read-only mount
    (conftest.commands_in_one_process: a process a command cost 2-3 s on 2 cores, importing torch): [(exit code,
    stdout, stderr)]. Root ignores chmod, so read-only bind mounts in a user and mount namespace of the process's
    own (unshare); without unshare, chmod (not for root: skipped)."""
    if _unshare_works():
        prefix = ("unshare", "-rm", "sh", "-c", _RO_MOUNTS, "sh", *map(str, folders), "--")
        return commands_in_one_process(argvs, prefix=prefix)
    if os.geteuid() == 0:
        pytest.skip("root ignores chmod, and unshare cannot make a read-only mount here")
    paths = [p for folder in folders for p in (folder, *folder.iterdir())]
    modes = {p: p.stat().st_mode for p in paths}
    try:
        for p in paths:
            p.chmod(0o555 if p.is_dir() else 0o444)
        return commands_in_one_process(argvs)
    finally:
        for p, mode in modes.items():
            p.chmod(mode)


# --- numeric options: refused at parsing, before a run starts ----------------------------------------------------
COMMANDS = {                       # a command line that would start measuring if its options were good
    "run": ["run"], "bench": ["bench", "--suite", "quick"], "models": ["models"], "ceilings": ["ceilings"],
    "lab": ["lab"], "generate": ["generate"], "comm": ["comm"], "advise": ["advise", "model.py:factory"],
}
OPTIONS = {"--timeout": tuple(COMMANDS), "--rep-ms": ("run", "bench", "models", "ceilings", "lab", "generate", "comm"),
           "--budget": ("advise",), "--tolerance": ("advise",), "--factor": ("comm",)}


@pytest.mark.parametrize("value", ["-5", "0", "nan", "inf", "soon"])
@pytest.mark.parametrize("command, option", [(c, o) for o, cs in OPTIONS.items() for c in cs])
def test_a_bad_number_is_one_line_and_stores_nothing(stored, capsys, command, option, value):
    before = rows(stored)
    rc = main([*COMMANDS[command], option, value, "--device", "cpu", "--db", stored])
    one_line(capsys, rc, f"{command}: argument ", option, "finite number above 0", repr(value))
    assert rows(stored) == before


@pytest.mark.parametrize("option", ["--max-minutes", "--usd-per-hour", "--epochs"])
def test_train_to_target_budgets_are_checked_the_same_way(stored, capsys, option):
    before = rows(stored)
    one_line(capsys, main(["train-to-target", option, "nan", "--device", "cpu", "--db", stored]), option, "'nan'")
    assert rows(stored) == before


@pytest.mark.parametrize("value", [math.inf, math.nan, 0, -1])
@pytest.mark.parametrize("option", ["timeout", "budget", "tolerance"])
def test_the_python_api_refuses_the_same_numbers(option, value):
    with pytest.raises(UserError, match=option):
        api.check_args("infer", **{"tolerance": None, "recipes": None, option: value})


# --- export --out and report --out: one way to write a file ------------------------------------------------------
@pytest.mark.parametrize("command", ["export", "report"])
def test_a_missing_folder_is_made_and_said_so(stored, tmp_path, capsys, command):
    """Issue 58: `report --out /nonexistent/dir/r.html` made the folders without a word; a typo in --out should not
    pass unseen. An existing folder says nothing."""
    for out, said in ((tmp_path / "new" / "deeper" / "run.out", True), (tmp_path / "new" / "again.out", False)):
        assert main([command, "1", "--out", str(out), "--db", stored]) == 0
        err = capsys.readouterr().err
        assert out.stat().st_size > 0 and (f"made the folder {out.parent} for {out.name}" in err) == said, err


@pytest.mark.parametrize("command", ["export", "report"])
@pytest.mark.parametrize("where, words", [("folder", "that is a folder, not a file"),
                                          ("file/run.out", "file is a file, not a folder"),
                                          ("file/sub/run.out", "file is a file, not a folder")])
def test_an_out_that_cannot_be_written_is_one_line(stored, tmp_path, capsys, command, where, words):
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("kept")
    before = rows(stored)
    out = tmp_path / where
    one_line(capsys, main([command, "1", "--out", str(out), "--db", stored]), f"cannot write {out}: ", words)
    assert rows(stored) == before and (tmp_path / "file").read_text() == "kept"
    assert list((tmp_path / "folder").iterdir()) == []


# --- where the store is ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", [["runs"], ["show"], ["export", "1"], ["bench", "--suite", "quick", "--device", "cpu"]])
@pytest.mark.parametrize("where", ["file/results.db", "file/sub/results.db"])
def test_a_store_whose_folder_is_a_file_is_one_line(tmp_path, capsys, command, where):
    (tmp_path / "file").write_text("kept")
    db = tmp_path / where
    one_line(capsys, main([*command, "--db", str(db)]), f"cannot use results store {db}: ",
             f"{tmp_path / 'file'} is a file, not a folder")
    assert sorted(tmp_path.iterdir()) == [tmp_path / "file"] and (tmp_path / "file").read_text() == "kept"


# --- a read-only folder: every command below in one process that sees each test's folder read-only ----------------
READS = [(["runs", "--json"], '"kind": "bench"'), (["show"], "run 1 · bench · test cpu"),
         (["export", "1"], '"case_key": "gemm|k=8,m=8,n=8|fp32"')]
WRITES = [["bench", "--suite", "quick", "--device", "cpu", "--limit", "1"],
          ["advise", "MODEL:factory", "--device", "cpu"]]


@pytest.fixture(scope="module")
def read_only_runs(tmp_path_factory):
    """The commands of the tests below, each on a folder of its own that it sees read-only, all in one fresh process
    (read_only): {name: SimpleNamespace(folder, ran=(exit code, stdout, stderr), before=the store's rows, files=the
    folder's files before)}. Each folder but the export's and the new store's holds a copy of the one-run store;
    `in_use`: a writer elsewhere holds the copy open while the command runs, so its -wal and -shm files are there and
    SQLite opens it read-only by itself; else tcperf opens it read-only."""
    base = tmp_path_factory.mktemp("read_only")
    stored = one_run_store(str(base / "results.db"))
    cases = {}

    def case(name, argv, copy=True):
        folder = base / name / "ro"
        folder.mkdir(parents=True)
        if copy:
            shutil.copy(stored, folder / "results.db")
        tokens = {"DB": str(folder / "results.db"), "MODEL:factory": f"{base / name / 'model.py'}:factory"}
        argv = [tokens.get(a, a) for a in argv]
        cases[name] = types.SimpleNamespace(folder=folder, db=folder / "results.db", argv=argv)
    case("export", ["export", "1", "--out", str(base / "export" / "ro" / "run.json"), "--db", stored], copy=False)
    case("new-store", ["runs", "--db", str(base / "new-store" / "ro" / "new" / "results.db")], copy=False)
    for i, (command, _) in enumerate(READS):
        case(f"read-{i}", [*command, "--db", "DB"])
    for i, command in enumerate(WRITES):
        for in_use in (False, True):
            case(f"write-{i}-{in_use}", [*command, "--db", "DB"])
            (base / f"write-{i}-{in_use}" / "model.py").write_text(
                "import torch\ndef factory():\n    return torch.nn.Linear(4, 4), torch.randn(2, 4)\n")
    with contextlib.ExitStack() as writers:
        for name, c in cases.items():
            if name.startswith("write-"):
                writer = writers.enter_context(contextlib.closing(sqlite3.connect(c.db)))
                if name.endswith("True"):
                    writer.execute("SELECT count(*) FROM runs").fetchall()
            c.before = rows(c.db) if c.db.exists() else None
            c.files = sorted(c.folder.iterdir())
        ran = read_only([c.folder for c in cases.values()], [c.argv for c in cases.values()])
    for c, r in zip(cases.values(), ran):
        c.ran = r
    return cases


def test_export_to_a_read_only_file_system_is_one_line(read_only_runs):
    c = read_only_runs["export"]
    line = refused(c.ran, f"cannot write {c.folder / 'run.json'}: ")
    assert line.endswith(("Read-only file system", "Permission denied")) and not (c.folder / "run.json").exists()


def test_a_store_whose_folder_cannot_be_made_is_one_line(read_only_runs):
    c = read_only_runs["new-store"]
    line = refused(c.ran, f"cannot use results store {c.folder / 'new' / 'results.db'}: cannot make folder "
                          f"{c.folder / 'new'}: ")
    assert line.endswith(("Read-only file system", "Permission denied")) and list(c.folder.iterdir()) == []


@pytest.mark.parametrize("i, shows", [(i, shows) for i, (_, shows) in enumerate(READS)])
def test_a_read_only_store_is_read(read_only_runs, i, shows):
    c = read_only_runs[f"read-{i}"]
    code, out, err = c.ran
    assert code == 0 and shows in out and "Traceback" not in err, err
    assert rows(c.db) == c.before


@pytest.mark.parametrize("i", range(len(WRITES)))
@pytest.mark.parametrize("in_use", [False, True])
def test_a_read_only_store_refuses_a_write_before_anything_runs(read_only_runs, i, in_use):
    c = read_only_runs[f"write-{i}-{in_use}"]
    refused(c.ran, f"cannot write results store {c.db}: it is read-only here")
    assert rows(c.db) == c.before and len(c.files) == (3 if in_use else 1)


# --- a garbled JSON cell ---------------------------------------------------------------------------------------------
GARBLED = {("results", "metrics"): '{"iters": 3', ("results", "shape"): "[1, 2]", ("results", "warnings"): "nan",
           ("runs", "env"): "not json", ("runs", "warnings"): '{"a": 1}'}
READERS = {"show": ["show"], "show-json": ["show", "--json"], "runs": ["runs"], "runs-json": ["runs", "--json"],
           "json": ["export", "1"], "csv": ["export", "1", "--format", "csv"],
           "flat-csv": ["export", "1", "--format", "flat-csv"], "mlperf": ["export", "1", "--format", "mlperf"],
           "report": ["report", "1", "--out", "OUT"], "compare": ["compare", "1", "1"]}
MARKED_BY = {"results": ("show", "show-json", "json", "csv", "flat-csv", "mlperf"),      # print a result's warnings
             "runs": ("show", "show-json", "runs-json", "json", "mlperf")}               # print a run's warnings


@pytest.mark.parametrize("table, column", list(GARBLED))
@pytest.mark.parametrize("reader", list(READERS))
def test_a_garbled_cell_is_marked_unreadable_and_left_as_it_is(stored, tmp_path, capsys, table, column, reader):
    with contextlib.closing(sqlite3.connect(stored)) as conn, conn:
        conn.execute(f"UPDATE {table} SET {column} = ?", (GARBLED[table, column],))
    before = rows(stored)
    out = tmp_path / "report.html"
    rc = main([str(out) if a == "OUT" else a for a in READERS[reader]] + ["--db", stored])
    shown = capsys.readouterr()
    assert rc == 0 and shown.err == "", shown.err
    text = out.read_text() if reader == "report" else shown.out
    assert f"stored {column} unreadable" in text or reader not in MARKED_BY[table]
    assert rows(stored) == before


# --- advise on a model whose fp32 output is already NaN or inf -----------------------------------------------------
NONFINITE = '''
import torch

class Scaled(torch.nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.lin, self.scale = torch.nn.Linear(4, 4), scale

    def forward(self, x):
        return self.lin(x) * self.scale

def nan():
    return Scaled(float("nan")), torch.randn(2, 4)

def inf():
    return Scaled(float("inf")), torch.randn(2, 4)

def inf_loss():
    return {"model": Scaled(1.0), "inputs": torch.randn(2, 4), "loss_fn": lambda out: out.sum() * float("inf")}
'''


NONFINITE_CASES = [
    ("nan", "infer", "the model's own fp32 output holds NaN/inf (8 of 8 values of output tensor 0)"),
    ("nan", "train", "the model's own fp32 output holds NaN/inf"),
    ("inf", "infer", "the model's own fp32 output holds NaN/inf"),
    ("inf_loss", "train", "loss_fn(outputs) is inf in fp32 itself"),
]


@pytest.fixture(scope="module")
def nonfinite_refused(tmp_path_factory):
    """`tcperf advise nonfinite.py:FACTORY --mode MODE` for each case below, each on a copy of the one-run store, in
    two fresh processes side by side (conftest.commands_side_by_side: one at a time, in this process, 15 s on 2
    cores, a worker importing torch with a core idle): {(factory, mode): (exit status, stdout, stderr, store, its
    rows before)}."""
    folder = tmp_path_factory.mktemp("nonfinite")
    (folder / "nonfinite.py").write_text(NONFINITE)
    stores = {(f, m): one_run_store(str(folder / f"{f}-{m}.db")) for f, m, _ in NONFINITE_CASES}
    before = {case: rows(db) for case, db in stores.items()}
    ran = commands_side_by_side({f"{f}-{m}": ["advise", f"{folder / 'nonfinite.py'}:{f}", "--mode", m, "--device",
                                              "cpu", "--db", stores[f, m]] for f, m in stores})
    return {(f, m): (*ran[f"{f}-{m}"], stores[f, m], before[f, m]) for f, m in stores}


@pytest.mark.parametrize("factory, mode, words", NONFINITE_CASES)
def test_advise_refuses_a_model_whose_fp32_is_not_finite(nonfinite_refused, factory, mode, words):
    *ran, db, before = nonfinite_refused[factory, mode]
    refused(ran, words)
    assert rows(db) == before


def test_the_python_api_refuses_it_too():
    """In this process (isolate=False, 1.4 s against 5 s with a probe worker): the CLI cases above refuse it in a
    worker."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    with torch.no_grad():
        model[0].bias.fill_(float("nan"))
    with pytest.raises(UserError, match="fp32 output holds NaN/inf"):
        tcperf.advise(model, torch.randn(2, 4), device="cpu", recipes=["fp32"], isolate=False)
