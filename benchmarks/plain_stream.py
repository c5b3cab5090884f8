"""One recipe's plain loop over a workload's stream, alone and cold: the child process benchmarks/workload_gpu.py
starts once a recipe, and the yardstick `tcperf advise --steps N` is held against. No tcperf code runs here: the loop
is what a user writes by hand from the advice's snippet, with PyTorch's defaults wherever the recipe says nothing.

    python benchmarks/plain_stream.py --target benchmarks/streams/gru_asr.py:factory --mode infer \\
        --hand '{"weights": "float16", "compile": true}' --result /tmp/row.json [--device cuda] [--stream 64]

The recipe is a `Hand` (what the loop sets; workload_gpu.hand_of reads one off an advisor's label):
    weights         the model cast (model.to(torch.float16 | torch.bfloat16)), floating-point inputs with it
    autocast        torch.autocast(device, dtype) around the forward (and the loss); training with float16 adds
                    torch.amp.GradScaler, as the AMP docs write it
    tf32            TF32 for float32 matmuls and cuDNN convolutions and RNNs; off otherwise (what the advisor's
                    snippet sets: torch.backends.cudnn.allow_tf32 is True as PyTorch ships it)
    channels_last   model and 4-D inputs in NHWC
    compile         torch.compile(model[, mode="reduce-overhead" if graphs][, dynamic=False if shapes == "static"])
    shapes          static | dynamic (automatic dynamic, torch's default) | marked (maybe_mark_dynamic on every
                    varying dimension before each call) | padN (every varying dimension right-padded to a multiple
                    of N, never past the stream's longest; 0, labels -100; marked where compiled; outputs cut back)
    cudnn_benchmark torch.backends.cudnn.benchmark = True (off as PyTorch ships it unless named)
    fused           training: AdamW(fused=True); else AdamW as a user writes it (foreach, PyTorch's default)
The stream is the factory's workload(0..S-1) (torch.manual_seed(step) before each, as tcperf.workload draws it),
on the device before anything is timed. Training steps an AdamW (lr 1e-3) over the factory's loss_fn(outputs).

Method (the row written to --result says how far it got, even when a stage raises):
    1. fp32's reference, TF32 off, autocast off: the outputs of steps 0..2 (inference; every floating-point tensor
       of the output) or the losses of steps 0..2 trained from the same weights (training, on a copy).
    2. padding's precondition (padN, inference): each output dimension that varies must follow an input dimension
       that varies (the same size at every probed step), so the padded outputs can be cut back; else the recipe is
       refused with the shapes as the reason, before any warm-up (a model whose output is shorter than its input).
    3. warm-up: two passes over the stream from cold, each on the wall clock (synchronized at its end); CUDA graph
       trees record a shape at its second call, so the one-time cost ends after the second pass. Compiles counted
       (Dynamo's unique_graphs after each step). Stopped after the step that passes --cap seconds ("capped").
    4. check: inference, steps 0..2 again; training, the losses of the first pass's steps 0..2 (from the same
       weights as the reference). ||out - ref|| / ||ref|| per tensor, the largest.
    5. steady: --passes passes over the stream, each between two CUDA events (perf_counter on a CPU).
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import importlib.util
import json
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

if str(Path(__file__).resolve().parents[1]) not in sys.path:
    sys.path.insert(1, str(Path(__file__).resolve().parents[1]))     # hand_loops imports this checkout's tcperf

from hand_loops import adamw, window  # noqa: E402 - beside this script: AdamW as users write it, and its clock

CHECK_STEPS = 3           # stream steps checked against fp32
WARM_PASSES = 2           # passes before the steady ones: CUDA graph trees record a shape on its second call
PAD_VALUES = {"labels": -100}     # PyTorch's and Hugging Face's ignore_index; every other input pads with 0
LR = 1e-3


@dataclass(frozen=True)
class Hand:
    """What a plain loop sets (the module's doc says how each is written)."""
    weights: str | None = None          # "float16" | "bfloat16"
    autocast: str | None = None         # "float16" | "bfloat16"
    tf32: bool = False
    channels_last: bool = False
    compile: bool = False
    graphs: bool = False                # mode="reduce-overhead"
    shapes: str = "static"              # static | dynamic | marked | padN
    cudnn_benchmark: bool = False
    fused: bool = False

    @property
    def pad(self) -> int:
        return int(self.shapes[3:]) if self.shapes.startswith("pad") else 0

    @property
    def mark(self) -> bool:
        return self.compile and (self.shapes == "marked" or self.pad > 0)

    def compile_kwargs(self) -> dict:
        return {**({"mode": "reduce-overhead"} if self.graphs else {}),
                **({"dynamic": False} if self.shapes == "static" else {})}


# --- inputs: (args, kwargs) a step, as tcperf.workload splits them ----------------------------------------------------
def split(x) -> tuple[tuple, dict]:
    if torch.is_tensor(x):
        return (x,), {}
    return ((), dict(x)) if isinstance(x, dict) else (tuple(x), {})


def named(step: tuple[tuple, dict]) -> dict:
    """The step's tensors by name: 'arg0', ... for positional ones, keywords as they are."""
    args, kwargs = step
    return {**{f"arg{i}": a for i, a in enumerate(args) if torch.is_tensor(a)},
            **{k: v for k, v in kwargs.items() if torch.is_tensor(v)}}


def rebuild(step: tuple[tuple, dict], tensors: dict) -> tuple[tuple, dict]:
    args, kwargs = step
    return (tuple(tensors.get(f"arg{i}", a) for i, a in enumerate(args)),
            {k: tensors.get(k, v) for k, v in kwargs.items()})


def varying_dims(stream: list) -> dict[str, dict[int, int]]:
    """{input name: {dimension whose size changes across the stream: its longest}}."""
    first = named(stream[0])
    out = {}
    for name, t in first.items():
        sizes = {d: {named(x)[name].shape[d] for x in stream} for d in range(t.dim())}
        dims = {d: max(s) for d, s in sizes.items() if len(s) > 1}
        if dims:
            out[name] = dims
    return out


def bucket(size: int, multiple: int, longest: int) -> int:
    """The next multiple, never past the stream's longest (a model's limit, BERT's 512 positions, often is)."""
    return min(max(multiple, -(-size // multiple) * multiple), max(longest, size))


def pad_step(tensors: dict, varying: dict, multiple: int) -> dict:
    out = {}
    for name, t in tensors.items():
        widths = [0] * (2 * t.dim())
        for d, longest in varying.get(name, {}).items():
            widths[2 * (t.dim() - 1 - d) + 1] = bucket(t.shape[d], multiple, longest) - t.shape[d]  # last dim first
        out[name] = F.pad(t, widths, value=PAD_VALUES.get(name, 0)) if any(widths) else t
    return out


def leaves(out) -> list[torch.Tensor]:
    """Every floating-point tensor of a model's output (a tensor, a dict or ModelOutput, a tuple), in order."""
    if torch.is_tensor(out):
        return [out] if out.is_floating_point() else []
    if isinstance(out, dict):
        return [t for v in out.values() for t in leaves(v)]
    if isinstance(out, (tuple, list)):
        return [t for v in out for t in leaves(v)]
    return []


# --- loading ----------------------------------------------------------------------------------------------------------
def load_factory(target: str) -> dict:
    """path/to/file.py:factory imported under a fixed name (torch.compile and inspect look its module up), the
    factory called after torch.manual_seed(0) (as tcperf.source does)."""
    path, _, name = target.rpartition(":")
    spec = importlib.util.spec_from_file_location(f"stream_{Path(path).stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    made = getattr(module, name)()
    return made if isinstance(made, dict) else {"model": made}


def draw(workload, steps: int, device) -> list[tuple[tuple, dict]]:
    stream = []
    for s in range(steps):
        torch.manual_seed(s)
        args, kwargs = split(workload(s))
        to = lambda v: v.to(device) if torch.is_tensor(v) else v            # noqa: E731
        stream.append((tuple(map(to, args)), {k: to(v) for k, v in kwargs.items()}))
    return stream


# --- global flags, as the snippet writes them -------------------------------------------------------------------------
def set_flags(tf32: bool, cudnn_benchmark: bool) -> None:
    """TF32 for matmuls, convolutions and RNNs on or off, cuDNN autotuning on or off."""
    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):        # torch >= 2.9: one family of switches
        for backend in (torch.backends.cuda.matmul, getattr(torch.backends.cudnn, "conv", None),
                        getattr(torch.backends.cudnn, "rnn", None)):
            if hasattr(backend, "fp32_precision"):
                backend.fp32_precision = "tf32" if tf32 else "ieee"
    else:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = cudnn_benchmark


def autocast(hand: Hand, device) -> contextlib.AbstractContextManager:
    if hand.autocast is None:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=getattr(torch, hand.autocast))


# --- the step ---------------------------------------------------------------------------------------------------------
class Loop:
    """The plain loop of one Hand: step(x) runs one stream step and returns the compared tensors (inference: the
    output's floating-point tensors at the real positions; training: the loss)."""

    def __init__(self, hand: Hand, model, mode: str, loss_fn, varying: dict, follows: dict, device):
        self.hand, self.mode, self.loss_fn, self.device = hand, mode, loss_fn, device
        self.varying, self.follows = varying, follows
        if hand.weights:
            model = model.to(getattr(torch, hand.weights))
        if hand.channels_last:
            model = model.to(memory_format=torch.channels_last)
        self.model = model
        self.runner = torch.compile(model, **hand.compile_kwargs()) if hand.compile else model
        if mode == "train":
            self.opt = adamw(model.parameters(), {"lr": LR}, fused=hand.fused)
            self.scaler = torch.amp.GradScaler(device.type) if hand.autocast == "float16" else None

    def inputs(self, x) -> tuple[tuple, dict, dict]:
        """The step's inputs as the recipe feeds them, and each input's real sizes before padding."""
        tensors = named(x)
        real = {name: tuple(t.shape) for name, t in tensors.items()}
        if self.hand.weights:
            tensors = {k: t.to(getattr(torch, self.hand.weights)) if t.is_floating_point() else t
                       for k, t in tensors.items()}
        if self.hand.channels_last:
            tensors = {k: t.contiguous(memory_format=torch.channels_last) if t.dim() == 4 else t
                       for k, t in tensors.items()}
        if self.hand.pad:
            tensors = pad_step(tensors, self.varying, self.hand.pad)
        if self.hand.mark:
            for name, dims in self.varying.items():
                for d in dims:
                    torch._dynamo.maybe_mark_dynamic(tensors[name], d)
        args, kwargs = rebuild(x, tensors)
        return args, kwargs, real

    def __call__(self, x) -> list[torch.Tensor]:
        if self.hand.graphs:
            torch.compiler.cudagraph_mark_step_begin()     # a new step: earlier outputs may be overwritten
        args, kwargs, real = self.inputs(x)
        if self.mode == "train":
            return [self.train(args, kwargs)]
        with torch.no_grad(), autocast(self.hand, self.device):
            out = leaves(self.runner(*args, **kwargs))
        return [self.cut(t, i, real) for i, t in enumerate(out)] if self.hand.pad else out

    def train(self, args, kwargs) -> torch.Tensor:
        self.opt.zero_grad(set_to_none=True)
        with autocast(self.hand, self.device):
            loss = self.loss_fn(self.runner(*args, **kwargs))
        if self.scaler is None:
            loss.backward()
            self.opt.step()
        else:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.opt)                     # sync point: GradScaler reads found_inf on the host
            self.scaler.update()
        return loss.detach()

    def cut(self, t: torch.Tensor, index: int, real: dict) -> torch.Tensor:
        """Output `index` cut back, in each dimension that follows an input's varying one, to that input's size."""
        for d, (name, e) in self.follows.get(index, {}).items():
            t = t.narrow(d, 0, real[name][e])
        return t


# --- the reference and padding's precondition -------------------------------------------------------------------------
def reference(model, stream, mode: str, loss_fn, device) -> list[list[torch.Tensor]]:
    """fp32 strict's compared tensors on steps 0..2: the outputs, or the losses trained from these weights."""
    set_flags(tf32=False, cudnn_benchmark=False)
    loop = Loop(Hand(), copy.deepcopy(model) if mode == "train" else model, mode, loss_fn, {}, {}, device)
    refs = [[t.float().clone() for t in loop(x)] for x in stream[:CHECK_STEPS]]
    del loop
    return refs


def follow_map(model, stream, refs, varying: dict) -> tuple[dict, str | None]:
    """{output index: {dimension: (input name, its dimension)}} for every output dimension that varies, each
    following the input dimension of the same size at every probed step (the first CHECK_STEPS, and the stream's
    first step of another shape where those share one); (map, None), or ({}, why padding cannot be cut back)."""
    probes = list(range(min(CHECK_STEPS, len(stream))))
    shapes = [[tuple(t.shape) for t in r] for r in refs]
    if len({shape_of(stream[i]) for i in probes}) == 1:
        other = next((i for i, x in enumerate(stream) if shape_of(x) != shape_of(stream[0])), None)
        if other is not None:
            with torch.no_grad():
                shapes.append([tuple(t.shape) for t in leaves(model(*stream[other][0], **stream[other][1]))])
            probes.append(other)
    inputs = [{name: named(stream[i])[name].shape for name in varying} for i in probes]
    follows = {}
    for j, dims in enumerate(zip(*shapes)):             # output j's shape at each probed step
        for d in range(len(dims[0])):
            sizes = [shape[d] for shape in dims]
            if len(set(sizes)) == 1:
                continue
            found = next(((name, e) for name in varying for e in varying[name]
                          if all(inp[name][e] == n for inp, n in zip(inputs, sizes))), None)
            if found is None:
                return {}, (f"output {j}'s dimension {d} takes {sizes} on the probed steps, which no varying input "
                            f"dimension does ({describe_inputs(inputs, varying)}): padded outputs could not be cut "
                            f"back to the real positions")
            follows.setdefault(j, {})[d] = found
    return follows, None


def shape_of(x) -> tuple:
    return tuple(tuple(t.shape) for t in named(x).values())


def describe_inputs(inputs: list[dict], varying: dict) -> str:
    return "; ".join(f"{name} dim {e}: {[inp[name][e] for inp in inputs]}" for name in varying for e in varying[name])


# --- warm-up, check, steady -------------------------------------------------------------------------------------------
def sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)      # sync point: the wall clock ends with the GPU's work


def unique_graphs() -> int:
    from torch._dynamo.utils import counters
    return int(counters["stats"]["unique_graphs"])


def warm_up(step, stream, cap: float, device, keep: int = 0) -> dict:
    """WARM_PASSES passes over the stream from cold: each pass's wall seconds, the compiles after every step, and
    the compared tensors of the first `keep` steps (copied to the host); stopped after the step that takes the whole
    past cap seconds."""
    compiles, passes, kept, t0 = [], [], [], time.perf_counter()
    for _ in range(WARM_PASSES):
        start = time.perf_counter()
        for x in stream:
            out = step(x)
            if len(kept) < keep:
                kept.append([t.float().cpu() for t in out])        # sync point: the first steps' results
            compiles.append(unique_graphs())
            if time.perf_counter() - t0 > cap and len(compiles) < WARM_PASSES * len(stream):
                sync(device)
                return {"warm_s": time.perf_counter() - t0, "warm_pass_s": passes, "steps_done": len(compiles),
                        "capped": True, "compiles": compiles[-1], "compiles_by_step": compiles, "kept": kept}
        sync(device)
        passes.append(time.perf_counter() - start)
    return {"warm_s": sum(passes), "warm_pass_s": passes, "steps_done": len(compiles), "capped": False,
            "compiles": compiles[-1], "compiles_by_step": compiles, "kept": kept}


def rel_errors(outs: list[list[torch.Tensor]], refs: list[list[torch.Tensor]]) -> list[float]:
    """||out - ref|| / ||ref|| of each checked step, the worst of its tensors (inf where a shape differs)."""
    errs = []
    for out, ref in zip(outs, refs):
        worst = 0.0 if len(out) == len(ref) else float("inf")
        for o, r in zip(out, ref):
            o = o.float().to(r.device)
            bad = o.shape != r.shape or not torch.isfinite(o).all()
            worst = max(worst, float("inf") if bad else float((o - r).norm() / r.norm().clamp_min(1e-30)))
        errs.append(worst)
    return errs


def steady(step, stream, passes: int, device) -> list[float]:
    """ms of each pass over the whole stream, each started on an idle GPU."""
    out = []
    for _ in range(passes):
        it = iter(stream)
        sync(device)
        ms, _ = window(lambda: step(next(it)), device, calls=len(stream))
        out.append(ms)
    return out


def limit_hit(shapes: list[tuple], compiles: list[int], limit: int) -> bool:
    """Did compiles stop growing at the recompile limit while new shapes kept coming?"""
    seen, before = set(), 0
    for shape, after in zip(shapes, compiles):
        if shape not in seen and after == before and before >= limit:
            return True
        seen.add(shape)
        before = after
    return False


# --- one recipe -------------------------------------------------------------------------------------------------------
def prepare(args, row: dict):
    """(model on the device, stream, loss_fn, varying dims), the stream's facts in `row`."""
    device = torch.device(args.device)
    made = load_factory(args.target)
    model = made["model"].to(device).train(args.mode == "train")
    stream = draw(made["workload"], args.stream, device)
    varying = varying_dims(stream)
    row.update(params=sum(p.numel() for p in model.parameters()), distinct=len({shape_of(x) for x in stream}),
               varying={k: {str(d): n for d, n in v.items()} for k, v in varying.items()},
               conv=any(isinstance(m, torch.nn.Conv2d) for m in model.modules()),
               gpu=torch.cuda.get_device_name(device) if device.type == "cuda" else None,
               recompile_limit=torch._dynamo.config.recompile_limit)
    return model, stream, made.get("loss_fn"), varying


def run_one(args, row: dict) -> None:
    """The child: prepare, reference, padding's precondition, warm-up, check, steady, filling `row` as it goes."""
    t0, hand, device = time.perf_counter(), Hand(**json.loads(args.hand)), torch.device(args.device)
    model, stream, loss_fn, varying = prepare(args, row)
    refs = reference(model, stream, args.mode, loss_fn, device)
    follows = {}
    if hand.pad and args.mode == "infer":
        follows, why = follow_map(model, stream, refs, varying)
        if why:
            row.update(refused=f"padding refused: {why}", wall_s=time.perf_counter() - t0)
            return
    set_flags(hand.tf32, hand.cudnn_benchmark)
    step = Loop(hand, model, args.mode, loss_fn, varying, follows, device)
    row["setup_s"] = time.perf_counter() - t0
    run_timed(step, stream, refs, args, row)
    row["wall_s"] = time.perf_counter() - t0


def run_timed(step, stream, refs, args, row: dict) -> None:
    device, train = torch.device(args.device), args.mode == "train"
    shapes = [shape_of(x) if not step.hand.pad else shape_of(rebuild(x, pad_step(named(x), step.varying,
                                                                                     step.hand.pad))) for x in stream]
    row["shapes"] = len(set(shapes))
    with contextlib.nullcontext() if train else torch.no_grad():
        warm = warm_up(step, stream, args.cap, device, keep=CHECK_STEPS if train else 0)
        kept = warm.pop("kept")
        row.update(warm, limit_hit=limit_hit(shapes * WARM_PASSES, warm["compiles_by_step"], row["recompile_limit"]))
        say(args, "warm-up passes " + " + ".join(f"{t:.1f}" for t in warm["warm_pass_s"]) +
            f" s, {warm['steps_done']} steps, {warm['compiles']} compiles" + (" (capped)" if warm["capped"] else ""))
        if warm["capped"]:
            return
        outs = kept if train else [[t.float().clone() for t in step(x)] for x in stream[:CHECK_STEPS]]
        errs = rel_errors(outs, refs)
        row.update(rel_errors=errs, rel_error=max(errs), passes=max(errs) <= args.tolerance)
        say(args, "rel. error vs fp32 " + ", ".join(f"{e:.3g}" for e in errs))
        row["pass_ms"] = steady(step, stream, args.passes, device)


def say(args, text: str) -> None:
    print(f"  {args.label}: {text}", flush=True)


# --- main -------------------------------------------------------------------------------------------------------------
def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True, help="path/to/file.py:factory")
    ap.add_argument("--hand", required=True, help="the Hand as JSON: {\"weights\": \"bfloat16\", \"compile\": true}")
    ap.add_argument("--result", required=True, help="where the row goes (JSON)")
    ap.add_argument("--mode", choices=("infer", "train"), default="infer")
    ap.add_argument("--label", default="plain loop", help="the recipe's label, for the log")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--stream", type=int, default=64, help="steps in the stream: workload(0..S-1)")
    ap.add_argument("--passes", type=int, default=5, help="steady passes timed")
    ap.add_argument("--cap", type=float, default=150.0, help="seconds the warm-up (its 2 passes) may take")
    ap.add_argument("--tolerance", type=float, default=0.05, help="||out - ref|| / ||ref|| a recipe may reach")
    ap.add_argument("--profiler-first", action="store_true",
                    help="start torch.profiler once before anything else, as tcperf's session workers do")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    row = {"label": args.label, "hand": json.loads(args.hand), "profiler_first": args.profiler_first}
    try:
        if args.profiler_first and args.device.startswith("cuda"):
            from tcperf.worker import ready_device   # the session workers' start: context, cuBLAS, the profiler
            ready_device(torch.device(args.device), profiler=True)
        run_one(args, row)
    except Exception as e:      # noqa: BLE001 - the row says what failed; the traceback goes to the log
        traceback.print_exc()
        row["error"] = f"{type(e).__name__}: {' '.join(str(e).split())}"[:300]
    Path(args.result).write_text(json.dumps(row))
    return 1 if "error" in row else 0


if __name__ == "__main__":
    sys.exit(main())
