"""2-D convolution through cuDNN: forward, backward-data and backward-weight, in NCHW or NHWC (channels_last).

Shape keys: N C H W (input), K (output channels), R S (filter), pad, stride (or pad_h/pad_w, stride_h/stride_w),
layout (NCHW | NHWC), pass (fwd | bwd_data | bwd_weight). Output P = (H + 2*pad_h - R) // stride_h + 1, Q likewise.

FLOPs, every pass: 2 * N * K * P * Q * C * R * S (each output element of the forward pass is a C*R*S-term dot
product; backward-data and backward-weight are the same multiply-adds regrouped, as DeepBench counts them).
Bytes: input N*C*H*W + filter K*C*R*S + output N*K*P*Q elements, each read or written once (the same three
tensors in every pass). The float64 reference runs the same call (_CALLS) on NCHW float64 copies.

    tcperf bench --suite resnet50 --precision tf32,bf16 --filter pass=fwd
On an H200 (anchors.md): 3x3 64->64 at 56x56, N=64: fp16 NCHW 119 TFLOPS, fp16 NHWC 254.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..errors import UserError
from ..precision import Precision
from .base import Op, Prepared, generator, one_of, randn

LAYOUTS = ("NCHW", "NHWC")
PASSES = ("fwd", "bwd_data", "bwd_weight")


def geometry(shape: dict) -> dict:
    """The shape with defaults filled in and P, Q computed; UserError for a shape that is no convolution."""
    missing = [k for k in ("N", "C", "H", "W", "K", "R", "S") if k not in shape]
    if missing:
        raise UserError(f"conv shape lacks {', '.join(missing)}; needs N C H W K R S [pad stride layout pass]")
    g = {k: int(shape[k]) for k in ("N", "C", "H", "W", "K", "R", "S")}
    for side in ("h", "w"):
        g[f"pad_{side}"] = int(shape.get(f"pad_{side}", shape.get("pad", 0)))
        g[f"stride_{side}"] = int(shape.get(f"stride_{side}", shape.get("stride", 1)))
    g["layout"] = one_of(str(shape.get("layout", "NCHW")).upper(), LAYOUTS, "layout")
    g["pass"] = one_of(str(shape.get("pass", "fwd")), PASSES, "conv pass")
    g["P"] = (g["H"] + 2 * g["pad_h"] - g["R"]) // max(g["stride_h"], 1) + 1
    g["Q"] = (g["W"] + 2 * g["pad_w"] - g["S"]) // max(g["stride_w"], 1) + 1
    if min(g[k] for k in ("N", "C", "H", "W", "K", "R", "S", "stride_h", "stride_w")) < 1 or min(g["P"], g["Q"]) < 1:
        raise UserError(f"not a valid convolution: {describe(g)} (sizes and strides must be >= 1, the filter "
                        "must fit the padded input)")
    return g


def describe(g: dict) -> str:
    pad = g["pad_h"] if g["pad_h"] == g["pad_w"] else f"{g['pad_h']},{g['pad_w']}"
    stride = g["stride_h"] if g["stride_h"] == g["stride_w"] else f"{g['stride_h']},{g['stride_w']}"
    return (f"N{g['N']} {g['C']}->{g['K']} {g['H']}x{g['W']} {g['R']}x{g['S']} pad {pad} stride {stride} "
            f"{g['layout']} {g['pass']}")


class Conv(Op):
    name = "conv"
    precisions = ("fp32", "tf32", "fp16", "bf16")
    shape_keys = ("N", "C", "H", "W", "K", "R", "S", "pad", "stride", "layout", "pass")

    def flops(self, shape: dict) -> float:
        g = geometry(shape)
        return 2.0 * g["N"] * g["K"] * g["P"] * g["Q"] * g["C"] * g["R"] * g["S"]

    def bytes(self, shape: dict, prec: Precision) -> float:
        g = geometry(shape)
        x = g["N"] * g["C"] * g["H"] * g["W"]
        w = g["K"] * g["C"] * g["R"] * g["S"]
        y = g["N"] * g["K"] * g["P"] * g["Q"]
        return float((x + w + y) * prec.element_bytes)

    def label(self, shape: dict) -> str:
        return describe(geometry(shape))

    def verdict(self, shape: dict, prec: Precision, sm_count: int | None) -> dict:
        from ..tensorcore import conv_verdict
        return conv_verdict(geometry(shape), prec.name, sm_count)

    def padded(self, shape: dict, prec: Precision) -> dict | None:
        """C and K up to the 16-byte multiple (8 fp16/bf16, 4 tf32); nothing for fp32, which has no Tensor Cores."""
        from ..tensorcore import pad_to, uses_tensor_cores
        if not uses_tensor_cores(prec.name):
            return None
        new = {**shape, "C": pad_to(int(shape["C"]), prec.align), "K": pad_to(int(shape["K"]), prec.align)}
        return None if (new["C"], new["K"]) == (shape["C"], shape["K"]) else new

    def prepare(self, shape: dict, prec: Precision, device: torch.device, seed: int = 0) -> Prepared:
        g = geometry(shape)
        gen = generator(device, seed)
        x = randn((g["N"], g["C"], g["H"], g["W"]), prec.dtype, device, gen)     # N, C, H, W
        w = randn((g["K"], g["C"], g["R"], g["S"]), prec.dtype, device, gen)     # K, C, R, S
        dy = randn((g["N"], g["K"], g["P"], g["Q"]), prec.dtype, device, gen)    # N, K, P, Q
        if g["layout"] == "NHWC":
            x, w, dy = (t.contiguous(memory_format=torch.channels_last) for t in (x, w, dy))
        call = _CALLS[g["pass"]]
        args = dict(stride=(g["stride_h"], g["stride_w"]), padding=(g["pad_h"], g["pad_w"]))
        ref = lambda: call(*(t.double().contiguous() for t in (x, w, dy)), **args)
        return Prepared(run=lambda: call(x, w, dy, **args), reference=ref,
                        info={"layout": g["layout"], "pass": g["pass"]})


def _backward(x, w, dy, stride, padding, mask):
    """torch.ops.aten.convolution_backward: the call autograd makes; mask picks (input, weight, bias) grads."""
    return torch.ops.aten.convolution_backward(dy, x, w, None, list(stride), list(padding), [1, 1], False,
                                               [0, 0], 1, mask)


_CALLS = {
    "fwd": lambda x, w, dy, stride, padding: F.conv2d(x, w, None, stride, padding),
    "bwd_data": lambda x, w, dy, stride, padding: _backward(x, w, dy, stride, padding, [True, False, False])[0],
    "bwd_weight": lambda x, w, dy, stride, padding: _backward(x, w, dy, stride, padding, [False, True, False])[1],
}

OP = Conv()
