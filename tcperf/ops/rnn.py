"""Recurrent layers through torch.nn (cuDNN on a GPU): vanilla RNN, LSTM and GRU, one layer, forward or backward.

Shape keys: cell (vanilla | lstm | gru), hidden, batch, timesteps, input (default: hidden), pass (fwd | bwd).
fwd is inference (no autograd graph); bwd times the backward of one forward pass recorded at preparation
(input and weight gradients, torch.autograd.grad with retain_graph), as DeepBench's training table does.
The vanilla cell uses tanh: DeepBench's cuDNN benchmark used ReLU, which costs the same GEMMs, but a ReLU backward
flips its mask wherever rounding moves a pre-activation across zero, so an fp16/bf16 ReLU backward differs from
the float64 one by 1-3 % (measured) and could not be held to the correctness gate.

FLOPs, counting the GEMMs only (the gate nonlinearities are a few percent and not counted):
    fwd = 2 * gates * hidden * (input + hidden) * batch * timesteps      gates: vanilla 1, LSTM 4, GRU 3
    bwd = 2 * fwd    (gradients of the inputs and of the weights, each one GEMM the size of the forward's)
Bytes: fwd reads x (T*B*I) and the weights (gates*H*(I+H)) and writes y (T*B*H); bwd reads dy, x and the weights
and writes dx and the weight gradients (the activations saved by the forward pass are not counted).

    tcperf bench --suite deepbench-rnn-train --precision fp32,fp16 --filter cell=lstm
On an H200 (anchors.md): LSTM hidden 1024, batch 64, 100 steps, forward: fp32 52 TFLOPS, fp16 114.
"""
from __future__ import annotations

import copy
import math

import torch

from ..precision import Precision
from .base import Op, Prepared, flat, generator, one_of, randn, sizes

CELLS = {"vanilla": 1, "lstm": 4, "gru": 3}     # cell -> gates (GEMM blocks per step)
PASSES = ("fwd", "bwd")
NONLINEARITY = "tanh"     # see the module docstring


def dims(shape: dict) -> dict:
    """cell, gates, hidden H, batch B, timesteps T, input I, pass; UserError for unknown cells or passes."""
    cell = one_of(str(shape.get("cell", "lstm")).lower(), CELLS, "RNN cell")
    rnn_pass = one_of(str(shape.get("pass", "fwd")), PASSES, "RNN pass")
    h = int(shape["hidden"])
    n = sizes({"hidden": h, "batch": int(shape["batch"]), "timesteps": int(shape["timesteps"]),
               "input": int(shape.get("input", h))}, "RNN")
    return {"cell": cell, "gates": CELLS[cell], "H": h, "B": n["batch"], "T": n["timesteps"], "I": n["input"],
            "pass": rnn_pass}


class Rnn(Op):
    name = "rnn"
    precisions = ("fp32", "fp16", "bf16")
    shape_keys = ("cell", "hidden", "batch", "timesteps", "input", "pass")

    def flops(self, shape: dict) -> float:
        d = dims(shape)
        fwd = 2.0 * d["gates"] * d["H"] * (d["I"] + d["H"]) * d["B"] * d["T"]
        return fwd if d["pass"] == "fwd" else 2.0 * fwd

    def bytes(self, shape: dict, prec: Precision) -> float:
        d = dims(shape)
        x, y, weights = d["T"] * d["B"] * d["I"], d["T"] * d["B"] * d["H"], d["gates"] * d["H"] * (d["I"] + d["H"])
        elements = x + weights + y if d["pass"] == "fwd" else 2 * x + y + 2 * weights
        return float(elements * prec.element_bytes)

    def label(self, shape: dict) -> str:
        d = dims(shape)
        inp = "" if d["I"] == d["H"] else f" input {d['I']}"
        return f"{d['cell']} hidden {d['H']}{inp} batch {d['B']} x {d['T']} steps {d['pass']}"

    def verdict(self, shape: dict, prec: Precision, sm_count: int | None) -> dict:
        from ..tensorcore import rnn_verdict
        d = dims(shape)
        return rnn_verdict(d["cell"], d["H"], d["B"], d["I"], prec.name, sm_count)

    def padded(self, shape: dict, prec: Precision) -> dict | None:
        """hidden, input and batch up to the 16-byte multiple (fp16/bf16: 8); nothing for fp32."""
        from ..tensorcore import pad_to, uses_tensor_cores
        d = dims(shape)
        if not uses_tensor_cores(prec.name):
            return None
        new = {**shape, "hidden": pad_to(d["H"], prec.align), "batch": pad_to(d["B"], prec.align),
               "input": pad_to(d["I"], prec.align)}
        return None if (new["hidden"], new["batch"], new["input"]) == (d["H"], d["B"], d["I"]) else new

    def prepare(self, shape: dict, prec: Precision, device: torch.device, seed: int = 0) -> Prepared:
        d = dims(shape)
        gen = generator(device, seed)
        layer = _layer(d, prec.dtype, device, gen)
        x = randn((d["T"], d["B"], d["I"]), prec.dtype, device, gen)    # T, B, I (sequence first, as cuDNN)
        twin = copy.deepcopy(layer).double()                            # the float64 reference, same weights
        twin.flatten_parameters()
        info = {"cell": d["cell"]}
        if d["pass"] == "fwd":
            layer.eval()
            twin.eval()
            return Prepared(run=lambda: _no_grad(layer, x), reference=lambda: _no_grad(twin, x.double()), info=info)
        return _prepare_backward(layer, twin, x, gen, info)


def _layer(d: dict, dtype, device, gen) -> torch.nn.Module:
    """One layer with weights drawn from our generator: uniform(-1/sqrt(H), 1/sqrt(H)), PyTorch's own init."""
    kind = {"vanilla": torch.nn.RNN, "lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[d["cell"]]
    extra = {"nonlinearity": NONLINEARITY} if d["cell"] == "vanilla" else {}
    layer = kind(d["I"], d["H"], device=device, dtype=dtype, **extra)
    bound = 1.0 / math.sqrt(d["H"])
    with torch.no_grad():
        for p in layer.parameters():
            u = torch.rand(p.shape, generator=gen, device=device, dtype=torch.float32)
            p.copy_((u * 2 - 1) * bound)
    layer.flatten_parameters()     # one contiguous weight block, as cuDNN wants
    return layer


def _no_grad(layer, x):
    with torch.no_grad():
        return layer(x)[0]         # y: T, B, H (the hidden state of every step)


def _prepare_backward(layer, twin, x, gen, info) -> Prepared:
    x = x.requires_grad_(True)
    y = layer(x)[0]                                  # one forward pass with its graph kept for the timed backward
    dy = randn(y.shape, y.dtype, y.device, gen)
    inputs = (x, *layer.parameters())
    run = lambda: torch.autograd.grad(y, inputs, dy, retain_graph=True)

    def reference():
        x64 = x.detach().double().requires_grad_(True)
        y64 = twin(x64)[0]
        return flat(torch.autograd.grad(y64, (x64, *twin.parameters()), dy.double()))

    return Prepared(run=run, reference=reference, compare=flat, info=info)


OP = Rnn()
