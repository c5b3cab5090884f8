"""The precisions `tcperf generate` decodes at, as data, and which Linear layers each swaps for tcperf.quant's, which
run them on PyTorch's own kernels (torchao's, where it is installed and asked for by an `ao-` recipe).

    bf16, fp16          the model's weights and activations in that dtype
    fp8-row, fp8-tensor weights and activations in float8_e4m3fn with one scale per row (per tensor), the
                        activation's taken at every call, through torch._scaled_mm, bf16 out
    int8wo              int8 weights, one scale per output channel, bf16 activations: gpt-fast's
                        `F.linear(x, W.to(bf16)) * scales`, which torch.compile fuses into one kernel
    int4wo-32/-128      4-bit weights in groups of 32 (128) along K, a bf16 scale and zero each, on tinygemm
                        (torch._weight_int4pack_mm) as gpt-fast does; on a CPU the _for_cpu twins
    ao-int8wo, ao-int4wo-128, ao-fp8-row   the same through torchao.quantization.quantize_ (optional)

Any of them with `+kvfp8`: the KV cache in float8_e4m3fn instead of the activation dtype. The weight-only recipes
run on tcperf.kernels.gemv's Triton kernels with kernel="triton", or on the fastest for their format with
kernel="auto" (KERNELS); the other recipes have one kernel each and ignore it.

    recipe = get("int4wo-128+kvfp8")
    notes = quantize(model, recipe)                     # swaps the eligible nn.Linear layers in place
    notes = quantize(model, recipe, kernel="triton")    # the same layers on tcperf.kernels.gemv's kernels
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn as nn

from ..env import triton_interpreting
from ..errors import UserError
from ..quant import F8, Fp8Linear, Int4WeightOnlyLinear, Int8WeightOnlyLinear, swap_linears

KV_FP8 = "+kvfp8"


@dataclass(frozen=True)
class GenRecipe:
    name: str
    weights: str                      # "bf16" | "fp16" | "fp8" | "int8" | "int4"
    act: torch.dtype = torch.bfloat16 # activation (and default KV cache) dtype
    group: int = 0                    # int4 group size along K
    rowwise: bool = False             # fp8: one scale per row (else per tensor)
    torchao: bool = False             # quantized by torchao instead of the Linear layers below
    perplexity_limit: float = 0.0     # on trained weights: the rise over bf16's perplexity allowed (0.01 = +1%)
    peak: str = "bf16"                # the Tensor Core precision its GEMMs run at (MFU, roofline)
    kv: str = "act"                   # "act" (the activation dtype) | "fp8"
    about: str = ""

    @property
    def weight_bits(self) -> int:
        return {"bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "int4": 4}[self.weights]

    @property
    def kv_dtype(self) -> torch.dtype:
        return F8 if self.kv == "fp8" else self.act


# Perplexity limits: what published round-to-nearest quantization costs a trained LLM, on wikitext (PERPLEXITY_BASIS;
# besides it, Llama-2-7B on an A100: int4wo-64 +5%; AWQ's calibrated int4 in groups of 128 on Llama-3-8B-Instruct:
# +4.3%). Each limit sits just above its figure.
PERPLEXITY_BASIS = ("limits from torchao's README (Llama-3.1-8B, wikitext): int8wo +0.3%, fp8 +0.9 to 1.1%, "
                    "int4wo-64 round-to-nearest +12%")
RECIPES: dict[str, GenRecipe] = {r.name: r for r in (
    GenRecipe("bf16", "bf16", about="bfloat16 weights and activations (the reference)"),
    GenRecipe("fp16", "fp16", act=torch.float16, perplexity_limit=0.01, peak="fp16",
              about="float16 weights and activations"),
    GenRecipe("fp8-row", "fp8", rowwise=True, perplexity_limit=0.02, peak="fp8",
              about="e4m3 weights and activations, a scale per row, torch._scaled_mm"),
    GenRecipe("fp8-tensor", "fp8", perplexity_limit=0.02, peak="fp8",
              about="e4m3 weights and activations, a scale per tensor, torch._scaled_mm"),
    GenRecipe("int8wo", "int8", perplexity_limit=0.01, about="int8 weights (scale per channel), bf16 activations"),
    GenRecipe("int4wo-32", "int4", group=32, perplexity_limit=0.10,
              about="int4 weights in groups of 32, torch._weight_int4pack_mm"),
    GenRecipe("int4wo-128", "int4", group=128, perplexity_limit=0.15,
              about="int4 weights in groups of 128, torch._weight_int4pack_mm"),
    GenRecipe("ao-int8wo", "int8", torchao=True, perplexity_limit=0.01, about="torchao int8 weight-only"),
    GenRecipe("ao-int4wo-128", "int4", group=128, torchao=True, perplexity_limit=0.15,
              about="torchao int4 weight-only"),
    GenRecipe("ao-fp8-row", "fp8", rowwise=True, torchao=True, perplexity_limit=0.02, peak="fp8",
              about="torchao float8 dynamic activation and weight, per row"),
)}
HEADLINE = ("bf16", "int8wo", "int4wo-128")     # `tcperf generate` with no arguments
SWEEP = ("bf16", "fp16", "fp8-row", "fp8-tensor", "int8wo", "int4wo-32", "int4wo-128")     # and --sweep
KV_LIMIT = 0.01                       # added to a recipe's perplexity limit when its KV cache is fp8
KERNELS = {  # --kernel -> the weight-only layers' kernel= by weight format (tcperf.quant); None: the layer's default
    "default": {"int8": None, "int4": None},
    "triton": {"int8": "triton", "int4": "triton"},
    # the fastest by format in benchmarks/gemv_gpu.py on Llama-3.2-1B's layers (H100, 2026-11-26 night): int8 on
    # tcperf.kernels.gemv's at every batch (0.58 of bf16's time at one row), int4 on tinygemm (0.48; gemv's 1.19)
    "auto": {"int8": "triton", "int4": None},
}


def get(name: str) -> GenRecipe:
    """'int4wo-128' or 'int4wo-128+kvfp8' -> its recipe; UserError naming the valid choices."""
    base, kv = (name[:-len(KV_FP8)], "fp8") if name.endswith(KV_FP8) else (name, "act")
    if base not in RECIPES:
        raise UserError(f"unknown precision {name!r}; choose from: {', '.join(RECIPES)} "
                        f"(any of them with {KV_FP8}: the KV cache in fp8)")
    r = RECIPES[base]
    return r if kv == "act" else replace(r, name=name, kv="fp8", perplexity_limit=r.perplexity_limit + KV_LIMIT)


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


def kernel_choice(name: str | None) -> str:
    """--kernel's value checked: 'default' for None; UserError naming the valid choices."""
    name = name or "default"
    if name not in KERNELS:
        raise UserError(f"unknown --kernel {name!r}; choose from: {', '.join(KERNELS)}")
    return name


def kernel_for(r: GenRecipe, kernel: str | None) -> str:
    """The kernel the recipe's layers run on: `kernel` where the recipe has layers it applies to (int8wo, int4wo,
    not torchao's), else "default" (bf16 in a --kernel triton run is plain bf16)."""
    kernel = kernel_choice(kernel)
    return kernel if not r.torchao and KERNELS[kernel].get(r.weights) else "default"


def kernel_reason(kernel: str | None, device: torch.device) -> str | None:
    """None when `kernel` runs on `device`, else why not (one line): the Triton kernels need a GPU or the Triton
    interpreter (TRITON_INTERPRET=1)."""
    kernel = kernel_choice(kernel)
    if kernel in ("triton", "auto") and device.type != "cuda" and not triton_interpreting():
        return f"--kernel {kernel} needs a CUDA GPU (or TRITON_INTERPRET=1, the Triton interpreter, on a CPU)"
    return None


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


# --- swapping ---------------------------------------------------------------------------------------------------
def _maker(r: GenRecipe, kernel: str):
    chosen = KERNELS[kernel].get(r.weights)
    if r.weights == "int8":
        return (lambda lin: Int8WeightOnlyLinear(lin, **({"kernel": chosen} if chosen else {})), lambda lin: True)
    if r.weights == "int4":
        return (lambda lin: Int4WeightOnlyLinear(lin, r.group, **({"kernel": chosen} if chosen else {})),
                lambda lin: lin.in_features % r.group == 0 and lin.in_features % 32 == 0 and lin.out_features % 8 == 0)
    return (lambda lin: Fp8Linear(lin, r.rowwise), lambda lin: lin.in_features % 16 == 0 and lin.out_features % 16 == 0)


def quantize(model: nn.Module, r: GenRecipe, kernel: str | None = None) -> list[str]:
    """Convert `model` (already in r.act) to the recipe in place, the weight-only layers on `kernel` (a KERNELS
    name; None: "default"); returns notes (layers kept in 16 bits)."""
    if r.weights in ("bf16", "fp16"):
        return []
    if r.torchao:
        return _quantize_torchao(model, r)
    make, fits = _maker(r, kernel_for(r, kernel))
    takes = lambda lin: lin.bias is None and fits(lin)        # a biased layer stays: weight-only ones have none
    _, kept = swap_linears(model, make, takes,
                           lambda kept: UserError(f"{r.name}: no Linear layer of this model has a shape it takes"))
    names = [name for name, _ in kept]
    more = " ..." if len(names) > 6 else ""
    return [f"kept in {str(r.act).split('.')[-1]} (shape): {', '.join(names[:6])}{more}"] if names else []


def _quantize_torchao(model: nn.Module, r: GenRecipe) -> list[str]:
    """torchao's quantize_ with the config matching the recipe (its newer *Config classes, else the older functions)."""
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
