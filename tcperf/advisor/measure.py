"""The model ladder's recipes on the user's model: accuracy against fp32 strict on the user's inputs, then speed.

Inference: the outputs' relative error (all floating-point outputs together, ||out - ref|| / ||ref||), the largest
absolute error, top-1 agreement for logits, NaN/inf, and the user's metric_fn. Training: the loss of the first step
and after `steps` steps on the same data against the fp32 run, NaN/inf, and GradScaler's skipped steps. A recipe
passes when its deciding error (metric_fn's relative change when given, else the output error; in training the
larger loss change) is within the tolerance and nothing is NaN/inf. Then, on a GPU, it is timed with
tcperf.timing.time_fn and profiled for its Tensor Core share.

A recipe's time a step is the mean of 2 s of back-to-back steps: what a loop of them sustains. Not the median of
a short window: a step can run at two speeds in spells (on an H200 near its power cap, fp16_overflow's compiled
fp8 step ran 0.55 ms, then 0.72-0.93 ms, then 0.55 again, in spells of 10 ms to a second that did not follow the
SM clock; host-bound steps follow the CPU, which on the lent VMs changed speed by up to 1.5x within a window),
and a short window's median reports whichever spell it caught. The median and IQR stay beside the mean.

    results = run_ladder(spec, "infer", device, tolerance=0.05)     # [RecipeResult(...), ...]
"""
from __future__ import annotations

import copy
import gc
import math
import time
from dataclasses import asdict, dataclass, field

import torch

from .load import Spec, one_line, tensors
from .snippets import Setup

DEFAULT_TOLERANCE = {"infer": 0.05, "train": 0.02}   # output relative error / relative loss change
TRAIN_STEPS = 5
TIMING = {"warmup_ms": 200.0, "rep_ms": 2000.0, "flush_l2": False, "back_to_back": True, "min_reps": 5,
          "max_reps": 100_000}


@dataclass
class RecipeResult:
    recipe: str
    status: str                      # ok | fails | skipped | error | oom
    message: str = ""
    error: float | None = None       # the deciding error, held against the tolerance
    criterion: str = ""              # what `error` is: output rel. error | metric change | loss change
    accuracy: dict = field(default_factory=dict)
    timing: dict | None = None       # mean_ms (the step time), median_ms, iqr_ms, min_ms, n, samples
    first_call_s: float | None = None   # prepare + first call: includes torch.compile
    speedup: float | None = None     # fp32's step_ms / this step_ms
    tc_share: float | None = None    # share of GPU kernel time in Tensor Core kernels
    gpu_busy: float | None = None    # kernel time a step over the step time (< 1: the GPU waits for the host)
    kernels: list = field(default_factory=list)
    keep_fp32: list = field(default_factory=list)   # mixed recipes: modules kept in float32
    base: str | None = None          # mixed recipes: the recipe they modify

    @property
    def passes(self) -> bool:
        return self.status == "ok"

    @property
    def step_ms(self) -> float | None:
        """The time a step: the mean of the back-to-back samples (see the module's doc)."""
        return self.timing["mean_ms"] if self.timing else None

    def to_dict(self) -> dict:
        return asdict(self)


# --- what a recipe is (tcperf.recipes) --------------------------------------------------------------------------
def recipes_module():
    from .. import recipes
    return recipes


def model_kind(model: torch.nn.Module) -> str:
    """The model ladder's kind for a user's model: 'cnn' with 2-D convolutions (channels_last applies), 'rnn' with
    an RNN layer, else 'transformer' (any model whose GEMMs are Linear layers: fp8/int8 apply)."""
    mods = list(model.modules())
    if any(isinstance(m, torch.nn.Conv2d) for m in mods):
        return "cnn"
    if any(isinstance(m, torch.nn.RNNBase) for m in mods):
        return "rnn"
    return "transformer"


def setup_of(name: str, kind: str = "transformer", keep: tuple = ()) -> Setup:
    """A recipe -> the Setup its code snippets are written from (what was measured, flag for flag)."""
    from .. import precision
    r = recipes_module().get(name)
    p = precision.get(r.precision)
    compile_mode = ("reduce-overhead" if r.cuda_graphs else "default") if r.compile else None
    return Setup(name=r.describe(kind) + (" + fp32 modules" if keep else ""), tf32=p.tf32,
                 autocast=str(p.autocast).replace("torch.", "") if p.autocast is not None else None,
                 channels_last=r.channels_last and kind == "cnn", compile=compile_mode, fp8=r.fp8, int8=r.int8,
                 keep_fp32=tuple(keep))


def autocast_of(name: str) -> str | None:
    """'float16' | 'bfloat16' | None: the autocast dtype a recipe runs its matmuls in."""
    from .. import precision
    dtype = precision.get(recipes_module().get(name).precision).autocast
    return str(dtype).replace("torch.", "") if dtype is not None else None


def kernel_precision(name: str) -> str:
    """The GEMM precision a recipe runs at, for the shape lint: fp32 | tf32 | fp16 | bf16 | fp8 | int8."""
    return recipes_module().get(name).peak_precision


def lint_precisions(mode: str, model: torch.nn.Module, names=None) -> list[str]:
    """The GEMM precisions of the recipes that apply to this model and mode on some GPU (whatever this device
    runs), strict fp32 aside: the shape lint checks each."""
    rec = recipes_module()
    kind = model_kind(model)
    found = {rec.get(n).peak_precision for n in (names or rec.LADDER)
             if mode in rec.get(n).modes and kind in rec.get(n).kinds}
    return [p for p in ("tf32", "fp16", "bf16", "fp8", "int8") if p in found]


def candidates(mode: str, device: torch.device, model: torch.nn.Module, names=None) -> list[tuple[str, str | None]]:
    """(recipe, skip reason or None) for each recipe to try, in ladder order. On a CPU only the recipes whose
    numerics differ are run (no compile, no CUDA graphs): speed is not measured there."""
    rec = recipes_module()
    kind = model_kind(model)
    out = []
    for name in list(names or rec.LADDER):
        r = rec.get(name)
        why = r.skip_reason(kind, mode, device)
        if why is None and device.type == "cpu" and r.compile:
            why = "torch.compile changes speed, not accuracy: not run on the CPU"
        out.append((name, why))
    return out


# --- accuracy ---------------------------------------------------------------------------------------------------
def _nonfinite(outs: list[torch.Tensor]) -> bool:
    return any(not torch.isfinite(t).all() for t in outs)


def compare_outputs(out, ref, metric_fn=None) -> dict:
    """Relative error over all floating-point outputs together, largest absolute error, top-1 agreement for
    logits, NaN/inf, and the metric's relative change."""
    outs = [t.detach().double() for t in tensors(out)]
    refs = [t.detach().double() for t in tensors(ref)]
    if len(outs) != len(refs) or any(o.shape != r.shape for o, r in zip(outs, refs)):
        return {"rel_error": math.inf, "nonfinite": False, "note": "outputs differ in number or shape from fp32"}
    diff = math.sqrt(sum(float(torch.linalg.vector_norm(o - r)) ** 2 for o, r in zip(outs, refs)))
    norm = math.sqrt(sum(float(torch.linalg.vector_norm(r)) ** 2 for r in refs))
    acc = {"nonfinite": _nonfinite(outs),
           "rel_error": diff / norm if norm > 0 else diff,
           "max_abs_error": max(float((o - r).abs().max()) for o, r in zip(outs, refs) if o.numel()),
           "max_abs_ref": max(float(r.abs().max()) for r in refs if r.numel())}
    if acc["nonfinite"]:
        acc["rel_error"] = math.inf
    first, first_ref = outs[0], refs[0]
    if first.dim() >= 2 and first.shape[-1] > 1:
        acc["top1_agree"] = float((first.argmax(-1) == first_ref.argmax(-1)).double().mean())
    if metric_fn is not None:
        m, m_ref = float(metric_fn(out)), float(metric_fn(ref))
        acc.update(metric=m, metric_fp32=m_ref, metric_change=_rel_change(m, m_ref))
    return acc


def _rel_change(x: float, ref: float) -> float:
    if not math.isfinite(x):
        return math.inf
    return abs(x - ref) / max(abs(ref), 1e-12)


def compare_losses(losses: list[float], ref: list[float], skipped: int | None) -> dict:
    return {"loss_first": losses[0], "loss_first_fp32": ref[0], "loss": losses[-1], "loss_fp32": ref[-1],
            "loss_change": max(_rel_change(losses[0], ref[0]), _rel_change(losses[-1], ref[-1])),
            "nonfinite": not all(map(math.isfinite, losses)), "skipped_steps": skipped, "steps": len(losses)}


def judge(acc: dict, mode: str, tolerance: float) -> tuple[float, str, bool, str]:
    """(deciding error, what it is, passes, why not)."""
    if mode == "train":
        err, what = acc["loss_change"], "loss change"
        skipped = acc.get("skipped_steps") or 0
        if skipped > acc["steps"] // 2:
            return err, what, False, f"GradScaler skipped {skipped} of {acc['steps']} steps (overflow)"
    elif "metric_change" in acc:
        err, what = acc["metric_change"], "metric change"
    else:
        err, what = acc["rel_error"], "output rel. error"
    if acc.get("nonfinite"):
        return err, what, False, "NaN/inf in the " + ("loss" if mode == "train" else "outputs")
    if not err <= tolerance:      # written this way round so that NaN fails too
        return err, what, False, f"{what} {err:.3g} > tolerance {tolerance:g}"
    return err, what, True, ""


# --- running one recipe ------------------------------------------------------------------------------------------
class Bound(torch.nn.Module):
    """The model called with the user's example inputs, taking only their top-level tensors positionally (what
    recipes.prepare passes): keyword inputs and non-tensor arguments are bound here."""

    def __init__(self, model: torch.nn.Module, args: tuple, kwargs: dict):
        super().__init__()
        self.model = model
        self.args = [None if torch.is_tensor(a) else a for a in args]
        self.kwargs = {k: None if torch.is_tensor(v) else v for k, v in kwargs.items()}
        self.tensor_args = [i for i, a in enumerate(args) if torch.is_tensor(a)]
        self.tensor_kwargs = [k for k, v in kwargs.items() if torch.is_tensor(v)]

    def forward(self, *tensors):
        args, kwargs = list(self.args), dict(self.kwargs)
        for i, t in zip(self.tensor_args, tensors):
            args[i] = t
        for k, t in zip(self.tensor_kwargs, tensors[len(self.tensor_args):]):
            kwargs[k] = t
        return self.model(*args, **kwargs)


def _tensor_inputs(spec: Spec) -> tuple:
    return (*(a for a in spec.args if torch.is_tensor(a)), *(v for v in spec.kwargs.values() if torch.is_tensor(v)))


def _plain_call(spec: Spec) -> bool:
    """True when the example inputs are positional tensors only: the model goes to prepare() as it is."""
    return not spec.kwargs and all(torch.is_tensor(a) for a in spec.args)


def _loss(spec: Spec):
    """recipes.prepare calls loss_fn(outputs, targets); the user's loss_fn takes the outputs only unless the
    factory gave targets."""
    if spec.loss_fn is None or spec.targets is not None:
        return spec.loss_fn
    return lambda outputs, _targets: spec.loss_fn(outputs)


def _model_with(spec: Spec, keep: list[str], device: torch.device) -> torch.nn.Module:
    model = spec.model
    if keep:
        from .sensitive import keep_fp32
        model = keep_fp32(copy.deepcopy(model), keep, device.type)
    return model if _plain_call(spec) else Bound(model, spec.args, spec.kwargs)


def _prepare(spec: Spec, name: str, mode: str, device, keep: list[str]):
    rec = recipes_module()
    torch.manual_seed(0)          # the same dropout masks and default-loss draws in every recipe
    return rec.prepare(_model_with(spec, keep, device), rec.get(name), mode, _tensor_inputs(spec), device,
                       loss_fn=_loss(spec), targets=spec.targets)


def _run_accuracy(step, mode: str, steps: int):
    """Inference: the outputs of one call (copied: CUDA-graph replays overwrite them). Training: the loss of each
    of `steps` steps as floats, and GradScaler's skipped steps (a step after which the scale went down)."""
    if mode == "infer":
        return _clone(step()), None
    losses, skipped = [], 0
    scaler = getattr(step, "scaler", None)
    for _ in range(steps):
        scale = scaler.get_scale() if scaler else None    # sync point: get_scale reads the scale on the host
        losses.append(float(step()))                      # sync point, once per step
        if scaler and scaler.get_scale() < scale:
            skipped += 1
    return losses, skipped if scaler else None


def _clone(x):
    if torch.is_tensor(x):
        return x.detach().clone()
    if isinstance(x, (tuple, list)):
        return type(x)(_clone(v) for v in x)
    if isinstance(x, dict):
        return {k: _clone(v) for k, v in x.items()}
    return x


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)   # sync point: wall-clock the first call honestly


def reference(spec: Spec, mode: str, device: torch.device, steps: int = TRAIN_STEPS):
    """fp32 strict on the user's inputs: the outputs (inference) or the losses (training)."""
    step = _prepare(spec, "fp32", mode, device, [])
    out, _ = _run_accuracy(step, mode, steps)
    del step
    return out


def run_recipe(spec: Spec, name: str, mode: str, device: torch.device, ref, tolerance: float, *,
               keep: list[str] = (), base: str | None = None, steps: int = TRAIN_STEPS, time_it: bool = True,
               label: str | None = None) -> RecipeResult:
    """Prepare, check accuracy against `ref`, then (GPU, passing or not) time and profile the step."""
    result = RecipeResult(label or name, "ok", keep_fp32=list(keep), base=base)
    try:
        t0 = time.perf_counter()
        step = _prepare(spec, name, mode, device, list(keep))
        out, skipped = _run_accuracy(step, mode, steps)
        _sync(device)
        result.first_call_s = time.perf_counter() - t0
        acc = compare_losses(out, ref, skipped) if mode == "train" else compare_outputs(out, ref, spec.metric_fn)
        del out
        result.accuracy = acc
        result.error, result.criterion, ok, why = judge(acc, mode, tolerance)
        if not ok:
            result.status, result.message = "fails", why
        if time_it and device.type == "cuda":
            _time_and_profile(result, step, device)
        del step
    except recipes_module().NotApplicable as e:
        result.status, result.message = "skipped", str(e)
    except torch.OutOfMemoryError as e:
        result.status, result.message = "oom", str(e).splitlines()[0][:200]
    except Exception as e:     # one recipe that cannot run is a finding, not the end of the advice
        result.status, result.message = "error", one_line(e)
    finally:
        _release(device)
    return result


def _time_and_profile(result: RecipeResult, step, device: torch.device) -> None:
    from ..timing import time_fn
    from .share import gpu_busy, profile
    m = time_fn(step, device, **TIMING)
    result.timing = {**m.summary(), "samples": m.samples_ms, "spread": m.spread, "unstable": m.unstable}
    try:
        result.tc_share, result.kernels, kernel_ms = profile(step, device)
        result.gpu_busy = gpu_busy(kernel_ms, result.step_ms)
    except Exception as e:       # the profiler failing leaves the timing standing
        result.kernels = [{"name": f"profiler failed: {one_line(e)}", "time_us": 0.0, "tensor_core": False}]


def _release(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    if hasattr(torch, "_dynamo"):
        torch._dynamo.reset()      # compiled graphs of one recipe must not serve the next


def add_speedups(results: list[RecipeResult]) -> None:
    base = next((r.step_ms for r in results if r.recipe == "fp32" and r.step_ms), None)
    for r in results:
        r.speedup = base / r.step_ms if base and r.step_ms else None


def run_ladder(spec: Spec, mode: str, device: torch.device, tolerance: float, names=None,
               steps: int = TRAIN_STEPS, on_result=None) -> tuple[list[RecipeResult], object]:
    """Every candidate recipe, fp32 first (it is the reference and the speed baseline). Returns (results, ref)."""
    ref = reference(spec, mode, device, steps)
    results = []
    for name, why in candidates(mode, device, spec.model, names):
        r = (RecipeResult(name, "skipped", message=why) if why
             else run_recipe(spec, name, mode, device, ref, tolerance, steps=steps))
        results.append(r)
        if on_result:
            on_result(r)
    add_speedups(results)
    return results, ref
