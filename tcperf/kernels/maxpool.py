"""The 3 x 3, stride 2, padding 1 max-pool (ResNet's stem) as two Triton kernels, forward and backward, for training
in the channels-last layout; a batch norm -> ReLU -> that pool computed as one on them (BatchNormReluPool2d), and the
torch.fx search that finds such chains in a model (the ladder's pool_kernel and bn_relu_pool rungs:
tcperf.kernels.fusions).

Why: in ResNet-50's whole-step graph (H200, 2026-11-27, c41fb7d) Inductor's stem pooling was the step's largest
memory-bound kernel, at 14% of the copy bandwidth: its backward gathers each input pixel's windows in an order the
channels-last layout does not read contiguously.

Here the forward keeps, for each output, the offset (0-8) of its window's maximum as int8, a quarter of the
output's bytes in bf16 against the input's 4x that a recomputing backward reads; the backward visits each input
pixel once, looks at the (at most four) windows that hold it, and sums the gradients of those whose maximum it is.
Both read and write channels contiguously (a program is BLOCK_P pixels x BLOCK_C channels), and both take any
strides, so contiguous tensors give the same numbers, more slowly. The arithmetic is ATen's: the first maximum in
the window's row-major order wins (a NaN wins and stays), and the backward adds in fp32.

BatchNormReluPool2d (_BatchNormReluPool says how) keeps the stem's batch norm and ReLU, which Inductor had fused into
its pooling, in the same pass: on an H200 (2026-11-27, edc4066, bf16) it ran ResNet-50 at 1.046-1.054x the hand loop in
8 interleaved rounds each, the pooling 1.84 -> 0.75 ms a step (docs/training.md has the story). In Triton's interpreter
it equals nn.BatchNorm2d -> nn.ReLU -> nn.MaxPool2d in float32 to 1e-7, gradients and running statistics included.

    fuse_batch_norm_relu_pool(model) # bn -> ReLU -> max-pool chains fused (tcperf.kernels.fusions: the ladder's rungs)
    out, offsets = torch.ops.tcperf.max_pool_3s2(x)          # (N, C, H, W) -> (N, C, ceil(H/2), ceil(W/2))

On a CPU the modules fall back to PyTorch's layers, unless TRITON_INTERPRET=1 was set before this module was
imported (the tests run the kernels in Triton's interpreter that way).
"""
from __future__ import annotations

from collections import Counter
from typing import Optional  # triton_op's schema inference reads Optional[Tensor] in every torch it runs on

import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl
from torch.library import triton_op

from .batchnorm import (DIMS, FusedBatchNorm2d, affine_grads, as_dtype, batch_stats, bn_relu_pairs, normalized,
                        only_user, per_channel, replace_module)
from ..env import launchable, triton_interpreting
from .gemv import tuned

INTERPRETING = triton_interpreting()     # as Triton read it when it was imported
KERNEL, STRIDE, PAD = 3, 2, 1
BLOCK_P = 32                             # pixels a program in the interpreter; BLOCK_C channels beside each (64
                                         # for ResNet's stem); on a GPU BLOCK_P and the warps are autotuned:
CONFIGS = [triton.Config({"BLOCK_P": p}, num_warps=w) for p in (16, 32, 64, 128) for w in (4, 8)]
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@triton.jit
def max_pool_3s2_forward_kernel(x, sign, out, offsets, P, C, H, W, OH, OW, sxn, sxc, sxh, sxw, son, soc, soh, sow,
                                SIGNED: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr):
    """out = the window's maximum and offsets its place; SIGNED: the maximum of sign[c] * x, times sign[c] (a
    channel of sign -1 takes its minimum: a batch norm of negative scale turns the maximum into the minimum)."""
    p = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)         # output pixels, n-major
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    pm, cm = p < P, c < C
    ow, oh, n = p % OW, (p // OW) % OH, p // (OW * OH)
    s = tl.load(sign + c, mask=cm, other=1.0).to(tl.float32)[None, :] if SIGNED else 1.0
    best = tl.full((BLOCK_P, BLOCK_C), float("-inf"), tl.float32)
    # a window of -inf alone keeps its first pixel inside the input (not the padding), as ATen's does
    first = ((oh == 0).to(tl.int32) * 3 + (ow == 0).to(tl.int32))[:, None] + tl.zeros((BLOCK_P, BLOCK_C), tl.int32)
    arg = first
    for i in tl.static_range(3):
        for j in tl.static_range(3):
            h, w = oh * 2 - 1 + i, ow * 2 - 1 + j
            inside = (pm & (h >= 0) & (h < H) & (w >= 0) & (w < W))[:, None] & cm[None, :]
            ptr = x + (n * sxn + h * sxh + w * sxw)[:, None] + (c * sxc)[None, :]
            v = tl.where(inside, tl.load(ptr, mask=inside, other=0.0).to(tl.float32) * s, float("-inf"))
            take = (v > best) | (v != v)                            # the first maximum wins; a NaN wins and stays
            best = tl.where(take, v, best)
            arg = tl.where(take, i * 3 + j, arg)
    where = (n * son + oh * soh + ow * sow)[:, None] + (c * soc)[None, :]
    mask = pm[:, None] & cm[None, :]
    tl.store(out + where, (best * s).to(out.dtype.element_ty), mask=mask)
    tl.store(offsets + where, arg.to(tl.int8), mask=mask)


@triton.jit
def max_pool_3s2_backward_kernel(grad, offsets, x, mean, c0, k1, dx, Q, C, H, W, OH, OW, sgn, sgc, sgh, sgw,
                                 son, soc, soh, sow, sxn, sxc, sxh, sxw, sdn, sdc, sdh, sdw,
                                 AFFINE: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr):
    """dx = the output gradient gathered back to each window's maximum; AFFINE: + c0[c] + k1[c] * (x - mean[c]) (a
    batch norm's gradient through its mean and variance, which reaches every pixel)."""
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
    mask = qm[:, None] & cm[None, :]
    if AFFINE:
        xv = tl.load(x + (n * sxn + h * sxh + w * sxw)[:, None] + (c * sxc)[None, :], mask=mask, other=0.0)
        centred = xv.to(tl.float32) - tl.load(mean + c, mask=cm, other=0.0)[None, :]
        acc += tl.load(c0 + c, mask=cm, other=0.0)[None, :] + tl.load(k1 + c, mask=cm, other=0.0)[None, :] * centred
    where = (n * sdn + h * sdh + w * sdw)[:, None] + (c * sdc)[None, :]
    tl.store(dx + where, acc.to(dx.dtype.element_ty), mask=mask)


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


def _launch(name: str, pixels: int, channels: int, *args, **flags) -> None:
    """A program per BLOCK_P pixels and BLOCK_C channels: the tile autotuned on a GPU (pixels and channels the
    key: a new batch tunes again), fixed in the interpreter."""
    block_c = min(64, triton.next_power_of_2(channels))
    grid = lambda meta: (triton.cdiv(pixels, meta["BLOCK_P"]), triton.cdiv(channels, block_c))
    plain, autotuned = KERNELS[name]
    fixed = {"BLOCK_P": BLOCK_P} if INTERPRETING else {}
    launchable(plain if INTERPRETING else autotuned)[grid](*args, **flags, **fixed, BLOCK_C=block_c)


@triton_op("tcperf::max_pool_3s2", mutates_args=())
def max_pool_3s2(x: torch.Tensor, sign: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """x (N, C, H, W) -> its 3 x 3, stride 2, padding 1 max-pool and each output's window offset (int8, 0-8),
    both (N, C, OH, OW) in x's layout; with sign (C,) of +-1, a channel of -1 takes the window's minimum."""
    n, c, h, w = x.shape
    oh, ow = out_size(h), out_size(w)
    out = _empty_like_layout(x, (n, c, oh, ow), x.dtype)
    offsets = _empty_like_layout(x, (n, c, oh, ow), torch.int8)
    _launch("forward", n * oh * ow, c, x, x if sign is None else sign, out, offsets, n * oh * ow, c, h, w, oh, ow,
            *x.stride(), *out.stride(), SIGNED=sign is not None)
    return out, offsets


@triton_op("tcperf::max_pool_3s2_backward", mutates_args=())
def max_pool_3s2_backward(grad: torch.Tensor, offsets: torch.Tensor, height: int, width: int,
                          x: Optional[torch.Tensor] = None, mean: Optional[torch.Tensor] = None,
                          c0: Optional[torch.Tensor] = None, k1: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The input's gradient (N, C, height, width), in the layout of `offsets`, from the output's gradient; with
    x (the pooled input) and mean, c0, k1 (C,) fp32, + c0[c] + k1[c] * (x - mean[c]) everywhere."""
    n, c, oh, ow = offsets.shape
    affine = x is not None
    dx = _empty_like_layout(offsets, (n, c, height, width), x.dtype if affine else grad.dtype)
    x_strides = x.stride() if affine else (0, 0, 0, 0)
    extra = (x, mean, c0, k1) if affine else (grad,) * 4          # not read without AFFINE
    _launch("backward", n * height * width, c, grad, offsets, *extra, dx, n * height * width, c, height, width, oh,
            ow, *grad.stride(), *offsets.stride(), *x_strides, *dx.stride(), AFFINE=affine)
    return dx


def _setup(ctx, inputs, output) -> None:
    x, _sign = inputs
    _, offsets = output
    ctx.save_for_backward(offsets)
    ctx.size = x.shape[-2:]


def _grad(ctx, grad_out, _grad_offsets):
    offsets, = ctx.saved_tensors
    return max_pool_3s2_backward(grad_out, offsets, *ctx.size), None


max_pool_3s2.register_autograd(_grad, setup_context=_setup)


class MaxPool3s2(nn.Module):
    """nn.MaxPool2d(3, stride=2, padding=1) through tcperf's kernels on a GPU (and in Triton's interpreter)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 4 and x.dtype in DTYPES and (x.is_cuda or INTERPRETING):
            return max_pool_3s2(x)[0]
        return F.max_pool2d(x, KERNEL, STRIDE, PAD)


class _BatchNormReluPool(torch.autograd.Function):
    """max_pool(relu(batch_norm(y))) in training, as relu(a * max_pool_s(y) + b), a = weight * invstd and b = bias
    - mean * a per channel: an affine map of positive scale keeps a window's maximum where it was (of negative
    scale, its minimum: sign s), and ReLU keeps it too, so the pooling runs on the batch norm's input and the
    normalization on the pooled quarter. Neither the normalized tensor nor its gradient is ever whole: the
    backward writes the input's gradient in one pass (tcperf's backward kernel, AFFINE), the gathered gradient of
    the pooled values plus what reaches every pixel through the mean and the variance (tcperf.kernels.batchnorm's
    affine_grads: batch norm's own backward restricted to where its gradient is not zero). Statistics in fp32, as
    Inductor's batch norm; returns (out, mean, biased variance) for the running statistics."""

    @staticmethod
    def forward(ctx, y, weight, bias, eps: float):
        mean, var, invstd, a = batch_stats(y, weight, eps)
        pooled, offsets = max_pool_3s2(y, torch.where(a >= 0, 1.0, -1.0))
        out = as_dtype(torch.relu(normalized(pooled, mean, a, bias)), y.dtype)
        ctx.save_for_backward(y, pooled, offsets, mean, invstd, weight, bias, a)
        ctx.mark_non_differentiable(mean, var)
        return out, mean, var

    @staticmethod
    def backward(ctx, g, _g_mean, _g_var):
        y, pooled, offsets, mean, invstd, weight, bias, a = ctx.saved_tensors
        gz = torch.where(normalized(pooled, mean, a, bias) > 0, g.float(), 0.0)
        c0, k1, g_w, g_b = affine_grads(gz.sum(DIMS), (gz * (pooled.float() - per_channel(mean))).sum(DIMS),
                                        invstd, a, y.numel() // y.shape[1])
        dy = max_pool_3s2_backward(gz * per_channel(a), offsets, y.shape[-2], y.shape[-1], y, mean, c0, k1)
        return dy, g_w.to(weight.dtype), g_b.to(weight.dtype), None


class BatchNormReluPool2d(FusedBatchNorm2d):
    """An nn.BatchNorm2d whose output goes through a ReLU into nn.MaxPool2d(3, 2, 1) and nowhere else (ResNet's
    stem), computed as one (_BatchNormReluPool) where batch statistics are used: it returns the pooled output, so the
    ReLU after it is redundant and the pool is replaced by nn.Identity. Elsewhere (eval with running statistics, a
    CPU, momentum None) the three as they were."""

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        if not (self.fusable(y) and y.dtype in DTYPES and (y.is_cuda or INTERPRETING)):
            return F.max_pool2d(F.relu(super().forward(y)), KERNEL, STRIDE, PAD)
        out, mean, var = _BatchNormReluPool.apply(y, *self.weight_bias(y), self.eps)
        self.update_running(mean, var, y.numel() // y.shape[1])
        return out


def is_stem_pool(module: nn.Module) -> bool:
    """An nn.MaxPool2d these kernels compute: 3 x 3, stride 2, padding 1, no dilation, floor mode, no indices."""
    pair = lambda v: tuple(v) if isinstance(v, (tuple, list)) else (v, v)
    return (type(module) is nn.MaxPool2d and pair(module.kernel_size) == (KERNEL, KERNEL)
            and pair(module.stride) == (STRIDE, STRIDE) and pair(module.padding) == (PAD, PAD)
            and pair(module.dilation) == (1, 1) and not module.ceil_mode and not module.return_indices)


def fuse_batch_norm_relu_pool(model: nn.Module) -> list[str]:
    """Each chain found by chains() fused in place: its batch norm's class becomes BatchNormReluPool2d (parameters,
    buffers and names kept), its ReLU module (if a module) and its pool nn.Identity. -> the batch norms' names."""
    found = chains(model)
    for bn, relu, pool in found:
        model.get_submodule(bn).__class__ = BatchNormReluPool2d
        for name in (relu, pool):
            if name:
                replace_module(model, name, nn.Identity())
    return [bn for bn, _, _ in found]


def chains(model: nn.Module) -> list[tuple[str, str | None, str]]:
    """(batch norm, ReLU module or None for a functional relu, pool) names of each nn.BatchNorm2d whose only user is a
    ReLU whose only user is an nn.MaxPool2d(3, 2, 1) (past nn.Identity modules: batchnorm.bn_relu_pairs), each module
    called once in the model's forward, read from torch.fx's trace of it; none where the model does not trace."""
    try:
        graph = torch.fx.symbolic_trace(model).graph
    except Exception:                        # control flow on values, unsupported calls: no fusion, plain pools
        return []
    modules = dict(model.named_modules())
    calls = Counter(node.target for node in graph.nodes if node.op == "call_module")
    found = []
    for bn, relu in bn_relu_pairs(graph, modules):
        pool = only_user(relu, modules)
        if pool is None or pool.op != "call_module" or not is_stem_pool(modules.get(pool.target)):
            continue
        relu_module = relu.target if relu.op == "call_module" else None
        if all(calls.get(name) == 1 for name in (bn.target, pool.target, relu_module) if name):
            found.append((bn.target, relu_module, pool.target))
    return found
