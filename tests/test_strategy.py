"""`tcperf advise FILE:factory --mode train --nproc N`: DDP and FSDP2 with their options timed on the user's model at
N gloo ranks (a tiny transformer and a tiny CNN, at 2 and 4 ranks: 8 takes the same path), every option stored, the
fastest measured picked, a script that runs under torchrun printed; bad input one line and exit 2."""
import functools
import os
import subprocess
import sys

import pytest
import torch

from conftest import side_by_side
from tcperf import cli
from tcperf.advisor import strategy
from tcperf.distributed import parallel
from tcperf.records import Result
from tcperf.store import Store

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = {"transformer": "examples/gpt2_small.py:tiny", "cnn": "examples/resnet50.py:tiny"}


# The transformer at 4 ranks (the N-rank path 8 ranks take too) and the CNN at 2 (its FSDP2 units, whole-model):
# each model and rank count once, since every run costs minutes of rank start-up and gloo steps on 2 cores
@pytest.mark.slow
@pytest.mark.parametrize("model, n", [("transformer", 4), ("cnn", 2)])
def test_every_option_is_timed_stored_and_the_fastest_picked(model, n, db_path, capsys):
    argv = ["advise", MODELS[model], "--mode", "train", "--nproc", str(n), "--device", "cpu", "--check-steps", "1",
            "--db", db_path]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    rows = Store.open(db_path).results(Store.open(db_path).run()["id"])
    one, *ranked, pick = rows
    assert one["shape"] == {"model": MODELS[model].replace("examples/", ""), "mode": "train"}
    assert [r["shape"].get("parallel") for r in ranked] == list(strategy.OPTIONS)     # every option, in order
    for r in ranked:
        assert r["status"] == "ok", r["message"]
        m = r["metrics"]
        assert r["shape"]["nproc"] == m["nproc"] == n and m["unit"] == "samples/s"
        assert m["scaling_efficiency"] == pytest.approx(m["throughput"] / (n * one["metrics"]["throughput"]))
        assert m["parallel_options"] == parallel.PARALLELS[m["parallel"]].options(parallel.recipes.get("fp32"))
        assert sum(m["breakdown"].values()) == pytest.approx(1.0) and m["cause"]
    fastest = max(ranked, key=lambda r: r["metrics"]["throughput"])
    assert pick["op"] == "advise.parallel.pick" and pick["metrics"]["pick"] == fastest["metrics"]["parallel"]
    assert pick["metrics"]["ranked"][0] == fastest["metrics"]["parallel"] and len(pick["metrics"]["ranked"]) == 5
    assert f"pick {fastest['metrics']['parallel']}:" in out
    assert f"torchrun --standalone --nproc-per-node {n} train.py" in out
    compile(pick["metrics"]["script"], "train.py", "exec")                # the script printed is Python


SCRIPTED = ["ddp_bucket100", "fsdp2"]


@pytest.fixture(scope="module")
def pasted(tmp_path_factory):
    """The script printed for a pick of each option above, run as pasted: `torchrun --standalone --nproc-per-node 2
    train.py` from the repository's root, on gloo (no GPU visible); the two side by side (one after the other they
    took 13 s on 2 cores): {option: the finished process}."""
    def torchrun(name):
        path = tmp_path_factory.mktemp(name) / "train.py"
        path.write_text(strategy.script(MODELS["transformer"], {"precision": "fp32",
                                                                "metrics": {"parallel": name, "nproc": 2}}))
        return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                               str(path)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                              env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    return dict(zip(SCRIPTED, side_by_side(*(functools.partial(torchrun, name) for name in SCRIPTED))))


@pytest.mark.parametrize("parallel_name", SCRIPTED)
def test_the_script_to_paste_trains_under_torchrun(pasted, parallel_name):
    """The pasted script, as printed for a pick, runs on 2 gloo ranks and trains (its loss printed)."""
    done = pasted[parallel_name]
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"after {strategy.SCRIPT_STEPS} steps" in done.stdout


def test_the_pick_is_the_fastest_that_passed():
    def row(par, status, tput):
        return Result(strategy.OP, {"model": "m", "mode": "train", "nproc": 2, "parallel": par}, "fp32", status=status,
                      metrics={"parallel": par, "nproc": 2, "throughput": tput, "unit": "samples/s"})
    rows = [Result(strategy.OP, {"model": "m", "mode": "train"}, "fp32", metrics={"throughput": 60.0}),
            row("ddp", "ok", 100.0), row("fsdp2", "wrong", 300.0), row("ddp_bucket100", "ok", 110.0),
            row("fsdp2_no_reshard", "error", None)]
    best, ranked = strategy.pick(rows)
    assert best["metrics"]["parallel"] == "ddp_bucket100" and [r["metrics"]["parallel"] for r in ranked] == [
        "ddp_bucket100", "ddp"]
    assert strategy.verdict(best, ranked).startswith("pick ddp_bucket100: 110 samples/s on 2 ranks; 10.0% ahead of ddp")
    verdict = strategy.pick_row(rows, MODELS["transformer"])
    assert verdict.metrics["pick"] == "ddp_bucket100" and "DistributedDataParallel(" in verdict.metrics["script"]
    assert strategy.pick(rows[:1]) == (None, []) and strategy.pick_row(rows[:1], "x.py").status == "error"


@pytest.mark.parametrize("name", strategy.OPTIONS)
@pytest.mark.parametrize("recipe", ["fp32", "amp_bf16", "channels_last", "fused"])
def test_every_options_script_is_python_with_the_options_measured(name, recipe):
    code = strategy.script(MODELS["cnn"], {"precision": recipe, "metrics": {"parallel": name, "nproc": 4}})
    compile(code, "train.py", "exec")
    par = parallel.PARALLELS[name]
    assert f"tcperf advise --nproc 4: {name}" in code and ("torch.compile(" in code) == (recipe == "fused")
    if par.kind == "ddp":
        assert f"bucket_cap_mb={par.bucket_cap_mb!r}" in code and f"gradient_as_bucket_view={par.bucket_view}" in code
    else:
        assert ("param_dtype=torch.bfloat16" in code) == (recipe != "fp32")


@pytest.mark.parametrize("args, said", [
    (["--nproc", "1"], "bad --nproc 1"), (["--nproc", "0"], "bad --nproc 0"),
    (["--nproc", "2", "--mode", "infer"], "give --mode train"),
    (["--nproc", "2", "--recipes", "fp32,amp_bf16"], "under one recipe"),
    (["--nproc", "2", "--recipes", "step_graph"], "not measured across ranks")])
def test_bad_nproc_input_is_one_line(args, said, capsys):
    argv = ["advise", MODELS["cnn"], "--device", "cpu", *args]
    if "--mode" not in args:
        argv += ["--mode", "train"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err and "Traceback" not in err, err


def test_more_ranks_than_gpus_is_one_line(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert cli.main(["advise", MODELS["cnn"], "--mode", "train", "--nproc", "4", "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "only 2 CUDA GPU(s) visible" in err, err


# --- benchmarks/strategy_gpu.py: the advice against plain loops of every option -------------------------------------
def test_the_strategy_benchmark_judges_the_picks_plain_loop_against_the_fastest():
    from test_benchmarks import load
    bench = load("strategy_gpu")
    plains = {"ddp": {"throughput": 100.0}, "ddp_bucket100": {"throughput": 98.0}, "fsdp2": None,
              "ddp_no_view": {"throughput": 96.0}}
    assert bench.judge({"pick": "ddp_bucket100"}, plains) == {"ratio": 0.98, "passes": True, "best_plain": "ddp"}
    assert bench.judge({"pick": "ddp_no_view"}, plains)["passes"] is False                    # 0.96: outside 3%
    assert bench.judge({"pick": "fsdp2"}, plains) == {"ratio": None, "passes": False, "best_plain": "ddp"}
    assert bench.judge({}, {}) == {"ratio": None, "passes": False, "best_plain": None}
    ddp = load("ddp_gpu")           # a plain row for every option the advice times, on both models
    names = {r.name for r in ddp.ROWS}
    assert all(ddp.strategy_row(m, o) in names for m in bench.FACTORY for o in strategy.OPTIONS)


@pytest.mark.parametrize("args, said", [(["--models", "vgg"], "unknown model 'vgg'"), (["--world", "1"], "at least 2")])
def test_the_strategy_benchmarks_bad_input_is_one_line(args, said, monkeypatch, capsys):
    """main() in this process, as tests/test_benchmarks.py runs the other scripts' bad input (a python of its own
    imported torch again for each: 2 s)."""
    from test_benchmarks import load
    bench = load("strategy_gpu")
    monkeypatch.setattr(sys, "argv", ["benchmarks/strategy_gpu.py", "--check", *args])
    assert bench.main() == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err, err
