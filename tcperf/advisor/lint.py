"""Shape lint: every matmul, linear, bmm, convolution and attention a model runs (tcperf.layers.record), checked
against the Tensor Core rules of each candidate precision; on a GPU, what a misaligned GEMM costs (timed at its
shape and padded, through tcperf.ops) and its share of the model's step.

    layers = record(model, args, kwargs)           # one forward, fp32; Layer(module='head', kind='gemm', ...)
    flag(layers, ["tf32", "bf16", "fp8"])          # layer.issues = {'bf16': {'misaligned': ['n=50257 ...']}}
    measure_costs(layers, "bf16", device, model_ms=12.3, mode="infer")   # GPU only: layer.cost = {...}
"""
from __future__ import annotations

from .. import precision as precmod
from .. import tensorcore
from ..layers import TOP_LEVEL, Layer, record  # noqa: F401  (the advisor's modules take them from here)

MAX_MEASURED = 8          # time at most this many misaligned layers (the largest by FLOPs)
WORTH = 0.01              # a fix is worth making when it saves at least 1% of the model's step


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
    return precmod.get(precision).align


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
    from ..ops import gemm
    from ..timing import time_fn
    prec = precmod.get(precision)
    with precmod.apply(prec, device.type):
        return time_fn(gemm.OP.prepare(shape, prec, device).run, device, rep_ms=30, warmup_ms=10).median_ms


def gemm_cost(layer: Layer, precision: str, device, mode: str) -> dict:
    """Time the layer's GEMMs at their shapes and padded to the precision's alignment (one call each)."""
    from ..ops import gemm
    prec = precmod.get(precision)
    ms = padded_ms = 0.0
    for shape in _gemm_shapes(layer.dims, mode):
        ms += _time_gemm(shape, precision, device)
        padded_ms += _time_gemm(gemm.OP.padded(shape, prec) or shape, precision, device)
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

