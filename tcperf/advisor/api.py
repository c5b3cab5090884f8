"""`tcperf.advise(model, example_inputs, ...)`: the whole advice for one model, in five steps.

1. shape lint (one fp32 forward, every GEMM-like op with its module and shapes, checked per candidate precision);
2. the model ladder's recipes, each checked against fp32 strict and (GPU) timed and profiled;
3. for an autocast recipe that misses the tolerance: the modules that cause it, and the recipe re-run with those
   modules kept in fp32;
4. on a GPU, the cost of each misaligned GEMM at the recommended precision (its shape against the padded shape);
5. the verdict and the code to paste.

    advice = tcperf.advise(model, x, mode="infer")       # Advice; print(advice), advice.to_json(), advice.save()
"""
from __future__ import annotations

import copy

import torch

from .. import env as envmod
from .. import precision as precmod
from ..errors import UserError
from . import lint, load, measure, sensitive, share, verdict
from .result import Advice

MODES = ("infer", "train")
MAX_KEPT = 16           # more culprits than this and keeping them in fp32 is not a mixed recipe any more


def advise(model, example_inputs, *, loss_fn=None, metric_fn=None, mode: str = "infer", tolerance=None,
           device=None, recipes=None, steps: int = measure.TRAIN_STEPS, log=None) -> Advice:
    """Advise on `model` run on `example_inputs` (a tensor, a tuple of positional arguments or a dict of keyword
    arguments). The model is copied; the original is left as it was. Bad input raises tcperf.errors.UserError."""
    spec = load.build(model, example_inputs, loss_fn, metric_fn)
    spec.model = copy.deepcopy(spec.model)
    return run(spec, mode=mode, tolerance=tolerance, device=device, recipes=recipes, steps=steps, log=log)


def check_args(mode: str, tolerance, recipes, steps: int = measure.TRAIN_STEPS) -> float:
    """UserError for a bad mode, tolerance, recipe name or step count; returns the tolerance to use."""
    if mode not in MODES:
        raise UserError(f"unknown mode {mode!r}; choose from: {', '.join(MODES)}")
    if tolerance is not None and not (isinstance(tolerance, (int, float)) and tolerance > 0):
        raise UserError(f"tolerance must be a positive number (relative error), not {tolerance!r}")
    if not (isinstance(steps, int) and steps >= 1):
        raise UserError(f"steps must be a whole number >= 1, not {steps!r}")
    for name in recipes or ():
        measure.recipes_module().get(name)          # UserError naming the valid recipes
    return float(tolerance) if tolerance is not None else measure.DEFAULT_TOLERANCE[mode]


def run(spec: load.Spec, *, mode: str = "infer", tolerance=None, device=None, recipes=None,
        steps: int = measure.TRAIN_STEPS, log=None) -> Advice:
    """The five steps on a loaded spec (see the module docstring). Everything is checked before anything is timed."""
    tol = check_args(mode, tolerance, recipes, steps)
    device = device if isinstance(device, torch.device) else envmod.parse_device(device)
    log = log or (lambda text: None)
    spec = load.on_device(spec, device)
    with precmod.apply("fp32", device.type):
        load.check(spec, mode)                         # the inputs the model rejects: UserError, nothing stored
        layers = lint.record(spec.model, spec.args, spec.kwargs)
    names = _with_baseline(recipes)
    results, ref = measure.run_ladder(spec, mode, device, tol, names, steps,
                                      on_result=lambda r: log(_progress_line(r)))
    found = find_sensitive(spec, results, ref, mode, device, tol, steps, log)
    measure.add_speedups(results)
    chosen = verdict.choose(results) if device.type == "cuda" else None
    lint.flag(layers, measure.lint_precisions(mode, spec.model, names), _sm_count(device))
    fixes = _shape_costs(layers, chosen, results, device, mode)
    v = verdict.decide(results, fixes, mode, device.type, measure.model_kind(spec.model))
    return Advice(model=spec.name, mode=mode, device=str(device), gpu=_gpu_name(device), tolerance=tol,
                  recipes=results, layers=layers, lint_summary=lint.summary(layers), sensitive=found,
                  share=share.summary(results, chosen), verdict=v, notes=_notes(spec, mode, device),
                  env=envmod.collect(device))


def _eager_ms(chosen, results) -> float | None:
    """The step time of the eager rung under the chosen recipe's precision (the chosen one if none ran)."""
    from ..recipes import RECIPES
    rec = RECIPES.get(chosen.base or chosen.recipe)
    eager = rec.precision if rec else None
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
def _failing_autocast(results: list[measure.RecipeResult]) -> dict[str, measure.RecipeResult]:
    """autocast dtype -> the recipe to repair: the fastest failing one with that dtype (the first on a CPU)."""
    out: dict[str, measure.RecipeResult] = {}
    for r in results:
        dtype = measure.autocast_of(r.recipe) if r.status == "fails" and not r.base else None
        if not dtype:
            continue
        best = out.get(dtype)
        if best is None or (r.step_ms and best.step_ms and r.step_ms < best.step_ms):
            out[dtype] = r
    return out


def _forward(spec: load.Spec, mode: str):
    def run():
        torch.manual_seed(0)          # the same dropout masks in every forward of the search
        return spec.model(*spec.args, **spec.kwargs)
    spec.model.train(mode == "train")
    return run


def find_sensitive(spec: load.Spec, results: list, ref, mode: str, device: torch.device, tol: float, steps: int,
                   log) -> dict:
    """For each autocast dtype whose recipe misses the tolerance: the culprit modules and the mixed recipe."""
    found = {}
    for dtype, base in _failing_autocast(results).items():
        forward = _forward(spec, mode)
        with precmod.apply("fp32", device.type), torch.no_grad():
            out_ref = forward()
        search_tol = max(tol, measure.DEFAULT_TOLERANCE["infer"]) if mode == "train" else tol
        metric = spec.metric_fn if mode == "infer" else None

        def error_of(out):
            acc = measure.compare_outputs(out, out_ref, metric)
            return acc.get("metric_change", acc["rel_error"]) if not acc["nonfinite"] else float("inf")

        with precmod.apply("fp32", device.type):
            s = sensitive.find(spec.model, forward, getattr(torch, dtype), device.type, error_of, search_tol)
        s["base"] = base.recipe
        log(f"{base.recipe} misses the tolerance; modules that break it alone in {dtype}: "
            f"{', '.join(s['modules']) or 'none'}")
        if s["modules"] and len(s["modules"]) <= MAX_KEPT:
            r = _mixed(spec, base, s["modules"], ref, mode, device, tol, steps)
            results.append(r)
            s["mixed"] = f"{r.recipe}: {r.status}" + (f" ({r.message})" if r.message else "")
            log(_progress_line(r))
        found[dtype] = s
    return found


def _mixed(spec, base, modules, ref, mode, device, tol, steps) -> measure.RecipeResult:
    label = f"{base.recipe}+fp32[{','.join(modules)}]" if len(modules) <= 2 else \
        f"{base.recipe}+fp32[{len(modules)} modules]"
    return measure.run_recipe(spec, base.recipe, mode, device, ref, tol, keep=modules, base=base.recipe,
                              steps=steps, label=label)


# --- step 4: what the misaligned shapes cost ----------------------------------------------------------------------
def _shape_costs(layers, chosen, results, device: torch.device, mode: str) -> list:
    """On a GPU, at the recommended recipe's GEMM precision: time the misaligned GEMMs at their shape and padded.

    Their share is taken of the eager step at that precision (amp_bf16 for a compiled bf16 recipe): the GEMMs are
    timed eagerly, and torch.compile may pad a misaligned GEMM itself (seen on an H200: inductor ran GPT-2-style
    50257-wide heads at the aligned speed), so a compiled step is no fair denominator."""
    if device.type != "cuda" or chosen is None:
        return []
    prec = measure.kernel_precision(chosen.base or chosen.recipe)
    if prec == "fp32":
        return []
    lint.measure_costs(layers, prec, device, _eager_ms(chosen, results), mode)
    return lint.worth_fixing(layers)
