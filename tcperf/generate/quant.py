"""The precisions `tcperf generate` decodes at, as data, and the Linear layers that run them on PyTorch's own
kernels (torchao's, where it is installed and asked for by an `ao-` recipe).

    bf16, fp16          the model's weights and activations in that dtype
    fp8-row, fp8-tensor weights and activations in float8_e4m3fn with one scale per row (per tensor), the
                        activation's taken at every call, through torch._scaled_mm, bf16 out
    int8wo              int8 weights, one scale per output channel, bf16 activations: gpt-fast's
                        `F.linear(x, W.to(bf16)) * scales`, which torch.compile fuses into one kernel
    int4wo-32/-128      4-bit weights in groups of 32 (128) along K with a bf16 scale and zero each, packed by
                        torch._convert_weight_to_int4pack and multiplied by torch._weight_int4pack_mm (tinygemm),
                        as gpt-fast does; on a CPU the _for_cpu twins of both
    ao-int8wo, ao-int4wo-128, ao-fp8-row   the same through torchao.quantization.quantize_ (optional)

Any of them with `+kvfp8`: the KV cache in float8_e4m3fn instead of the activation dtype.

    recipe = get("int4wo-128+kvfp8")
    notes = quantize(model, recipe)         # swaps the eligible nn.Linear layers in place
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..errors import UserError
from ..recipes import QuantLinear

F8 = getattr(torch, "float8_e4m3fn", None)
F8_MAX = 448.0
KV_FP8 = "+kvfp8"


@dataclass(frozen=True)
class GenRecipe:
    name: str
    weights: str                      # "bf16" | "fp16" | "fp8" | "int8" | "int4"
    act: torch.dtype = torch.bfloat16 # activation (and default KV cache) dtype
    group: int = 0                    # int4 group size along K
    rowwise: bool = False             # fp8: one scale per row (else per tensor)
    torchao: bool = False             # quantized by torchao instead of the Linear layers below
    tolerance: float = 0.05           # logits' relative error against bf16 allowed (teacher-forced)
    peak: str = "bf16"                # the Tensor Core precision its GEMMs run at (MFU, roofline)
    kv: str = "act"                   # "act" (the activation dtype) | "fp8"
    about: str = ""

    @property
    def weight_bits(self) -> int:
        return {"bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "int4": 4}[self.weights]

    @property
    def kv_dtype(self) -> torch.dtype:
        return F8 if self.kv == "fp8" else self.act


# Tolerances: relative norm error of the logits against bf16's on bf16's own tokens. bf16 itself is the reference
# (0); fp16 differs by rounding only; 8-bit weights by ~0.4% a weight; 4-bit by ~1/15 of a group's range.
RECIPES: dict[str, GenRecipe] = {r.name: r for r in (
    GenRecipe("bf16", "bf16", tolerance=0.0, about="bfloat16 weights and activations (the reference)"),
    GenRecipe("fp16", "fp16", act=torch.float16, tolerance=0.02, peak="fp16", about="float16 weights and activations"),
    GenRecipe("fp8-row", "fp8", rowwise=True, tolerance=0.15, peak="fp8",
              about="e4m3 weights and activations, a scale per row, torch._scaled_mm"),
    GenRecipe("fp8-tensor", "fp8", tolerance=0.2, peak="fp8",
              about="e4m3 weights and activations, a scale per tensor, torch._scaled_mm"),
    GenRecipe("int8wo", "int8", tolerance=0.05, about="int8 weights (scale per channel), bf16 activations"),
    GenRecipe("int4wo-32", "int4", group=32, tolerance=0.25,
              about="int4 weights in groups of 32, torch._weight_int4pack_mm"),
    GenRecipe("int4wo-128", "int4", group=128, tolerance=0.3,
              about="int4 weights in groups of 128, torch._weight_int4pack_mm"),
    GenRecipe("ao-int8wo", "int8", torchao=True, tolerance=0.05, about="torchao int8 weight-only"),
    GenRecipe("ao-int4wo-128", "int4", group=128, torchao=True, tolerance=0.3, about="torchao int4 weight-only"),
    GenRecipe("ao-fp8-row", "fp8", rowwise=True, torchao=True, tolerance=0.15, peak="fp8",
              about="torchao float8 dynamic activation and weight, per row"),
)}
DEFAULT = ("bf16", "fp16", "fp8-row", "fp8-tensor", "int8wo", "int4wo-32", "int4wo-128")
KV_TOLERANCE = 0.05                   # added to a recipe's tolerance when its KV cache is fp8


def get(name: str) -> GenRecipe:
    """'int4wo-128' or 'int4wo-128+kvfp8' -> its recipe; UserError naming the valid choices."""
    base, kv = (name[:-len(KV_FP8)], "fp8") if name.endswith(KV_FP8) else (name, "act")
    if base not in RECIPES:
        raise UserError(f"unknown precision {name!r}; choose from: {', '.join(RECIPES)} "
                        f"(any of them with {KV_FP8}: the KV cache in fp8)")
    r = RECIPES[base]
    if kv == "act":
        return r
    return GenRecipe(**{**r.__dict__, "name": name, "kv": "fp8", "tolerance": r.tolerance + KV_TOLERANCE})


def parse_list(precisions: str, kv: str) -> list[GenRecipe]:
    """--precision and --kv (bf16 | fp8, comma lists) -> every recipe, each once per KV cache dtype."""
    kvs = [k.strip() for k in kv.split(",") if k.strip()]
    bad = [k for k in kvs if k not in ("bf16", "fp8")]
    if bad or not kvs:
        raise UserError(f"unknown --kv {kv!r}; choose from: bf16 (the activation dtype), fp8")
    names = [n.strip() for n in precisions.split(",") if n.strip()]
    if not names:
        raise UserError("no precision given; choose from: " + ", ".join(RECIPES))
    return [get(n + (KV_FP8 if k == "fp8" and not n.endswith(KV_FP8) else "")) for k in kvs for n in names]


def unsupported(r: GenRecipe, device: torch.device) -> str | None:
    """None when the recipe runs on `device`, else why not (one line)."""
    if r.torchao and _torchao() is None:
        return "torchao is not installed (pip install torchao): the ao- recipes need it"
    if (r.weights == "fp8" or r.kv == "fp8") and F8 is None:
        return "this torch build has no float8_e4m3fn"
    if device.type != "cuda":
        return None
    cc = torch.cuda.get_device_capability(device)
    if r.weights == "fp8" and cc < (8, 9):
        return f"fp8 needs compute capability >= 8.9, this GPU is {cc[0]}.{cc[1]}"
    if r.weights == "fp8" and r.rowwise and cc < (9, 0):
        return f"row-wise fp8 scaling needs compute capability >= 9.0, this GPU is {cc[0]}.{cc[1]}"
    if r.weights == "int4" and cc < (8, 0):
        return "torch._weight_int4pack_mm needs compute capability >= 8.0"
    return None


def _torchao():
    try:
        import torchao.quantization as q
    except Exception:        # noqa: BLE001 - missing or broken: the ao- recipes are skipped
        return None
    return q


# --- int8 weight-only -------------------------------------------------------------------------------------------
def int8_quantize(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-output-channel: W (N, K) -> int8 (N, K), scales (N,) float32 with W ~ q * scale."""
    scales = w.float().abs().amax(dim=1).clamp(min=1e-12) / 127.0
    return torch.round(w.float() / scales[:, None]).clamp(-127, 127).to(torch.int8), scales


class Int8WeightOnlyLinear(QuantLinear):
    """gpt-fast's WeightOnlyInt8Linear: 1 byte a weight read instead of 2; the widening to bf16 and the scale are
    fused into the matmul by torch.compile (eager widens the whole weight first: compile it). Like every layer
    here, `weight` is a bf16 stand-in of nn.Linear's shape (tcperf.recipes.QuantLinear) for model code that reads
    its dtype; the int8 values are `w8`."""

    def __init__(self, linear: nn.Linear):
        super().__init__(linear)
        q, scales = int8_quantize(linear.weight.detach())
        self.register_buffer("w8", q)
        self.register_buffer("scales", scales.to(torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.w8.to(x.dtype)) * self.scales


# --- int4 weight-only (groups) ----------------------------------------------------------------------------------
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
    g = q.reshape(-1, group).float()
    return ((g - 8) * scales.float().reshape(-1, 1) + zeros.float().reshape(-1, 1)).reshape_as(q)


def pack_scales_and_zeros(scales: torch.Tensor, zeros: torch.Tensor) -> torch.Tensor:
    """(N, K/g) twice -> (K/g, N, 2): the layout _weight_int4pack_mm reads."""
    return torch.stack([scales, zeros], dim=-1).transpose(0, 1).contiguous()


def inner_k_tiles(k: int) -> int:
    """The largest of 8, 4, 2 tinygemm's packing takes for this K (K must be a multiple of 16 times it)."""
    return next(t for t in (8, 4, 2) if k % (16 * t) == 0)


def int4_pack(q: torch.Tensor, device: torch.device) -> torch.Tensor:
    """q int32 (N, K) -> tinygemm's packed layout (the CUDA kernel takes two 4-bit values a byte)."""
    tiles = inner_k_tiles(q.shape[1])
    if device.type == "cuda":
        return torch._convert_weight_to_int4pack((q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8), tiles)
    return torch._convert_weight_to_int4pack_for_cpu(q, tiles)


class Int4WeightOnlyLinear(QuantLinear):
    """gpt-fast's WeightOnlyInt4Linear: half a byte a weight plus a bf16 scale and zero per group (`packed`)."""

    def __init__(self, linear: nn.Linear, group: int):
        super().__init__(linear)
        w = linear.weight.detach()
        q, scales, zeros = int4_quantize(w, group)
        self.group = group
        self.register_buffer("packed", int4_pack(q.to(w.device), w.device))
        self.register_buffer("scales_and_zeros", pack_scales_and_zeros(scales, zeros).to(w.device))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, x.shape[-1]).to(torch.bfloat16)
        mm = torch._weight_int4pack_mm if x.is_cuda else torch._weight_int4pack_mm_for_cpu
        y = mm(x2, self.packed, self.group, self.scales_and_zeros)
        return y.reshape(*x.shape[:-1], self.out_features).to(x.dtype)


# --- fp8 weights and activations --------------------------------------------------------------------------------
def fp8_quantize(t: torch.Tensor, rowwise: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """t (M, K) -> e4m3 (M, K) and float32 scales, (M, 1) per row or () per tensor, with t ~ q * scale."""
    amax = t.float().abs().amax(dim=1, keepdim=True) if rowwise else t.float().abs().amax()
    scale = amax.clamp(min=1e-12) / F8_MAX
    return (t.float() / scale).to(F8), scale


class Fp8Linear(QuantLinear):
    """y = x W^T in e4m3 through torch._scaled_mm (bf16 out); W's scales made once, x's at every call."""

    def __init__(self, linear: nn.Linear, rowwise: bool):
        super().__init__(linear)
        w8, w_scale = fp8_quantize(linear.weight.detach(), rowwise)
        self.rowwise = rowwise
        self.register_buffer("w8", w8)                                        # (N, K): w8.t() is column-major
        self.register_buffer("w_scale", w_scale.reshape(1, -1) if rowwise else w_scale)   # (1, N) or ()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x8, x_scale = fp8_quantize(x.reshape(-1, x.shape[-1]), self.rowwise)   # (M, K), (M, 1) or ()
        y = torch._scaled_mm(x8, self.w8.t(), scale_a=x_scale, scale_b=self.w_scale, out_dtype=torch.bfloat16)
        return y.reshape(*x.shape[:-1], y.shape[-1])


# --- swapping ---------------------------------------------------------------------------------------------------
def _maker(r: GenRecipe):
    if r.weights == "int8":
        return Int8WeightOnlyLinear, lambda lin: True
    if r.weights == "int4":
        return (lambda lin: Int4WeightOnlyLinear(lin, r.group),
                lambda lin: lin.in_features % r.group == 0 and lin.in_features % 32 == 0 and lin.out_features % 8 == 0)
    return (lambda lin: Fp8Linear(lin, r.rowwise),
            lambda lin: lin.in_features % 16 == 0 and lin.out_features % 16 == 0)


def quantize(model: nn.Module, r: GenRecipe) -> list[str]:
    """Convert `model` (already in r.act) to the recipe in place; returns notes (layers kept in 16 bits)."""
    if r.weights in ("bf16", "fp16"):
        return []
    if r.torchao:
        return _quantize_torchao(model, r)
    make, fits = _maker(r)
    swapped, kept = 0, []
    for parent_name, parent in list(model.named_modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear and child.bias is None and fits(child):
                setattr(parent, name, make(child))
                swapped += 1
            elif type(child) is nn.Linear:
                kept.append(f"{parent_name}.{name}".lstrip("."))
    if not swapped:
        raise UserError(f"{r.name}: no Linear layer of this model has a shape it takes")
    return [f"kept in {str(r.act).split('.')[-1]} (shape): {', '.join(kept[:6])}" + (" ..." if len(kept) > 6 else "")] \
        if kept else []


def _quantize_torchao(model: nn.Module, r: GenRecipe) -> list[str]:
    """torchao's quantize_ with the config matching the recipe (its newer *Config classes, else the older
    functions)."""
    q = _torchao()
    if r.weights == "int8":
        config = q.Int8WeightOnlyConfig() if hasattr(q, "Int8WeightOnlyConfig") else q.int8_weight_only()
    elif r.weights == "int4":
        config = (q.Int4WeightOnlyConfig(group_size=r.group) if hasattr(q, "Int4WeightOnlyConfig")
                  else q.int4_weight_only(group_size=r.group))
    else:
        config = q.Float8DynamicActivationFloat8WeightConfig(granularity=q.PerRow())
    q.quantize_(model, config)
    return [f"torchao {type(config).__name__}"]
