"""Bad input (issue 34): one line on stderr, exit status 2, never a traceback; a command that never started stores
no run, and nothing already stored is lost. Every test starts from a real SQLite store holding one run."""
import math
import sqlite3

import pytest

from tcperf.advisor import api
from tcperf.cli import main
from tcperf.errors import UserError
from tcperf.store import Store


@pytest.fixture
def stored(db_path):
    """A store holding one finished run of one result."""
    store = Store.open(db_path)
    run_id = store.start_run("bench", "tcperf bench --suite quick", {"cpu": {"model": "test cpu"}})
    store.add_result(run_id, {"op": "gemm", "precision": "fp32", "status": "ok", "shape": {"m": 8, "n": 8, "k": 8},
                              "median_ms": 1.0, "iqr_ms": 0.1, "metrics": {"wall_s": 0.5}})
    store.finish_run(run_id)
    return db_path


def rows(db_path) -> tuple[list, list]:
    """Every stored row, read past tcperf: what must not change."""
    with sqlite3.connect(db_path) as conn:
        return (conn.execute("SELECT * FROM runs ORDER BY id").fetchall(),
                conn.execute("SELECT * FROM results ORDER BY id").fetchall())


def one_line(capsys, rc: int, *words: str) -> str:
    """The single stderr line of a refused command, checked for exit 2 and the words it must name."""
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("tcperf: "), (rc, err)
    assert all(w in err[0] for w in words), err[0]
    return err[0]


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
