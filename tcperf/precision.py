"""Precision recipes as data, and one context manager that applies a recipe and restores every flag it touched.

    with precision.apply("tf32"):        # TF32 on for matmul and cuDNN inside, previous state restored after
        y = a @ b

A recipe says which dtype the operands are made in, whether float32 math may use TF32, whether autocast runs,
the relative-norm error it is allowed against a float64 reference, and what hardware it needs.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from .errors import choices


@dataclass(frozen=True)
class Precision:
    name: str
    dtype: torch.dtype            # dtype the operands are made in (float32 for tf32 and the amp recipes)
    tf32: bool = False            # float32 matmul/conv may run on Tensor Cores as TF32
    autocast: torch.dtype | None = None   # amp recipes: torch.autocast dtype
    tolerance: float = 1e-4       # allowed ||out - ref|| / ||ref|| against float64
    min_cc: tuple[int, int] = (0, 0)      # CUDA compute capability needed
    cpu: bool = True              # runs on the CPU at all
    element_bytes: int = 4        # operand width, for the 16-byte Tensor Core alignment rule
    about: str = ""

    @property
    def align(self) -> int:
        """Elements per 16 bytes: the multiple every GEMM dimension should be for full Tensor Core speed."""
        return max(1, 16 // self.element_bytes)


_F8 = getattr(torch, "float8_e4m3fn", None)

# Tolerances are relative-norm errors against a float64 reference computed from the very operands the kernel got,
# so they bound the arithmetic (accumulation and output rounding), not the input quantization.
PRECISIONS: dict[str, Precision] = {p.name: p for p in (
    Precision("fp64", torch.float64, tolerance=1e-9, element_bytes=8, about="IEEE double"),
    Precision("fp32", torch.float32, tolerance=1e-4, about="IEEE single, TF32 off for matmul and cuDNN"),
    Precision("tf32", torch.float32, tf32=True, tolerance=5e-3, min_cc=(8, 0), cpu=False,
              about="float32 operands, TF32 Tensor Core math"),
    Precision("fp16", torch.float16, tolerance=2e-2, element_bytes=2, about="half operands, fp32 accumulate"),
    Precision("bf16", torch.bfloat16, tolerance=2e-2, element_bytes=2, about="bfloat16 operands, fp32 accumulate"),
    Precision("fp8", _F8 or torch.float16, tolerance=1e-1, min_cc=(8, 9), cpu=False, element_bytes=1,
              about="e4m3 operands, per-tensor scales, torch._scaled_mm, bf16 out"),
    Precision("int8", torch.int8, tolerance=1e-6, element_bytes=1,
              about="int8 operands, int32 accumulate, torch._int_mm"),
    Precision("amp_fp16", torch.float32, autocast=torch.float16, tolerance=5e-2, cpu=False,
              about="autocast fp16 + GradScaler (models)"),
    Precision("amp_bf16", torch.float32, autocast=torch.bfloat16, tolerance=5e-2,
              about="autocast bf16 (models)"),
)}

KERNEL_PRECISIONS = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8")


def get(name: str) -> Precision:
    try:
        return PRECISIONS[name]
    except KeyError:
        raise choices("precision", name, PRECISIONS) from None


def parse_list(text: str) -> list[Precision]:
    """'fp32,bf16' -> [Precision, Precision]; raises UserError naming the valid choices."""
    return [get(n.strip()) for n in text.split(",") if n.strip()]


def unsupported_reason(p: Precision, device: torch.device | str) -> str | None:
    """None when `p` can run on `device`, else one line saying why not."""
    device = torch.device(device)
    if device.type == "cpu":
        return None if p.cpu else f"{p.name} needs a CUDA GPU"
    if p.name == "fp8" and _F8 is None:
        return "this torch build has no float8_e4m3fn"
    cc = torch.cuda.get_device_capability(device)
    if cc < p.min_cc:
        return f"{p.name} needs compute capability >= {p.min_cc[0]}.{p.min_cc[1]}, this GPU is {cc[0]}.{cc[1]}"
    if p.dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported():
        return "bf16 needs compute capability >= 8.0"
    return None


# --- global flags -----------------------------------------------------------------------------------------------
# PyTorch >= 2.9 has per-backend `fp32_precision` ("ieee" | "tf32"); older builds have allow_tf32 and
# set_float32_matmul_precision. Mixing the two families in one process makes newer builds raise, so use one.
_NEW_API = hasattr(torch.backends.cuda.matmul, "fp32_precision")
_NEW_TARGETS = ("cuda.matmul", "cudnn.conv", "cudnn.rnn")


def _backend(path: str):
    obj = torch.backends
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def _new_targets():
    return [t for t in _NEW_TARGETS if hasattr(_backend(t), "fp32_precision")]


def save_flags() -> dict:
    """Every global flag a recipe may change, as it is now."""
    flags = {"cudnn.benchmark": torch.backends.cudnn.benchmark}
    if _NEW_API:
        flags.update({t: _backend(t).fp32_precision for t in _new_targets()})
    else:
        flags["matmul"] = torch.get_float32_matmul_precision()
        flags["cudnn.allow_tf32"] = torch.backends.cudnn.allow_tf32
    return flags


def restore_flags(flags: dict) -> None:
    torch.backends.cudnn.benchmark = flags["cudnn.benchmark"]
    if _NEW_API:
        for t in _new_targets():
            _backend(t).fp32_precision = flags[t]
    else:
        torch.set_float32_matmul_precision(flags["matmul"])
        torch.backends.cudnn.allow_tf32 = flags["cudnn.allow_tf32"]


def set_tf32(on: bool) -> None:
    """TF32 on or off for matmul AND cuDNN convolutions and RNNs (strict fp32 means all three off)."""
    if _NEW_API:
        for t in _new_targets():
            _backend(t).fp32_precision = "tf32" if on else "ieee"
    else:
        torch.set_float32_matmul_precision("high" if on else "highest")
        torch.backends.cudnn.allow_tf32 = on


def tf32_enabled() -> bool:
    """Is TF32 allowed for matmul right now?"""
    if _NEW_API:
        return torch.backends.cuda.matmul.fp32_precision == "tf32"
    return torch.get_float32_matmul_precision() != "highest"


@contextlib.contextmanager
def apply(name: str | Precision, device_type: str = "cuda", *, benchmark_cudnn: bool = False):
    """Apply a recipe's global state (TF32 flags, cuDNN autotune, autocast) and restore all of it on exit,
    exceptions included. cuDNN's autotuning is off as PyTorch ships it unless asked for: a model fed a new shape
    pays for it at every shape (a detector's 59 image sizes: 140 s of the advisor's fp32 probe, H100 2026-11-28)."""
    p = name if isinstance(name, Precision) else get(name)
    saved = save_flags()
    try:
        set_tf32(p.tf32)
        torch.backends.cudnn.benchmark = benchmark_cudnn
        if p.autocast is not None:
            with torch.autocast(device_type, dtype=p.autocast), _no_autograd_cache():
                yield p
        else:
            yield p
    finally:
        restore_flags(saved)


@contextlib.contextmanager
def _no_autograd_cache():
    """AOTAutograd's on-disk cache off inside, as it was on exit: torch.compile compiles at a step's first call,
    which runs in here. Its key recorded whether autocast was on, not its dtype (pytorch/pytorch#181564), so a graph
    compiled under amp_fp16 was served to another worker compiling amp_bf16 (an H200, torch 2.11, 2026-11-24:
    amp_bf16 + compile reported amp_fp16's output error to the digit). Inductor's FX graph cache stays on: its key
    is the graph after autocast. Costs the AOT trace on a warm cache, a few seconds a compile."""
    import torch._functorch.config as functorch_config
    saved = functorch_config.enable_autograd_cache
    functorch_config.enable_autograd_cache = False
    try:
        yield
    finally:
        functorch_config.enable_autograd_cache = saved
