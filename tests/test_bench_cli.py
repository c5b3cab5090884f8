"""`tcperf bench`, `suites`, `lint` and `ceilings` end to end on the CPU (tiny --limit), their bad inputs (exit 2,
one line), and Store.ceilings (peaks.measured for a command's device)."""
import json

import pytest
import torch

from tcperf.records import Result
from tcperf import peaks
from tcperf.cli import main
from tcperf.store import Store


def run_json(capsys, *argv):
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_suites_lists_every_suite_with_rows_and_source(capsys):
    items = {s["name"]: s for s in run_json(capsys, "suites", "--json")}
    assert items["deepbench-gemm-train"]["rows"] == 160 and items["deepbench-gemm-train"]["source"] == "DeepBench"
    assert items["deepbench-conv-infer"]["rows"] == 123
    assert {"quick", "llm", "attention", "vit", "resnet50"} <= set(items)
    assert main(["suites"]) == 0 and "deepbench-sparse" in capsys.readouterr().out


def test_bench_gemm_suite_on_cpu_stored_and_sorted(capsys, db_path):
    out = run_json(capsys, "bench", "--suite", "deepbench-gemm-train", "--device", "cpu", "--precision", "fp32,bf16",
                   "--limit", "2", "--rep-ms", "5", "--sort", "tflops", "--json", "--db", db_path)
    results = out["results"]
    assert out["run"]["kind"] == "bench" and out["run"]["status"] == "done"
    assert len(results) == 4 and {r["precision"] for r in results} == {"fp32", "bf16"}
    assert all(r["status"] == "ok" and r["error"] <= r["tolerance"] for r in results)
    assert [r["tflops"] for r in results] == sorted((r["tflops"] for r in results), reverse=True)
    assert {r["shape"]["n"] for r in results} == {16, 32}               # the suite's first two rows
    assert all(r["metrics"]["tags"]["application"] == "DeepSpeech" and r["metrics"]["verdict"] for r in results)
    assert len(Store(db_path).results(out["run"]["id"])) == 4


def test_bench_filters_and_prints_a_table(capsys, db_path):
    argv = ["bench", "--suite", "deepbench-conv-infer", "--device", "cpu", "--precision", "fp32", "--filter",
            "set=device", "--filter", "layout=NHWC", "--limit", "1", "--rep-ms", "5", "--db", db_path]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "conv" in text and "NHWC" in text
    [r] = Store(db_path).results(Store(db_path).run()["id"])
    assert r["status"] == "ok" and r["shape"]["C"] == 64 and r["metrics"]["tags"]["set"] == "device"


def test_filter_matches_tags_by_substring_and_shapes_exactly():
    from tcperf import suites
    from tcperf.commands.bench import select
    cases = suites.load("deepbench-gemm-train", "cpu")
    speaker = select(cases, ["application=speaker"], None)
    assert speaker and all("Speaker" in c.tags["application"] for c in speaker)
    both = select(cases, ["a_t=T", "m=1024,2048"], 3)
    assert len(both) <= 3 and all(c.shape["a_t"] == "T" and c.shape["m"] in (1024, 2048) for c in both)


@pytest.mark.parametrize("argv,expect", [
    (["bench", "--suite", "nope"], "unknown suite 'nope'; choose from: quick, deepbench-gemm-train"),
    (["bench", "--suite", "deepbench-gemm-train", "--precision", "fp7"], "unknown precision 'fp7'"),
    (["bench", "--suite", "deepbench-gemm-train", "--filter", "application"], "malformed filter 'application'"),
    (["bench", "--suite", "deepbench-gemm-train", "--filter", "color=red"], "unknown filter key 'color'; choose"),
    (["bench", "--suite", "deepbench-gemm-train", "--filter", "application=Nobody"], "no case matches"),
    (["bench", "--suite", "deepbench-gemm-train", "--limit", "0"], "--limit must be >= 1"),
    (["bench", "--suite", "deepbench-gemm-train", "--sort", "speed"], "invalid choice: 'speed'"),
    (["bench", "--suite", "deepbench-sparse", "--precision", "fp32"], "no case at precision(s) fp32"),
    (["bench"], "the following arguments are required: --suite"),
    (["lint", "gemm", "1", "2"], "lint gemm needs 3 sizes (m n k), got 2"),
    (["lint", "fft", "1"], "unknown lint operation 'fft'; choose from: gemm, conv"),
    (["lint", "gemm", "8", "x", "8"], "invalid int value: 'x'"),
    (["lint", "gemm", "0", "8", "8"], "sizes must be >= 1"),
    (["lint", "gemm", "8", "8", "8", "--precision", "int4"], "unknown precision 'int4'"),
    (["lint", "gemm", "8", "8", "8", "--transpose", "NX"], "--transpose must be two of N/T"),
    (["lint", "conv", "1", "1", "4", "4", "1", "3", "3", "--layout", "NCWH"], "unknown layout 'NCWH'"),
    (["lint", "conv", "1", "1", "2", "2", "1", "3", "3"], "not a valid convolution"),
    (["lint", "conv", "1", "1", "4", "4", "1", "3", "3", "--precision", "int8"], "conv has no int8 variant"),
    (["ceilings", "--device", "cpu", "--size", "0"], "must be >= 1"),
    (["ceilings", "--device", "cpu", "--precision", "fp9"], "unknown precision 'fp9'"),
])
def test_bad_input_is_one_line_and_exit_2(argv, expect, capsys, db_path):
    extra = ["--db", db_path] if argv[0] in ("bench", "ceilings") and len(argv) > 1 else []
    assert main(argv + extra) == 2
    err = capsys.readouterr().err
    assert expect in err and len(err.strip().splitlines()) == 1, err


def test_lint_prints_the_verdict_without_running(capsys):
    assert main(["lint", "gemm", "8191", "8191", "8191", "--precision", "bf16", "--sm-count", "132"]) == 0
    text = capsys.readouterr().out
    assert "misaligned" in text and "fix: pad m 8191->8192, n 8191->8192, k 8191->8192" in text
    out = run_json(capsys, "lint", "gemm", "16", "4096", "4096", "--precision", "int8", "--json")
    assert "M > 16" in out["verdict"]["hard_limit"]
    out = run_json(capsys, "lint", "gemm", "4096", "4096", "4100", "--precision", "fp8", "--json")
    assert "multiples of 16" in out["verdict"]["hard_limit"]
    out = run_json(capsys, "lint", "conv", "64", "3", "224", "224", "64", "7", "7", "--pad", "3", "--stride", "2",
                   "--precision", "fp16", "--json")
    assert out["verdict"]["fix"] == "pad C 3->8; use NHWC (channels_last)" and out["shape"]["layout"] == "NCHW"
    out = run_json(capsys, "lint", "conv", "64", "64", "56", "56", "64", "3", "3", "--pad", "1", "--layout", "nhwc",
                   "--precision", "bf16", "--json")
    assert out["verdict"]["aligned"] and out["verdict"]["fix"] is None


def test_ceilings_on_cpu_are_stored_and_read_back(capsys, db_path):
    out = run_json(capsys, "ceilings", "--device", "cpu", "--precision", "fp32,bf16", "--size", "64",
                   "--copy-elements", "4096", "--rep-ms", "2", "--json", "--db", db_path)
    assert out["run"]["kind"] == "ceilings"
    assert {r["op"] for r in out["results"]} == {"ceiling"}
    assert {r["precision"] for r in out["results"]} == {"fp32", "bf16", "bandwidth"}
    assert all(r["status"] == "ok" for r in out["results"])
    for r in out["results"]:        # each measured again until its best stopped improving
        assert r["metrics"]["repeats"] == len(r["metrics"]["repeat_medians_ms"]) >= 3
        assert r["median_ms"] == min(r["metrics"]["repeat_medians_ms"])
    assert set(out["ceilings"]) == {"fp32", "bf16", "bandwidth"} and out["ceilings"]["bandwidth"] > 0
    assert Store(db_path).ceilings(out["run"]["device"]) == out["ceilings"]
    assert main(["show", "--db", db_path]) == 0 and "100%" in capsys.readouterr().out   # % of the measured ceiling


def test_store_ceilings_takes_the_best_figure_of_the_latest_run_per_precision(db_path, monkeypatch):
    s = Store(db_path)
    env = {"gpu": {"name": "NVIDIA H200"}}
    first = s.start_run("ceilings", "tcperf ceilings", env)
    for prec, tflops, gbps in (("bf16", 700.0, None), ("fp32", 50.0, None), ("bandwidth", None, 4200.0)):
        s.add_result(first, Result.from_row({"op": "ceiling", "precision": prec, "status": "ok", "tflops": tflops, "gbps": gbps}))
    second = s.start_run("ceilings", "tcperf ceilings --precision bf16", env)
    s.add_result(second, Result.from_row({"op": "ceiling", "precision": "bf16", "status": "ok", "tflops": 740.0}))
    s.add_result(second, Result.from_row({"op": "ceiling", "precision": "bf16", "status": "ok", "tflops": 690.0}))   # a larger size
    s.add_result(second, Result.from_row({"op": "ceiling", "precision": "fp32", "status": "error"}))
    other = s.start_run("ceilings", "tcperf ceilings", {"gpu": {"name": "NVIDIA H100 80GB HBM3"}})
    s.add_result(other, Result.from_row({"op": "ceiling", "precision": "bf16", "status": "ok", "tflops": 690.0}))
    bench = s.start_run("bench", "tcperf bench", env)
    s.add_result(bench, Result.from_row({"op": "gemm", "precision": "bf16", "status": "ok", "tflops": 999.0}))
    assert s.ceilings("NVIDIA H200") == {"bf16": 740.0, "fp32": 50.0, "bandwidth": 4200.0}
    assert s.ceilings("NVIDIA A100") == {}
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: "NVIDIA H200")     # what a command asks
    assert peaks.measured(db_path, torch.device("cuda")) == s.ceilings("NVIDIA H200")
    assert peaks.measured(db_path, torch.device("cpu")) == {}


def test_ceiling_cases_measure_every_size_and_int8_with_b_column_major():
    from tcperf.commands.ceilings import cases
    got = cases(["bf16", "int8"], (4096, 8192), 1024)
    gemms = [(c.precision, c.shape["m"], c.shape["b_t"]) for c in got if c.op == "gemm"]
    assert gemms == [("bf16", 4096, "N"), ("bf16", 8192, "N"), ("int8", 4096, "T"), ("int8", 8192, "T")]
    assert [c.precision for c in got if c.op == "copy"] == ["bandwidth"]
