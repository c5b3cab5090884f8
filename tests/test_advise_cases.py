"""The new cases of benchmarks/advise_gpu.py at CPU size, and its grid logic, on the CPU.

What these tests prove:
- every case from tests/thirdparty (Llama, T5, the LSTM tagger, EfficientNet, Swin, the diffusion UNet) builds
  from its tiny factory in tests/thirdparty/, runs a forward, and for training a loss backward, in a second or two;
  each has its GPU-size twin (gpu_<factory>) in the same file;
- `advise_gpu.py --check-build --size cpu` builds, runs and rebuilds them as the advisor's workers do, exit 0;
- the hand grid: compiled forms pruned by the two rules (fp32 > 3x slower; an eager base that does not pass),
  unless an advice called the form ok; picks outside the grid added once; the checked targets (ratio, repeats).
"""
import sys
import time
import types
from pathlib import Path

import pytest
import torch
from test_benchmarks import load

from tcperf import accuracy, engine

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks" / "advise_gpu.py"
ag = load("advise_gpu")
FAMILIES = [name for name, c in ag.CASES.items() if c.file and c.file.parent == ag.THIRDPARTY]
NEEDS = {"hf_llama.py": "transformers", "hf_t5.py": "transformers", "timm_effnet.py": "timm", "timm_swin.py": "timm"}


@pytest.mark.parametrize("case", FAMILIES)
def test_tiny_factory_builds_and_runs(case):
    pytest.importorskip(NEEDS.get(ag.CASES[case].file.name, "torch"))
    from tcperf.source import import_file, split_target
    path, gpu_factory = split_target(ag.target_of(case, "gpu"))
    assert callable(getattr(import_file(path), gpu_factory, None)), f"no GPU-size factory {gpu_factory} in {path}"
    t0 = time.perf_counter()       # the file is imported (transformers' modules take seconds): build and run
    spec, mode = ag.build_spec(case, "cpu")
    model = spec.model.train(mode == "train")
    out = model(*spec.args, **spec.kwargs)
    outs = accuracy.check_outputs(out)
    assert outs and all(t.numel() and torch.isfinite(t).all() for t in outs), case
    if mode == "train":
        loss = engine._loss(spec)(out, spec.targets)
        loss.backward()
        assert torch.isfinite(loss) and any(p.grad is not None for p in model.parameters()), case
    params = sum(p.numel() for p in model.parameters())
    assert params < 5e6, f"{case} at CPU size has {params / 1e6:.1f}M parameters"    # tiny: well under a second
    assert time.perf_counter() - t0 < 30, f"{case} took {time.perf_counter() - t0:.1f} s on the CPU"


@pytest.mark.slow
def test_check_build_new_cases(monkeypatch, capsys):
    """main() in this process, whose factory files the test above imported (a python of its own imported torch,
    transformers and timm again: 10 s on 2 cores); each case is still rebuilt from a saved source as a worker does."""
    pytest.importorskip("transformers")
    pytest.importorskip("timm")
    monkeypatch.setattr(sys, "argv", [str(BENCH), "--check-build", "--size", "cpu", "--cases", ",".join(FAMILIES)])
    code = ag.main()
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.count("rebuilt as a worker does") == len(FAMILIES), out


# --- the grid logic, on made-up rows -----------------------------------------------------------------------------
def _advice(pick, ok=(), keep=()):
    from tcperf.advisor.trials import RecipeResult
    rows = [RecipeResult(name, "ok", timing={"mean_ms": 1.0}) for name in ok]
    rows.append(RecipeResult(pick, "ok", timing={"mean_ms": 1.0}, keep_fp32=list(keep), base="bf16" if keep else None))
    return types.SimpleNamespace(recipes=rows, verdict={"recommended": pick}, tolerance=0.05)


def test_compiled_grid_prunes_on_evidence():
    eager = [{"recipe": "fp32", "passes": True, "ms": 10.0}, {"recipe": "tf32", "passes": True, "ms": 4.0},
             {"recipe": "amp_fp16", "passes": False, "why": "overflow"},
             {"recipe": "amp_bf16", "passes": True, "ms": 2.0}]
    todo, notes = ag.compiled_grid(eager, [_advice("compile", ok=("amp_fp16+cuda_graphs",))], "infer")
    names = [h.recipe for h in todo]
    assert "fp32+compile" not in names and any(n.startswith("fp32+compile:") for n in notes)   # rule 1: 10 > 3 x 2
    assert "amp_fp16+compile" not in names and "amp_fp16+cuda_graphs" in names               # rule 2, unless ok
    assert {"tf32+compile", "tf32+cuda_graphs", "compile", "cuda_graphs", "fp8", "int8"} <= set(names)
    assert len(names) == len(set(names))


def test_picks_outside_the_grid_are_timed_once():
    advices = [_advice("bf16+fp32[lm_head]", keep=("lm_head",)), _advice("bf16+fp32[lm_head]", keep=("lm_head",)),
               _advice("compile")]
    hands = ag.pick_entries(advices, {"compile", "fp32"})
    assert [(h.recipe, h.runs, h.keep) for h in hands] == [("bf16+fp32[lm_head]", "bf16", ("lm_head",))]


def test_the_hand_grid_times_the_advisors_contenders_before_a_deadline_can_cut_them():
    from tcperf.advisor.trials import RecipeResult
    advice = _advice("cuda_graphs")          # BERT training on an H100, 2026-11-27: the advisor's ms a step
    advice.recipes += [RecipeResult(n, "ok", timing={"mean_ms": ms}) for n, ms in
                       (("tf32+compile", 27.7), ("step_graph", 9.22), ("amp_fp16+cuda_graphs", 9.91))]
    advice.recipes.append(RecipeResult("fp8+step_graph", "skipped"))
    grid = ["fp32+compile", "tf32+compile", "fp8+step_graph", "amp_fp16+cuda_graphs", "cuda_graphs", "step_graph"]
    hands = ag.contenders_first([ag.Hand(n, n) for n in grid], [advice])
    assert [h.recipe for h in hands] == ["cuda_graphs", "step_graph", "amp_fp16+cuda_graphs", "tf32+compile",
                                         "fp32+compile", "fp8+step_graph"]


def test_checks_ratio_and_repeats():
    hand = [{"recipe": "compile", "ms": 1.0, "passes": True}, {"recipe": "cuda_graphs", "ms": 1.02, "passes": True},
            {"recipe": "tf32", "ms": 2.0, "passes": True}]
    row = ag.summarize("llama_infer", "infer", [_advice("compile"), _advice("cuda_graphs")], hand, [50.0, 60.0])
    assert row["verdict"] == "PASS" and row["repeat_spread"] == pytest.approx(1.02), row["checks"]
    row = ag.summarize("llama_infer", "infer", [_advice("compile"), _advice("tf32")], hand, [50.0, 60.0])
    assert row["checks"]["ratio"] is False and row["checks"]["repeats"] is False and row["verdict"] == "FAIL"


def test_a_hand_grid_cut_by_the_deadline_is_incomplete_and_names_what_it_missed():
    import time as _time
    b = ag.Bench(None, "infer", None, {}, _advice("compile"), 0.5, deadline=_time.perf_counter() - 1)
    row = ag.by_hand_one(b, ag.Hand("int8", "int8"))                 # nothing prepared: the deadline passed
    assert row["not_reached"] and row["passes"] is None
    hand = [{"recipe": "compile", "ms": 1.0, "passes": True}, {"recipe": "tf32", "ms": 2.0, "passes": True}, row]
    r = ag.summarize("t5_infer", "infer", [_advice("compile")], hand, [50.0])
    assert r["verdict"] == "INCOMPLETE" and r["not_reached"] == ["int8"] and r["ratio"] == 1.0
    r = ag.summarize("t5_infer", "infer", [_advice("tf32")], hand, [50.0])
    assert r["verdict"] == "FAIL"                                   # a check failed on the rows reached
    r = ag.summarize("t5_infer", "infer", [_advice("int8")], hand, [50.0])
    assert r["verdict"] == "INCOMPLETE" and r["checks"]["ratio"] is None   # the pick itself was not reached


def test_a_hand_row_on_the_cpu_is_prepared_checked_and_timed():
    spec, mode = ag.build_spec("lstm_infer", "cpu")
    b = ag.make_bench(spec, [_advice("fp32")], mode, torch.device("cpu"), seconds=0.01)
    row = ag.by_hand_one(b, ag.Hand("amp_bf16", "amp_bf16"))
    assert row["passes"] and row["rel_error"] < 0.05, row
    assert row["ms"] > 0 and len(row["windows"]) == ag.WINDOWS and row["advisor_status"] is None
