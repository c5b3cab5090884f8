"""The 3 x 3, stride 2, padding 1 max-pool (ResNet's stem) as two Triton kernels, forward and backward, for training
in the channels-last layout, and `use_pool_kernel`, which swaps a model's nn.MaxPool2d(3, 2, 1) layers for it.

Why: in ResNet-50's whole-step graph (H200, 2026-11-27, c41fb7d) Inductor's stem pooling was the step's largest
memory-bound kernel, its backward 1.48 ms a step, and the forward and backward together (benchmarks/maxpool_probe.py,
batch 256 x 64 x 112 x 112 bf16) ran at 14% of the copy bandwidth: 1.88 ms, where ATen's NHWC kernels took 2.85.
Its backward gathers each input pixel's windows in an order the channels-last layout does not read contiguously.

Here the forward keeps, for each output, the offset (0-8) of its window's maximum as int8, a quarter of the
output's bytes in bf16 against the input's 4x that a recomputing backward reads; the backward visits each input
pixel once, looks at the (at most four) windows that hold it, and sums the gradients of those whose maximum it is.
Both read and write channels contiguously (a program is BLOCK_P pixels x BLOCK_C channels), and both take any
strides, so contiguous tensors give the same numbers, more slowly. The arithmetic is ATen's: the first maximum in
the window's row-major order wins (a NaN wins and stays), and the backward adds in fp32.

    model = use_pool_kernel(model)           # every nn.MaxPool2d(3, 2, 1) becomes MaxPool3s2
    out, offsets = torch.ops.tcperf.max_pool_3s2(x)          # (N, C, H, W) -> (N, C, ceil(H/2), ceil(W/2))

On an H200 (2026-11-27, a6968ae, before the tile was autotuned: 32 pixels x 64 channels, 4 warps):
benchmarks/maxpool_probe.py at batch 256, forward + backward 0.971 ms against Inductor's 1.882 (1.94x, 28% of the
copy bandwidth); in ResNet-50's whole-step graph the pool_kernel rung ran 7,033 and 6,667 img/s in two calls
against the whole-step graph's 6,949 and 6,585 (1.012x both times), the training check passing. Less than the
pooling's 1.1 ms saved: the stem's batch norm + ReLU, which Inductor fused into its pooling, now writes its output
for these kernels (normalization +0.5 ms a step), and the add of the two incoming gradients is its own kernel.

On a CPU the module falls back to F.max_pool2d, unless TRITON_INTERPRET=1 was set before this module was imported
(the tests run the kernels in Triton's interpreter that way).
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton

from .env import triton_interpreting
from .gemv import tuned

INTERPRETING = triton_interpreting()     # as Triton read it when it was imported
KERNEL, STRIDE, PAD = 3, 2, 1
BLOCK_P = 32                             # pixels a program in the interpreter; BLOCK_C channels beside each (64
                                         # for ResNet's stem); on a GPU BLOCK_P and the warps are autotuned:
CONFIGS = [triton.Config({"BLOCK_P": p}, num_warps=w) for p in (16, 32, 64, 128) for w in (4, 8)]
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@triton.jit
def max_pool_3s2_forward_kernel(x, out, offsets, P, C, H, W, OH, OW, sxn, sxc, sxh, sxw, son, soc, soh, sow,
                                BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr):
    p = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)         # output pixels, n-major
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    pm, cm = p < P, c < C
    ow, oh, n = p % OW, (p // OW) % OH, p // (OW * OH)
    best = tl.full((BLOCK_P, BLOCK_C), float("-inf"), tl.float32)
    # a window of -inf alone keeps its first pixel inside the input (not the padding), as ATen's does
    first = ((oh == 0).to(tl.int32) * 3 + (ow == 0).to(tl.int32))[:, None] + tl.zeros((BLOCK_P, BLOCK_C), tl.int32)
    arg = first
    for i in tl.static_range(3):
        for j in tl.static_range(3):
            h, w = oh * 2 - 1 + i, ow * 2 - 1 + j
            inside = pm & (h >= 0) & (h < H) & (w >= 0) & (w < W)
            ptr = x + (n * sxn + h * sxh + w * sxw)[:, None] + (c * sxc)[None, :]
            v = tl.load(ptr, mask=inside[:, None] & cm[None, :], other=float("-inf")).to(tl.float32)
            take = (v > best) | (v != v)                            # the first maximum wins; a NaN wins and stays
            best = tl.where(take, v, best)
            arg = tl.where(take, i * 3 + j, arg)
    where = (n * son + oh * soh + ow * sow)[:, None] + (c * soc)[None, :]
    mask = pm[:, None] & cm[None, :]
    tl.store(out + where, best.to(out.dtype.element_ty), mask=mask)
    tl.store(offsets + where, arg.to(tl.int8), mask=mask)


@triton.jit
def max_pool_3s2_backward_kernel(grad, offsets, dx, Q, C, H, W, OH, OW, sgn, sgc, sgh, sgw, son, soc, soh, sow,
                                 sdn, sdc, sdh, sdw, BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr):
    q = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)         # input pixels, n-major
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    qm, cm = q < Q, c < C
    w, h, n = q % W, (q // W) % H, q // (W * H)
    acc = tl.zeros((BLOCK_P, BLOCK_C), tl.float32)
    for di in tl.static_range(2):               # the windows holding row h: oh = (h + 1) // 2, and the one above
        oh = (h + 1) // 2 - di
        i = h + 1 - 2 * oh                      # the row's place in that window, 0-2 (3: not in it)
        for dj in tl.static_range(2):
            ow = (w + 1) // 2 - dj
            j = w + 1 - 2 * ow
            held = qm & (oh >= 0) & (oh < OH) & (i <= 2) & (ow >= 0) & (ow < OW) & (j <= 2)
            mask = held[:, None] & cm[None, :]
            at = (n * son + oh * soh + ow * sow)[:, None] + (c * soc)[None, :]
            arg = tl.load(offsets + at, mask=mask, other=-1)
            at = (n * sgn + oh * sgh + ow * sgw)[:, None] + (c * sgc)[None, :]
            g = tl.load(grad + at, mask=mask, other=0.0).to(tl.float32)
            acc += tl.where(arg.to(tl.int32) == (i * 3 + j)[:, None], g, 0.0)
    where = (n * sdn + h * sdh + w * sdw)[:, None] + (c * sdc)[None, :]
    tl.store(dx + where, acc.to(dx.dtype.element_ty), mask=qm[:, None] & cm[None, :])


KERNELS = {  # name -> (the kernel as written, autotuned): named so that a profile files them under pooling
    "forward": (max_pool_3s2_forward_kernel, tuned(max_pool_3s2_forward_kernel, CONFIGS, key=("P", "C"))),
    "backward": (max_pool_3s2_backward_kernel, tuned(max_pool_3s2_backward_kernel, CONFIGS, key=("Q", "C"))),
}


def out_size(size: int) -> int:
    return (size + 2 * PAD - KERNEL) // STRIDE + 1


def _empty_like_layout(x: torch.Tensor, shape: tuple, dtype: torch.dtype) -> torch.Tensor:
    """A new tensor of `shape` in x's layout: channels-last where x is (and not plain contiguous), else contiguous."""
    nhwc = x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
    return torch.empty(shape, dtype=dtype, device=x.device,
                       memory_format=torch.channels_last if nhwc else torch.contiguous_format)


def _launch(name: str, pixels: int, channels: int, *args) -> None:
    """A program per BLOCK_P pixels and BLOCK_C channels: the tile autotuned on a GPU (pixels and channels the
    key: a new batch tunes again), fixed in the interpreter."""
    block_c = min(64, triton.next_power_of_2(channels))
    grid = lambda meta: (triton.cdiv(pixels, meta["BLOCK_P"]), triton.cdiv(channels, block_c))
    plain, autotuned = KERNELS[name]
    if INTERPRETING:
        wrap_triton(plain)[grid](*args, BLOCK_P=BLOCK_P, BLOCK_C=block_c)
    else:
        wrap_triton(autotuned)[grid](*args, BLOCK_C=block_c)


@triton_op("tcperf::max_pool_3s2", mutates_args=())
def max_pool_3s2(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x (N, C, H, W) -> its 3 x 3, stride 2, padding 1 max-pool and each output's window offset (int8, 0-8),
    both (N, C, OH, OW) in x's layout."""
    n, c, h, w = x.shape
    oh, ow = out_size(h), out_size(w)
    out = _empty_like_layout(x, (n, c, oh, ow), x.dtype)
    offsets = _empty_like_layout(x, (n, c, oh, ow), torch.int8)
    _launch("forward", n * oh * ow, c, x, out, offsets, n * oh * ow, c, h, w, oh, ow,
            *x.stride(), *out.stride())
    return out, offsets


@triton_op("tcperf::max_pool_3s2_backward", mutates_args=())
def max_pool_3s2_backward(grad: torch.Tensor, offsets: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """The input's gradient (N, C, height, width), in the layout of `offsets`, from the output's gradient."""
    n, c, oh, ow = offsets.shape
    dx = _empty_like_layout(offsets, (n, c, height, width), grad.dtype)
    _launch("backward", n * height * width, c, grad, offsets, dx, n * height * width, c, height,
            width, oh, ow, *grad.stride(), *offsets.stride(), *dx.stride())
    return dx


def _setup(ctx, inputs, output) -> None:
    x, = inputs
    _, offsets = output
    ctx.save_for_backward(offsets)
    ctx.size = x.shape[-2:]


def _grad(ctx, grad_out, _grad_offsets):
    offsets, = ctx.saved_tensors
    return max_pool_3s2_backward(grad_out, offsets, *ctx.size)


max_pool_3s2.register_autograd(_grad, setup_context=_setup)


class MaxPool3s2(nn.Module):
    """nn.MaxPool2d(3, stride=2, padding=1) through tcperf's kernels on a GPU (and in Triton's interpreter)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 4 and x.dtype in DTYPES and (x.is_cuda or INTERPRETING):
            return max_pool_3s2(x)[0]
        return F.max_pool2d(x, KERNEL, STRIDE, PAD)


def is_stem_pool(module: nn.Module) -> bool:
    """An nn.MaxPool2d these kernels compute: 3 x 3, stride 2, padding 1, no dilation, floor mode, no indices."""
    pair = lambda v: tuple(v) if isinstance(v, (tuple, list)) else (v, v)
    return (type(module) is nn.MaxPool2d and pair(module.kernel_size) == (KERNEL, KERNEL)
            and pair(module.stride) == (STRIDE, STRIDE) and pair(module.padding) == (PAD, PAD)
            and pair(module.dilation) == (1, 1) and not module.ceil_mode and not module.return_indices)


def use_pool_kernel(model: nn.Module, mode: str = "train") -> list[str]:
    """Swap every nn.MaxPool2d(3, 2, 1) of `model` (in place) for MaxPool3s2; notes for the ladder's row. Raises
    LookupError when the model has none."""
    names = [name for name, m in model.named_modules() if is_stem_pool(m)]
    if not names:
        raise LookupError("no nn.MaxPool2d(3, stride=2, padding=1) in the model")
    for name in names:
        parent, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, leaf, MaxPool3s2())
    return [f"max-pool 3x3/2 on tcperf's kernels: {', '.join(names)}"]
