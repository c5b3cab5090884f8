"""Shape lint: every matmul, linear, bmm, convolution and attention a model runs, with its real shapes and the module
that ran it, checked against the Tensor Core rules of each candidate precision; on a GPU, what a misaligned GEMM
costs (timed at its shape and padded, through tcperf.ops) and its share of the model's step.

    layers = record(model, args, kwargs)           # one forward, fp32; Layer(module='head', kind='gemm', ...)
    flag(layers, ["tf32", "bf16", "fp8"])          # layer.issues = {'bf16': {'misaligned': ['n=50257 ...']}}
    measure_costs(layers, "bf16", device, model_ms=12.3, mode="infer")   # GPU only: layer.cost = {...}

How: a `__torch_dispatch__` mode sees each aten op below autograd (aten.addmm for a Linear, aten.convolution,
aten._scaled_dot_product_*_attention, ...) with its real operands; forward pre/post hooks on every submodule keep
the stack of module names, so each op is owned by the innermost module that was running. FLOPs come from
torch.utils.flop_counter's formulas.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry, sdpa_flop_count

from .. import tensorcore

TOP_LEVEL = "(top level)"
MAX_MEASURED = 8          # time at most this many misaligned layers (the largest by FLOPs)
WORTH = 0.01              # a fix is worth making when it saves at least 1% of the model's step


@dataclass
class Layer:
    module: str                 # qualified name of the innermost module running the op ('encoder.3.ff.w1')
    module_type: str            # its class name ('Linear')
    kind: str                   # gemm | bmm | conv | attention
    dims: dict                  # gemm/bmm: m, n, k (+ batch); conv: n, c_in, c_out, kernel, ...; attention: ...
    count: int = 1              # calls with these dims in one forward
    flops: float = 0.0          # one call, from torch.utils.flop_counter
    issues: dict = field(default_factory=dict)   # precision -> {misaligned: [...], hard_limit, fix}
    cost: dict | None = None    # measured on the GPU: see measure_costs

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def label(self) -> str:
        d = self.dims
        if self.kind == "gemm":
            return f"{d['m']}x{d['n']}x{d['k']}"
        if self.kind == "bmm":
            return f"{d['batch']}x({d['m']}x{d['n']}x{d['k']})"
        if self.kind == "conv":
            return f"{d['c_in']}->{d['c_out']} k{'x'.join(map(str, d['kernel']))} s{d['stride'][0]} g{d['groups']}"
        return f"B{d['batch']} H{d['heads']} L{d['q_len']} S{d['kv_len']} E{d['head_dim']}"


# --- recording ------------------------------------------------------------------------------------------------
def _gemm(a, b, batch: bool = False) -> tuple[str, dict]:
    if batch:       # (B, m, k) @ (B, k, n)
        return "bmm", {"batch": a.shape[0], "m": a.shape[1], "n": b.shape[2], "k": a.shape[2]}
    return "gemm", {"m": a.shape[0], "n": b.shape[1], "k": a.shape[1]}


def _conv(x, w, bias, stride, padding, dilation, transposed, output_padding, groups) -> tuple[str, dict]:
    c_in = x.shape[1]
    c_out = w.shape[1] * groups if transposed else w.shape[0]
    return "conv", {"n": x.shape[0], "c_in": c_in, "c_out": c_out, "spatial": list(x.shape[2:]),
                    "kernel": list(w.shape[2:]), "stride": list(stride), "padding": list(padding),
                    "groups": groups, "transposed": bool(transposed)}


def _attention(q, k, v, *rest) -> tuple[str, dict]:
    # q: (B, H, L, E), k: (B, H, S, E), v: (B, H, S, Ev)
    return "attention", {"batch": q.shape[0], "heads": q.shape[1], "q_len": q.shape[2], "kv_len": k.shape[2],
                         "head_dim": q.shape[3], "v_head_dim": v.shape[3]}


def _conv_extras(dims: dict, x: torch.Tensor, out: torch.Tensor) -> None:
    dims["out_spatial"] = list(out.shape[2:])
    channels_last = x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
    dims["layout"] = "NHWC" if channels_last else "NCHW"


# aten op name -> how to read its operands
PARSERS = {
    "mm": lambda a, b, *r: _gemm(a, b),
    "_int_mm": lambda a, b, *r: _gemm(a, b),
    "_scaled_mm": lambda a, b, *r: _gemm(a, b),
    "addmm": lambda c, a, b, *r: _gemm(a, b),
    "bmm": lambda a, b, *r: _gemm(a, b, batch=True),
    "baddbmm": lambda c, a, b, *r: _gemm(a, b, batch=True),
    "convolution": _conv,
}


def _parser(name: str):
    if name in PARSERS:
        return PARSERS[name]
    if "scaled_dot_product" in name and "attention" in name and "backward" not in name:
        return _attention
    return None


def _flops(func, args, kwargs, out, kind: str, dims: dict) -> float:
    packet = func.overloadpacket
    if packet in flop_registry:
        return float(flop_registry[packet](*args, **kwargs, out_val=out))
    if kind == "attention":      # e.g. the CPU flash kernel, which flop_counter does not list
        return float(sdpa_flop_count(args[0].shape, args[1].shape, args[2].shape))
    return 0.0


class _Recorder(TorchDispatchMode):
    """Sees every aten op below autograd; keeps the GEMM-like ones with their owner module."""

    def __init__(self, owner_stack: list):
        super().__init__()
        self.owner_stack = owner_stack
        self.layers: dict[tuple, Layer] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        parse = _parser(func.overloadpacket.__name__)
        if parse is not None:
            kind, dims = parse(*args)
            if kind == "conv":
                _conv_extras(dims, args[0], out)
            name, mtype = self.owner_stack[-1]
            key = (name, kind, repr(sorted(dims.items())))
            if key in self.layers:
                self.layers[key].count += 1
            else:
                self.layers[key] = Layer(name, mtype, kind, dims, 1, _flops(func, args, kwargs, out, kind, dims))
        return out


def _hooks(model: torch.nn.Module, stack: list) -> list:
    handles, seen = [], set()
    for name, module in model.named_modules():
        if id(module) in seen or module is model:
            continue
        seen.add(id(module))
        entry = (name, type(module).__name__)
        handles.append(module.register_forward_pre_hook(_push(stack, entry)))
        handles.append(module.register_forward_hook(_pop(stack), always_call=True))
    return handles


def _push(stack: list, entry: tuple):
    def hook(module, args):
        stack.append(entry)          # returns None: the module's inputs stay as they are
    return hook


def _pop(stack: list):
    def hook(module, args, output):
        stack.pop()                  # returns None: the module's output stays as it is
    return hook


def record(model: torch.nn.Module, args: tuple, kwargs: dict | None = None) -> list[Layer]:
    """Run one forward (grad enabled, as training would, so no inference fast path hides its GEMMs) and return
    the GEMM-like ops, one Layer per (module, kind, dims), largest FLOPs first."""
    stack = [(TOP_LEVEL, type(model).__name__)]
    handles = _hooks(model, stack)
    recorder = _Recorder(stack)
    try:
        with recorder:
            out = model(*args, **(kwargs or {}))
        del out
    finally:
        for h in handles:
            h.remove()
    return sorted(recorder.layers.values(), key=lambda l: -l.flops * l.count)


# --- the rules ------------------------------------------------------------------------------------------------
def _conv_geometry(d: dict) -> dict | None:
    """Our conv dims -> the geometry tcperf.tensorcore.conv_verdict reads (2-D, ungrouped convolutions only)."""
    if len(d["kernel"]) != 2 or d["groups"] != 1 or d["transposed"] or not d.get("out_spatial"):
        return None
    (h, w), (r, s), (p, q) = d["spatial"], d["kernel"], d["out_spatial"]
    return {"N": d["n"], "C": d["c_in"], "H": h, "W": w, "K": d["c_out"], "R": r, "S": s, "P": p, "Q": q,
            "layout": d.get("layout", "NCHW"), "pass": "fwd"}


def _conv_issue(dims: dict, precision: str) -> dict:
    """Channels against the precision's alignment (tcperf.tensorcore.conv_verdict where it applies, else the
    same 16-byte rule on the channels per group). The layout is left to the channels_last rungs."""
    g = _conv_geometry(dims)
    if g is not None:
        v = tensorcore.conv_verdict(g, precision)
        fix = ", ".join(f"{d} {g[d]}->{tensorcore.pad_to(g[d], _align(precision))}"
                        for d in ("C", "K") if g[d] % _align(precision))
        note = [i for i in v["issues"] if "image input" in i]
        return {"misaligned": v["misaligned"], "hard_limit": v["hard_limit"],
                "fix": (f"pad {fix}" + (f" ({note[0].split(': ', 1)[1]})" if note else "")) if fix else None}
    groups = dims["groups"]
    per_group = {"c_in": dims["c_in"] // groups, "c_out": dims["c_out"] // groups}
    bad = tensorcore.misaligned(per_group, precision)
    fix = ", ".join(f"{d} {v}->{tensorcore.pad_to(v, _align(precision))}" for d, v in per_group.items()
                    if v % _align(precision))
    return {"misaligned": [f"{b} per group" for b in bad], "hard_limit": None,
            "fix": f"pad channels per group {fix}" if bad else None}


def _align(precision: str) -> int:
    from ..precision import get
    return get(precision).align


def issues_for(layer: Layer, precision: str, sm_count: int | None = None) -> dict | None:
    """The layer's Tensor Core problems at `precision` (None when it has none, or the rule does not apply)."""
    if not tensorcore.uses_tensor_cores(precision):
        return None
    d = layer.dims
    if layer.kind in ("gemm", "bmm"):
        if precision in ("fp8", "int8") and (layer.kind == "bmm" or layer.module_type != "Linear"):
            return None    # the fp8/int8 recipes replace nn.Linear only
        v = tensorcore.gemm_verdict(d["m"], d["n"], d["k"], precision, sm_count)
        found = {"misaligned": v["misaligned"], "hard_limit": v["hard_limit"], "fix": v["fix"]}
        if layer.module_type == "Linear" and d["m"] % _align(precision):
            found["fix"] += " (m is batch x sequence: a batch-size choice)"
    elif layer.kind == "conv":
        if precision in ("fp8", "int8"):
            return None
        found = _conv_issue(d, precision)
    else:       # attention: the fused kernels want the head dimension a multiple of 8
        if precision not in ("fp16", "bf16"):
            return None
        bad = tensorcore.misaligned({"head_dim": d["head_dim"]}, precision)
        found = {"misaligned": bad, "hard_limit": None,
                 "fix": f"head_dim {d['head_dim']}->{tensorcore.pad_to(d['head_dim'], 8)}" if bad else None}
    return found if found["misaligned"] or found["hard_limit"] else None


def flag(layers: list[Layer], precisions, sm_count: int | None = None) -> list[Layer]:
    """Fill layer.issues for each candidate precision; returns the layers that have any."""
    for layer in layers:
        layer.issues = {p: i for p in precisions if (i := issues_for(layer, p, sm_count))}
    return [l for l in layers if l.issues]


def summary(layers: list[Layer]) -> dict:
    """Counts for the report: layers, total forward FLOPs, flagged layers per precision."""
    per_prec: dict[str, int] = {}
    for layer in layers:
        for p in layer.issues:
            per_prec[p] = per_prec.get(p, 0) + 1
    return {"layers": len(layers), "forward_gflops": sum(l.flops * l.count for l in layers) / 1e9,
            "flagged": per_prec}


# --- what a misalignment costs, measured (GPU) -------------------------------------------------------------------
def _gemm_shapes(dims: dict, mode: str) -> list[dict]:
    """The GEMMs one layer runs: the forward, and in training the two backward ones (same dims, permuted):
    dX[m,k] = dY[m,n] @ W[n,k] and dW[n,k] = dY^T[n,m] @ X[m,k]."""
    m, n, k = dims["m"], dims["n"], dims["k"]
    shapes = [{"m": m, "n": n, "k": k}]
    if mode == "train":
        shapes += [{"m": m, "n": k, "k": n}, {"m": n, "n": k, "k": m}]
    return shapes


def _time_gemm(shape: dict, precision: str, device) -> float:
    from .. import precision as precmod
    from ..ops import gemm
    from ..timing import time_fn
    prec = precmod.get(precision)
    with precmod.apply(prec, device.type):
        prep = gemm.OP.prepare(shape, prec, device)
        return time_fn(prep.run, device, rep_ms=30, warmup_ms=10).median_ms


def gemm_cost(layer: Layer, precision: str, device, mode: str) -> dict:
    """Time the layer's GEMMs at their shapes and padded to the precision's alignment (one call each)."""
    from .. import precision as precmod
    from ..ops import gemm
    prec = precmod.get(precision)
    ms = padded_ms = 0.0
    for shape in _gemm_shapes(layer.dims, mode):
        padded = gemm.OP.padded(shape, prec) or shape
        ms += _time_gemm(shape, precision, device)
        padded_ms += _time_gemm(padded, precision, device)
    return {"precision": precision, "ms": ms, "padded_ms": padded_ms, "gain": ms / padded_ms if padded_ms else None}


def measure_costs(layers: list[Layer], precision: str, device, model_ms: float | None, mode: str) -> list[Layer]:
    """For the largest misaligned GEMMs at `precision`: their time, padded time, and share of the model's step
    (per call x calls per forward). Layers with a hard limit or no GEMM op to time are left unmeasured."""
    chosen = [l for l in layers if precision in l.issues and l.kind == "gemm"
              and not l.issues[precision]["hard_limit"]][:MAX_MEASURED]
    for layer in chosen:
        cost = gemm_cost(layer, precision, device, mode)
        cost["ms"] *= layer.count
        cost["padded_ms"] *= layer.count
        if model_ms:
            cost["share"] = cost["ms"] / model_ms
            cost["saved_share"] = (cost["ms"] - cost["padded_ms"]) / model_ms
        layer.cost = cost
    return chosen


def worth_fixing(layers: list[Layer]) -> list[Layer]:
    """Layers whose measured padding gain saves at least WORTH of the model's step."""
    out = [l for l in layers if l.cost and (l.cost.get("saved_share") or 0) >= WORTH]
    return sorted(out, key=lambda l: -l.cost["saved_share"])

