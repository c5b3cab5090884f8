"""`tcperf.advise(model, example_inputs, ...)`: the whole advice for one model, in six steps.

1. shape lint (one fp32 forward, every GEMM-like op with its module and shapes, checked per candidate precision);
2. the recipes that need no compile of their own (fp32 strict, tf32, amp, fp16/bf16 weights, channels_last) and
   fp8/int8 where the model's Linear layers carry enough of its FLOPs, each in a worker process of its own
   (tcperf.engine, the model ladder's engine), checked against fp32 strict and (GPU) timed and profiled;
3. for a 16-bit recipe that misses the tolerance: the modules that cause it, and the recipe re-run with those
   modules kept in fp32;
4. on a GPU, torch.compile on top of the two fastest recipes that passed and CUDA graphs on top of the fastest
   (tf32 + compile when no 16-bit recipe meets the tolerance);
5. on a GPU, the cost of each misaligned GEMM at the recommended precision (its shape against the padded shape);
6. the verdict and the code to paste.
A stage that fails is a note in the advice; what the stages before it measured stands (and, from the command, is
already in the store: each recipe's row is stored as it arrives).

    advice = tcperf.advise(model, x, mode="infer")       # Advice; print(advice), advice.to_json(), advice.save()
"""
from __future__ import annotations

import copy

import torch

from .. import accuracy, engine
from .. import env as envmod
from .. import precision as precmod
from ..errors import UserError
from ..recipes import EXTRAS, get as get_recipe, on_top
from . import lint, load, measure, sensitive, share, verdict
from .result import Advice

MODES = ("infer", "train")
MAX_KEPT = 16           # more culprits than this and keeping them in fp32 is not a mixed recipe any more
TOP_BASES = 2           # torch.compile goes on top of this many of the fastest passing recipes


def advise(model, example_inputs, *, loss_fn=None, metric_fn=None, mode: str = "infer", tolerance=None,
           device=None, recipes=None, steps: int = measure.TRAIN_STEPS, log=None,
           timeout: float = measure.DEFAULT_TIMEOUT, isolate: bool = True) -> Advice:
    """Advise on `model` run on `example_inputs` (a tensor, a tuple of positional arguments or a dict of keyword
    arguments). The model is copied; the original is left as it was. Each recipe runs in a worker process (the
    model is pickled to it) unless isolate=False or it cannot be pickled. Bad input raises UserError."""
    spec = load.build(model, example_inputs, loss_fn, metric_fn)
    spec.model = copy.deepcopy(spec.model)
    return run(spec, mode=mode, tolerance=tolerance, device=device, recipes=recipes, steps=steps, log=log,
               timeout=timeout, isolate=isolate)


def check_args(mode: str, tolerance, recipes, steps: int = measure.TRAIN_STEPS, timeout=None) -> float:
    """UserError for a bad mode, tolerance, recipe name, step count or timeout; returns the tolerance to use."""
    if mode not in MODES:
        raise UserError(f"unknown mode {mode!r}; choose from: {', '.join(MODES)}")
    if tolerance is not None and not (isinstance(tolerance, (int, float)) and tolerance > 0):
        raise UserError(f"tolerance must be a positive number (relative error), not {tolerance!r}")
    if not (isinstance(steps, int) and steps >= 1):
        raise UserError(f"steps must be a whole number >= 1, not {steps!r}")
    if timeout is not None and not (isinstance(timeout, (int, float)) and timeout > 0):
        raise UserError(f"timeout must be a positive number of seconds, not {timeout!r}")
    for name in recipes or ():
        measure.recipes_module().get(name)          # UserError naming the valid recipes
    return float(tolerance) if tolerance is not None else measure.DEFAULT_TOLERANCE[mode]


def run(spec: load.Spec, *, mode: str = "infer", tolerance=None, device=None, recipes=None,
        steps: int = measure.TRAIN_STEPS, log=None, timeout: float = measure.DEFAULT_TIMEOUT,
        target: str | None = None, isolate: bool = True, on_result=None) -> Advice:
    """The six steps on a loaded spec (see the module docstring). target: the spec's 'file.py:factory', so that the
    workers rebuild it from there. on_result(RecipeResult) sees each recipe as it is measured."""
    tol = check_args(mode, tolerance, recipes, steps, timeout)
    device = device if isinstance(device, torch.device) else envmod.parse_device(device)
    log = log or (lambda text: None)
    notes = _notes(spec, mode, device)
    spec = load.on_device(spec, device)
    with precmod.apply("fp32", device.type):
        load.check(spec, mode)                         # the inputs the model rejects: UserError, nothing stored
        layers = _stage("the shape lint", notes, log, lambda: lint.record(spec.model, spec.args, spec.kwargs), [])
    kind = measure.model_kind(spec.model)

    def got(r: measure.RecipeResult) -> None:
        log(_progress_line(r))
        if on_result:
            on_result(r)

    with measure.Bench(spec, mode, device, tol, steps, target=target, timeout=timeout, isolate=isolate,
                       on_result=got) as bench:
        notes += bench.notes
        results = _eager(bench, recipes, got)
        found = _stage("the sensitive-layer search", notes, log,
                       lambda: find_sensitive(bench, results, tol, log), {})
        if device.type == "cuda" and not recipes:
            results += _stage("compile and CUDA graphs", notes, log, lambda: bench.run(compile_tier(results)), [])
    notes += _reference_notes(results)
    measure.add_speedups(results)
    chosen = verdict.choose(results) if device.type == "cuda" else None
    lint.flag(layers, measure.lint_precisions(mode, recipes), _sm_count(device))
    fixes = _stage("the cost of misaligned shapes", notes, log,
                   lambda: _shape_costs(layers, chosen, results, device, mode), [])
    v = verdict.decide(results, fixes, mode, device.type, kind)
    return Advice(model=spec.name, mode=mode, device=str(device), gpu=_gpu_name(device), tolerance=tol,
                  recipes=results, layers=layers, lint_summary=lint.summary(layers), sensitive=found,
                  share=share.summary(results, chosen), verdict=v, notes=notes, env=envmod.collect(device))


def _stage(what: str, notes: list, log, fn, default):
    """Run one stage of the advice; a stage that fails becomes a note, and the advice goes on without it."""
    try:
        return fn()
    except UserError:
        raise
    except Exception as e:      # noqa: BLE001 - what earlier stages measured must survive a later one's bug
        note = f"{what} failed ({load.one_line(e)}); the advice goes on without it"
        notes.append(note)
        log(note)
        return default


def _eager(bench: measure.Bench, recipes, got) -> list[measure.RecipeResult]:
    """fp32 first (the reference and the baseline), then every other candidate; skips known without a worker are
    recorded at once."""
    plan = measure.candidates(bench.mode, bench.device, _with_baseline(recipes))
    results = [measure.skipped(name, why) for name, why in plan if why]
    for r in results:
        got(r)
    results += bench.run([measure.Item(name) for name, why in plan if not why])
    order = [name for name, _ in plan]
    return sorted(results, key=lambda r: order.index(r.recipe) if r.recipe in order else len(order))


def compile_tier(results: list[measure.RecipeResult]) -> list[measure.Item]:
    """torch.compile on top of the TOP_BASES fastest passing recipes that do not compile yet, and CUDA graphs on top
    of the fastest (mixed recipes keep their fp32 modules): each compile of a large model costs tens of seconds."""
    eager = sorted((r for r in results if r.passes and r.step_ms and not get_recipe(r.runs).compile),
                   key=lambda r: r.step_ms)
    seen, items = {r.recipe for r in results}, []
    for i, r in enumerate(eager[:TOP_BASES]):
        for extra in EXTRAS if i == 0 else EXTRAS[:1]:
            name = on_top(r.runs, extra)
            label = f"{r.recipe}+{extra}" if r.keep_fp32 else name
            if label not in seen:
                seen.add(label)
                items.append(measure.Item(name, tuple(r.keep_fp32), label if r.keep_fp32 else None,
                                          name if r.keep_fp32 else None))
    return items


def _reference_notes(results: list[measure.RecipeResult]) -> list[str]:
    """What the fp32 reference itself warns about (a degenerate output), said once."""
    fp32 = next((r for r in results if r.recipe == "fp32"), None)
    return [w for w in (fp32.warnings if fp32 else []) if w.startswith("fp32's output is degenerate")]


def _eager_ms(chosen, results) -> float | None:
    """The step time of the eager recipe at the chosen recipe's precision (the chosen one if none ran)."""
    eager = get_recipe(chosen.runs).precision
    for r in results:
        if r.recipe == eager and r.status == "ok" and r.step_ms:
            return r.step_ms
    return chosen.step_ms


def _with_baseline(recipes) -> list[str] | None:
    if not recipes:
        return None
    return ["fp32", *[r for r in recipes if r != "fp32"]]


def _progress_line(r: measure.RecipeResult) -> str:
    timing = f" {r.step_ms:.3g} ms" if r.step_ms else ""
    return f"{r.recipe}: {r.status}{timing}{' (' + r.message + ')' if r.message else ''}"


def _sm_count(device: torch.device) -> int | None:
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else None


def _gpu_name(device: torch.device) -> str | None:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else None


def _notes(spec: load.Spec, mode: str, device: torch.device) -> list[str]:
    notes = []
    if device.type != "cuda":
        notes.append(verdict.GPU_NEEDED)
    if mode == "train" and spec.metric_fn is not None:
        notes.append("metric_fn is used in inference mode only; training compares the loss")
    if mode == "train" and spec.loss_fn is None:
        notes.append("no loss_fn: training used the recipes' default loss (cross-entropy against integer targets, "
                     "else the mean square of the outputs)")
    return notes


# --- step 3: sensitive modules ------------------------------------------------------------------------------------
def _failing_lowp(results: list[measure.RecipeResult]) -> dict[tuple, measure.RecipeResult]:
    """(dtype, weights cast?) -> the recipe to repair: the fastest failing one of that kind (the first on a CPU)."""
    out: dict[tuple, measure.RecipeResult] = {}
    for r in results:
        key = measure.lowp_of(r.recipe) if r.status == "fails" and not r.base else None
        if not key:
            continue
        best = out.get(key)
        if best is None or (r.step_ms and best.step_ms and r.step_ms < best.step_ms):
            out[key] = r
    return out


def find_sensitive(bench: measure.Bench, results: list, tol: float, log) -> dict:
    """For each 16-bit kind whose recipe misses the tolerance: the culprit modules (searched in a worker, with the
    timeout) and the mixed recipe that keeps them in fp32, appended to `results`."""
    found = {}
    for (dtype, cast), base in _failing_lowp(results).items():
        key = f"{dtype} weights" if cast else dtype
        case = {"op": "advise.sensitive", "suite": "advise", "shape": {"model": bench.spec.name},
                "precision": f"search:{base.recipe}", "task": "tcperf.advisor.api:sensitive_task",
                "source": bench.source, "mode": bench.mode, "dtype": dtype, "cast": cast, "tolerance": tol}
        row = bench.call(case)
        if row["status"] != "ok":
            found[key] = {"modules": [], "errors": {}, "tests": 0, "base": base.recipe, "dtype": key,
                          "failed": f"{row['status']}: {row.get('message', '')}"}
            continue
        s = {**row["metrics"]["sensitive"], "base": base.recipe, "dtype": key}
        log(f"{base.recipe} misses the tolerance; modules that break it alone in {key}: "
            f"{', '.join(s['modules']) or 'none'}")
        if s["modules"] and len(s["modules"]) <= MAX_KEPT:
            r = bench.run([_mixed(base, s["modules"])])[0]
            results.append(r)
            s["mixed"] = f"{r.recipe}: {r.status}" + (f" ({r.message})" if r.message else "")
        found[key] = s
    return found


def _mixed(base: measure.RecipeResult, modules: list[str]) -> measure.Item:
    label = f"{base.recipe}+fp32[{','.join(modules)}]" if len(modules) <= 2 else \
        f"{base.recipe}+fp32[{len(modules)} modules]"
    return measure.Item(base.recipe, tuple(modules), label, base.recipe)


preload = engine.preload      # the worker loads the spec while it waits for its turn


def sensitive_task(case: dict, device, job: dict) -> dict:
    """The worker's side of the search: the spec rebuilt, the culprits found."""
    spec = engine.spec_of(case, device)
    s = search(spec, case["mode"], device, case["dtype"], case["cast"], case["tolerance"])
    return {"op": case["op"], "suite": case["suite"], "shape": case["shape"], "precision": case["precision"],
            "status": "ok", "metrics": {"sensitive": s}}


def search(spec: load.Spec, mode: str, device, dtype: str, cast: bool, tol: float) -> dict:
    """Which modules alone, in `dtype` (autocast, or weights cast), push the outputs past the tolerance."""
    device = torch.device(device)
    forward = _forward(spec, mode)
    metric = spec.metric_fn if mode == "infer" else None
    with precmod.apply("fp32", device.type), torch.no_grad():
        out_ref = forward()
    refs = accuracy.check_outputs(out_ref)
    metric_ref = float(metric(out_ref)) if metric else None
    if mode == "train":       # a share of the loss's fall is no output error: the inference default, scaled alike
        tol = tol / measure.DEFAULT_TOLERANCE["train"] * measure.DEFAULT_TOLERANCE["infer"]

    def error_of(out) -> float:
        acc = accuracy.compare_outputs(accuracy.check_outputs(out), refs)
        if acc["nonfinite"]:
            return float("inf")
        return accuracy.rel_change(float(metric(out)), metric_ref) if metric else acc["rel_error"]

    with precmod.apply("fp32", device.type):
        return sensitive.find(spec.model, forward, getattr(torch, dtype), device.type, error_of, tol,
                              cast_weights=cast)


def _forward(spec: load.Spec, mode: str):
    def run():
        torch.manual_seed(0)          # the same dropout masks in every forward of the search
        return spec.model(*spec.args, **spec.kwargs)
    spec.model.train(mode == "train")
    return run


# --- step 5: what the misaligned shapes cost ----------------------------------------------------------------------
def _shape_costs(layers, chosen, results, device: torch.device, mode: str) -> list:
    """On a GPU, at the recommended recipe's GEMM precision: time the misaligned GEMMs at their shape and padded.

    Their share is taken of the eager step at that precision (amp_bf16 for a compiled bf16 recipe): the GEMMs are
    timed eagerly, and torch.compile may pad a misaligned GEMM itself (seen on an H200: inductor ran GPT-2-style
    50257-wide heads at the aligned speed), so a compiled step is no fair denominator."""
    if device.type != "cuda" or chosen is None:
        return []
    prec = measure.kernel_precision(chosen.runs)
    if prec == "fp32":
        return []
    lint.measure_costs(layers, prec, device, _eager_ms(chosen, results), mode)
    return lint.worth_fixing(layers)
