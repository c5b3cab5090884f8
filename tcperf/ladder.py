"""The model ladder: how fast each model trains and infers under each recipe, and what the recipe costs in accuracy.

One cell is model x mode x recipe x batch. `measure_cell` builds the model at a fixed seed, prepares the recipe's
step (tcperf.recipes.prepare), runs it once (the first call holds torch.compile's compile time, reported apart as
compile_s and never inside the timed steps), runs the accuracy check's steps, times whole steps with
tcperf.timing.time_fn (no L2 flush: a model step is not a cold-cache kernel), and reads peak memory. Model FLOPs
come from torch.utils.flop_counter (or the model's formula), MFU is taken against the measured ceiling for the
recipe's precision (`tcperf ceilings`) or, without one, the datasheet peak, and the row says which.

The accuracy check, against fp32 strict on the same data and the same initial weights:
- inference: relative error of the outputs (the first rows of the batch; the fp32 model runs only those rows,
  which is exact because every model here treats samples independently in eval mode) and top-1 agreement for
  classifiers;
- training: the loss at step N (N = `steps`, same fixed batch) against fp32's, GradScaler's skipped steps and any
  NaN/inf. The fp32 loss comes from the fp32 cell of the same run when it ran first (the parent passes it on),
  else the cell computes it itself. A recipe outside its tolerance is stored as status "wrong", timed all the
  same: "fp16 diverged" is a finding, not a crash.

`climb` runs cells through tcperf.runner, one worker process per recipe in the order given (flags and compile
caches never leak between recipes, a crash or OOM is recorded), and fills in speedup over fp32 and over the
previous rung as each row arrives. `--batch auto` finds the largest batch that fits by doubling and bisection
(out-of-memory caught, memory released) and reports throughput against batch.

    results = climb(cells(["gpt2"], "train", LADDER, [16]), torch.device("cuda"))
On an H200 (anchors.md): GPT-2 small training amp_bf16 ~326k tokens/s; ResNet-50 training best ~6,750 img/s.
"""
from __future__ import annotations

import gc
import time
from itertools import groupby

import torch

from . import env, models, peaks, recipes
from .ops.base import rel_error
from .runner import TimingConfig, run_cases
from .timing import time_fn

TASK = "tcperf.ladder:cell_task"
DEFAULT_STEPS = 8       # training steps the accuracy check compares after
CHECK_ROWS = 4          # inference: rows of the batch compared against fp32
INFER_WARMUP = 2        # inference calls after the first (CUDA-graph recording happens here)
AUTO_LIMIT = 4096       # --batch auto never tries beyond this
MIN_REPS = 5


# --- cases ------------------------------------------------------------------------------------------------------
def cell_case(model: str, mode: str, recipe: str, batch, *, config: str = "full", steps: int = DEFAULT_STEPS,
              seed: int = 0, **extra) -> dict:
    """A runner case for one cell; batch is an int or "auto"."""
    return {"op": "model", "suite": "models", "task": TASK, "shape": {"model": model, "mode": mode, "batch": batch},
            "precision": recipe, "config": config, "steps": steps, "seed": seed, **extra}


def cells(model_names, mode: str, recipe_names, batches, **kw) -> list[dict]:
    """Cases ordered recipe by recipe (the climb order); batches: ints, "auto", or None for each model's default."""
    out = []
    for recipe in recipe_names:
        for name in model_names:
            cfg = models.config(models.get(name), kw.get("config", "full"))
            for batch in batches or [None]:
                out.append(cell_case(name, mode, recipe, cfg["batch"] if batch is None else batch, **kw))
    return out


def cell_task(case: dict, device, job: dict) -> dict:
    """The worker's entry point (tcperf.worker calls task(case, device, job))."""
    shape = case["shape"]
    return measure_cell(shape["model"], shape["mode"], case["precision"], shape["batch"], device,
                        config=case.get("config", "full"), steps=case.get("steps", DEFAULT_STEPS),
                        seed=case.get("seed", 0), timing=job.get("timing"), ceilings=job.get("ceilings"),
                        reference=case.get("reference"), oom_above=case.get("oom_above"))


# --- one cell ---------------------------------------------------------------------------------------------------
def measure_cell(model: str, mode: str, recipe, batch, device, *, config: str = "full", steps: int = DEFAULT_STEPS,
                 seed: int = 0, timing: dict | None = None, ceilings: dict | None = None,
                 reference: dict | None = None, oom_above: int | None = None, check: bool = True) -> dict:
    """One model x mode x recipe x batch cell -> a result dict in the store's format (op "model").

    reference: {"loss_fp32": ...} from an earlier fp32 cell (training), so the cell need not recompute it.
    oom_above: simulate running out of memory above this batch (tests of --batch auto on a CPU).
    check=False: throughput only (no accuracy check, no FLOP count): the probes of --batch auto."""
    mod, rec, device = models.get(model), recipes.get(recipe), torch.device(device)
    cfg = models.config(mod, config)
    result = _base(model, mode, rec, batch, mod, config)
    why = rec.skip_reason(mod.KIND, mode, device)
    if why:
        return {**result, "status": "skipped", "message": why}
    if batch == "auto":
        return auto_batch(model, mode, rec, device, config=config, steps=steps, seed=seed, timing=timing,
                          ceilings=ceilings, oom_above=oom_above)
    if oom_above is not None and batch > oom_above:
        raise torch.OutOfMemoryError(f"simulated out of memory: batch {batch} > {oom_above}")
    _fresh(device, rec)
    try:
        step = _prepare(mod, cfg, rec, mode, batch, device, seed)
    except recipes.NotApplicable as e:
        return {**result, "status": "skipped", "message": str(e)}
    run = _run_cell(step, mode, steps if check else 1, device, timing or {})
    del step
    _release(device)
    result["metrics"]["notes"] = run.pop("notes")
    _fill_timing(result, run, rec, mod.items_per_batch(cfg, batch))
    if check:
        _fill_accuracy(result, run, mod, cfg, rec, mode, batch, device, seed, steps, reference)
        _fill_flops(result, mod, cfg, rec, mode, batch, device, seed, ceilings)
    return result


def _base(model: str, mode: str, rec, batch, mod, config: str) -> dict:
    rung = recipes.LADDER.index(rec.name) if rec.name in recipes.LADDER else None
    return {"op": "model", "suite": "models", "shape": {"model": model, "mode": mode, "batch": batch},
            "precision": rec.name, "tolerance": rec.tolerance, "warnings": [], "message": "",
            "metrics": {"label": f"{model} {mode} b={batch}", "unit": mod.UNIT, "rung": rung,
                        "recipe": rec.describe(mod.KIND), "config": config}}


def _fresh(device: torch.device, rec) -> None:
    """A clean slate for the cell: compiled graphs and freed memory of earlier cells dropped."""
    if rec.compile:
        torch._dynamo.reset()
    _release(device)


def _release(device: torch.device) -> None:
    """Hand freed GPU memory back (the collector first, so that unreachable steps really are freed)."""
    if device.type == "cuda":
        gc.collect()
        torch.cuda.empty_cache()


def _build(mod, cfg: dict, device: torch.device, seed: int):
    """The model at `seed`, made on the device (the same weights every time for the same seed and device)."""
    torch.manual_seed(seed)
    with device:
        return mod.build(cfg)


def _data(mod, cfg: dict, batch: int, device: torch.device, seed: int):
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    return mod.make_batch(cfg, batch, device, gen)


def _prepare(mod, cfg, rec, mode, batch, device, seed) -> recipes.Step:
    inputs, targets = _data(mod, cfg, batch, device, seed)
    model = _build(mod, cfg, device, seed)
    step = recipes.prepare(model, rec, mode, inputs, device, loss_fn=mod.loss_fn, targets=targets,
                           optimizer=lambda params: models.make_optimizer(mod, params, device))
    del model      # prepare made its own copy
    return step


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)   # sync point: wall-clock intervals must end with the GPU's work


def _run_cell(step, mode: str, steps: int, device: torch.device, timing: dict) -> dict:
    """First call (compile), the accuracy check's calls, then the timed steps and peak memory."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    scale = step.scaler.get_scale() if step.scaler else None     # GradScaler's initial scale (no sync yet)
    t0 = time.perf_counter()
    first = step()
    _sync(device)
    first_s = time.perf_counter() - t0
    run = {"first_s": first_s, "notes": step.notes}
    if mode == "infer":
        run["outputs"] = _rows(first, CHECK_ROWS)
        del first            # the timed calls hold one output at a time
        for _ in range(INFER_WARMUP):
            step()
    else:
        run.update(_train_check(step, first, steps, scale))
    m = time_fn(step, device, warmup_ms=timing.get("warmup_ms", 25.0), rep_ms=timing.get("rep_ms", 100.0),
                flush_l2=False, graph=False, min_reps=MIN_REPS)
    run["measurement"] = m
    cuda = device.type == "cuda"
    run["peak_gib"] = torch.cuda.max_memory_allocated(device) / 2**30 if cuda else None
    run["throttled"] = env.throttle_reasons(device.index or 0) if cuda else None
    return run


def _rows(outputs, k: int) -> torch.Tensor:
    """The first k rows of the (first) output, copied to host memory at once (CUDA-graph replays overwrite
    outputs, and rows kept on the GPU would count in the peak memory of the timed steps)."""
    out = outputs[0] if isinstance(outputs, (tuple, list)) else outputs
    return out[:k].detach().to("cpu", torch.float32, copy=True)


def _train_check(step, first_loss, steps: int, scale_before_first: float | None) -> dict:
    """Steps 2..N after the first, counting GradScaler's skipped steps (a step after which the scale went down)."""
    scaler = step.scaler
    losses = [first_loss]
    skipped = int(scaler is not None and scaler.get_scale() < scale_before_first)
    for _ in range(steps - 1):
        scale = scaler.get_scale() if scaler else None     # sync point (get_scale reads the scale on the host)
        losses.append(step())
        if scaler and scaler.get_scale() < scale:
            skipped += 1
    finite = torch.stack([loss.float() for loss in losses]).isfinite()
    bad = (~finite).nonzero()
    return {"loss": losses[-1].item(), "loss_start": losses[0].item(), "skipped": skipped,
            "first_nonfinite": int(bad[0]) + 1 if len(bad) else None}


def _fill_timing(result: dict, run: dict, rec, items: int) -> None:
    m = run["measurement"]
    result.update(status="ok", samples=m.samples_ms, median_ms=m.median_ms, iqr_ms=m.iqr_ms, min_ms=m.min_ms,
                  mean_ms=m.mean_ms, n=m.n)
    metrics = result["metrics"]
    metrics.update(throughput=items / (m.median_ms * 1e-3), items_per_step=items, peak_mem_gib=run["peak_gib"],
                   first_call_s=run["first_s"])
    if rec.compile:      # the first call compiled; one step of it was the step itself
        metrics["compile_s"] = max(0.0, run["first_s"] - m.median_ms * 1e-3)
    if m.unstable:
        result["warnings"].append(f"unstable: IQR/median = {m.spread:.0%}")
    if run["throttled"]:
        result["warnings"].append(f"clocks throttled: {', '.join(run['throttled'])}")


# --- accuracy ---------------------------------------------------------------------------------------------------
def _fill_accuracy(result, run, mod, cfg, rec, mode, batch, device, seed, steps, reference) -> None:
    if mode == "infer":
        acc = _infer_accuracy(run["outputs"], mod, cfg, rec, batch, device, seed)
        err = acc["rel_error"]
    else:
        acc = _train_accuracy(run, mod, cfg, rec, batch, device, seed, steps, reference)
        err = acc.get("loss_diff")
    result["metrics"]["accuracy"] = acc
    result["error"] = err
    verdict = _verdict(acc, err, rec, mode)
    if verdict:
        result.update(status="wrong", message=verdict)
    elif acc.get("reference_missing"):
        result["warnings"].append(acc["reference_missing"])


def _verdict(acc: dict, err, rec, mode: str) -> str | None:
    """A message when the recipe broke the model, None when it kept within its tolerance."""
    if acc.get("nonfinite") and mode == "infer":
        return "NaN/inf in the outputs"
    if acc.get("nonfinite"):
        skipped = f" (GradScaler skipped {acc['skipped_steps']} steps)" if acc.get("skipped_steps") else ""
        return f"diverged: NaN/inf loss at step {acc['first_nonfinite']}{skipped}"
    if err is None or err <= rec.tolerance:
        return None
    if mode == "infer":
        return f"accuracy: output error {err:.3g} vs fp32 > {rec.tolerance:g} allowed"
    return (f"accuracy: loss {acc['loss']:.4g} vs fp32 {acc['loss_fp32']:.4g} at step {acc['steps']} (diff "
            f"{err:.3g} of the starting loss > {rec.tolerance:g}; GradScaler skipped {acc.get('skipped_steps') or 0})")


def _infer_accuracy(out: torch.Tensor, mod, cfg, rec, batch, device, seed) -> dict:
    out = out.to(device)
    nonfinite = not bool(torch.isfinite(out).all())
    if rec.name == "fp32":
        ref = out            # fp32 strict is the reference
    else:
        inputs, _ = _data(mod, cfg, batch, device, seed)
        rows = tuple(x[:CHECK_ROWS] for x in inputs)
        step = recipes.prepare(_build(mod, cfg, device, seed), "fp32", "infer", rows, device)
        ref = step().float()
        del step
    acc = {"rel_error": rel_error(out, ref), "nonfinite": nonfinite, "rows": out.shape[0],
           "reference": "self" if rec.name == "fp32" else "fp32 strict, same weights and inputs"}
    if mod.CLASSIFIER:
        acc["top1_agree"] = float((out.argmax(-1) == ref.argmax(-1)).float().mean())
    return acc


def _train_accuracy(run, mod, cfg, rec, batch, device, seed, steps, reference) -> dict:
    acc = {"loss": run["loss"], "loss_start": run["loss_start"], "skipped_steps": run["skipped"], "steps": steps,
           "nonfinite": run["first_nonfinite"] is not None, "first_nonfinite": run["first_nonfinite"]}
    if rec.name == "fp32":
        acc.update(loss_fp32=run["loss"], loss_start_fp32=run["loss_start"], reference="self")
    elif reference and reference.get("loss_fp32") is not None:
        acc.update(reference, reference="the fp32 cell of this run")
    else:
        try:
            acc.update(_fp32_losses(mod, cfg, batch, device, seed, steps), reference="computed in the cell")
        except torch.OutOfMemoryError:
            acc["reference_missing"] = f"no accuracy check: fp32 strict does not fit at batch {batch}"
        finally:
            _release(device)
    if acc.get("loss_fp32") is not None:
        # relative to the starting loss: as a fixed batch is memorised the loss heads for 0, and a difference
        # relative to the loss itself would grow without the recipe getting any worse
        start = acc.get("loss_start_fp32") or acc["loss_start"]
        acc["loss_diff"] = abs(acc["loss"] - acc["loss_fp32"]) / max(abs(start), 1e-12)
    return acc


def _fp32_losses(mod, cfg, batch, device, seed, steps) -> dict:
    """fp32 strict from the same weights on the same batch: the loss at step 1 and at step N."""
    step = _prepare(mod, cfg, recipes.RECIPES["fp32"], "train", batch, device, seed)
    losses = [step() for _ in range(steps)]
    return {"loss_fp32": losses[-1].item(), "loss_start_fp32": losses[0].item()}


# --- FLOPs and MFU ----------------------------------------------------------------------------------------------
def count_flops(mod, cfg: dict, mode: str, batch: int, device, seed: int = 0) -> float:
    """FLOPs of one step (forward, plus backward for training; the optimizer's elementwise work is not counted):
    the model's own formula where it has one, else torch.utils.flop_counter on the fp32 model at a batch of at
    most 2, scaled to `batch` (every model here is linear in the batch)."""
    formula = models.model_flops(mod, cfg, batch, mode)
    if formula is not None:
        return formula
    from torch.utils.flop_counter import FlopCounterMode
    device = torch.device(device)
    b0 = min(batch, 2)
    model = _build(mod, cfg, device, seed).train(mode == "train")
    inputs, targets = _data(mod, cfg, b0, device, seed)
    with FlopCounterMode(display=False) as counter:
        if mode == "train":
            mod.loss_fn(model(*inputs), targets).backward()
        else:
            with torch.no_grad():
                model(*inputs)
    return counter.get_total_flops() * batch / b0


def peak_tflops(prec: str, device, ceilings: dict | None) -> tuple[float | None, str | None]:
    """(TFLOPS, 'measured ceiling' | 'datasheet peak') for `prec` on `device`; (None, None) when unknown."""
    if ceilings and ceilings.get(prec):
        return float(ceilings[prec]), "measured ceiling"
    device = torch.device(device)
    if device.type != "cuda":
        return None, None
    value = peaks.datasheet(torch.cuda.get_device_name(device)).get(prec)
    return (value, "datasheet peak") if value else (None, None)


def _fill_flops(result, mod, cfg, rec, mode, batch, device, seed, ceilings) -> None:
    flops = count_flops(mod, cfg, mode, batch, device, seed)
    _release(device)
    seconds = result["median_ms"] * 1e-3
    result["flops"] = flops
    result["tflops"] = flops / seconds / 1e12 if flops else None
    peak, source = peak_tflops(rec.peak_precision, device, ceilings)
    metrics = result["metrics"]
    metrics["model_flops"] = flops
    metrics["mfu"] = result["tflops"] / peak if peak and result["tflops"] else None
    metrics["mfu_basis"] = {"precision": rec.peak_precision, "tflops": peak, "source": source} if peak else None


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


def auto_batch(model: str, mode: str, rec, device, *, start: int = 1, limit: int = AUTO_LIMIT, **kw) -> dict:
    """The cell at the largest batch that fits, with the throughput of every batch tried (metrics.batch_curve).
    Each probe is a short throughput-only cell; with a torch.compile recipe every probe compiles afresh, so give
    such a search a long --timeout."""
    curve: list[dict] = []
    timing = kw.get("timing") or {}
    probe_timing = {**timing, "rep_ms": min(100.0, timing.get("rep_ms", 100.0))}

    def fits(batch: int) -> bool:
        point = {"batch": batch, "status": "oom", "throughput": None}
        try:
            r = measure_cell(model, mode, rec, batch, device, **{**kw, "timing": probe_timing}, check=False)
            point.update(status=r["status"], throughput=r["metrics"].get("throughput"),
                         peak_mem_gib=r["metrics"].get("peak_mem_gib"))
        except torch.OutOfMemoryError:
            pass           # the exception (and the frames holding the step's tensors) is gone after this block
        finally:
            _release(device)
        curve.append(point)
        return point["status"] == "ok"

    best = find_max_batch(fits, start, limit)
    if best == 0:
        result = _base(model, mode, rec, "auto", models.get(model), kw.get("config", "full"))
        result["metrics"]["batch_curve"] = curve
        return {**result, "status": "oom", "message": f"batch {start} does not fit"}
    result = _final_cell(model, mode, rec, device, best, curve, kw)
    result["shape"]["batch"] = "auto"
    result["metrics"].update(batch_curve=sorted(curve, key=lambda p: p["batch"]),
                             label=f"{model} {mode} b=auto({result['metrics']['batch']})")
    return result


def _final_cell(model, mode, rec, device, best: int, curve: list[dict], kw: dict) -> dict:
    """The full cell (accuracy, FLOPs) at the largest batch that fit; one batch down the curve should memory
    that was free for the probe be short now."""
    fitting = sorted((p["batch"] for p in curve if p["status"] == "ok" and p["batch"] <= best), reverse=True)

    def at(batch: int) -> dict:
        result = measure_cell(model, mode, rec, batch, device, **kw)
        result["metrics"]["batch"] = batch
        return result

    for batch in fitting[:-1]:
        try:
            return at(batch)
        except torch.OutOfMemoryError:
            _release(device)
    return at(fitting[-1])


# --- the climb (parent side) ------------------------------------------------------------------------------------
def _key(r: dict) -> tuple:
    s = r.get("shape") or {}
    return s.get("model"), s.get("mode"), str(s.get("batch"))


def add_speedups(result: dict, earlier: list[dict]) -> None:
    """speedup_fp32 and speedup_prev (throughput ratios) from the rows of the same model, mode and batch."""
    mine = (result.get("metrics") or {}).get("throughput")
    same = [r for r in earlier if _key(r) == _key(result) and (r.get("metrics") or {}).get("throughput")]
    if not mine or not same:
        return
    fp32 = [r for r in same if r["precision"] == "fp32"]
    if fp32:
        result["metrics"]["speedup_fp32"] = mine / fp32[-1]["metrics"]["throughput"]
    result["metrics"]["speedup_prev"] = mine / same[-1]["metrics"]["throughput"]
    result["metrics"]["prev"] = same[-1]["precision"]


def _with_reference(case: dict, earlier: list[dict]) -> dict:
    """Hand a training cell the fp32 loss of the same model, batch, steps and seed when that cell already ran."""
    if case["shape"]["mode"] != "train" or case["shape"]["batch"] == "auto":
        return case
    for r in earlier:
        acc = (r.get("metrics") or {}).get("accuracy") or {}
        if (r["precision"] == "fp32" and _key(r) == _key(case) and acc.get("loss_fp32") is not None
                and acc.get("steps") == case.get("steps") and r["metrics"].get("config") == case.get("config")):
            return {**case, "reference": {"loss_fp32": acc["loss_fp32"], "loss_start_fp32": acc["loss_start_fp32"]}}
    return case


def climb(cases: list[dict], device, *, timeout: float = 600.0, timing: TimingConfig | None = None,
          profile: bool = False, pad: bool = False, on_result=None, extra: dict | None = None,
          ceilings: dict | None = None) -> list[dict]:
    """Run the cells recipe by recipe in the order given (one worker process per recipe), each row completed
    with its speedups before `on_result` sees it; run_cases's signature, so that measure_into_store can call it.
    ceilings: {precision: TFLOPS} measured on this GPU, for MFU (else the datasheet peak). Returns the rows in
    the order they finished."""
    done: list[dict] = []
    extra = {**(extra or {}), **({"ceilings": ceilings} if ceilings else {})}

    def finish(r: dict) -> None:
        add_speedups(r, done)
        done.append(r)
        if on_result:
            on_result(r)

    for _, group in groupby(cases, key=lambda c: c["precision"]):
        to_run = []
        for case in group:
            skipped = skip_result(case, device)     # known without a worker: no process started for it
            if skipped:
                finish(skipped)
            else:
                to_run.append(_with_reference(case, done))
        if to_run:
            run_cases(to_run, torch.device(device), timeout=timeout, timing=timing, profile=profile, pad=pad,
                      on_result=finish, extra=extra)
    return done


def skip_result(case: dict, device) -> dict | None:
    """The skipped row for a cell whose recipe does not apply to its model, mode or device; None otherwise."""
    shape, rec = case["shape"], recipes.get(case["precision"])
    mod = models.get(shape["model"])
    why = rec.skip_reason(mod.KIND, shape["mode"], device)
    if why is None:
        return None
    result = _base(shape["model"], shape["mode"], rec, shape["batch"], mod, case.get("config", "full"))
    return {**result, "status": "skipped", "message": why}
