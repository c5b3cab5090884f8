"""Batch norm -> ReLU in training as one autograd function whose backward takes ReLU's mask from the batch norm's
input, and fuse_batch_norm_relu, which puts it into a model (the ladder's bn_relu rung, tcperf.kernels.fusions).

Why: in ResNet-50's whole-step graph the batch norms are half the kernel time (H200, 2026-11-27: 17.4 ms of 36.5 ms
a step), all of it memory-bound. In the graph AOTAutograd hands Inductor, ReLU's backward is threshold_backward(grad,
relu_output): both of the batch norm's backward passes then read the incoming gradient, the ReLU's output (for the
mask) and the batch norm's input (for x-hat). Here the mask is recomputed from the batch norm's input: two reads a
pass instead of three for each batch norm followed by a ReLU (33 of ResNet-50's 53), with the same saved tensors
(the ReLU's output is saved for the next convolution's weight gradient either way).

    z, mean, var = _BatchNormRelu.apply(y, weight, bias, eps)       # z = relu(batch_norm(y)), batch statistics
    fuse_batch_norm_relu(model)   # each batch norm whose only user is a ReLU computes both (ReLU node removed)

The arithmetic is batch norm's (statistics in fp32 as Inductor's, fp64 in a float64 model; running statistics as
nn.BatchNorm2d updates them); `affine_grads` is the part of its backward that tcperf.kernels.maxpool's fused stem
shares.

Measured, and slower: in ResNet-50's whole-step graph on an H200 (2026-11-27, edc4066, bf16, batch 256) 0.99x the
whole-step graph and 0.96x on top of the fused stem, its backward writing the masked gradient `g` below and reading
it back, a pass more than Inductor's (benchmarks/bn_relu_probe.py; docs/training.md): so the ladder climbs it only
where named (recipes.NAMED_ONLY). Recomputing the mask inside both passes is the next thing to try.
"""
from __future__ import annotations

from collections import Counter

import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F

DIMS = (0, 2, 3)             # a channel's pixels: N, H, W of (N, C, H, W)


def per_channel(v: torch.Tensor) -> torch.Tensor:
    return v.view(1, -1, 1, 1)


def wide(t: torch.Tensor) -> torch.Tensor:
    """t in the precision batch norm's arithmetic runs at: fp32 for fp16/bf16/fp32 (as Inductor's), fp64 kept (a
    float64 model stays float64: the whole-model test holds the fusion against nn.BatchNorm2d there, where no
    rounding can flip a ReLU's mask)."""
    return t.to(torch.promote_types(t.dtype, torch.float32))


def batch_stats(y: torch.Tensor, weight: torch.Tensor, eps: float):
    """(mean, biased variance, invstd, a) of y per channel, at least fp32, a = weight * invstd: batch norm's output
    is normalized(y, mean, a, bias) = (y - mean) * a + bias."""
    var, mean = torch.var_mean(wide(y), dim=DIMS, correction=0)
    invstd = torch.rsqrt(var + eps)
    return mean, var, invstd, wide(weight) * invstd


def normalized(x: torch.Tensor, mean: torch.Tensor, a: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """(x - mean) * a + bias per channel, at least fp32 (centred first: no cancellation where the mean dwarfs the
    spread)."""
    return (wide(x) - per_channel(mean)) * per_channel(a) + per_channel(wide(bias))


def as_dtype(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """x in dtype, with no .to() where it is already: in torch 2.11 a no-op .to() on an autograd.Function's output
    made torch.compile drop the function's backward (the input's gradient came out zero: float32 through these
    fused batch norms, rel. error 1.0, on an H200 and on the CPU, 2026-11-27; torch 2.14 was right)."""
    return x if x.dtype == dtype else x.to(dtype)


def affine_grads(g_sum: torch.Tensor, g_centered: torch.Tensor, invstd, a, count: int):
    """Batch norm's backward through its statistics, from two sums per channel of the gradient g of its output
    (g_sum = sum g, g_centered = sum g * (y - mean), over every pixel where g is not zero): (c0, k1, weight's
    gradient, bias's gradient) with dy = a * g + c0 + k1 * (y - mean) at every pixel."""
    g_xhat = invstd * g_centered                          # sum g * x-hat
    return -a * g_sum / count, -a * invstd * g_xhat / count, g_xhat, g_sum


class _BatchNormRelu(torch.autograd.Function):
    """relu(batch_norm(y)) with batch statistics; the backward recomputes ReLU's mask from y."""

    @staticmethod
    def forward(ctx, y, weight, bias, eps: float):
        mean, var, invstd, a = batch_stats(y, weight, eps)
        z = as_dtype(torch.relu(normalized(y, mean, a, bias)), y.dtype)
        ctx.save_for_backward(y, mean, invstd, weight, bias, a)
        ctx.mark_non_differentiable(mean, var)
        return z, mean, var

    @staticmethod
    def backward(ctx, dz, _g_mean, _g_var):
        y, mean, invstd, weight, bias, a = ctx.saved_tensors
        centred = wide(y) - per_channel(mean)
        g = torch.where(normalized(y, mean, a, bias) > 0, wide(dz), 0.0)
        c0, k1, g_w, g_b = affine_grads(g.sum(DIMS), (g * centred).sum(DIMS), invstd, a, y.numel() // y.shape[1])
        dy = g * per_channel(a) + per_channel(c0) + per_channel(k1) * centred
        return dy.to(y.dtype), g_w.to(weight.dtype), g_b.to(weight.dtype), None


class FusedBatchNorm2d(nn.BatchNorm2d):
    """An nn.BatchNorm2d whose subclasses fuse it with what follows it where batch statistics are used (fusable:
    training, or no running statistics; momentum set; 4-D), and run it as it was elsewhere. They are made by
    changing the class of an instance in place: its parameters, buffers and state-dict names stay."""

    def fusable(self, y: torch.Tensor) -> bool:
        return (self.training or not self.track_running_stats) and self.momentum is not None and y.dim() == 4

    def weight_bias(self, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.affine:
            return self.weight, self.bias
        return (y.new_ones(self.num_features, dtype=torch.float32), y.new_zeros(self.num_features, dtype=torch.float32))

    def update_running(self, mean: torch.Tensor, var: torch.Tensor, count: int) -> None:
        """nn.BatchNorm2d's update in training: momentum toward the batch's mean and unbiased variance."""
        if not (self.training and self.track_running_stats):
            return
        with torch.no_grad():
            self.num_batches_tracked.add_(1)
            self.running_mean.lerp_(mean.to(self.running_mean.dtype), self.momentum)
            self.running_var.lerp_((var * count / max(count - 1, 1)).to(self.running_var.dtype), self.momentum)


class BatchNormRelu2d(FusedBatchNorm2d):
    """An nn.BatchNorm2d followed by a ReLU, computed as one (_BatchNormRelu): returns relu(batch_norm(y))."""

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        if not self.fusable(y):
            return F.relu(super().forward(y))
        z, mean, var = _BatchNormRelu.apply(y, *self.weight_bias(y), self.eps)
        self.update_running(mean, var, y.numel() // y.shape[1])
        return z


# --- finding and fusing the pairs ----------------------------------------------------------------------------------
def fuse_batch_norm_relu(model: nn.Module) -> list[str]:
    """Each module of `model` below the root whose own trace holds a batch norm -> ReLU pair (the batch norm's output
    used by the ReLU alone, through nn.Identity modules, the batch norm held once in the model) is replaced by a
    GraphModule of its trace with the ReLU node removed and the batch norm's class made BatchNormRelu2d: a ReLU
    module called again elsewhere (torchvision's Bottleneck calls one three times) stays for its other calls.
    Deepest modules first. -> the fused batch norms' names."""
    held = Counter(id(m) for _, m in model.named_modules(remove_duplicate=False))
    order = {name: i for i, (name, _) in enumerate(model.named_modules())}
    fused = []
    for name, module in reversed(list(model.named_modules())):
        if not name or not any(True for _ in module.children()):
            continue
        graph_module = _fused(module, held)
        if graph_module is not None:
            fused += [f"{name}.{bn}" for bn in graph_module.fused_pairs]
            replace_module(model, name, graph_module)
    return sorted(fused, key=lambda bn: order.get(bn, len(order)))


def _fused(module: nn.Module, held: dict) -> torch.fx.GraphModule | None:
    try:
        graph_module = torch.fx.symbolic_trace(module)
    except Exception:                        # control flow on values, unsupported calls: left as it is
        return None
    modules = dict(graph_module.named_modules())
    pairs = [(bn, relu) for bn, relu in bn_relu_pairs(graph_module.graph, modules)
             if held.get(id(module.get_submodule(bn.target))) == 1]
    if not pairs:
        return None
    for bn, relu in pairs:
        relu.replace_all_uses_with(relu.args[0])
        graph_module.graph.erase_node(relu)
        graph_module.get_submodule(bn.target).__class__ = BatchNormRelu2d
    graph_module.graph.lint()
    graph_module.recompile()
    graph_module.fused_pairs = [bn.target for bn, _ in pairs]
    return graph_module


def bn_relu_pairs(graph: torch.fx.Graph, modules: dict) -> list[tuple[torch.fx.Node, torch.fx.Node]]:
    """(batch norm, ReLU) nodes of an fx graph: each nn.BatchNorm2d call whose only user, past nn.Identity modules, is
    a ReLU (the fx search both fused batch norms start from: this module's pairs, tcperf.kernels.maxpool's chains)."""
    pairs = []
    for node in graph.nodes:
        if node.op == "call_module" and type(modules.get(node.target)) is nn.BatchNorm2d:
            relu = only_user(node, modules)
            if relu is not None and is_relu(relu, modules):
                pairs.append((node, relu))
    return pairs


def only_user(node: torch.fx.Node, modules: dict) -> torch.fx.Node | None:
    """The one node that uses `node`, past nn.Identity modules that use it alone (timm's blocks hold a drop_block
    between a batch norm and its activation, an nn.Identity when not training with it); None when more use it."""
    while len(node.users) == 1:
        node = next(iter(node.users))
        if not (node.op == "call_module" and type(modules.get(node.target)) is nn.Identity):
            return node
    return None


def is_relu(node: torch.fx.Node, modules: dict) -> bool:
    """A ReLU call in an fx graph: an nn.ReLU module, F.relu / torch.relu, or Tensor.relu."""
    if node.op == "call_module":
        return type(modules.get(node.target)) is nn.ReLU
    if node.op == "call_function":
        return node.target in (F.relu, torch.relu, torch.relu_)
    return node.op == "call_method" and node.target in ("relu", "relu_")


def replace_module(model: nn.Module, name: str, module: nn.Module) -> None:
    parent, _, leaf = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, leaf, module)
