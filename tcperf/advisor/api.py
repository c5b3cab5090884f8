"""`tcperf.advise(model, example_inputs, ...)`: the whole advice for one model, in six steps.

1. the probe, in a worker under --timeout (tcperf.advisor.probe): the factory, one fp32 forward, the shape lint,
   which recipes apply, the fp32 reference;
2. the search (tcperf.advisor.search): every base recipe that applies, each in a worker, checked against fp32 strict
   and (GPU) timed; for a 16-bit recipe that misses the tolerance, the modules that cause it kept in fp32
   (find_sensitive); torch.compile and CUDA graphs on top of each passing recipe the kernel times leave a chance;
3. the runoff (tcperf.advisor.runoff): the leaders re-timed interleaved; the pick and its margin with its spread;
4. with a workload (the factory's `workload`, tcperf.workload): the leading recipes and the ways of meeting its
   varying shapes, each timed on the workload's stream from cold (tcperf.advisor.streams);
5. on a GPU, the cost of each misaligned GEMM at the pick's precision (its shape against the padded shape);
6. the verdict: the cheapest job of `steps` steps (tcperf.advisor.job), its distance from the speed of light
   (tcperf.advisor.limit), and the code to paste.
A stage that fails after the probe is a note in the advice; what the stages before it measured stands (and, from the
command, is already in the store: each recipe's row is stored as it arrives).
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass

import torch

from .. import accuracy, engine, peaks
from .. import env as envmod
from .. import precision as precmod
from ..errors import UserError, finite_positive, one_line
from ..records import Case, Job, Result
from ..recipes import get as get_recipe
from .. import source
from . import limit, lint, sensitive, streams, trials, verdict
from .result import Advice
from .search import TIERS, Search, default_jobs, tier_of

MODES = ("infer", "train")
WORKLOAD_BUDGET_S = 150.0   # --budget's default with a workload (issue 57's target for a model of up to 150M
#                             parameters on one H100); None on one input
MAX_KEPT = 16           # more culprits than this and keeping them in fp32 is not a mixed recipe any more
SPARES_PER_JOB = 2      # workers started ahead of the recipes, per parallel job: two waves (on an H200 with 8 jobs,
#                         one wave's replacements took 16 s to be ready, and the compiled tiers waited for them)


def advise(model, example_inputs=None, *, loss_fn=None, metric_fn=None, workload=None, mode: str = "infer",
           tolerance=None, device=None, recipes=None, steps: int | None = None,
           check_steps: int = trials.TRAIN_STEPS, log=None, timeout: float = trials.DEFAULT_TIMEOUT,
           isolate: bool = True, budget=None, jobs=None, ceilings=None, progress=None) -> Advice:
    """Advise on `model` run on `example_inputs` (a tensor, a tuple of positional arguments or a dict of keyword
    arguments) or on a `workload` (a list of such inputs, or workload(step) -> inputs: tcperf.workload) for a job
    of `steps` steps (None: long enough that one-time costs vanish). The model is copied; the original is left as
    it was. Each recipe runs in a worker process (the model is pickled to it) unless isolate=False or it cannot be
    pickled. check_steps: training steps the accuracy check compares. Bad input raises UserError."""
    spec = source.build(model, example_inputs, loss_fn, metric_fn, workload=workload)
    spec.model = copy.deepcopy(spec.model)
    return run(spec, mode=mode, tolerance=tolerance, device=device, recipes=recipes, steps=steps,
               check_steps=check_steps, log=log, timeout=timeout, isolate=isolate, budget=budget, jobs=jobs,
               ceilings=ceilings, progress=progress)


def check_args(mode: str, tolerance, recipes, check_steps: int = trials.TRAIN_STEPS, timeout=None, budget=None,
               jobs=None, steps=None) -> float:
    """UserError for a bad mode, tolerance, recipe name, step count, timeout, budget or job count; returns the
    tolerance to use."""
    if mode not in MODES:
        raise UserError(f"unknown mode {mode!r}; choose from: {', '.join(MODES)}")
    if tolerance is not None and not finite_positive(tolerance):
        raise UserError(f"tolerance must be a positive number (relative error), not {tolerance!r}")
    for what, value in (("check steps", check_steps), ("steps", 1 if steps is None else steps)):
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            raise UserError(f"{what} must be a whole number >= 1, not {value!r}")
    for what, value in (("timeout", timeout), ("budget", budget)):
        if value is not None and not finite_positive(value):
            raise UserError(f"{what} must be a positive number of seconds, not {value!r}")
    if jobs is not None and not (isinstance(jobs, int) and jobs >= 1):
        raise UserError(f"jobs must be a whole number >= 1, not {jobs!r}")
    for name in recipes or ():
        get_recipe(name)    # UserError naming the valid recipes
    return float(tolerance) if tolerance is not None else trials.DEFAULT_TOLERANCE[mode]


def run(spec: source.Spec | None = None, *, mode: str = "infer", tolerance=None, device=None, recipes=None,
        steps: int | None = None, check_steps: int = trials.TRAIN_STEPS, log=None,
        timeout: float = trials.DEFAULT_TIMEOUT, target: str | None = None, isolate: bool = True, on_result=None,
        budget=None, jobs=None, ceilings=None, progress=None) -> Advice:
    """The advice on a model given as a spec in memory or as a factory `target` ('file.py:factory': then nothing of
    the user's runs in this process). on_result(RecipeResult) sees each recipe as it is measured; progress(done,
    total, seconds_left, recipe) after each; budget: seconds the advice may take (None: no limit on one input,
    WORKLOAD_BUDGET_S with a workload); ceilings: this GPU's measured ceilings (tcperf.peaks.measured), else the
    speed of light measures its own."""
    started = time.perf_counter()
    tol = check_args(mode, tolerance, recipes, check_steps, timeout, budget, jobs, steps)
    device = device if isinstance(device, torch.device) else envmod.parse_device(device)
    log = log or (lambda text: None)

    def got(r: trials.RecipeResult) -> None:
        log(_progress_line(r))
        if on_result:
            on_result(r)

    phases: dict[str, float] = {}
    jobs = jobs or default_jobs(device)
    with trials.Bench(mode, device, tol, check_steps, spec=None if target else spec, target=target,
                       timeout=timeout, isolate=isolate, on_result=got) as bench:
        cores = str(max(1, envmod.usable_cores() // jobs))     # each worker's share of the cores
        bench.env = {"TORCHINDUCTOR_COMPILE_THREADS": cores, "OMP_NUM_THREADS": cores}
        bench.start_spares(SPARES_PER_JOB * jobs)   # while the probe looks at the model, the recipes' workers start
        plan = trials.candidates(mode, device, _with_baseline(recipes))
        facts = bench.probe([name for name, why in plan if not why])
        phases["probe_s"] = time.perf_counter() - started
        phases.update({f"probe_{stage}_s": s for stage, s in facts.times.items()})
        notes = ([verdict.GPU_NEEDED] if device.type != "cuda" else []) + bench.notes + facts.notes
        layers = facts.layers
        lint.flag(layers, trials.lint_precisions(mode, recipes), _sm_count(device))
        budget = budget if budget is not None else WORKLOAD_BUDGET_S if facts.workload else None
        # with a workload the one-shape grid only ranks the precisions (eager): the ways of meeting varying shapes
        # are measured on the stream, where a compile's cost is what the job pays (tcperf.advisor.streams)
        search = Search(bench, jobs=jobs, budget=budget, progress=progress, log=log, started=started,
                        grow=not recipes and not facts.workload, layers=layers, runoff=not facts.workload)
        found: dict = {}

        def sensitive_items(results):
            t0 = time.perf_counter()
            more = _stage("the sensitive-layer search", notes, log,
                          lambda: find_sensitive(bench, results, tol, log, found), [])
            phases["sensitive_s"] = time.perf_counter() - t0
            return more

        later = later_on_stream(plan, facts, device)
        results = _in_order(search.run(_first(plan, facts, search, later), after_eager=sensitive_items), plan)
        phases.update(search.phases)
        trials.add_speedups(results)
        ceilings = dict(ceilings or {})     # the workload stage adds what it measures; the speed of light reuses it
        deadline = started + budget if budget else None
        streamed = _workload_stage(bench, facts, results, steps, notes, log, progress, phases, ceilings, deadline,
                                    later)
    notes += _reference_notes(results) + _search_notes(search)
    chosen = verdict.choose(results, search.decision) if device.type == "cuda" else None
    t0 = time.perf_counter()
    fixes = _stage("the cost of misaligned shapes", notes, log,
                   lambda: _shape_costs(layers, chosen, results, device, mode), [])
    phases["shape_costs_s"] = time.perf_counter() - t0
    v = verdict.decide(results, fixes, mode, device.type, facts.kind, search.summary(),
                       stream=streamed if facts.workload else None,
                       steps=steps, varying=(facts.workload or {}).get("varying"))
    picked = next((r for r in streamed or results if r.recipe == v.get("recommended")), None)
    v["limit"] = _stage("the speed of light", notes, log,
                        lambda: _speed_of_light(picked, facts, mode, device, ceilings), None)
    v["limit_sentence"] = limit.sentence(v["limit"])
    phases["total_s"] = time.perf_counter() - started
    return Advice(model=facts.name, mode=mode, device=str(device), gpu=_gpu_name(device), tolerance=tol,
                  recipes=results, layers=layers, lint_summary=lint.summary(layers), sensitive=found,
                  share=share_summary(results, chosen), verdict=v, notes=notes, env=envmod.collect(device),
                  phases=phases, stream=streamed, workload=facts.workload, steps=steps)


def _workload_stage(bench, facts, results, steps, notes, log, progress, phases, ceilings: dict,
                    deadline: float | None, later: tuple = ()) -> list:
    """With a workload and a recipe that passed: the leading recipes on its stream, each alone and cold
    (tcperf.advisor.streams), once the workers the search kept are closed."""
    if not facts.workload:
        return []
    if not any(r.passes for r in results):
        notes.append("the workload was not timed: no recipe passed on the example input")
        return []
    t0 = time.perf_counter()
    if bench.spares is not None:
        bench.spares.close()
    sol_of = _sol_of(facts, bench, ceilings, notes, log) if bench.device.type == "cuda" else None
    stage = _stage("the workload", notes, log,
                   lambda: streams.run(bench, results, facts.workload, steps, convs=facts.kind == "cnn",
                                       sol_of=sol_of, deadline=deadline, later=later, log=log,
                                       progress=progress),
                   streams.Stage())
    for r in stage.results:
        bench.report(r)          # stored, and logged, as the search's recipes are
    if facts.workload.get("pad_refused"):
        notes.append(f"padded recipes not tried on the workload: {facts.workload['pad_refused']}")
    if facts.workload.get("untraced") and bench.device.type == "cuda":
        notes.append(f"torch.compile runs {', '.join(facts.workload['untraced'])} eagerly, between its graphs: CUDA "
                     "graphs were not counted on to remove those launches")
    if stage.untried:
        notes.append(f"--budget ran out on the workload: not tried: {', '.join(stage.untried)}")
    phases["workload_s"] = time.perf_counter() - t0
    return stage.results


def _sol_of(facts, bench, ceilings: dict, notes: list, log):
    """recipe -> the least ms a step of it can take on the stream (tcperf.advisor.limit.floor), the ceilings of its
    precision measured once where the store has none (into `ceilings`)."""
    def sol_ms(name: str) -> float | None:
        ceilings.update(_stage("the ceilings", notes, log, lambda: _ceilings_for(name, bench.device, ceilings), {}))
        found = limit.floor(name, facts.workload.get("flops_per_step"), facts.params, bench.mode, ceilings)
        return found and found["sol_ms"]
    return sol_ms


def _ceilings_for(name: str, device, ceilings: dict | None) -> dict:
    """This GPU's Tensor Core ceiling at the recipe's precision and its copy bandwidth: those given (the store's),
    else measured now (tcperf.peaks.measure_now)."""
    prec = trials.kernel_precision(name.split("@")[0])
    found = dict(ceilings or {})
    if not (found.get(prec) and found.get("bandwidth")):
        found = {**peaks.measure_now(device, prec), **{k: v for k, v in found.items() if v}}
    return found


def _speed_of_light(picked, facts, mode: str, device, ceilings) -> dict | None:
    """On a GPU: the pick's step against FLOPs at the ceiling and bytes at the bandwidth (tcperf.advisor.limit)."""
    if device.type != "cuda" or picked is None:
        return None
    flops = (facts.workload or {}).get("flops_per_step") if picked.stream else facts.flops
    return limit.of(picked, flops, facts.params, mode, _ceilings_for(picked.runs, device, ceilings))


def _first(plan, facts, search: Search, later: tuple = ()) -> list[trials.Item]:
    """The base recipes that apply to this model; those that do not are recorded at once with the reason. `later`
    (later_on_stream: with a workload on a GPU, fp8 and int8, compiled by definition) go to the stream only: their
    compile at one example shape says nothing of what the stream's shapes cost, and took 45-65 s of T5's budget."""
    items = []
    for name, why in plan:
        why = why or facts.skips.get(name) or (STREAM_ONLY if name in later else None)
        if why:
            search._record(trials.skipped(name, why))
        else:
            items.append(trials.Item(name))
    return items


STREAM_ONLY = "compiled by definition: tried on the workload's stream only, with its varying dimensions marked"


def later_on_stream(plan, facts, device) -> tuple[str, ...]:
    """The recipes compiled by definition (fp8, int8) that apply, where a workload is measured on a GPU."""
    if not facts.workload or device.type != "cuda":
        return ()
    return tuple(name for name, why in plan if not (why or facts.skips.get(name)) and
                 (get_recipe(name).fp8 or get_recipe(name).int8))


def _in_order(results: list[trials.RecipeResult], plan) -> list[trials.RecipeResult]:
    """Tier by tier (eager, compile, CUDA graphs, ...), each in ladder order (mixed recipes after their base)."""
    order = [name for name, _ in plan]

    def key(r):
        root = r.runs.split("+")[0]
        root = "amp_bf16" if root in ("compile", "cuda_graphs", "step_graph") else root
        return TIERS.index(tier_of(r.runs)), order.index(root) if root in order else len(order), bool(r.keep_fp32)
    return sorted(results, key=key)


def _stage(what: str, notes: list, log, fn, default):
    """Run one stage of the advice; a stage that fails becomes a note, and the advice goes on without it."""
    try:
        return fn()
    except UserError:
        raise
    except Exception as e:      # noqa: BLE001 - what earlier stages measured must survive a later one's bug
        note = f"{what} failed ({one_line(e)}); the advice goes on without it"
        notes.append(note)
        log(note)
        return default


def _search_notes(search: Search) -> list[str]:
    notes = []
    if search.untried:
        notes.append(f"--budget {search.budget:g} s ran out: not tried: {', '.join(search.untried)} "
                     f"(and any tier above them)")
    if search.pruned:
        notes.append(f"pruned on measured kernel time (they could not beat the best step): "
                     f"{', '.join(search.pruned)}")
    return notes


def _reference_notes(results: list[trials.RecipeResult]) -> list[str]:
    """What the fp32 reference itself warns about (a degenerate output), said once."""
    fp32 = next((r for r in results if r.recipe == "fp32"), None)
    return [w for w in (fp32.warnings if fp32 else []) if w.startswith("fp32's output is degenerate")]


def _eager_ms(chosen, results) -> float | None:
    """The step time of the eager recipe at the chosen recipe's precision (the chosen one if none ran)."""
    eager = get_recipe(chosen.runs).precision
    return next((r.step_ms for r in results if r.recipe == eager and r.passes and r.step_ms), chosen.step_ms)


def _with_baseline(recipes) -> list[str] | None:
    return ["fp32", *[r for r in recipes if r != "fp32"]] if recipes else None


def _progress_line(r: trials.RecipeResult) -> str:
    timing = f" {r.step_ms:.3g} ms" if r.step_ms else ""
    return f"{r.recipe}: {r.status}{timing}{' (' + r.message + ')' if r.message else ''}"


def _sm_count(device: torch.device) -> int | None:
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else None


def _gpu_name(device: torch.device) -> str | None:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else None


# --- step 3: sensitive modules ------------------------------------------------------------------------------------
def _failing_lowp(results: list[trials.RecipeResult]) -> dict[tuple, trials.RecipeResult]:
    """(dtype, weights cast?) -> the recipe to repair: the fastest failing one of that kind (the first on a CPU)."""
    out: dict[tuple, trials.RecipeResult] = {}
    for r in results:
        key = trials.lowp_of(r.recipe) if r.status == "fails" and not r.base else None
        if not key:
            continue
        best = out.get(key)
        if best is None or (r.step_ms and best.step_ms and r.step_ms < best.step_ms):
            out[key] = r
    return out


def find_sensitive(bench: trials.Bench, results: list, tol: float, log, found: dict) -> list[trials.Item]:
    """For each 16-bit kind whose recipe misses the tolerance: the culprit modules (searched in a worker, with the
    timeout), into `found`; returns the mixed recipes that keep them in fp32, for the search to run."""
    items = []
    for (dtype, cast), base in _failing_lowp(results).items():
        key = f"{dtype} weights" if cast else dtype
        args = SensitiveArgs(bench.args(trials.Item(base.recipe)), dtype, cast, tol)
        row = bench.call(Case("advise.sensitive", {"model": bench.name}, base.recipe, sensitive_task, suite="advise",
                              args=args, preload=preload_sensitive))
        if row.status != "ok":
            found[key] = {"modules": [], "errors": {}, "tests": 0, "base": base.recipe, "dtype": key,
                          "failed": f"{row.status}: {row.message}"}
            continue
        s = {**row.metrics["sensitive"], "base": base.recipe, "dtype": key}
        log(f"{base.recipe} misses the tolerance; modules that break it alone in {key}: "
            f"{', '.join(s['modules']) or 'none'}")
        if s["modules"] and len(s["modules"]) <= MAX_KEPT:
            items.append(_mixed(base, s["modules"]))
            s["mixed"] = f"{items[-1].label} (in the recipes above)"
        found[key] = s
    return items


def _mixed(base: trials.RecipeResult, modules: list[str]) -> trials.Item:
    label = f"{base.recipe}+fp32[{','.join(modules)}]" if len(modules) <= 2 else \
        f"{base.recipe}+fp32[{len(modules)} modules]"
    return trials.Item(base.recipe, tuple(modules), label, base.recipe)


@dataclass(frozen=True)
class SensitiveArgs:
    """The search for the modules that break a 16-bit recipe: the model (as the recipe's worker loads it), the
    dtype and whether weights are cast to it, the tolerance."""
    recipe: engine.RecipeArgs
    dtype: str
    cast: bool
    tolerance: float


def preload_sensitive(case: Case) -> None:
    engine.load_ahead(case.args.recipe)


def sensitive_task(case: Case, device, job: Job) -> Result:
    """The worker's side of the search: the spec rebuilt, the culprits found."""
    a = case.args
    s = search(engine.spec_of(a.recipe, device), a.recipe.mode, device, a.dtype, a.cast, a.tolerance)
    return Result(case.op, case.shape, case.precision, suite=case.suite, metrics={"sensitive": s})


def search(spec: source.Spec, mode: str, device, dtype: str, cast: bool, tol: float) -> dict:
    """Which modules alone, in `dtype` (autocast, or weights cast), push the outputs past the tolerance."""
    device = torch.device(device)
    forward = _forward(spec, mode)
    metric = spec.metric_fn if mode == "infer" else None
    with precmod.apply("fp32", device.type), torch.no_grad():
        out_ref = forward()
    refs = accuracy.check_outputs(out_ref)
    metric_ref = float(metric(out_ref)) if metric else None
    if mode == "train":       # a share of the loss's fall is no output error: the inference default, scaled alike
        tol = tol / trials.DEFAULT_TOLERANCE["train"] * trials.DEFAULT_TOLERANCE["infer"]

    def error_of(out) -> float:
        acc = accuracy.compare_outputs(accuracy.check_outputs(out), refs)
        if acc["nonfinite"]:
            return float("inf")
        return accuracy.rel_change(float(metric(out)), metric_ref) if metric else acc["rel_error"]

    with precmod.apply("fp32", device.type):
        return sensitive.find(spec.model, forward, getattr(torch, dtype), device.type, error_of, tol,
                              cast_weights=cast)


def _forward(spec: source.Spec, mode: str):
    def run():
        torch.manual_seed(0)          # the same dropout masks in every forward of the search
        return spec.model(*spec.args, **spec.kwargs)
    spec.model.train(mode == "train")
    return run


# --- step 5: what the misaligned shapes cost ----------------------------------------------------------------------
def _shape_costs(layers, chosen, results, device: torch.device, mode: str) -> list:
    """On a GPU, at the recommended recipe's GEMM precision: the misaligned GEMMs timed at their shape and padded,
    as a share of the eager step at that precision (amp_bf16 for a compiled bf16 recipe): torch.compile may pad a
    GEMM itself (on an H200 Inductor ran GPT-2's 50257-wide head at the aligned speed), so a compiled step is no
    fair denominator."""
    if device.type != "cuda" or chosen is None:
        return []
    prec = trials.kernel_precision(chosen.runs)
    if prec == "fp32":
        return []
    lint.measure_costs(layers, prec, device, _eager_ms(chosen, results), mode)
    return lint.worth_fixing(layers)


def share_summary(results: list, chosen) -> dict:
    """The Tensor Core shares (tcperf.profiler.profile) of the fp32 baseline and the chosen recipe (None where not
    profiled: on a CPU, or skipped)."""
    base = next((r for r in results if r.recipe == "fp32"), None)
    return {"baseline": base.tc_share if base else None,
            "baseline_kernels": base.kernels if base else [],
            "recommended_recipe": chosen.recipe if chosen else None,
            "recommended": chosen.tc_share if chosen else None,
            "recommended_kernels": chosen.kernels if chosen else []}
