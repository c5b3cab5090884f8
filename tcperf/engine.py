"""One engine that runs recipes on a model: the model ladder (`tcperf models`) and the advisor (`tcperf advise`) both
measure through it, so a fix to how a recipe is prepared, checked or timed lands once.

For one model spec (tcperf.spec) and one recipe (tcperf.recipes): does the recipe apply to this model (skip_reason);
prepare the step; check its accuracy against fp32 strict on the same weights and inputs (tcperf.accuracy); time it
as the mean of back-to-back steps over a time window (what a loop of them sustains), and optionally profile it,
count its FLOPs (MFU) and read its peak memory. A worker runs `recipe_task`, one recipe a process (tcperf.runner);
the fp32 reference is made once, by the first worker that needs it, and read by the others from a file.

    row = measure(spec, "bf16+compile", "infer", "cuda", ref=reference(spec, "infer", "cuda"))     # a Result
    case = recipe_case(RecipeArgs("bf16+compile", "infer", source=source, reference=path), op="advise.recipe",
                       shape={"model": "m"})                    # one recipe, for tcperf.runner.run_cases
"""
from __future__ import annotations

import copy
import dataclasses
import gc
import logging
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from . import accuracy, env, peaks, recipes, stream, workload
from .errors import one_line
from .records import Case, Job, Result, Source, to_wire
from .source import import_files, load_source, on_device
from .spec import Spec, callable_model, tensor_inputs

log = logging.getLogger(__name__)   # progress a worker's parent reads when it kills it (runner: last logged)

TIMING = {"warmup_ms": 200.0, "rep_ms": 2000.0, "flush_l2": False, "back_to_back": True, "min_reps": 5,
          "max_reps": 100_000}
MIN_LINEAR_SHARE = 0.10     # fp8/int8 are tried when their Linear layers carry at least this share of the FLOPs
PROFILE_STEPS = 4           # a stream's steps profiled (StreamSession.profile): its kernels' share of a step (8 of
                            # a GRU's took 9-14 s to read back on an H200, 8 of conv_seq's 0.8 s)
EAGER_FAIL = 2.0            # fp8/int8 past this many tolerances without compile fail before compiling (_fails_eagerly)


# --- does the recipe apply to this model? ---------------------------------------------------------------------------
def has_conv2d(model: torch.nn.Module) -> bool:
    return any(isinstance(m, torch.nn.Conv2d) for m in model.modules())


def linear_share(spec: Spec, kind: str) -> tuple[float, float, int]:
    """(share of the forward's matmul/conv FLOPs in nn.Linear layers that `kind` ("fp8" | "int8") takes, the
    forward's GFLOP, how many such layers), from one recorded forward (tcperf.layers)."""
    from .layers import record
    layers = record(spec.model, spec.args, spec.kwargs)
    total = sum(l.flops * l.count for l in layers)
    taken = {l.module for l in layers if _takes(spec.model, l.module, kind)}
    eligible = sum(l.flops * l.count for l in layers if l.module in taken)
    return (eligible / total if total else 0.0), total / 1e9, len(taken)


def _takes(model: torch.nn.Module, name: str, kind: str) -> bool:
    try:
        module = model.get_submodule(name)
    except AttributeError:          # the top level's own ops
        return False
    return type(module) is torch.nn.Linear and recipes.linear_limit(module, kind) is None


def skip_reason(rec: recipes.Recipe, spec: Spec, mode: str, device) -> str | None:
    """None when the recipe runs on this model, mode and device; else one line about this model saying why not."""
    why = rec.skip_reason(mode, device)
    if why or rec.needs is None:
        return why
    if rec.needs == "conv2d":
        return None if has_conv2d(spec.model) else f"{rec.name}: {spec.name} has no 2-D convolution ({rec.about})"
    kind = "fp8" if rec.fp8 else "int8"
    share, gflop, count = linear_share(spec, kind)
    if share >= MIN_LINEAR_SHARE:
        return None
    return (f"{rec.name}: the nn.Linear layers {kind} can take ({count}) carry {share:.0%} of {spec.name}'s "
            f"{gflop:.3g} GFLOP forward (< {MIN_LINEAR_SHARE:.0%}): too little to gain")


# --- preparing a step -----------------------------------------------------------------------------------------------
def _prepare(spec: Spec, rec: recipes.Recipe, mode: str, device, *, keep=(), tap: str | None = None,
             holder: dict | None = None, perturb: int | None = None, wrap=None) -> recipes.Step:
    """recipes.prepare on the spec; keep: modules run in fp32; tap: a module whose input `holder` receives at every
    call; perturb: a seed for fp32's noise runs (weights scaled by 1 + PERTURBATION N(0,1), that seed for dropout);
    wrap: DDP or fully_shard around the recipe's copy (tcperf.distributed.parallel)."""
    model = spec.model
    if keep or tap or perturb is not None:
        model = copy.deepcopy(model)
    if tap:             # before the islands, whose wrappers would add a level to its name
        model.get_submodule(tap).register_forward_pre_hook(_tap_hook(holder), with_kwargs=True)
    if keep:
        from .islands import keep_fp32
        keep_fp32(model, list(keep), torch.device(device).type)
    if perturb is not None:
        _perturb(model, perturb)
    torch.manual_seed(perturb or 0)       # the same dropout masks and default-loss draws in every recipe
    varying, names = _workload_shapes(spec)
    return recipes.prepare(callable_model(spec, model), rec, mode, tensor_inputs(spec), device,
                           loss_fn=_loss(spec), optimizer=spec.optimizer, targets=spec.targets, wrap=wrap,
                           varying=varying, tensor_names=names)


def stream_of(spec: Spec) -> list[tuple] | None:
    """The workload's stream as the steps' tensors (tcperf.workload.flat), or None without a workload."""
    return [workload.flat(a, k) for a, k in spec.workload] if spec.workload else None


def _workload_shapes(spec: Spec) -> tuple[dict, list]:
    if not spec.workload:
        return {}, []
    return workload.varying_dims(stream_of(spec)), workload.names(*spec.workload[0])


def _loss(spec: Spec):
    """recipes.prepare calls loss_fn(outputs, targets); a user's loss_fn takes the outputs only unless the factory
    gave targets."""
    if spec.loss_fn is None or spec.targets is not None:
        return spec.loss_fn
    return lambda outputs, _targets: spec.loss_fn(outputs)


def _tap_hook(holder: dict):
    def hook(module, args, kwargs):
        found = [x for x in (*args, *kwargs.values()) if torch.is_tensor(x) and x.is_floating_point()]
        if found:
            holder["x"] = found[0]
    return hook


def _perturb(model: torch.nn.Module, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point():
                p.mul_(1 + accuracy.PERTURBATION * torch.randn(p.shape, generator=gen).to(p.device, p.dtype))


def last_leaf(spec: Spec) -> str | None:
    """The last leaf module called in a forward that takes a floating-point tensor: its input is what the model's
    last layer sees."""
    calls: list[str] = []
    handles = [m.register_forward_pre_hook(_recorder(calls, name), with_kwargs=True)
               for name, m in spec.model.named_modules() if name and not list(m.children())]
    try:
        with torch.no_grad():
            spec.forward()
    finally:
        for h in handles:
            h.remove()
    return calls[-1] if calls else None


def _recorder(calls: list, name: str):
    def hook(module, args, kwargs):
        if any(torch.is_tensor(x) and x.is_floating_point() for x in (*args, *kwargs.values())):
            calls.append(name)
    return hook


# --- the fp32 reference ---------------------------------------------------------------------------------------------
def reference(spec: Spec, mode: str, device, steps: int = accuracy.DEFAULT_STEPS) -> dict:
    """fp32 strict on the spec: the outputs to compare (inference), or the losses of `steps` steps and of
    NOISE_RUNS perturbed runs (training)."""
    fp32 = recipes.get("fp32")
    log.info("fp32 strict's reference (%s%s)", mode, f", {steps} steps and {accuracy.NOISE_RUNS} noise runs"
             if mode == "train" else "")
    if mode == "train":
        losses, _ = train_losses(_prepare(spec, fp32, mode, device), steps)
        noise = [train_losses(_prepare(spec, fp32, mode, device, perturb=i + 1), steps)[0]
                 for i in range(accuracy.NOISE_RUNS)]
        ref = {"mode": mode, "steps": steps, "losses": losses, "noise": noise,
               "noise_floor": accuracy.noise_floor(losses, noise)}
        if spec.workload:
            ref["stream"] = stream_losses(_prepare(spec, fp32, mode, device).call, stream_of(spec))
        _release(device)
        return ref
    step = _prepare(spec, fp32, mode, device)
    out = step()
    ref = {"mode": mode, "outputs": accuracy.check_outputs(out)}
    if spec.workload:
        ref["stream"] = [accuracy.check_outputs(step.call(x)) for x in stream_of(spec)[:workload.CHECK_STEPS]]
    del step
    if spec.metric_fn is not None:
        ref["metric"] = float(spec.metric_fn(out))
    del out
    why = accuracy.degenerate(ref["outputs"])
    if why:
        ref.update(degenerate=why, tap=last_leaf(spec))
        if ref["tap"]:
            holder: dict = {}
            _prepare(spec, fp32, mode, device, tap=ref["tap"], holder=holder)()
            ref["outputs"] = accuracy.check_outputs(holder.get("x"))
    _release(device)
    return ref


def stream_losses(call, stream: list[tuple]) -> list[list[torch.Tensor]]:
    """Training on a stream: the losses of its first CHECK_STEPS steps from the same weights, as check outputs."""
    return [accuracy.check_outputs(call(x)) for x in stream[:workload.CHECK_STEPS]]


def reference_note(ref: dict) -> str | None:
    if not ref.get("degenerate"):
        return None
    what = f"the input of {ref['tap']} (the last layer) is compared instead" if ref.get("tap") else \
        "no earlier activation could be found, so accuracy is not really checked"
    return f"fp32's output is degenerate ({ref['degenerate']}): it cannot tell a good recipe from a bad one; {what}"


def train_losses(step, steps: int) -> tuple[list[float], list[bool]]:
    """The loss of each of `steps` steps, and whether GradScaler skipped each (its scale went down)."""
    losses, skipped = [], []
    scaler = step.scaler
    for _ in range(steps):
        scale = scaler.get_scale() if scaler else None    # sync point: get_scale reads the scale on the host
        losses.append(float(step()))                      # sync point, once per step
        skipped.append(bool(scaler and scaler.get_scale() < scale))
    return losses, skipped


def load_reference(path: str | None, spec: Spec, mode: str, device, steps: int) -> dict:
    """The reference saved by an earlier worker at `path`, or computed here (and saved there for the next)."""
    if path and os.path.exists(path):
        return {**torch.load(path, weights_only=False), "origin": "made by an earlier recipe's worker"}
    ref = reference(spec, mode, device, steps)
    if path:
        tmp = f"{path}.{os.getpid()}.tmp"
        torch.save(ref, tmp)
        os.replace(tmp, path)        # atomic: a worker killed mid-write leaves no half reference
    return {**ref, "origin": "made here"}


# --- one recipe -----------------------------------------------------------------------------------------------------
def measure(spec: Spec, recipe, mode: str, device, *, ref: dict | None = None, reference_file: str | None = None,
            tolerance: float | None = None, steps: int = accuracy.DEFAULT_STEPS, timing: dict | None = None,
            time_it: bool = True, check: bool = True, keep=(), profile: bool = False, flops: bool = False,
            ceilings: dict | None = None, wrap=None, probe=None) -> Result:
    """One recipe on one spec -> its row (status ok | wrong | skipped; the runner adds error, oom and timeout; the
    caller names the row's op and shape). The reference is `ref`, else read from `reference_file` (made and saved
    there when missing); check=False: speed only. On many GPUs (tcperf.distributed.parallel): `wrap` puts DDP or
    FSDP2 around the recipe's model, and `probe(row, step, device)` runs after the timing while the step is alive."""
    rec, device = recipes.get(recipe), torch.device(device)
    row, step = prepare_checked(spec, rec, mode, device, ref=ref, reference_file=reference_file,
                                tolerance=tolerance, steps=steps, check=check, keep=keep, wrap=wrap)
    for window in ("first_call_window", "new_shape_window"):    # for a parent that stops workers: none stops this one
        row.metrics.pop(window, None)
    if step is None:
        return row
    if time_it:
        _time(row, step, device, timing or TIMING, spec, rec, profile)
        if probe is not None:
            probe(row, step, device)
    del step
    _release(device)
    if flops and row.mean_ms:
        _fill_flops(row, spec, rec, mode, device, ceilings)
    return row


def prepare_checked(spec: Spec, rec: recipes.Recipe, mode: str, device: torch.device, *, ref: dict | None = None,
                    reference_file: str | None = None, tolerance: float | None = None,
                    steps: int = accuracy.DEFAULT_STEPS, check: bool = True, keep=(), wrap=None):
    """(row, step): the recipe's step prepared and run once (torch.compile compiles here), its accuracy judged into
    the row. step is None when the recipe does not apply (the row says why)."""
    tol = tolerance if tolerance is not None else rec.tolerance
    row = Result("", {}, rec.name, tolerance=tol, metrics={"recipe": rec.describe(has_conv2d(spec.model)),
                                                           "keep_fp32": list(keep), "notes": []})
    why = skip_reason(rec, spec, mode, device)
    if why:
        return row.replace(status="skipped", message=why), None
    if check and ref is None:
        ref = load_reference(reference_file, spec, mode, device, steps)
    fresh(device, rec)
    holder: dict = {}
    t0 = time.perf_counter()
    try:
        early = _fails_eagerly(spec, rec, mode, device, ref, steps, tol, keep, wrap) if check else None
        if early is not None:
            _judge(row, early, mode, tol, ref)
            row.message += " (checked before compiling: these layers round the same without torch.compile)"
            row.metrics.update(checked="eager", first_call_s=time.perf_counter() - t0)
            return row, None
        step = _prepare(spec, rec, mode, device, keep=keep, tap=(ref or {}).get("tap"), holder=holder, wrap=wrap)
    except recipes.NotApplicable as e:
        return row.replace(status="skipped", message=str(e)), None
    acc = _check(step, spec, mode, steps, ref, holder) if check else step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)   # sync point: first_call_s must end with the GPU's work
    t1 = time.perf_counter()
    # the window on the monotonic clock every process shares: a parent that stopped this worker meanwhile (the
    # advisor's pool, while it timed another recipe) takes the stopped time back out (tcperf.advisor.pool)
    row.metrics.update(first_call_s=t1 - t0, first_call_window=(t0, t1), notes=list(step.notes))
    if check:
        _judge(row, acc, mode, tol, ref)
    if spec.workload and row.ok and not (rec.compile or rec.cuda_graphs):
        row.metrics.update(_new_shape(step, spec, device))
    return row, step


def _new_shape(step, spec: Spec, device: torch.device) -> dict:
    """An eager recipe's first call at the workload's first shape other than the example input's: what it pays again
    at each new shape of a stream (cuDNN's kernels for a new convolution shape), apart from what its first call paid
    once (the precision's kernels loaded, its handles made). {} where every step has the example's shape."""
    example = workload.shape_key(tensor_inputs(spec))
    other = next((x for x in stream_of(spec) if workload.shape_key(x) != example), None)
    if other is None:
        return {}
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    try:
        step.call(other)
        if device.type == "cuda":
            torch.cuda.synchronize(device)   # sync point: the new shape's call must end with the GPU's work
    except Exception as e:      # noqa: BLE001 - out of memory at a larger shape, say: the stream will say so
        _release(device)
        return {"new_shape_error": one_line(e)}
    t1 = time.perf_counter()
    return {"new_shape_s": t1 - t0, "new_shape_window": (t0, t1)}


def _fails_eagerly(spec: Spec, rec: recipes.Recipe, mode: str, device, ref: dict, steps: int, tol: float, keep,
                   wrap) -> dict | None:
    """A compiled recipe that replaces layers (fp8, int8, a transform) checked first without torch.compile: its
    accuracy dict when the error is past EAGER_FAIL x the tolerance (the recipe fails; nothing compiled), else None.
    Compile fuses their scaling and casts but rounds them the same; on an H200 the compiles of fp8 and int8 held two
    of the advisor's eight workers 40-50 s on a 134M decoder, and fp8 then failed (0.143 against 0.05)."""
    if not (rec.compile and (rec.fp8 or rec.int8 or rec.transform)):
        return None
    eager = dataclasses.replace(rec, compile=False, cuda_graphs=False, step_graph=False)
    holder: dict = {}
    step = _prepare(spec, eager, mode, device, keep=keep, tap=ref.get("tap"), holder=holder, wrap=wrap)
    acc = _check(step, spec, mode, steps, ref, holder)
    del step, holder
    _release(device)
    _, _, passes, _ = accuracy.judge(dict(acc), mode, EAGER_FAIL * tol)
    return None if passes else acc


def _check(step, spec: Spec, mode: str, steps: int, ref: dict, holder: dict) -> dict:
    """Run the accuracy check's calls (the first holds torch.compile's compile time) and compare."""
    if mode == "train":
        losses, skipped = train_losses(step, steps)
        return accuracy.compare_training(losses, skipped, ref)
    out = step()
    got = accuracy.check_outputs(holder.get("x") if ref.get("tap") else out)
    acc = accuracy.compare_outputs(got, ref["outputs"])
    if "metric" in ref:
        acc.update(accuracy.metric_change(float(spec.metric_fn(out)), ref["metric"]))
    if ref.get("tap"):
        acc["compared"] = f"input of {ref['tap']}"
    return acc


def _judge(row: Result, acc: dict, mode: str, tol: float, ref: dict) -> None:
    err, what, passes, why = accuracy.judge(acc, mode, tol)
    row.metrics.update(accuracy=acc, criterion=what, reference=ref.get("origin", "given"))
    row.error = err
    note = reference_note(ref)
    if note:
        row.warnings.append(note)
    if not passes:
        row.status, row.message = "wrong", why


def _time(row: Result, step, device: torch.device, timing: dict, spec: Spec, rec, profile: bool) -> None:
    from .timing import time_fn
    if device.type == "cuda":
        torch.cuda.empty_cache()          # cached blocks of the checks go; a CUDA graph's private pool stays
        torch.cuda.reset_peak_memory_stats(device)
    m = time_fn(step, device, **{**TIMING, **timing})
    row.samples, row.median_ms, row.iqr_ms, row.min_ms, row.mean_ms, row.n = \
        m.samples_ms, m.median_ms, m.iqr_ms, m.min_ms, m.mean_ms, m.n
    metrics = row.metrics
    metrics.update(spread=m.spread, unstable=m.unstable)
    if spec.items:
        metrics.update(throughput=spec.items / (m.mean_ms * 1e-3), items_per_step=spec.items, unit=spec.unit)
    if rec.compile:          # the first call compiled; one step of it was the step itself
        metrics["compile_s"] = max(0.0, metrics["first_call_s"] - m.mean_ms * 1e-3)
    if m.unstable:
        row.warnings.append(f"unstable: IQR/median = {m.spread:.0%}")
    if device.type == "cuda":
        metrics["peak_mem_gib"] = peak_memory(device, graphed=rec.cuda_graphs or rec.step_graph) / 2**30
        throttled = env.throttle_reasons(device.index or 0)
        if throttled:
            row.warnings.append(f"clocks throttled: {', '.join(throttled)}")
        if profile:
            _profile(row, step, device, m.mean_ms)


def peak_memory(device: torch.device, graphed: bool) -> int:
    """Bytes a step needs at its peak. A replayed CUDA graph keeps its tensors in a private pool counted as reserved,
    not allocated (an H200, 2026-11-25: ResNet-50's whole-step graph read 0.9 GiB allocated, 10.9 GiB compiled
    without it), so a graphed step counts what is reserved, the cache emptied before."""
    allocated = torch.cuda.max_memory_allocated(device)
    return max(allocated, torch.cuda.max_memory_reserved(device)) if graphed else allocated


def _profile(row: Result, step, device, step_ms: float) -> None:
    from .profiler import gpu_busy, profile
    try:
        found = profile(step, device)
        row.metrics.update(tc_share=found["tc_share"], kernels=found["top"], kernel_ms=found["kernel_ms"],
                           matmul_ms=found["matmul_ms"], kernel_kinds=found["kinds"], kernel_leaders=found["leaders"],
                           gpu_busy=gpu_busy(found["kernel_ms"], step_ms))
    except Exception as e:       # the profiler failing leaves the timing standing
        row.metrics["kernels"] = [{"name": f"profiler failed: {type(e).__name__}: {e}"[:160], "time_us": 0.0,
                                   "tensor_core": False}]


# --- FLOPs and MFU --------------------------------------------------------------------------------------------------
def count_flops(spec: Spec, mode: str, device) -> float:
    """FLOPs of one step (forward, plus backward for training; the optimizer's elementwise work is not counted):
    the spec's own formula where it has one, else torch.utils.flop_counter on a fp32 copy of the model."""
    if spec.flops is not None:
        return spec.flops(mode)
    from torch.utils.flop_counter import FlopCounterMode
    model = copy.deepcopy(spec.model).train(mode == "train")
    with FlopCounterMode(display=False) as counter:
        if mode == "train":
            out = model(*spec.args, **spec.kwargs)
            loss = _loss(spec)(out, spec.targets) if spec.loss_fn else recipes._default_loss(out, spec.targets)
            loss.backward()
        else:
            with torch.no_grad():
                model(*spec.args, **spec.kwargs)
    del model
    _release(device)
    return counter.get_total_flops()


def peak_tflops(prec: str, device, ceilings: dict | None) -> tuple[float | None, str | None]:
    """(TFLOPS, 'measured ceiling' | 'datasheet peak') for `prec` on `device`; (None, None) when unknown."""
    if ceilings and ceilings.get(prec):
        return float(ceilings[prec]), "measured ceiling"
    device = torch.device(device)
    if device.type != "cuda":
        return None, None
    value = peaks.datasheet(torch.cuda.get_device_name(device)).get(prec)
    return (value, "datasheet peak") if value else (None, None)


def _fill_flops(row: Result, spec: Spec, rec, mode: str, device, ceilings) -> None:
    row.flops = flops = count_flops(spec, mode, device)
    row.tflops = flops / (row.mean_ms * 1e-3) / 1e12 if flops else None
    peak, source = peak_tflops(rec.peak_precision, device, ceilings)
    row.metrics.update(model_flops=flops, mfu=row.tflops / peak if peak and row.tflops else None,
                       mfu_basis={"precision": rec.peak_precision, "tflops": peak, "source": source} if peak else None)


# --- housekeeping ---------------------------------------------------------------------------------------------------
def fresh(device: torch.device, rec) -> None:
    """A clean slate: compiled graphs of earlier recipes (or runs) dropped (they must not serve this one), memory
    freed. Inductor's on-disk cache stays: what a second run of a user's script finds."""
    if rec.compile:
        torch._dynamo.reset()
    _release(device)


def _release(device) -> None:
    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


# --- in a worker ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RecipeArgs:
    """One recipe on one model, as a worker runs it (task, RecipeSession, StreamSession)."""
    recipe: str                          # tcperf.recipes' name of what runs
    mode: str                            # infer | train
    source: Source | None = None         # where the worker loads the model (tcperf.source.load_source) ...
    spec: Any = None                     # ... or the spec itself, in this process (tcperf.runner.InProcess)
    reference: str | None = None         # fp32's reference: read from this file, or made and saved there
    steps: int = accuracy.DEFAULT_STEPS  # training steps the accuracy check compares
    tolerance: float | None = None       # None: the recipe's own
    timing: dict | None = None           # tcperf.timing.time_fn's options (None: TIMING)
    time_it: bool = True
    keep: tuple[str, ...] = ()           # modules run in fp32 (a mixed recipe)
    profile: bool = False
    flops: bool = False
    base: str | None = None              # a mixed recipe's base recipe, for its row
    cold: str | None = None              # StreamSession: a folder for Inductor's and Triton's caches, empty


def recipe_case(args: RecipeArgs, *, op: str, shape: dict, label: str | None = None,
                suite: str | None = None) -> Case:
    """A case for one recipe on a model, measured by recipe_task (or kept alive as a RecipeSession or StreamSession);
    its row's precision is `label` (a mixed recipe's name) or the recipe's."""
    return Case(op, shape, label or args.recipe, recipe_task, suite=op.split(".")[0] if suite is None else suite,
                args=args, preload=preload)


_PRELOADED: dict[str, object] = {}


def preload(case: Case) -> None:
    """What a worker does while it waits for its turn (Case.preload): the recipe's model loaded ahead."""
    load_ahead(case.args)


def load_ahead(args: RecipeArgs) -> None:
    """The spec loaded into host memory (unpickling, importing the user's libraries, calling the user's factory:
    seconds that would otherwise hold the GPU idle); spec_of takes it from here."""
    source = args.source
    if source is not None and source.kind == "imports":      # the model is not saved yet: its files and libraries
        import_files(source.files)
    elif source is not None and args.spec is None:
        key = str(to_wire(source))
        if key not in _PRELOADED:
            try:
                _PRELOADED[key] = load_source(source, "cpu")
            except Exception as e:      # noqa: BLE001 - raised again by the case, where it is recorded
                _PRELOADED[key] = e


def spec_of(args: RecipeArgs, device) -> Spec:
    """The spec on `device`: given (in this process), preloaded, or loaded now."""
    if args.spec is not None:
        return args.spec
    found = _PRELOADED.get(str(to_wire(args.source)))
    if isinstance(found, BaseException):
        raise found
    return on_device(found, device) if found is not None else load_source(args.source, device)


def recipe_task(case: Case, device, job: Job) -> Result:
    """One recipe measured in a worker: measure() on the spec its args name (spec_of)."""
    a = case.args
    spec = spec_of(a, device)
    row = measure(spec, a.recipe, a.mode, device, reference_file=a.reference, tolerance=a.tolerance, steps=a.steps,
                  timing=a.timing, time_it=a.time_it, keep=a.keep, profile=a.profile, flops=a.flops,
                  ceilings=job.ceilings)
    row.metrics.update(label=spec.name, base=a.base)
    return _named(row, case)


def _named(row: Result, case: Case) -> Result:
    """The case's identity on the engine's row: op, suite, shape and precision (a mixed recipe's label)."""
    row.op, row.suite, row.shape, row.precision = case.op, case.suite, case.shape, case.precision
    return row


class RecipeSession:
    """One recipe kept alive in a worker (the advisor's search): prepared and checked once when made (torch.compile
    compiles then, while another worker may be timing), timed when the parent says the GPU is free, and timed again
    in short windows beside the other leading recipes (the runoff)."""

    def __init__(self, case: Case, device, job: Job | None = None):
        self.case, self.device = case, torch.device(device)
        a = case.args
        self.spec = spec_of(a, device)
        self.rec = recipes.get(a.recipe)
        self._row, self.step = prepare_checked(self.spec, self.rec, a.mode, self.device, reference_file=a.reference,
                                               tolerance=a.tolerance, steps=a.steps, keep=a.keep)
        self._row.metrics.update(label=self.spec.name, base=a.base)
        _named(self._row, case)

    def row(self) -> Result:
        return self._row.replace(metrics=dict(self._row.metrics), warnings=list(self._row.warnings))

    def time(self, timing: dict | None = None, profile: bool = False) -> Result:
        """The step timed (and profiled), as measure() times it."""
        if self.step is not None and self._row.ok:
            _time(self._row, self.step, self.device, timing or TIMING, self.spec, self.rec, profile)
        return self.row()

    def window(self, ms: float) -> float:
        """Back-to-back steps for about `ms` after a short warm-up: their mean in ms (the runoff's sample)."""
        from .timing import time_fn
        return float(time_fn(self.step, self.device, warmup_ms=min(50.0, ms / 4), rep_ms=ms, flush_l2=False,
                             back_to_back=True, min_reps=3, max_reps=100_000).mean_ms)


def reference_path(folder, *parts) -> str:
    return str(Path(folder) / ("ref-" + "-".join(str(p) for p in parts) + ".pt"))


# --- a recipe on a workload's stream (the advisor's workload stage) ---------------------------------------------------
class StreamSession:
    """One recipe on the spec's workload (tcperf.workload) in a worker of its own: prepared when made (with the fp32
    reference of the stream's first steps), then `first`, `time` and `profile` as the advisor asks. args.cold: empty
    compile caches, so the compiles cost what they cost on a new machine or container."""

    def __init__(self, case: Case, device, job: Job | None = None):
        self.case, self.device = case, torch.device(device)
        if case.args.cold:
            _cold_caches(case.args.cold)
        t0 = time.perf_counter()
        self.spec = spec_of(case.args, device)
        self.rec = recipes.get(case.args.recipe)
        self.stream = stream_of(self.spec)
        self.varying = _workload_shapes(self.spec)[0]
        self.first_seen, self.second_s, self.pass_ms = None, None, []
        t1 = time.perf_counter()
        self._row, self.step, self.ref = self._open()
        # where a worker's set-up went (the advisor adds the worker's start): the model and its stream loaded and on
        # the device, then fp32's reference and the recipe prepared
        self.setup = {"load_s": t1 - t0, "reference_and_prepare_s": time.perf_counter() - t1}
        _named(self._row, case)

    def _open(self):
        a, rec, spec = self.case.args, self.rec, self.spec
        tol = a.tolerance if a.mode == "infer" and a.tolerance is not None else accuracy.DEFAULT_TOLERANCE["infer"]
        row = Result("", {}, rec.name, tolerance=tol,
                     metrics={"recipe": rec.describe(has_conv2d(spec.model)), "keep_fp32": list(a.keep),
                              "base": a.base, "label": spec.name})
        why = "the factory gives no workload" if not self.stream else skip_reason(rec, spec, a.mode, self.device)
        if why:
            return row.replace(status="skipped", message=why), None, None
        ref = load_reference(a.reference, spec, a.mode, self.device, a.steps)
        fresh(self.device, rec)
        return row, _prepare(spec, rec, a.mode, self.device, keep=a.keep), ref

    def first(self, limit: stream.Limit = stream.Limit()) -> Result:
        """The first pass over the stream, from cold (tcperf.stream.first_pass), and the accuracy of its first
        CHECK_STEPS steps against fp32 on the unpadded inputs; stopped where `limit` says (tcperf.stream.Limit)."""
        if self.step is None or self.first_seen is not None:
            return self.row()
        row, rec = self._row, self.rec
        self.first_seen = stream.first_pass(self.step.call, self.stream, self.device, limit=limit, key=self._key,
                                            per_shape=_recompile_stop(rec))
        row.metrics["stream"] = {**self.first_seen.to_dict(), "length": len(self.stream),
                                 "distinct": workload.distinct_shapes(self.stream), "setup": dict(self.setup)}
        acc = stream_accuracy(self.first_seen.outputs, self.ref["stream"])
        err, what, passes, why = accuracy.judge(acc, "infer", row.tolerance)
        row.metrics.update(accuracy=acc, criterion=f"{what} on the stream's first steps")
        row.error = err
        if not passes:
            row.status = "wrong"
            row.message = why + (" at the real positions of the padded inputs" if rec.pad_to else "")
        if self.first_seen.stopped:
            row.status, row.message = "skipped", f"warm-up stopped: {self.first_seen.stopped}"
            self.step = None
        return self.row()

    def _key(self, tensors: tuple) -> tuple:
        """What the compiled code sees as a new shape: a padded recipe's bucket."""
        if not self.rec.pad_to:
            return workload.shape_key(tensors)
        padded, _ = workload.pad(tensors, self.varying, self.rec.pad_to, [""] * len(tensors))
        return workload.shape_key(padded)

    def row(self) -> Result:
        return self._row.replace(metrics=dict(self._row.metrics), warnings=list(self._row.warnings))

    def time(self, passes: int = stream.PASSES, fresh: bool = True) -> Result:
        """The second warm-up pass (at the first call only: CUDA graphs record there), then `passes` steady passes:
        the step time on this workload is the median pass over the stream's steps. Called again, it times again;
        fresh=False adds its passes to those before (the advisor times its recipes in interleaved rounds)."""
        if self.first_seen is None:
            self.first()
        if self.step is None or not self._row.ok:
            return self.row()
        if self.second_s is None:
            self.second_s = stream.wall_pass(self.step.call, self.stream, self.device)
        steady = stream.steady_passes(self.step.call, self.stream, self.device, passes)
        if not fresh:
            steady = stream.summary(self.pass_ms + steady["pass_ms"], len(self.stream))
        self.pass_ms = steady["pass_ms"]
        samples = [t / len(self.stream) for t in steady["pass_ms"]]
        row = self._row
        row.samples, row.median_ms, row.mean_ms = samples, steady["step_ms"], steady["step_ms"]
        row.min_ms, row.iqr_ms, row.n = min(samples), max(samples) - min(samples), len(samples)
        one_time = max(0.0, self.first_seen.seconds + self.second_s - 2 * steady["median_ms"] / 1e3)
        row.metrics["stream"].update(steady, second_s=self.second_s, one_time_s=one_time)
        row.metrics.update(spread=steady["spread"], unstable=steady["spread"] > 0.1)
        return self.row()

    def profile(self) -> Result:
        """The stream's kernels under the profiler, on PROFILE_STEPS of its steps spread evenly over it: kernel time,
        GPU busy, Tensor Core share. The same steps are timed first without the profiler, and a step's kernel time on
        the stream is their share of kernel time (GPU busy) times the stream's step: a whole pass profiled took
        tens of seconds to read back where a step launches thousands of kernels (a GRU's time steps)."""
        if self.step is None or not self._row.ok or self.device.type != "cuda" or not self._row.median_ms:
            return self.row()
        from .profiler import gpu_busy, profile

        sample = self.stream[::max(1, math.ceil(len(self.stream) / PROFILE_STEPS))]

        def some_steps():
            for x in sample:
                self.step.call(x)
        try:
            wall_ms = stream.steady_passes(lambda _: some_steps(), [None], self.device, passes=3)["median_ms"]
            found = profile(some_steps, self.device, calls=1)
            busy = gpu_busy(found["kernel_ms"], wall_ms)
            step = self._row.median_ms
            self._row.metrics.update(tc_share=found["tc_share"], kernels=found["top"], gpu_busy=busy,
                                     kernel_ms=busy * step if busy is not None else None,
                                     matmul_ms=found["matmul_ms"] / max(found["kernel_ms"], 1e-9) * busy * step
                                     if busy is not None else None, profiled_steps=len(sample))
        except Exception as e:       # the profiler failing leaves the timing standing
            self._row.metrics["kernels"] = [{"name": f"profiler failed: {type(e).__name__}: {e}"[:160],
                                             "time_us": 0.0, "tensor_core": False}]
        return self.row()


def _recompile_stop(rec) -> int:
    """After how many new shapes in a row that each compiled a recipe's first pass is stopped (tcperf.stream)."""
    if not rec.compile:
        return 0
    return 1 if rec.shapes == "static" else stream.RECOMPILE_STOP


def stream_accuracy(outputs: list, refs: list) -> dict:
    """The worst of the stream's checked steps (each compared as tcperf.accuracy compares one output)."""
    worst = None
    for i, (got, ref) in enumerate(zip(outputs, refs)):
        acc = {**accuracy.compare_outputs(got, ref), "stream_step": i}
        if worst is None or not acc["rel_error"] <= worst["rel_error"]:
            worst = acc
    return worst or {"rel_error": math.inf, "nonfinite": False, "note": "no stream step was checked"}


def _cold_caches(folder: str) -> None:
    """Inductor's and Triton's on-disk caches in an empty folder of their own (read when they compile)."""
    os.makedirs(folder, exist_ok=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = folder
    os.environ["TRITON_CACHE_DIR"] = os.path.join(folder, "triton")
