"""The matmuls, linears, bmms, convolutions and attention calls one forward of a model runs, with their real shapes,
FLOPs and the module that ran each: what the engine reads to see whether fp8/int8 have layers to take, and what the
advisor's shape lint checks against the Tensor Core rules (tcperf.advisor.lint).

    layers = record(model, args, kwargs)           # one forward, fp32; Layer(module='head', kind='gemm', ...)

How: a `__torch_dispatch__` mode sees each aten op below autograd (aten.addmm for a Linear, aten.convolution, ...)
with its real operands; forward pre/post hooks on every submodule keep the stack of module names, so each op is
owned by the innermost module that was running. FLOPs come from torch.utils.flop_counter's formulas.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry, sdpa_flop_count

TOP_LEVEL = "(top level)"


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
