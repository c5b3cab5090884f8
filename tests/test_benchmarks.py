"""Every script in benchmarks/ imports, answers --help, and names only what tcperf has, on the CPU in seconds: a
rename in tcperf breaks a test here instead of a GPU call.

What these tests prove, for each benchmarks/*.py (new scripts are picked up by the glob):
- it imports as `python3 benchmarks/NAME.py` imports it (its own folder on sys.path for its siblings, tcperf
  installed), without running its main;
- its main() answers --help (argparse exits 0 with a usage line) before touching a GPU;
- every name it takes from tcperf exists: `from tcperf.x import y` anywhere in the file (inside functions too) and
  every attribute it reads off a tcperf module or class it imported (`engine._prepare`, `Store.open`); and no
  argument or assignment hides one of those names.
"""
import ast
import dataclasses
import math
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import NICE, early_lane, lane_env

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SCRIPTS = sorted(p.stem for p in BENCHMARKS.glob("*.py"))


def load(name: str):
    """benchmarks/NAME.py as a module, its siblings importable as when it runs as a script; main() not run."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.append(str(BENCHMARKS))
    module = importlib.import_module(name)
    assert Path(module.__file__).parent == BENCHMARKS, f"{name} resolves to {module.__file__}"
    return module


def resolve(dotted: str):
    """The object a dotted name under tcperf names: the longest importable module, then attributes."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(dotted)


def tcperf_bound(nodes) -> dict[str, str]:
    """The names these nodes import from tcperf: {local name: dotted name in tcperf}."""
    bound: dict[str, str] = {}
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "tcperf":
            bound.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names})
        elif isinstance(node, ast.Import):
            bound.update({a.asname: a.name for a in node.names if a.asname and a.name.split(".")[0] == "tcperf"})
    return bound


def tcperf_names(path: Path) -> list[str]:
    """Every dotted name a script takes from tcperf: what it imports, and the attributes it reads off them."""
    tree = ast.parse(path.read_text())
    bound = tcperf_bound(ast.walk(tree))
    read = {f"{bound[n.value.id]}.{n.attr}" for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in bound}
    return sorted({*bound.values(), *read})


def own_nodes(scope: ast.AST):
    """The nodes of a module or function, those of the functions inside it left out."""
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            todo.extend(ast.iter_child_nodes(node))


def shadowed(path: Path) -> set[str]:
    """tcperf names a scope imports and also binds to something else within it (an argument, an assignment): a
    `recipes` parameter hides the module `recipes` in that function."""
    tree = ast.parse(path.read_text())
    found = set()
    for scope in [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))]:
        inside = list(ast.walk(scope))[1:]
        rebound = {n.arg for n in inside if isinstance(n, ast.arg)}
        rebound |= {n.id for n in inside if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        found |= rebound & set(tcperf_bound(own_nodes(scope)))
    return found


@pytest.mark.parametrize("name", SCRIPTS)
def test_imports_and_answers_help(name, monkeypatch, capsys):
    module = load(name)
    if not hasattr(module, "main"):               # a library of its siblings (hand_loops)
        return
    monkeypatch.setattr(sys, "argv", [f"benchmarks/{name}.py", "--help"])
    with pytest.raises(SystemExit) as done:
        module.main()
    assert done.value.code == 0 and "usage:" in capsys.readouterr().out


@pytest.mark.parametrize("name", SCRIPTS)
def test_names_it_takes_from_tcperf_exist(name):
    names = tcperf_names(BENCHMARKS / f"{name}.py")
    missing = []
    for dotted in names:
        try:
            resolve(dotted)
        except (AttributeError, ModuleNotFoundError) as e:
            missing.append(f"{dotted} ({type(e).__name__}: {e})")
    assert not missing, f"benchmarks/{name}.py names what tcperf lacks: {missing}"
    hidden = shadowed(BENCHMARKS / f"{name}.py")
    assert not hidden, f"benchmarks/{name}.py binds {hidden} to something else in the scope that imports them"


def test_the_name_check_sees_a_rename(tmp_path):
    script = tmp_path / "renamed.py"
    script.write_text("from tcperf import engine\n\ndef f():\n    from tcperf.recipes import on_top\n"
                      "    return engine._prepare_renamed, on_top\n")
    names = tcperf_names(script)
    assert names == ["tcperf.engine", "tcperf.engine._prepare_renamed", "tcperf.recipes.on_top"]
    with pytest.raises(AttributeError):
        resolve("tcperf.engine._prepare_renamed")
    script.write_text("from tcperf import recipes\n\ndef f(recipes):\n    return recipes.get\n")
    assert shadowed(script) == {"recipes"}


def test_models_gpu_states_each_target_for_the_gpu_and_the_gain_over_the_rungs_before():
    bench = load("models_gpu")

    def row(recipe, value, status="ok", batch=16):
        return {"precision": recipe, "status": status, "shape": {"model": "gpt2", "mode": "train", "batch": 16},
                "metrics": {"throughput": value, "unit": "tokens/s", **({"batch": batch} if batch != 16 else {})}}
    rows = [row("amp_bf16", 330_000.0), row("step_graph", 430_000.0), row("chunked_ce", 520_000.0, "wrong"),
            row("batch", 505_000.0, batch=32)]
    found = bench.checks(rows, "NVIDIA H200")
    best = found["gpt2 train best"]
    assert best["recipe"] == "batch" and best["batch"] == 32 and best["meets"]      # a failed check never counts
    assert best["before"] == "step_graph" and best["gain"] == pytest.approx(505 / 430) and best["meets_gain"]
    lines = bench.check_lines(bench.checks(rows, "NVIDIA H100 80GB HBM3"), "NVIDIA H100 80GB HBM3")
    assert any("no throughput target for an NVIDIA H100" in x and "1.174x the best rung up to step_graph" in x
               for x in lines)


def test_models_gpu_says_what_holds_a_missed_target_by_kernel_kind():
    bench = load("models_gpu")
    kinds = {"matmul": 21.3, "normalization": 6.1, "elementwise": 5.2, "pooling": 2.0}
    rows = [{"precision": "step_graph", "status": "ok", "shape": {"model": "resnet50", "mode": "train", "batch": 256},
             "metrics": {"throughput": 6_600.0, "unit": "img/s", "kernel_kinds": kinds, "gpu_busy": 0.97}}]
    lines = bench.check_lines(bench.checks(rows, "NVIDIA H200"), "NVIDIA H200")
    assert "BELOW" in lines[0]
    assert lines[1] == ("  what holds it, step_graph's step by kernel kind, GPU busy 97%: matmul 21.3 ms (62%), "
                        "normalization 6.1 (18%), elementwise 5.2 (15%), pooling 2 (6%)")
    del rows[0]["metrics"]["kernel_kinds"]
    lines = bench.check_lines(bench.checks(rows, "NVIDIA H200"), "NVIDIA H200")
    assert lines[1] == "  what holds it: run with --profile for the best rung's step by kernel kind"
    rows.append({**rows[0], "precision": "batch", "metrics": {"throughput": 7_600.0, "unit": "img/s"}})
    lines = bench.check_lines(bench.checks(rows, "NVIDIA H200"), "NVIDIA H200")     # both targets met
    assert len(lines) == 1 and "BELOW" not in lines[0]


def test_models_gpu_keeps_a_rung_for_one_model_only():
    bench = load("models_gpu")
    plans = {"train": {"resnet50": ["fp32", "step_graph", "chunked_ce", "batch"],
                       "gpt2": ["fp32", "step_graph", "chunked_ce", "batch"]}}
    cut = bench.only_rungs(plans, "step_graph,chunked_ce,gpt2:batch")
    assert cut == {"train": {"resnet50": ["step_graph", "chunked_ce"], "gpt2": ["step_graph", "chunked_ce", "batch"]}}
    assert bench.only_rungs(plans, "gpt2:fp32") == {"train": {"resnet50": [], "gpt2": ["fp32"]}}
    with pytest.raises(Exception, match="batchh"):
        bench.only_rungs(plans, "gpt2:batchh")


def test_models_gpu_holds_the_best_passing_rung_against_the_hand_loops_timed_before_the_ladder(capsys):
    bench = load("models_gpu")
    rows = [{"precision": p, "status": st, "shape": {"model": "gpt2", "mode": "train", "batch": 16},
             "metrics": {"throughput": v, "unit": "tokens/s", **m}}
            for p, st, v, m in (("step_graph", "ok", 403_007.0, {}), ("chunked_ce", "ok", 440_070.0, {}),
                                ("batch", "wrong", 510_000.0, {"batch": 128}))]
    timed = {"gpt2": {"batch": 16, "times": {"compile + fused": [394_340.0, 391_998.0],
                                             "compile + fused + step graph": [399_597.0, 396_081.0]}},
             "resnet50": {"batch": 256, "times": {}}}                  # its loops failed: no comparison
    found = bench.against_hand(rows, timed)
    assert list(found) == ["gpt2"] and found["gpt2"]["best_rung"] == "chunked_ce"   # a failed check never counts
    assert found["gpt2"]["hand_best"] == "compile + fused + step graph"
    assert found["gpt2"]["ratio"] == pytest.approx(440_070 / 399_597)
    assert "= 1.101 (target > 1.0: meets)" in capsys.readouterr().out
    assert bench.against_hand(rows[2:], timed) == {}                   # no passing rung: nothing to hold


def test_interleaved_rounds_reverse_the_order_and_count_items(monkeypatch):
    """A B, B A, A B: each step gets the early and the late moment of the call alike; items a second from each
    window's calls and milliseconds."""
    hand = load("hand_loops")
    order = []
    monkeypatch.setattr(hand, "window", lambda step, device, seconds: (order.append(step()) or 50.0, 5))
    rates = hand.interleaved({"a": lambda: "a", "b": lambda: "b"}, {"a": 10, "b": 20}, "cpu", rounds=3)
    assert order == ["a", "b", "b", "a", "a", "b"]
    assert rates == {"a": [1000.0] * 3, "b": [2000.0] * 3}                    # 5 calls x items in 50 ms


def test_models_gpu_head_to_head_rebuilds_the_best_rung_and_the_hand_loop_and_interleaves_them(capsys, monkeypatch):
    """On a CPU, ResNet-50's small configuration: the best passing row (here fp32, batch 2) and a hand loop without
    compile, built again in this process and timed in interleaved rounds; the batch rung is made again from the
    base it searched on, at the batch it found."""
    bench = load("models_gpu")
    monkeypatch.setitem(bench.HAND, "resnet50", {"eager": {"autocast": None}})
    rows = [{"precision": "fp32", "status": "ok", "shape": {"model": "resnet50", "mode": "train", "batch": 2},
             "metrics": {"throughput": 5.0, "unit": "img/s"}}]
    timed = {"resnet50": {"batch": 2, "times": {"eager": [4.0, 4.5]}}}
    found = bench.head_to_head(rows, timed, torch.device("cpu"), "small", rounds=2)
    r = found["resnet50"]
    assert (r["rung"], r["hand"], len(r["ratios"])) == ("fp32", "eager", 2) and r["low"] <= r["median"] <= r["high"]
    assert "resnet50: fp32 / hand loop (eager), 2 interleaved rounds: " in capsys.readouterr().out
    batch_row = {"precision": "batch", "shape": {"batch": 256}, "metrics": {"base_rung": "pool_kernel", "batch": 384}}
    assert bench.rung_of(batch_row) == ("pool_kernel", 384) and bench.rung_of(rows[0]) == ("fp32", 2)
    assert bench.head_to_head(rows, timed, torch.device("cpu"), "small", rounds=0) == {}


def test_workload_gpu_matches_a_pick_to_the_stored_loop_of_the_same_hand():
    """An advice's label is matched to the plain loop that sets the same things, whatever that loop's own label: the
    ladder's "compile" is amp_bf16 + channels_last + torch.compile; channels_last counts only on 2-D convolutions."""
    bench = load("workload_gpu")
    detector, tagger = bench.STREAMS["detector"], bench.STREAMS["deberta"]
    label = "amp_bf16+channels_last+compile@dynamic"
    rows = {label: {"hand": dataclasses.asdict(bench.hand_of(label, True, "infer"))}}
    assert bench.row_of("compile@dynamic", rows, detector) == label
    assert bench.row_of("amp_bf16+compile@dynamic", rows, detector) is None          # NCHW: another loop
    rows = {"amp_bf16+compile@dynamic": {"hand": dataclasses.asdict(bench.hand_of("amp_bf16+compile@dynamic", False,
                                                                                  "infer"))}}
    assert bench.row_of("compile@dynamic", rows, tagger) == "amp_bf16+compile@dynamic"
    assert bench.hand_of("bf16+compile", False, "infer") == bench.hand_of("bf16+compile@static", False, "infer")
    hand = bench.hand_of("fp16+channels_last+cudnn_benchmark", True, "infer")
    assert (hand.weights, hand.channels_last, hand.cudnn_benchmark, hand.compile, hand.tf32) == \
        ("float16", True, True, False, False)
    assert bench.hand_of("tf32", False, "infer").tf32 and bench.hand_of("fused", False, "train").fused
    for label, mode in (("fp8", "infer"), ("step_graph", "train"), ("bf16", "train"), ("no_such", "infer")):
        with pytest.raises(KeyError):
            bench.hand_of(label, True, mode)


def _timed(bench, label: str, warm_s: float, pass_ms: float, passes: bool = True) -> dict:
    return {"hand": dataclasses.asdict(bench.hand_of(label, False, "infer")), "warm_s": warm_s,
            "pass_ms": [pass_ms] * 3, "passes": passes, "rel_error": 0.01 if passes else 0.3}


def test_workload_gpu_holds_the_pick_to_the_best_plain_loop_and_its_stated_figures_to_its_own_loop():
    bench = load("workload_gpu")
    stream = bench.STREAMS["deberta"]
    rows = {"bf16": _timed(bench, "bf16", 2.0, 640.0),                     # 10 ms a step, one-time 0.72 s
            "bf16+cuda_graphs@marked": _timed(bench, "bf16+cuda_graphs@marked", 40.0, 320.0),   # 5 ms, 39.36 s
            "fp16": _timed(bench, "fp16", 1.0, 64.0, passes=False)}        # the fastest fails its check: never best
    cost = {r: bench.costs(row, [100, 10000], 64) for r, row in rows.items()}
    assert cost["bf16"]["one_time"] == pytest.approx(0.72) and cost["bf16"]["ms"] == pytest.approx(10.0)
    long = bench.judge(stream, 10000, {"recommended": "bf16+cuda_graphs@marked",
                                       "stated": {"one_time_s": 42.0, "step_ms": 5.4}}, rows, cost)
    assert long["best"] == "bf16+cuda_graphs@marked" and long["pick_job_s"] == pytest.approx(89.36)
    assert [ok for _, ok in long["checks"]] == [True, True, True]
    short = bench.judge(stream, 100, {"recommended": "bf16", "stated": {"one_time_s": 0.2, "step_ms": 12.0}},
                        rows, cost)
    assert short["best"] == "bf16" and [ok for _, ok in short["checks"]] == [True, True, False]  # 12 ms: +20%
    wrong = bench.judge(stream, 100, {"recommended": "bf16+cuda_graphs@marked", "stated": {}}, rows, cost)
    assert wrong["checks"][0][1] is False                                  # 39.9 s against bf16's 1.72 s
    missing = bench.judge(stream, 100, {"recommended": "fp16+compile@dynamic"}, rows, cost)
    assert missing["checks"][0][1] is None and "no plain loop" in missing["checks"][0][0]
    data = {"rows": rows, "advice": {"100": {"recommended": "fp16+compile@dynamic"}}}
    assert bench.picks_without_loop(stream, data) == ["fp16+compile@dynamic"]


def test_workload_gpu_goes_through_a_streams_work_in_order_and_leaves_out_what_its_rows_rule_out():
    """Eager rows first, then the compiled ways; a static compile left out where the stream has more shapes than
    Dynamo's recompile limit, the other padded recipes once one is refused; then the advice, then eager rows near
    the best again, one process more for each advice stored; a stored row is not run again."""
    bench = load("workload_gpu")
    stream = bench.STREAMS["gru_asr"]
    args = bench.parse_args(["--streams", "gru_asr", "--advise", "100", "--repeat-eager", "3"])
    data = {"settings": {"stream": 64}, "rows": {}, "advice": {}, "runs": {}}
    assert bench.next_work(stream, data, args, set()) == ("recipe", "fp32")
    for label in bench.EAGER["infer"]:
        data["rows"][label] = {**_timed(bench, label, 2.0, 640.0 if label != "fp32" else 6400.0), "distinct": 40,
                               "recompile_limit": 8}
    assert bench.next_work(stream, data, args, set()) == ("recipe", "bf16+compile@dynamic")
    assert "recompile limit" in bench.skip_reason("bf16+compile@static", stream, data, named=False)
    assert bench.skip_reason("bf16+compile@static", stream, data, named=True) is None
    data["rows"]["bf16+cuda_graphs@pad64"] = {"refused": "padding refused: output 0's dimension 1 ..."}
    assert bench.skip_reason("bf16+cuda_graphs@pad128", stream, data, named=False).startswith("padding refused")
    for label in ("bf16+compile@dynamic", "bf16+compile@marked", "bf16+cuda_graphs@dynamic",
                  "bf16+cuda_graphs@marked"):
        data["rows"][label] = _timed(bench, label, 60.0, 6400.0)
    assert bench.next_work(stream, data, args, set()) == ("advise", 100)
    data["advice"]["100"] = {"recommended": "fp16"}
    again = bench.next_work(stream, data, args, set())
    assert again[0] == "again" and again[1] in ("tf32", "amp_fp16", "amp_bf16", "fp16", "bf16")   # not fp32: 10x
    data["rows"]["fp16"] = {**data["rows"]["fp16"], "processes": 2}
    assert bench.next_work(stream, data, args, {again} | {("again", x) for x in bench.EAGER["infer"]
                                                          if x != "fp16"}) is None     # 2 = 1 + one advice


def test_workload_gpu_pools_an_eager_recipes_processes():
    bench = load("workload_gpu")
    rows = [{"recipe": "bf16", "warm_s": 4.0, "pass_ms": [330.0, 340.0]},
            {"recipe": "bf16", "warm_s": 3.0, "pass_ms": [570.0, 560.0]},
            {"recipe": "bf16", "warm_s": 5.0, "pass_ms": [350.0, 345.0]},
            {"recipe": "bf16", "error": "exit 1: killed", "pass_ms": [1.0]}]              # a failed process: left out
    row = bench.pooled(rows)
    assert row["warm_s"] == 4.0 and row["processes"] == 3 and sorted(row["pass_ms"]) == [330, 340, 345, 350, 560, 570]
    assert row["process_ms"] == [335.0, 565.0, 347.5]
    cost = bench.costs(row, [100], 60)
    assert cost["ms"] == pytest.approx(347.5 / 60)        # the median of every pass, not one process's
    assert "3 processes: 5.58, 9.42, 5.79" in bench.steady_cell(row, 60)
    assert bench.pooled(rows[:1]) is rows[0]


@early_lane
def workload_gpu_twice(folder) -> tuple[list[tuple[int, str]], Path]:
    """`benchmarks/workload_gpu.py --size tiny --device cpu`, three streams, two recipes each, run twice into one
    --out folder (FOLDER/out) from the repository's root as the command is typed, each recipe a process of its
    own: ([(exit status, stdout; stderr's tail after it where it failed)] of the two calls, the --out folder). One process at a time, about 35 s of one core on
    2 (2026-11-28): in conftest's early lane, under NICE, in a core the tests before it leave idle."""
    argv = ["benchmarks/workload_gpu.py", "--streams", "gru_asr,conv_seq,gpt2_train", "--size", "tiny", "--device",
            "cpu", "--stream", "4", "--passes", "1", "--recipes", "fp32,fp32@pad64", "--out", str(folder / "out")]
    calls = [subprocess.run([*NICE, sys.executable, *argv], cwd=BENCHMARKS.parent, env=lane_env(),
                            capture_output=True, text=True, timeout=400) for _ in range(2)]
    return [(c.returncode, c.stdout + c.stderr[-3000:] * (c.returncode != 0)) for c in calls], folder / "out"


@pytest.mark.slow
@pytest.mark.early("workload_gpu_twice")
def test_workload_gpu_runs_its_plain_loops_on_the_cpu_and_goes_on_where_it_stopped(early):
    """Padding refused on the GRU model before any warm-up (its output is a quarter as long as its input), padded
    and cut back on the 1-D conv model (time on its last dimension), and a training stream checked on its losses
    from the same weights. The same command again finds nothing left to do."""
    [(code, out), (code_again, again)], folder = early
    assert code == 0, out[-3000:]
    rows = {name: data["rows"] for name, data in json.loads((folder / "workload_gpu.json").read_text())["streams"]
            .items()}
    gru, conv, gpt = rows["gru_asr"], rows["conv_seq"], rows["gpt2_train"]
    assert gru["fp32"]["passes"] and len(gru["fp32"]["pass_ms"]) == 1
    assert gru["fp32@pad64"]["refused"].startswith("padding refused: output 0's dimension 1") and \
        "warm_s" not in gru["fp32@pad64"]
    assert conv["fp32@pad64"]["passes"] and conv["fp32@pad64"]["shapes"] <= conv["fp32"]["shapes"]
    assert gpt["fp32"]["rel_error"] == 0 and gpt["fp32@pad64"]["rel_error"] < 1e-4      # padded labels count nothing
    assert (folder / "workload_gpu.txt").exists() and "nothing left of what this call asks" in out
    assert code_again == 0, again[-3000:]
    assert "== gru_asr" not in again and "nothing left" in again


def test_ddp_benchmark_plain_loops_train_as_tcperfs_recipes():
    """Each row's plain loop compiles and fuses its optimizer exactly where tcperf's recipe for the row does: the
    plain loops were fused on every row while tcperf's rungs below `fused` were not (2 H200s, 2026-11-26)."""
    from tcperf import recipes
    for row in load("ddp_gpu").ROWS:
        rec = recipes.get(row.recipe)
        assert (row.fused, row.compile) == (rec.fused, rec.compile), row
        assert row.dynamic is False or row.name.endswith("-dynamic"), row   # compiled as tcperf compiles
    assert recipes.get("fused").shapes == "static"          # tcperf's recipes: torch.compile(dynamic=False)


def test_plain_loops_optimizer_is_foreach_unless_fused_is_asked_for():
    """The plain loops' AdamW takes PyTorch's foreach default, as tcperf's recipes do, and fused or capturable only
    when asked: an explicit fused=False turned foreach off and updated one parameter at a time (FSDP2's plain loop
    read 234k tokens/s against tcperf's 399k on two H100s, 2026-11-27)."""
    adamw = load("hand_loops").adamw
    params = [torch.nn.Parameter(torch.randn(4)), torch.nn.Parameter(torch.randn(3))]
    plain = adamw(params, {"lr": 1e-3})
    assert plain.defaults["fused"] is None and plain.defaults["foreach"] is None     # PyTorch picks foreach
    assert adamw(params, {"lr": 1e-3}, fused=True).defaults["fused"] is True
    assert adamw(params, {"lr": 1e-3}, capturable=True).defaults["capturable"] is True
    source = (BENCHMARKS / "ddp_gpu.py").read_text()
    assert "torch.optim.AdamW(" not in source and "adamw(model.parameters()" in source


def test_fp8_width_sweep_finds_the_narrowest_width_from_which_fp8_pays():
    """fp8 counts only where it is MARGIN faster at that width and every wider one; a failed fp8 row is not faster."""
    bench = load("fp8_width_gpu")
    t = lambda c, f: {"compile": c, "fp8": f}                                     # noqa: E731
    assert bench.crossover({768: t(100, 90), 2048: t(100, 104), 4096: t(100, 120), 8192: t(100, 130)}) == 2048
    assert bench.crossover({768: t(100, 110), 2048: t(100, 102), 4096: t(100, 120)}) == 4096   # 2048 within margin
    assert bench.crossover({768: t(100, 110), 4096: t(100, None)}) is None       # fp8 failed at the widest
    assert bench.throughputs([{"precision": "compile", "status": "ok", "metrics": {"throughput": 5.0}},
                              {"precision": "fp8", "status": "wrong", "metrics": {"throughput": 9.0}}]) == \
        {"compile": 5.0, "fp8": None}
    assert bench.lines({768: t(100, 90), 4096: t(100, 120)})[-1] == "fp8 pays (>= 3% faster) from width 4096 on"
    assert bench.config_of(2048, 2, 8) == "full:dim=2048,heads=32,layers=2,batch=8"


@pytest.mark.parametrize("args, words", [(["--widths", "768,1000"], "multiples of 64"),
                                         (["--widths", "x"], "positive integers"),
                                         (["--layers", "0"], "positive whole numbers")])
def test_fp8_width_sweep_bad_arguments_are_one_line_before_any_gpu(monkeypatch, capsys, args, words):
    bench = load("fp8_width_gpu")
    monkeypatch.setattr(sys, "argv", ["fp8_width_gpu.py", *args])
    assert bench.main() == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err


def test_decode_attention_probe_reference_is_grouped_query_attention_over_the_unmasked_cache():
    """The probe's float32 reference agrees with SDPA's math backend on the CPU (GQA, the mask's first half)."""
    bench = load("decode_attention_probe")
    q, k, v, mask = bench.inputs(2, 16, torch.device("cpu"))
    want = bench.reference(q, k, v, mask)
    got = bench.sdpa(torch.nn.attention.SDPBackend.MATH)(q, k, v, mask).float()
    assert got.shape == (2, bench.HEADS, 1, bench.HEAD_DIM)
    assert float((got - want).norm() / want.norm()) < 1e-2
    k2 = k.clone()
    k2[:, :, 16 // 2 + 1:] = 100.0                       # past the mask: no effect
    assert torch.allclose(bench.reference(q, k2, v, mask), want)


@pytest.mark.parametrize("args", [["--batches", "0"], ["--context", "a"]])
def test_decode_attention_probe_bad_arguments_are_one_line(monkeypatch, capsys, args):
    bench = load("decode_attention_probe")
    monkeypatch.setattr(sys, "argv", ["decode_attention_probe.py", *args])
    assert bench.main() == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "positive integers" in err[0], err


def test_models_gpu_rungs_and_hand_loops_share_one_batch_rule():
    """The ladder's cells and the hand loops beside them run at the same batch: own_batch, for both configurations."""
    bench = load("models_gpu")
    from tcperf import models
    for config in ("small", "full"):
        cases = bench.mode_cases("train", {"gpt2": ["amp_bf16"]}, config, ["gpt2"])
        assert [c.shape["batch"] for c in cases] == [bench.own_batch("gpt2", config)]
    assert bench.own_batch("gpt2", "small") == bench.QUICK_BATCH
    assert bench.own_batch("gpt2", "full") == models.config(models.get("gpt2"), "full")["batch"]


def _bandwidth_report(sections) -> str:
    """Inductor's TORCHINDUCTOR_PROFILE_OUTPUT text, written with Inductor's own line format (torch's end_graph)."""
    from torch._inductor.runtime.runtime_utils import create_bandwidth_info_str
    lines = []
    for graph, kernels in sections:
        lines += ["====================", f"TRITON KERNELS BANDWIDTH INFO ({graph})"]
        total = sum(ms for ms, _, _ in kernels)
        lines += [create_bandwidth_info_str(ms, gb, gb / (ms / 1e3), suffix=f" \t {ms / total * 100:.2f}% \t {name}",
                                            color=False) for ms, gb, name in kernels]
        lines += [f"SUMMARY ({graph})", f"{total:.2f}ms   \t 1.00 GB\t 1.00GB/s", ""]
    return "\n".join(lines)


def test_inductor_bandwidth_reads_the_last_report_of_each_graph_and_weighs_kinds_against_copy():
    """Each compiled graph writes a section every time it runs: the last one of each counts, once. A kind's gap is
    the time its kernels take beyond what their bytes take at copy bandwidth."""
    bench = load("inductor_bandwidth")
    text = _bandwidth_report([
        ("/tmp/fw.py", [(9.0, 1.0, "triton_red_fused__native_batch_norm_legit_functional_0")]),   # first run
        ("/tmp/fw.py", [(2.0, 4.0, "triton_red_fused__native_batch_norm_legit_functional_0"),
                        (0.5, 2.0, "triton_poi_fused_relu_threshold_backward_1")]),
        ("/tmp/bw.py", [(1.0, 2.0, "triton_poi_fused_add_max_pool2d_with_indices_backward_2")])])
    rows = bench.read_report(text)
    assert [(r["graph"], r["ms"], r["gb"]) for r in rows] == [("fw.py", 2.0, 4.0), ("fw.py", 0.5, 2.0),
                                                              ("bw.py", 1.0, 2.0)]
    kinds = bench.summarize(rows, copy_gbs=4000.0)
    norm = kinds["normalization"]
    assert list(kinds)[0] == "normalization" and norm["kernels"] == 1
    assert norm["ms_at_copy"] == pytest.approx(1.0) and norm["gap_ms"] == pytest.approx(1.0)
    assert norm["copy_share"] == pytest.approx(0.5)
    assert kinds["pooling"]["gap_ms"] == pytest.approx(0.5)
    assert kinds["elementwise"]["gap_ms"] == 0.0          # 2 GB in 0.5 ms: at copy bandwidth, nothing to gain
    assert [r["name"][-1] for r in bench.gaps(rows, 4000.0)] == ["0", "2", "1"]


def test_inductor_bandwidth_counts_the_bytes_normalization_layers_take_in():
    """Forward hooks count each normalization layer's input at the dtype it arrives in (autocast's), and leave."""
    bench = load("inductor_bandwidth")
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4),
                                torch.nn.BatchNorm1d(4))
    x = torch.randn(5, 8)
    assert bench.norm_input_bytes(model, (x,), torch.bfloat16) == 5 * 16 * 2 + 5 * 4 * 2
    assert all(not m._forward_hooks for m in model.modules())


def test_maxpool_probe_sliced_pooling_is_max_pool_and_a_wrong_one_is_caught():
    """The stem's max-pool as the maximum of 9 strided views: the same output, and the same gradient wherever the
    input is positive (after the stem's ReLU a zero's gradient is discarded); float32 for the gradient, where inputs
    do not tie. A pooling that is not max-pool fails the check before anything is timed."""
    probe = load("maxpool_probe")
    cpu = torch.device("cpu")
    exact, timed = probe.inputs(2, cpu, torch.float32), probe.inputs(2, cpu)
    assert probe.check(probe.SlicedMaxPool2d(), exact, timed) is None
    assert probe.check(torch.nn.MaxPool2d(3, 2, 1), exact, timed) is None
    average = torch.nn.AvgPool2d(3, 2, 1)
    assert "output" in probe.check(average, exact, timed)
    assert probe.SlicedMaxPool2d()(timed[0]).is_contiguous(memory_format=torch.channels_last)


def test_maxpool_probe_stem_ways_share_one_batch_norm_and_agree():
    """The three stems the probe times start from the same batch norm (scales of both signs) and, on a CPU where
    tcperf's modules fall back to PyTorch's layers, compute the same output and input gradient."""
    probe = load("maxpool_probe")
    ways = probe.stem_ways()
    assert list(ways) == ["inductor", "pool kernel", "fused"]
    weights = [w[0].weight if isinstance(w, torch.nn.Sequential) else w.weight for w in ways.values()]
    assert all(torch.equal(w, weights[0]) for w in weights) and (weights[0] < 0).any() and (weights[0] > 0).any()
    exact = probe.inputs(2, torch.device("cpu"), torch.float32)
    (want_y, want_g), *others = [probe.step(w, *exact) for w in ways.values()]
    assert all(torch.allclose(y, want_y) and torch.allclose(g, want_g) for y, g in others)


def test_bn_relu_probe_ways_agree_and_a_wrong_one_is_caught():
    """The probe's two pairs (the layers; tcperf's BatchNormRelu2d) start from one batch norm of scales of both signs
    and agree in float32 on the output and every gradient (eager, on the CPU); a pair without its ReLU is caught."""
    probe = load("bn_relu_probe")
    cpu = torch.device("cpu")
    ways = probe.ways(6)
    assert list(ways) == ["inductor", "tcperf"] and (ways["tcperf"].weight < 0).any()
    exact = probe.inputs(2, 6, 5, cpu, torch.float32)
    assert probe.check(ways["tcperf"], ways["inductor"], exact) is None
    assert "out" in probe.check(torch.nn.Sequential(probe.ways(6)["inductor"][0]), ways["inductor"], exact)
    assert all(t.is_contiguous(memory_format=torch.channels_last) for t in probe.inputs(2, 6, 5, cpu))


@pytest.mark.parametrize("name", ["maxpool_probe", "bn_relu_probe"])
def test_a_probes_bad_batch_is_one_line(monkeypatch, capsys, name):
    probe = load(name)
    monkeypatch.setattr(sys, "argv", [f"{name}.py", "--batch", "0"])
    assert probe.main() == 2
    assert capsys.readouterr().err.strip() == f"{name}.py: --batch takes a positive whole number"


def test_the_hand_written_step_is_one_function_that_trains():
    """hand_loops.plain_step builds the step every hand loop times (and the bandwidth probe profiles): it trains,
    and the model and inputs it hands back are the ones it trains on."""
    hand = load("hand_loops")
    step, model, inputs, items = hand.plain_step("gpt2", "small", 2, {"autocast": None}, torch.device("cpu"))
    before = [p.detach().clone() for p in model.parameters()]
    losses = [float(step()) for _ in range(3)]
    assert all(math.isfinite(x) for x in losses) and items == 2 * inputs[0].shape[1]
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_the_suite_splits_into_shards_of_about_equal_time_each_file_once():
    """scripts/test_shards.py (the GPU machine's cpusuite stage): longest file first onto the emptiest shard; a file
    without a recorded time counts as the median one; every test file of the repository lands in one shard."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    import test_shards
    got = test_shards.shards(2, ["a", "b", "c", "d", "new"], {"a": 10.0, "b": 6.0, "c": 5.0, "d": 1.0})
    assert got == [(15.0, ["a", "c"]), (12.5, ["b", "new", "d"])], got      # "new": the median, 5.5 s
    files = sorted(p.name for p in Path(__file__).parent.glob("test_*.py"))
    lines = subprocess.run([sys.executable, str(Path(test_shards.__file__)), "4"], capture_output=True, text=True,
                           check=True).stdout.splitlines()
    assert len(lines) == 4 and sorted(Path(f).name for line in lines for f in line.split()) == files
