"""The quantized Linear layers, one family for the model ladder (tcperf.recipes) and `tcperf generate`, on PyTorch's
own kernels: Fp8Linear (torch._scaled_mm), Int8Linear (torch._int_mm), Int8WeightOnlyLinear and Int4WeightOnlyLinear
(gpt-fast's; with kernel="triton" they run tcperf.kernels.gemv's Triton kernels instead), and swap_linears, the one loop
that puts them in place of nn.Linear layers:

    swapped, kept = swap_linears(model, Int8Linear, lambda lin: lin.in_features % 8 == 0, refuse=MyError)
    check_layers(model)        # {"passed": True, "rel_error": 0.0021, "layer": "layers.3.w2", ...}

check_layers runs every quantized layer of a model on random inputs against its own dequantised weights in float32
(`reference(x)`): a kernel either meets its tolerance or is wrong by far (a scale read from the wrong group, a packing
off by a nibble). What quantization costs a model's accuracy is the model's check.

Which layers a feature takes, and how it words what it kept, stay with the feature: this module imports none.
"""
from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

F8 = getattr(torch, "float8_e4m3fn", None)      # None on torch builds without float8
F8_MAX = 448.0                                   # largest finite float8_e4m3fn
I8_MAX = 127.0
# A kernel against its own dequantised weights: the same products, summed in another order and rounded to bf16 once
# or twice (2^-9 relative each). Measured on the CPU (tiny model): 0.0017-0.0025; int4 scales read one group off: 0.10.
KERNEL_TOLERANCE = 0.01
CHECK_ROWS = (1, 5)          # input rows: the decode GEMV (batch 1) and a small batch (kernels switch paths on M)


class QuantLinear(nn.Module):
    """What the quantized layers keep of nn.Linear's face, for model code that reads it: in_features, out_features
    and `weight`, a stand-in of the layer's shape in its output dtype (bf16) that costs no memory (one zero,
    expanded). transformers' T5 reads `wo.weight.dtype` to cast its input; code that computes with the values gets
    zeros, and the recipe's accuracy check fails it."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features

    @property
    def weight(self) -> torch.Tensor:
        """Made when read, on the layer's device: no buffer, so it is neither saved nor counted as bytes read."""
        held = next(self.buffers(), None)
        zero = torch.zeros((), dtype=torch.bfloat16, device=held.device if held is not None else None)
        return zero.expand(self.out_features, self.in_features)

    def dequantized(self) -> torch.Tensor:
        """The weight (N, K) in float32, as the kernel should read it."""
        raise NotImplementedError

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        """What forward(x) should give, in float32 from dequantized(): x W^T (+ bias)."""
        bias = getattr(self, "bias", None)
        y = F.linear(x.float(), self.dequantized())
        return y if bias is None else y + bias.float()


def _scale(amax: torch.Tensor, top: float) -> torch.Tensor:
    """The scale mapping amax onto the format's largest value; the floor keeps an all-zero tensor finite."""
    return (amax / top).clamp(min=1e-12)


def fp8_quantize(t: torch.Tensor, rowwise: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """t (M, K) -> e4m3 (M, K) and float32 scales, (M, 1) per row or () per tensor, with t ~ q * scale."""
    amax = t.float().abs().amax(dim=1, keepdim=True) if rowwise else t.float().abs().amax()
    scale = _scale(amax, F8_MAX)
    return (t.float() / scale).to(F8), scale


def int8_quantize(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per row: t (N, K) -> int8 (N, K), scales (N,) float32 with t ~ q * scale."""
    scales = _scale(t.float().abs().amax(dim=1), I8_MAX)
    return torch.round(t.float() / scales[:, None]).clamp(-I8_MAX, I8_MAX).to(torch.int8), scales


# --- weights and activations quantized ------------------------------------------------------------------------
class Fp8Linear(QuantLinear):
    """y = x W^T + b with x and W in e4m3 through torch._scaled_mm, bf16 out; W's scales made once, x's at every
    call, one per tensor or (rowwise) one per row. W is stored (N, K) row-major, so W^T is the column-major (K, N)
    operand cuBLASLt requires."""

    def __init__(self, linear: nn.Linear, rowwise: bool = False):
        super().__init__(linear)
        w8, w_scale = fp8_quantize(linear.weight.detach(), rowwise)
        self.rowwise = rowwise
        self.register_buffer("w8", w8)                                                    # (N, K)
        self.register_buffer("w_scale", w_scale.reshape(1, -1) if rowwise else w_scale)   # (1, N) or ()
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().to(torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x8, x_scale = fp8_quantize(x.reshape(-1, x.shape[-1]), self.rowwise)   # (M, K), (M, 1) or ()
        if x8.device.type == "cpu" and self.rowwise:
            # torch 2.11's CPU _scaled_mm takes per-tensor scales only (an internal assert otherwise): the same
            # e4m3 products, scaled per row after the float32 matmul
            y = ((x8.float() @ self.w8.float().t()) * x_scale * self.w_scale).to(torch.bfloat16)
        else:
            y = torch._scaled_mm(x8, self.w8.t(), scale_a=x_scale, scale_b=self.w_scale, out_dtype=torch.bfloat16)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*x.shape[:-1], y.shape[-1])

    def dequantized(self) -> torch.Tensor:
        return self.w8.float() * self.w_scale.reshape(-1, 1).float()

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        """The activation quantized as forward does, then the float32 product."""
        x8, x_scale = fp8_quantize(x.reshape(-1, x.shape[-1]), self.rowwise)
        return super().reference((x8.float() * x_scale).reshape(x.shape))


class Int8Linear(QuantLinear):
    """y = x W^T + b with int8 weights (one scale per output channel) and int8 activations (one scale per row,
    taken at every call), int32 accumulation through torch._int_mm, bf16 out. W is stored (N, K) row-major, so W^T
    is column-major: with a row-major B, _int_mm runs an sm80 WMMA kernel (an H200: 129 TOPS at 8192^3 against
    922). _int_mm needs M > 16: smaller calls fall back to the dequantized weight."""

    def __init__(self, linear: nn.Linear):
        super().__init__(linear)
        w8, w_scale = int8_quantize(linear.weight.detach())                       # (N, K), (N,)
        self.register_buffer("w_scale", w_scale)
        self.register_buffer("w8", w8)
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().float())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, x.shape[-1]).float()                                    # (M, K)
        if x2.shape[0] > 16:
            x8, x_scale = int8_quantize(x2)                                        # (M, K), (M,)
            y = torch._int_mm(x8, self.w8.t()).float() * x_scale[:, None] * self.w_scale   # int32 (M, N) -> float
        else:
            y = x2 @ (self.w8.float() * self.w_scale[:, None]).t()
        if self.bias is not None:
            y = y + self.bias
        return y.to(torch.bfloat16).view(*x.shape[:-1], y.shape[-1])

    def dequantized(self) -> torch.Tensor:
        return self.w8.float() * self.w_scale[:, None]

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        """Above 16 rows the activation is quantized a scale a row, as forward does."""
        x2 = x.reshape(-1, x.shape[-1]).float()
        if x2.shape[0] > 16:
            x8, x_scale = int8_quantize(x2)
            x2 = x8.float() * x_scale[:, None]
        return super().reference(x2.reshape(x.shape))


# --- weight-only ------------------------------------------------------------------------------------------------
INT8_KERNELS = ("inductor", "triton")     # Int8WeightOnlyLinear's kernel= choices, the default first
INT4_KERNELS = ("tinygemm", "triton")     # Int4WeightOnlyLinear's


def _kernel(kernel: str, choices: tuple) -> str:
    """A layer's kernel= checked; "triton" imports tcperf.kernels.gemv, which registers torch.ops.tcperf.*."""
    if kernel not in choices:
        raise ValueError(f"unknown kernel {kernel!r}; choose from: {', '.join(choices)}")
    if kernel == "triton":
        from .kernels import gemv  # noqa: F401  (here: the Triton kernels load only for the layers that run them)
    return kernel


def apart(x: torch.Tensor) -> torch.Tensor:
    """x as a GEMV's input under torch.compile: stored where it is made (Inductor's force_stride_order realises it,
    no copy), so the GEMV after it reads it instead of recomputing its producer (RMSNorm, SiLU(gate) x up) over all
    of K in every program: Llama-3.1-8B's int8 weight-only decode at batch 1 on an H100 (2026-11-26) ran at 180-223
    tokens/s fused and 237-249 with the input apart. Eager, and under autograd (no derivative), x itself."""
    if not torch.compiler.is_compiling() or torch.is_grad_enabled():
        return x
    from torch._inductor import inductor_prims     # registers the op; imported when first compiled, not before
    return inductor_prims.force_stride_order(x, x.stride())


class Int8WeightOnlyLinear(QuantLinear):
    """gpt-fast's WeightOnlyInt8Linear: 1 byte a weight read instead of 2, the int8 values in `w8`. kernel="inductor":
    the widening to bf16 and the scale fused into the matmul by torch.compile (eager widens the whole weight first),
    its input through apart(); kernel="triton": tcperf.kernels.gemv's int8 kernel, the same in eager and compiled
    (which a decode takes is tcperf.generate.quant.KERNELS's choice, measured there)."""

    def __init__(self, linear: nn.Linear, kernel: str = "inductor"):
        super().__init__(linear)
        self.kernel = _kernel(kernel, INT8_KERNELS)
        q, scales = int8_quantize(linear.weight.detach())
        self.register_buffer("w8", q)
        self.register_buffer("scales", scales.to(torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kernel == "inductor":
            return F.linear(apart(x), self.w8.to(x.dtype)) * self.scales
        y = torch.ops.tcperf.int8_weight_mm(x.reshape(-1, x.shape[-1]), self.w8, self.scales)     # (M, N)
        return y.reshape(*x.shape[:-1], self.out_features)

    def dequantized(self) -> torch.Tensor:
        return self.w8.float() * self.scales.float()[:, None]


def int4_quantize(w: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Asymmetric per group of `group` weights along K, as gpt-fast: W (N, K) -> q int32 in [0, 15], scales and
    zeros (N, K / group) bf16, with W ~ (q - 8) * scale + zero."""
    g = w.float().reshape(-1, group)
    lo, hi = g.amin(dim=1, keepdim=True), g.amax(dim=1, keepdim=True)
    scales = (hi - lo).clamp(min=1e-6) / 15
    zeros = lo + scales * 8
    q = ((g - lo) / scales).round().clamp(0, 15).to(torch.int32).reshape_as(w)
    n = w.shape[0]
    return q, scales.reshape(n, -1).to(torch.bfloat16), zeros.reshape(n, -1).to(torch.bfloat16)


def int4_dequantize(q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, group: int) -> torch.Tensor:
    """q (N, K) in [0, 15], scales and zeros (N, K / group) -> W (N, K) float32, W = (q - 8) * scale + zero."""
    g = q.reshape(-1, group).float()
    return ((g - 8) * scales.float().reshape(-1, 1) + zeros.float().reshape(-1, 1)).reshape_as(q)


def pack_scales_and_zeros(scales: torch.Tensor, zeros: torch.Tensor) -> torch.Tensor:
    """(N, K/g) twice -> (K/g, N, 2): the layout _weight_int4pack_mm reads."""
    return torch.stack([scales, zeros], dim=-1).transpose(0, 1).contiguous()


def inner_k_tiles(k: int) -> int:
    """The largest of 8, 4, 2 tinygemm's packing takes for this K (K must be a multiple of 16 times it)."""
    return next(t for t in (8, 4, 2) if k % (16 * t) == 0)


def nibbles(q: torch.Tensor) -> torch.Tensor:
    """q int32 (N, K) in [0, 15] -> uint8 (N, K / 2), two values a byte, the even one high."""
    return (q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8)


def unnibble(p: torch.Tensor) -> torch.Tensor:
    """nibbles' inverse: uint8 (N, K / 2) -> int32 (N, K)."""
    return torch.stack([p >> 4, p & 15], dim=-1).reshape(p.shape[0], -1).to(torch.int32)


def int4_pack(q: torch.Tensor, device: torch.device) -> torch.Tensor:
    """q int32 (N, K) -> tinygemm's packed layout (the CUDA kernel takes two 4-bit values a byte)."""
    tiles = inner_k_tiles(q.shape[1])
    if device.type == "cuda":
        return torch._convert_weight_to_int4pack(nibbles(q), tiles)
    return torch._convert_weight_to_int4pack_for_cpu(q, tiles)


class Int4WeightOnlyLinear(QuantLinear):
    """gpt-fast's WeightOnlyInt4Linear: half a byte a weight plus a bf16 scale and zero per group. kernel="tinygemm":
    torch._weight_int4pack_mm on tinygemm's layout (`packed`, `scales_and_zeros`), with the values, scales and zeros
    also kept plainly in host memory (`plain`: a decode step never reads them), so that dequantized() does not go
    through the layout it checks. kernel="triton": tcperf.kernels.gemv's int4 kernel reads the plain layout itself
    (buffers `q4`, `scales`, `zeros`, which `plain` names); dequantized() unpacks them in torch."""

    def __init__(self, linear: nn.Linear, group: int, kernel: str = "tinygemm"):
        super().__init__(linear)
        self.kernel = _kernel(kernel, INT4_KERNELS)
        w = linear.weight.detach()
        q, scales, zeros = int4_quantize(w, group)
        self.group = group
        if kernel == "triton":
            self.register_buffer("q4", nibbles(q))                  # (N, K/2) uint8, even k in the high nibble
            self.register_buffer("scales", scales)                  # (N, K/g) bf16
            self.register_buffer("zeros", zeros)                    # (N, K/g) bf16
            return
        self.host_plain = (nibbles(q).cpu(), scales.cpu(), zeros.cpu())
        self.register_buffer("packed", int4_pack(q.to(w.device), w.device))
        self.register_buffer("scales_and_zeros", pack_scales_and_zeros(scales, zeros).to(w.device))

    @property
    def plain(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(nibbles uint8 (N, K/2), scales, zeros (N, K/g) bf16): the device buffers (triton) or the host copy."""
        return (self.q4, self.scales, self.zeros) if self.kernel == "triton" else self.host_plain

    def dequantized(self) -> torch.Tensor:
        device = next(self.buffers()).device
        q, scales, zeros = (t.to(device) for t in self.plain)
        return int4_dequantize(unnibble(q), scales, zeros, self.group)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # (M, K), contiguous: the kernels read A densely, and transformers' lm_head gets the last position's slice
        # hidden[:, -1:] (B, 1, K), whose rows stand T * K apart (the CPU kernel refused it at batch > 1)
        x2 = x.reshape(-1, x.shape[-1]).to(torch.bfloat16).contiguous()
        if self.kernel == "triton":
            y = torch.ops.tcperf.int4_weight_mm(x2, self.q4, self.scales, self.zeros, self.group)
        else:
            mm = torch._weight_int4pack_mm if x.is_cuda else torch._weight_int4pack_mm_for_cpu
            y = mm(x2, self.packed, self.group, self.scales_and_zeros)
        return y.reshape(*x.shape[:-1], self.out_features).to(x.dtype)


# --- the kernel check ----------------------------------------------------------------------------------------------
def layer_error(layer: QuantLinear, rows: int, gen: torch.Generator) -> float:
    """The layer on `rows` random bf16 rows against reference(): relative norm error (inf for NaN/inf)."""
    device = next(layer.buffers()).device
    x = torch.randn(rows, layer.in_features, generator=gen).to(device, torch.bfloat16)   # (M, K)
    with torch.no_grad():
        got, want = layer(x).double(), layer.reference(x).double()
    if not torch.isfinite(got).all():
        return math.inf
    return float(torch.linalg.vector_norm(got - want) / torch.linalg.vector_norm(want).clamp(min=1e-30))


def check_layers(model: nn.Module, tolerance: float = KERNEL_TOLERANCE, seed: int = 0) -> dict:
    """Every quantized layer of `model` against its own dequantised weights at CHECK_ROWS rows: the largest
    relative error, where, and whether it is within `tolerance`. A failure is a bug in a kernel or its packing."""
    gen = torch.Generator().manual_seed(seed)
    worst, where, layers = 0.0, None, 0
    for name, layer in model.named_modules():
        if not isinstance(layer, QuantLinear):
            continue
        layers += 1
        for rows in CHECK_ROWS:
            err = layer_error(layer, rows, gen)
            if not err <= worst:
                worst, where = err, f"{name} at {rows} row(s)"
    return {"rel_error": worst, "layer": where, "layers": layers, "tolerance": tolerance,
            "passed": worst <= tolerance, "against": "each quantized layer's own dequantised weights, in float32"}


# --- swapping ---------------------------------------------------------------------------------------------------
def swap_linears(model: nn.Module, make: Callable[[nn.Linear], nn.Module], takes: Callable[[nn.Linear], bool],
                 refuse: Callable[[list], Exception]) -> tuple[int, list[tuple[str, nn.Linear]]]:
    """Replace, in place, every plain nn.Linear that takes(layer) accepts by make(layer); subclasses are the
    user's own layers and stay. Returns how many were swapped and the (dotted name, layer) pairs kept; raises
    refuse(kept), the caller's exception in its words, when none was swapped."""
    swapped, kept = 0, []
    for parent_name, parent in list(model.named_modules()):
        for name, child in list(parent.named_children()):
            if type(child) is not nn.Linear:
                continue
            if takes(child):
                setattr(parent, name, make(child))
                swapped += 1
            else:
                kept.append((f"{parent_name}.{name}".lstrip("."), child))
    if not swapped:
        raise refuse(kept)
    return swapped, kept
