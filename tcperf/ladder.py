"""The model ladder: how fast each model trains and infers under each recipe, and what the recipe costs in accuracy.

One cell is model x mode x recipe x batch: the model's spec (tcperf.source.builtin: the model at a fixed seed with
its synthetic batch) measured by tcperf.engine, the engine `tcperf advise` runs on the user's model, with cuDNN's
autotuning on (recipes.with_cudnn_benchmark) as the hand loops it is held against have it. A recipe outside its
tolerance is stored as status "wrong", timed all the same: "fp16 diverged" is a finding, not a crash.

`climb` runs the cells through tcperf.runner, a worker process per recipe in the order given; the fp32 reference of
each model, mode and batch is made once and handed to the later workers in a file, and the speedups over fp32 and
over the previous rung are filled in as each row arrives. `--batch auto` finds the largest batch that fits
(`find_max_batch`); the `batch` rung finds the batch with the most items a second (`find_fastest_batch`) on the
fastest rung already climbed among BATCH_BASES, named in the row's metrics.base_rung.

    results = climb(cells(["gpt2"], "train", LADDER, [16]), torch.device("cuda"))
On an H200 (anchors.md): GPT-2 small training amp_bf16 ~326k tokens/s; ResNet-50 training best ~6,750 img/s.
"""
from __future__ import annotations

import dataclasses
import logging
import tempfile
from dataclasses import dataclass
from itertools import groupby

import torch

from . import accuracy, engine, models, recipes, source
from .records import Case, Job, Result
from .runner import Rows, run_cases

log = logging.getLogger(__name__)   # progress a worker's parent reads when it kills it (runner: last logged)

DEFAULT_STEPS = accuracy.DEFAULT_STEPS   # training steps the accuracy check compares
AUTO_LIMIT = 4096       # --batch auto never tries beyond this
GAIN = 1.01             # a larger batch is the faster one only when it gives at least 1% more items a second
MIN_REPS = 5


# --- cases ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CellArgs:
    """What a cell needs beyond its identity (the case's shape and precision)."""
    config: str = "full"                 # the named configuration with any sizes changed ('full:dim=2048')
    steps: int = DEFAULT_STEPS           # the steps the training check compares
    reference: str | None = None         # fp32's reference file (made there by the first cell that needs it)
    base: str | None = None              # the rung the batch search builds on
    oom_above: int | None = None         # (CPU tests) a batch above which memory runs out


def cell_case(model: str, mode: str, recipe: str, batch, *, config: str = "full", steps: int = DEFAULT_STEPS,
              seed: int = 0, oom_above: int | None = None) -> Case:
    """A runner case for one cell; batch is an int or "auto"."""
    return Case("model", shape_of(model, mode, batch, config), recipe, cell_task, suite="models", seed=seed,
                args=CellArgs(config, steps, oom_above=oom_above))


def shape_of(model: str, mode: str, batch, config: str) -> dict:
    """A cell's identity in the store; sizes changed from the named configuration ('full:dim=2048') are part of it,
    so that `tcperf compare` never pairs a wider model with the stock one."""
    changes = config.partition(":")[2]
    return {"model": model, "mode": mode, "batch": batch, **({"sizes": changes} if changes else {})}


def cells(model_names, mode: str, recipe_names, batches, **kw) -> list[dict]:
    """Cases ordered recipe by recipe (the climb order); batches: ints, "auto", or None for each model's default."""
    out = []
    for recipe in recipe_names:
        for name in model_names:
            cfg = models.config(models.get(name), kw.get("config", "full"))
            for batch in batches or [None]:
                out.append(cell_case(name, mode, recipe, cfg["batch"] if batch is None else batch, **kw))
    return out


def cell_task(case: Case, device, job: Job) -> Result:
    """One cell, in a worker."""
    shape, a = case.shape, case.args
    recipe = batch_recipe(recipes.get(case.precision), a.base)
    result = measure_cell(shape["model"], shape["mode"], recipe, shape["batch"], device, config=a.config,
                          steps=a.steps, seed=case.seed, timing=dataclasses.asdict(job.timing),
                          ceilings=job.ceilings, reference=a.reference, oom_above=a.oom_above, profile=job.profile)
    if recipe.fastest_batch:
        result.metrics["base_rung"] = recipe.over
    return result


# --- the batch rung's base --------------------------------------------------------------------------------------
# The rungs the batch search may build on: the whole-step graph and the one-thing rungs on top of it that compile
# in seconds. Not autotune: its compile (about 7 minutes on ResNet-50 on an H100) comes again at every batch tried.
BATCH_BASES = tuple(name for name, r in recipes.RECIPES.items()
                    if r.step_graph and not r.autotune and not r.fastest_batch)


def batch_base(case: Case, done: list[Result]) -> str | None:
    """The rung the batch search builds on for this cell: the fastest of BATCH_BASES that passed its check among the
    rows already climbed (the issue's "fastest batch at the best rung"); None when none of them ran."""
    ran = [r for r in done if group_key(r.shape) == group_key(case.shape) and r.ok and r.precision in BATCH_BASES
           and r.metrics.get("throughput")]
    return max(ran, key=lambda r: r.metrics["throughput"]).precision if ran else None


def batch_recipe(rec, base: str | None):
    """The batch rung `rec` built on `base`: base's recipe with the search on, named and ranked as `rec`; `rec` as
    it is for anything else."""
    if not rec.fastest_batch or not base or base == rec.over:
        return rec
    on = recipes.get(base)
    return dataclasses.replace(on, name=rec.name, fastest_batch=True, over=base,
                               about=f"{on.about}, at the batch with the most items a second")


# --- one cell ---------------------------------------------------------------------------------------------------
def measure_cell(model: str, mode: str, recipe, batch, device, *, config: str = "full", steps: int = DEFAULT_STEPS,
                 seed: int = 0, timing: dict | None = None, ceilings: dict | None = None,
                 reference: str | dict | None = None, oom_above: int | None = None, check: bool = True,
                 profile: bool = False) -> Result:
    """One model x mode x recipe x batch cell -> its row (op "model").

    reference: the fp32 reference (a dict from engine.reference, or the path of a file an earlier cell saved it
    in); made in the cell when missing. oom_above: simulate running out of memory above this batch (tests of
    --batch auto on a CPU). check=False: throughput only (no accuracy check, no FLOP count): the probes of
    --batch auto. profile: the step's kernels after the timing (tcperf.engine)."""
    mod, rec, device = models.get(model), recipes.with_cudnn_benchmark(recipes.get(recipe)), torch.device(device)
    result = _base(model, mode, rec, batch, mod, config)
    why = rec.skip_reason(mode, device)
    if why:
        return result.replace(status="skipped", message=why)
    if batch == "auto":
        return auto_batch(model, mode, rec, device, config=config, steps=steps, seed=seed, timing=timing,
                          ceilings=ceilings, oom_above=oom_above, profile=profile)
    if rec.fastest_batch:
        return fastest_batch_cell(model, mode, rec, batch, device, config=config, steps=steps, seed=seed,
                                  timing=timing, ceilings=ceilings, oom_above=oom_above, profile=profile,
                                  reference=reference)
    if oom_above is not None and batch > oom_above:
        raise torch.OutOfMemoryError(f"simulated out of memory: batch {batch} > {oom_above}")
    cell = source.builtin(model, config, batch, seed, device)
    given = {"ref": reference} if isinstance(reference, dict) else {"reference_file": reference}
    row = engine.measure(cell, rec, mode, device, **given, steps=steps, timing=_timing(timing), check=check,
                         flops=check, ceilings=ceilings, profile=profile)
    row.op, row.suite, row.shape = result.op, result.suite, result.shape
    row.metrics = {**result.metrics, **row.metrics}
    return row


def _timing(timing: dict | None) -> dict:
    """The runner's timing config -> back-to-back steps over rep_ms (engine.TIMING: no L2 flush)."""
    timing = timing or {}
    return {"warmup_ms": timing.get("warmup_ms", 25.0), "rep_ms": timing.get("rep_ms", 100.0), "min_reps": MIN_REPS}


def _base(model: str, mode: str, rec, batch, mod, config: str) -> Result:
    rung = recipes.LADDER.index(rec.name) if rec.name in recipes.LADDER else None
    shape = shape_of(model, mode, batch, config)
    name = f"{model}[{shape['sizes']}]" if "sizes" in shape else model
    return Result("model", shape, rec.name, suite="models", tolerance=rec.tolerance,
                  metrics={"label": f"{name} {mode} b={batch}", "unit": mod.UNIT, "rung": rung,
                           "recipe": rec.describe(mod.KIND), "config": config})


# --- --batch auto -----------------------------------------------------------------------------------------------
def find_max_batch(fits, start: int = 1, limit: int = AUTO_LIMIT) -> int:
    """The largest batch b <= limit with fits(b), doubling from `start` and then bisecting between the last batch
    that fit and the first that did not (fits is assumed monotone); 0 when `start` does not fit."""
    if start > limit or not fits(start):
        return 0
    lo, hi = start, None
    while hi is None:
        b = min(lo * 2, limit)
        if b == lo:
            return lo
        if fits(b):
            lo = b
        else:
            hi = b
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def auto_batch(model: str, mode: str, rec, device, *, start: int = 1, limit: int = AUTO_LIMIT, **kw) -> Result:
    """The cell at the largest batch that fits, with the throughput of every batch tried (metrics.batch_curve) and
    the batch that gave the most items a second (metrics.fastest_batch). With a torch.compile recipe every probe
    compiles afresh: give such a search a long --timeout."""
    curve: list[dict] = []

    def fits(batch: int) -> bool:
        return probe(model, mode, rec, batch, device, curve, kw)["status"] == "ok"

    best = find_max_batch(fits, start, limit)
    if best == 0:
        result = _base(model, mode, rec, "auto", models.get(model), kw.get("config", "full"))
        result.metrics["batch_curve"] = curve
        return result.replace(status="oom", message=f"batch {start} does not fit")
    result = _final_cell(model, mode, rec, device, best, curve, kw)
    result.shape = {**result.shape, "batch": "auto"}
    result.metrics.update(batch_curve=sorted(curve, key=lambda p: p["batch"]), fastest_batch=fastest(curve),
                          label=f"{model} {mode} b=auto({result.metrics['batch']})")
    return result


def probe(model: str, mode: str, rec, batch: int, device, curve: list[dict], kw: dict) -> dict:
    """A short throughput-only cell at `batch` (no accuracy check, no FLOP count, no profile): its point (batch,
    status "ok" | "oom" | ..., throughput, peak memory), also appended to `curve`."""
    timing = kw.get("timing") or {}
    quick = {**kw, "timing": {**timing, "rep_ms": min(100.0, timing.get("rep_ms", 100.0))}, "profile": False,
             "reference": None}
    point = {"batch": batch, "status": "oom", "throughput": None}
    log.info("%s %s: probing batch %d", model, mode, batch)
    try:
        r = measure_cell(model, mode, rec, batch, device, **quick, check=False)
        point.update(status=r.status, throughput=r.metrics.get("throughput"),
                     peak_mem_gib=r.metrics.get("peak_mem_gib"))
    except torch.OutOfMemoryError:
        pass           # the exception (and the frames holding the step's tensors) is gone after this block
    finally:
        engine._release(device)
    curve.append(point)
    log.info("%s %s: batch %d %s, %s items/s", model, mode, batch, point["status"], point["throughput"])
    return point


def fastest(curve: list[dict]) -> int | None:
    """The batch of the curve with the most items a second: past it a larger batch only fills memory."""
    ranked = by_speed(curve)
    return ranked[0]["batch"] if ranked else None


def by_speed(curve: list[dict]) -> list[dict]:
    """The curve's points that ran, fastest first, where a larger batch counts as faster only when it gives at least
    GAIN more items a second: a smaller one within that goes ahead of it (the same speed in less memory, and a
    cheaper check). GPT-2 on an H100 read 506,340 tokens/s at 128 and 507,173 at 192: 128 is the fastest."""
    rest = sorted((p for p in curve if p["status"] == "ok" and p.get("throughput")), key=lambda p: -p["throughput"])
    out = []
    while rest:
        top = rest[0]["throughput"]
        out.append(min((p for p in rest if p["throughput"] * GAIN >= top), key=lambda p: p["batch"]))
        rest.remove(out[-1])
    return out


# --- the batch rung: the batch with the most items a second ---------------------------------------------------------
def find_fastest_batch(rate, start: int, limit: int = AUTO_LIMIT) -> tuple[int | None, dict]:
    """(the fastest batch of those tried by by_speed's rule, every batch's rate). From `start` it doubles while
    each double gives at least GAIN more items a second, halves instead on the same rule when no double did, then
    tries the midpoint (a multiple of 8) between the best and the batch above it. rate(b) -> items/s, or None when
    b does not fit; None when `start` does not."""
    rates: dict = {}

    def at(b: int):
        if b not in rates:
            rates[b] = rate(b) if 1 <= b <= limit else None
        return rates[b]

    if at(start) is None:
        return None, rates
    best = start
    for factor in (2, 0.5):
        while at(int(best * factor)) and at(int(best * factor)) >= at(best) * GAIN:
            best = int(best * factor)
        if best != start:
            break
    mid = (best + best * 2) // 2 // 8 * 8
    if best * 2 in rates and best < mid < best * 2:
        at(mid)
    return fastest([{"batch": b, "status": "ok", "throughput": r} for b, r in rates.items() if r]), rates


def fastest_batch_cell(model: str, mode: str, rec, batch: int, device, **kw) -> Result:
    """The batch rung: the search (throughput-only probes of the recipe without the search), then the full cell
    (accuracy check against fp32 at that batch, FLOPs, profile) at the fastest batch. The row keeps the model's
    batch in its shape, so that it climbs the same ladder as the rungs below; metrics.batch is the one found."""
    plain = dataclasses.replace(rec, fastest_batch=False)
    curve: list[dict] = []

    def rate(b: int) -> float | None:
        point = probe(model, mode, plain, b, device, curve, kw)
        return point["throughput"] if point["status"] == "ok" else None

    found, _ = find_fastest_batch(rate, batch)
    if found is None:
        result = _base(model, mode, rec, batch, models.get(model), kw.get("config", "full"))
        result.metrics["batch_curve"] = curve
        return result.replace(status="oom", message=f"batch {batch} does not fit")
    found, result = _checked_cell(model, mode, plain, batch, device, curve, kw)
    result.shape = {**result.shape, "batch": batch}
    result.metrics.update(batch=found, fastest_batch=found, batch_curve=sorted(curve, key=lambda p: p["batch"]),
                          label=f"{model} {mode} b={batch}->{found} (fastest)")
    return result


def _checked_cell(model: str, mode: str, rec, batch: int, device, curve: list[dict], kw: dict) -> tuple[int, Result]:
    """(the batch, its full cell): the fastest batch of the curve whose full cell fits and passes the training
    check. The full cell holds more than a probe (GPT-2 at 32 x 1024: 12.3 GiB of fp32's float64 logits on an H100,
    2026-11-26); where it does not fit, the next fastest batch. Where the check fails, the next fastest smaller
    batch: in 16 steps a larger batch learns less per step (ResNet-50 at 1024 kept 80% of fp32's loss fall, at 256
    98%: H200, 2026-11-27). Where none passes, the fastest failing cell, as it is."""
    failed = None                            # (batch, cell) of the fastest batch whose check failed
    for point in by_speed(curve):
        if failed and point["batch"] > failed[0]:
            continue
        try:
            cell = _full_cell(model, mode, rec, point["batch"], batch, device, kw)
        except torch.OutOfMemoryError:
            point["note"] = "fastest, but its full cell (fp32's reference, the check) ran out of memory"
            engine._release(device)
            continue
        if cell.status != "wrong":
            if failed:
                cell.metrics.setdefault("notes", []).append(
                    f"batch {failed[0]} ran faster but failed the training check: {failed[1].message}")
            return point["batch"], cell
        point["note"] = f"faster, but its training check failed: {cell.message}"
        failed = failed or (point["batch"], cell)
    if failed:
        return failed
    raise torch.OutOfMemoryError("no batch's full cell (fp32's reference, the check) fits")


def _full_cell(model: str, mode: str, rec, found: int, batch: int, device, kw: dict) -> Result:
    same = {**kw, "reference": kw.get("reference") if found == batch else None}   # fp32 made at the found batch
    log.info("%s %s: the full cell at batch %d (fp32's reference there, the check)", model, mode, found)
    return measure_cell(model, mode, rec, found, device, **same)


def _final_cell(model, mode, rec, device, best: int, curve: list[dict], kw: dict) -> Result:
    """The full cell (accuracy, FLOPs) at the largest batch that fit; one batch down the curve should memory
    that was free for the probe be short now."""
    fitting = sorted((p["batch"] for p in curve if p["status"] == "ok" and p["batch"] <= best), reverse=True)

    def at(batch: int) -> Result:
        result = measure_cell(model, mode, rec, batch, device, **kw)
        result.metrics["batch"] = batch
        return result

    for batch in fitting[:-1]:
        try:
            return at(batch)
        except torch.OutOfMemoryError:
            engine._release(device)
    return at(fitting[-1])


# --- the climb (parent side) ------------------------------------------------------------------------------------
def group_key(s: dict) -> tuple:
    """The rows (by their shape) that climb one ladder together: same model, sizes, mode and batch (rows on N ranks,
    from tcperf.distributed.parallel, climb apart from one GPU's)."""
    return s.get("model"), s.get("sizes"), s.get("mode"), str(s.get("batch")), s.get("nproc"), s.get("parallel")


def add_speedups(result: Result, earlier: list[Result]) -> None:
    """speedup_fp32 and speedup_prev (throughput ratios) from the rows of the same model, mode and batch: prev is the
    rung the recipe builds on (Recipe.over) where it ran, else the row before; pays_after_steps: pays_after(prev)."""
    m = result.metrics
    mine = m.get("throughput")
    same = [r for r in earlier if group_key(r.shape) == group_key(result.shape) and r.metrics.get("throughput")]
    if not mine or not same:
        return
    fp32 = [r for r in same if r.precision == "fp32"]
    if fp32:
        m["speedup_fp32"] = mine / fp32[-1].metrics["throughput"]
    over = m.get("base_rung") or getattr(recipes.RECIPES.get(result.precision), "over", None)
    prev = ([r for r in same if r.precision == over] or same)[-1]
    m.update(speedup_prev=mine / prev.metrics["throughput"], prev=prev.precision)
    pays = pays_after(prev, result)
    if pays is not None:
        m["pays_after_steps"] = pays


def pays_after(before: Result, after: Result) -> float | None:
    """Steps after which `after`'s extra compile time over `before`'s is paid back by its faster steps; None unless
    it compiles longer and steps faster."""
    extra = (after.metrics.get("compile_s") or 0.0) - (before.metrics.get("compile_s") or 0.0)
    saved_s = ((before.mean_ms or 0.0) - (after.mean_ms or 0.0)) * 1e-3
    if extra <= 0 or saved_s <= 0 or after.mean_ms is None:
        return None
    return extra / saved_s


def _with_reference(case: Case, folder: str) -> Case:
    """The case with its fp32 reference's file (the first cell that needs it makes it, the others read it)."""
    s, a = case.shape, case.args
    if s["batch"] == "auto":
        return case
    path = engine.reference_path(folder, s["model"], s["mode"], s["batch"], a.config, a.steps, case.seed)
    return case.replace(args=dataclasses.replace(a, reference=path))


def climb(cases: list[Case], device, job: Job = Job(), *, on_result=None) -> list[Result]:
    """Run the cells recipe by recipe in the order given, each row completed with its speedups before `on_result`
    sees it; run_cases's signature, so that measure_into_store can call it. job.ceilings: {precision: TFLOPS}
    measured on this GPU, for MFU (else the datasheet peak). Returns the rows in the order they finished."""
    done = Rows(on_result, complete=add_speedups)
    with tempfile.TemporaryDirectory(prefix="tcperf-ladder-") as folder:
        for recipe, group in groupby(cases, key=lambda c: c.precision):
            to_run = [case.replace(known=skip_result(case, device)) for case in group]     # a skip starts no worker
            if recipes.get(recipe).fastest_batch:
                to_run = [c.replace(args=dataclasses.replace(c.args, base=batch_base(c, done))) for c in to_run]
            run_cases([case if case.known else _with_reference(case, folder) for case in to_run],
                      torch.device(device), job, on_result=done.add)
    return done


def skip_result(case: Case, device) -> Result | None:
    """The skipped row for a cell whose recipe does not apply to its model, mode or device; None otherwise."""
    shape, rec = case.shape, recipes.get(case.precision)
    why = rec.skip_reason(shape["mode"], device)
    if why is None:
        return None
    result = _base(shape["model"], shape["mode"], rec, shape["batch"], models.get(shape["model"]), case.args.config)
    return result.replace(status="skipped", message=why)
