"""Scaled-dot-product attention (torch.nn.functional.scaled_dot_product_attention), forward or backward, and the
backend that ran it.

Shape keys: batch, heads, seq, head_dim, causal (true | false), pass (fwd | bwd). q, k, v: batch x heads x seq x
head_dim, self-attention (one sequence length), default scale 1/sqrt(head_dim).

Backend: the first of BACKENDS (flash, memory-efficient, cudnn, math), each tried alone under sdpa_kernel, that
runs this case; every timed call is made in its context, and it is stored as metrics["backend"].

FLOPs, the algorithm's matmuls (as torch.utils.flop_counter counts them):
    fwd = 4 * batch * heads * seq^2 * head_dim      (QK^T and PV, 2 * seq^2 * head_dim each)
    bwd = 2 * fwd                                   (dV, dP, dQ, dK: four seq^2 matmuls)
both halved when causal (the kernels skip the masked half; flop_counter counts it in full). FlashAttention's
papers count bwd as 2.5 * fwd, adding the recomputation of QK^T; tcperf counts the work any backend must do.
Bytes: fwd reads q, k, v and writes o (4 * batch*heads*seq*head_dim elements); bwd reads q, k, v, o, do and
writes dq, dk, dv (8x). The float64 reference is softmax(QK^T * scale + causal mask) V computed explicitly, a few
(batch, head) pairs at a time so that seq x seq float64 scores stay within ~1 GiB.

    tcperf bench --suite attention --precision bf16 --filter causal=true
"""
from __future__ import annotations

import math
import warnings

import torch
import torch.nn.functional as F

from ..precision import Precision
from .base import Op, Prepared, flat, generator, one_of, randn, sizes

BACKENDS = (("flash", "FLASH_ATTENTION"), ("efficient", "EFFICIENT_ATTENTION"), ("cudnn", "CUDNN_ATTENTION"),
            ("math", "MATH"))
REFERENCE_BYTES = 2**30      # float64 scores per reference chunk


def dims(shape: dict) -> dict:
    d = sizes({k: int(shape[k]) for k in ("batch", "heads", "seq", "head_dim")}, "attention")
    d["causal"] = str(shape.get("causal", False)).lower() in ("true", "1", "yes")
    d["pass"] = one_of(str(shape.get("pass", "fwd")), ("fwd", "bwd"), "attention pass")
    return d


class Attention(Op):
    name = "attention"
    precisions = ("fp32", "fp16", "bf16")
    shape_keys = ("batch", "heads", "seq", "head_dim", "causal", "pass")

    def flops(self, shape: dict) -> float:
        d = dims(shape)
        fwd = 4.0 * d["batch"] * d["heads"] * d["seq"] ** 2 * d["head_dim"] / (2 if d["causal"] else 1)
        return fwd if d["pass"] == "fwd" else 2.0 * fwd

    def bytes(self, shape: dict, prec: Precision) -> float:
        d = dims(shape)
        tensors = 4 if d["pass"] == "fwd" else 8
        return float(tensors * d["batch"] * d["heads"] * d["seq"] * d["head_dim"] * prec.element_bytes)

    def label(self, shape: dict) -> str:
        d = dims(shape)
        return (f"b{d['batch']} h{d['heads']} seq {d['seq']} d{d['head_dim']} "
                f"{'causal' if d['causal'] else 'full'} {d['pass']}")

    def verdict(self, shape: dict, prec: Precision, sm_count: int | None) -> dict:
        from ..tensorcore import attention_verdict
        d = dims(shape)
        return attention_verdict(d["batch"], d["heads"], d["seq"], d["head_dim"], prec.name, sm_count)

    def padded(self, shape: dict, prec: Precision) -> dict | None:
        """head_dim up to the 16-byte multiple (the sequence cannot be padded without changing the result)."""
        from ..tensorcore import pad_to, uses_tensor_cores
        d = dims(shape)
        new = pad_to(d["head_dim"], prec.align)
        return {**shape, "head_dim": new} if uses_tensor_cores(prec.name) and new != d["head_dim"] else None

    def prepare(self, shape: dict, prec: Precision, device: torch.device, seed: int = 0) -> Prepared:
        d = dims(shape)
        gen = generator(device, seed)
        size = (d["batch"], d["heads"], d["seq"], d["head_dim"])         # B, H, S, D
        q, k, v = (randn(size, prec.dtype, device, gen) for _ in range(3))
        if d["pass"] == "fwd":
            name, backend = pick_backend(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=d["causal"]))
            run = lambda: _sdpa(backend, q, k, v, d["causal"])
            return Prepared(run=run, reference=lambda: reference(q, k, v, d["causal"]), info={"backend": name})
        return _prepare_backward(q, k, v, d["causal"], gen)


def _sdpa(backend, q, k, v, causal):
    from torch.nn.attention import sdpa_kernel
    with sdpa_kernel(backend):       # the same backend for every call
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def pick_backend(call) -> tuple[str, object]:
    """(name, SDPBackend) of the first backend, in BACKENDS order, that runs `call` on its own."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    failures = []
    for name, attr in BACKENDS:
        backend = getattr(SDPBackend, attr, None)
        if backend is None:
            continue
        try:
            with warnings.catch_warnings(), sdpa_kernel(backend):
                warnings.simplefilter("ignore")      # "X kernel not used because ...": we try the next one
                call()
            return name, backend
        except RuntimeError as e:
            failures.append(f"{name}: {str(e).splitlines()[0][:80]}")
    raise RuntimeError("no attention backend ran this case (" + "; ".join(failures) + ")")


def _prepare_backward(q, k, v, causal, gen) -> Prepared:
    q, k, v = (t.requires_grad_(True) for t in (q, k, v))
    do = randn(q.shape, q.dtype, q.device, gen)

    def forward_backward():
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        torch.autograd.grad(o, (q, k, v), do)

    name, backend = pick_backend(forward_backward)
    o = _sdpa(backend, q, k, v, causal)         # one forward with its graph kept; the backward is what is timed
    run = lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
    return Prepared(run=run, reference=lambda: reference(q, k, v, causal, do), compare=flat, info={"backend": name})


def _attend(q, k, v, causal):
    """softmax(q k^T / sqrt(d) + mask) v, written out (float64, ... x S x D)."""
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])           # ..., S, S
    if causal:
        n = s.shape[-1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def reference(q, k, v, causal, do=None) -> torch.Tensor:
    """Float64 attention output (fwd), or the flattened dq, dk, dv (bwd, given do), a few heads at a time."""
    b, h, s, d = q.shape
    flat = [t.detach().reshape(b * h, s, d) for t in (q, k, v)] + ([do.reshape(b * h, s, d)] if do is not None else [])
    step = max(1, REFERENCE_BYTES // (s * s * 8))
    outs, grads = [], ([], [], [])
    for i in range(0, b * h, step):
        qi, ki, vi, *doi = (t[i:i + step].double() for t in flat)
        if do is None:
            outs.append(_attend(qi, ki, vi, causal))
            continue
        qi, ki, vi = (t.requires_grad_(True) for t in (qi, ki, vi))
        for acc, g in zip(grads, torch.autograd.grad(_attend(qi, ki, vi, causal), (qi, ki, vi), doi[0])):
            acc.append(g)
    if do is None:
        return torch.cat(outs).reshape(b, h, s, d)
    return torch.cat([torch.cat(acc).reshape(-1) for acc in grads])


OP = Attention()
