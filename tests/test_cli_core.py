"""The core commands end to end: run (CPU quick suite), env, show, runs, export, bad input, and a command that
cannot load."""
import csv
import importlib
import io
import json
import os
import re
import subprocess
import sys
import time

import pytest

from conftest import commands_in_one_process
from tcperf.cli import COMMANDS, build_parser, main
from tcperf.commands.show import time_spent
from tcperf.store import Store


def tcperf(*args, db=None, env=None):
    """Run the real console entry point in a fresh process; returns (exit code, stdout, stderr)."""
    cmd = [sys.executable, "-m", "tcperf", *args] + (["--db", db] if db else [])
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})})
    return p.returncode, p.stdout, p.stderr


BAD_INPUT = [
    (["run", "--device", "tpu"], "unknown device 'tpu'; choose from: cpu, cuda, cuda:N"),
    (["run", "--timeout", "soon"], "argument --timeout: give a finite number above 0, not 'soon'"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    (["show", "42"], "no run 42"),
    (["export", "1", "--format", "xml"], "unknown format 'xml'; choose from: json, csv"),
]
CUDA_WITHOUT_GPU = ["run", "--device", "cuda:0"]


@pytest.fixture(scope="module")
def refused(tmp_path_factory):
    """The bad command lines below and `run --device cuda:0`, each as main() runs it for `python -m tcperf`, all in
    one fresh process (conftest.commands_in_one_process): {argv: (exit code, stdout, stderr)}."""
    db = str(tmp_path_factory.mktemp("refused") / "results.db")
    lines = [a for a, _ in BAD_INPUT] + [CUDA_WITHOUT_GPU]
    ran = commands_in_one_process([args + (["--db", db] if args[0] in ("run", "show", "export") else [])
                                   for args in lines])
    return {tuple(args): result for args, result in zip(lines, ran)}


@pytest.mark.parametrize("args,expect", BAD_INPUT)
def test_bad_input_is_one_line_and_exit_2(args, expect, refused):
    code, out, err = refused[tuple(args)]
    assert code == 2
    assert expect in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_cuda_device_without_gpu_is_a_clear_error(refused):
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    code, _, err = refused[tuple(CUDA_WITHOUT_GPU)]
    assert code == 2 and "no CUDA GPU is visible" in err


def test_env_json_lists_precisions_with_reasons(capsys):
    assert main(["env", "--device", "cpu", "--json"]) == 0
    env = json.loads(capsys.readouterr().out)
    assert env["precisions"]["fp32"] is None and "CUDA GPU" in env["precisions"]["fp8"]
    assert env["libraries"]["torch"] and env["cpu"]["cores"] >= 1


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    """One real `tcperf run` on the CPU, the README's main command as typed in a 120-column terminal, shared by the
    tests below (10-20 s on 2 cores); its wall time last."""
    db = str(tmp_path_factory.mktemp("run") / "results.db")
    t0 = time.perf_counter()
    code, out, err = tcperf("run", "--device", "cpu", db=db, env={"COLUMNS": "120"})
    return code, out, err, db, time.perf_counter() - t0


def test_run_on_cpu_measures_the_quick_suite(cpu_run, capsys):
    code, out, err, db, wall = cpu_run
    with capsys.disabled():
        print(f"\n`tcperf run` on this CPU: {wall:.1f} s wall ({os.cpu_count()} cores)")
    assert code == 0, err
    assert err.splitlines()[0].startswith("No CUDA GPU found")
    s = Store(db)
    run = s.run()
    results = s.results(run["id"])
    assert run["kind"] == "run" and run["status"] == "done"
    assert {r["precision"] for r in results} == {"fp32", "bf16", "fp64"}
    assert {r["op"] for r in results} >= {"gemm", "conv", "attention", "copy"}
    bad = [(r["op"], r["precision"], r["message"]) for r in results if r["status"] != "ok"]
    assert not bad
    assert all(r["error"] <= r["tolerance"] and r["median_ms"] > 0 for r in results)
    assert "quick" in out or "gemm" in out


def test_run_on_cpu_prints_a_table_of_120_columns_and_no_ceiling_it_did_not_measure(cpu_run):
    """Issue 58: on a CPU the run's own GEMMs are no ceiling (none stored here: no '% ceiling'); each case timed
    twice, one row a case; piped without COLUMNS, `show` fits 120 columns too."""
    code, out, err, db, wall = cpu_run
    assert max(len(line) for line in out.splitlines()) <= 120 and "…" not in out
    flat = " ".join(out.split())
    assert "% ceiling: none for bf16, fp32, fp64 on this CPU until `tcperf ceilings` measures them" in flat
    header = next(line for line in out.splitlines() if "case" in line)
    assert "status" not in header and "% ceiling" not in header and not re.search(r"\d%", out.split("note")[0])
    assert "worker start-up: imports" in out and "cases: prepare" in out
    s = Store(db)
    results = s.results(s.run()["id"])
    assert len(results) == 2 * len({r["case_key"] for r in results})
    assert sum(line.startswith("│ gemm 512x512x512") for line in out.splitlines()) == 3     # fp32, bf16, fp64
    piped = subprocess.run([sys.executable, "-m", "tcperf", "show", "--db", db], capture_output=True, text=True,
                           timeout=300, env={k: v for k, v in os.environ.items() if k != "COLUMNS"})
    assert piped.returncode == 0 and max(map(len, piped.stdout.splitlines())) <= 120


def test_run_says_where_its_time_went(cpu_run):
    code, out, err, db, wall = cpu_run
    s = Store(db)
    run = s.run()
    spent = time_spent(run, s.results(run["id"]))
    assert list(spent) == ["start-up", "fp32", "bf16", "fp64", "end", "total"]
    assert all(v >= 0 for v in spent.values()) and spent["start-up"] > 0
    assert sum(v for k, v in spent.items() if k != "total") == pytest.approx(spent["total"])
    assert f"time: {spent['total']:.1f} s = start-up" in out


def test_show_runs_and_export(cpu_run, capsys):
    db = cpu_run[3]
    assert main(["show", "--db", db]) == 0
    assert "gemm" in capsys.readouterr().out
    assert main(["runs", "--db", db, "--json"]) == 0
    [run] = json.loads(capsys.readouterr().out)
    assert run["kind"] == "run" and run["n_results"] > 10
    assert main(["export", str(run["id"]), "--format", "json", "--db", db]) == 0
    exported = json.loads(capsys.readouterr().out)
    assert len(exported["results"]) == run["n_results"]
    assert main(["export", str(run["id"]), "--format", "csv", "--db", db]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == run["n_results"] and rows[0]["precision"]


def test_every_command_loads_and_a_broken_one_says_why(monkeypatch, capsys):
    for module, _ in COMMANDS.values():
        importlib.import_module(module)          # a command whose module fails to import fails here, loudly
    monkeypatch.setitem(COMMANDS, "broken", ("tcperf.commands.no_such_module", "a command that cannot load"))
    assert "broken" in build_parser().format_help()                     # still listed
    assert main(["broken", "--any", "thing"]) == 2 and main(["broken"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == 2 * [
        "tcperf: broken is unavailable: importing tcperf.commands.no_such_module failed: "
        "No module named 'tcperf.commands.no_such_module'"]
    assert main(["env", "--device", "cpu", "--json"]) == 0                # the others work


def test_help_lists_every_command_without_importing_them():
    """`tcperf --help` reads the listing from COMMANDS alone (it took 3.6 s importing every command, torch with
    them); each command's own arguments load when it runs."""
    import subprocess
    import sys
    code = ("import sys; from tcperf.cli import build_parser; build_parser(only='').format_help(); "
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('tcperf.commands.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    text = build_parser(only="").format_help()
    assert all(name in text for name in COMMANDS) and "the quick suite on this device" in text


def test_usable_cores_are_the_affinity_a_run_was_given():
    """Two advisors side by side on one host, each under `taskset` with its own block of cores, size their workers to
    their own block: the count is the process's CPU affinity, and the environment stores it beside the host's."""
    import torch
    from tcperf import env
    from tcperf.advisor.search import default_jobs
    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no CPU affinity on this platform")
    mine = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(mine)})
        assert env.usable_cores() == 1
        assert default_jobs(torch.device("cuda")) == 1
        assert env.collect("cpu")["cpu"]["cores"] == 1
    finally:
        os.sched_setaffinity(0, mine)
    assert env.usable_cores() == len(mine) and env.collect("cpu")["cpu"]["host_cores"] == os.cpu_count()
