"""Cross-entropy over a wide vocabulary head without its logits: the head's matmul and the loss computed chunk by
chunk of the tokens, the gradients of each chunk taken in the forward pass (Liger Kernel's fused linear
cross-entropy, written in PyTorch), so that the (tokens, vocabulary) logits, their fp32 copy and their gradient
never exist whole. For GPT-2 small at 16 x 1024 tokens that is 16,384 x 50,304: 3.3 GB in fp32, and the ladder's
profile (H200, 2026-11-25) shows a 2.5 ms copy kernel a step on it.

The ladder's `chunked_ce` rung swaps a model's `lm_head` for a DeferredHead, whose HeadInput `token_loss` (the
language models' loss) turns into the chunked loss: the same arithmetic as F.cross_entropy on the logits (bf16
head matmul under autocast, log-softmax in fp32), checked exactly on a CPU.

    model.lm_head = DeferredHead(model.lm_head)
    loss = token_loss(model(idx), targets)          # (B, T, V) logits never made
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F

CHUNKS = 8            # pieces the tokens are cut into: at 16,384 x 50,304, 2,048 rows (412 MB of fp32 logits) each
IGNORE = -100         # F.cross_entropy's ignore_index: padded positions (tcperf.workload's labels)


class HeadInput(NamedTuple):
    """What a DeferredHead hands the loss in training: the head's input and parameters, not its output."""
    hidden: torch.Tensor              # (..., d)
    weight: torch.Tensor              # (V, d)
    bias: torch.Tensor | None
    fused: bool = False               # each chunk's softmax work compiled into a few kernels (torch.compile)


class DeferredHead(nn.Module):
    """An nn.Linear head that, in training, leaves its matmul to the loss (HeadInput); in eval, the plain head."""

    def __init__(self, linear: nn.Linear, fused: bool = False):
        super().__init__()
        self.linear = linear          # the same parameters (GPT-2 ties the weight to the token embedding)
        self.fused = fused

    def forward(self, x: torch.Tensor):
        return HeadInput(x, self.linear.weight, self.linear.bias, self.fused) if self.training else self.linear(x)


def defer_head(model: nn.Module, fused: bool = False) -> list[str]:
    """The model's `lm_head` (the name nanoGPT and Hugging Face give the vocabulary head) made a DeferredHead;
    returns notes. fused: each chunk's softmax work compiled (a compiled recipe's: the loss runs outside the compiled
    model, so without it the chunks would be as many eager kernels as the plain loss)."""
    head = getattr(model, "lm_head", None)
    if not isinstance(head, nn.Linear):
        raise LookupError(f"{type(model).__name__} has no nn.Linear lm_head for the chunked cross-entropy to take")
    model.lm_head = DeferredHead(head, fused)
    return [f"chunked cross-entropy: lm_head {head.in_features}->{head.out_features} in {CHUNKS} chunks of the "
            f"tokens, its logits never whole{', each chunk compiled' if fused else ''}"]


def token_loss(outputs, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over every position: logits (B, T, V), or a DeferredHead's HeadInput; targets (B, T)."""
    if isinstance(outputs, HeadInput):
        hidden = outputs.hidden.reshape(-1, outputs.hidden.shape[-1])                  # (N, d)
        return linear_cross_entropy(hidden, outputs.weight, outputs.bias, targets.reshape(-1), fused=outputs.fused)
    return F.cross_entropy(outputs.view(-1, outputs.size(-1)), targets.view(-1))


def linear_cross_entropy(hidden, weight, bias, targets, chunks: int = CHUNKS, fused: bool = False) -> torch.Tensor:
    """F.cross_entropy(hidden @ weight.T + bias, targets) (mean over the targets not IGNORE), chunk by chunk;
    fused: each chunk's work compiled."""
    return _LinearCrossEntropy.apply(hidden, weight, bias, targets, chunks, _compiled_chunk() if fused else _chunk)


class _LinearCrossEntropy(torch.autograd.Function):
    """Forward: each chunk's logits, its loss and its gradients (softmax - one-hot, over the count); backward: the
    gradients kept, times the incoming one. The same three matmuls a step as the plain head, no logits kept."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, chunks, chunk_fn):
        dtype = _matmul_dtype(hidden)
        w, b = weight.to(dtype), bias.to(dtype) if bias is not None else None        # one cast, as autocast's
        wide = torch.promote_types(dtype, torch.float32)           # fp32 for bf16 logits, as autocast; fp64 stays
        count = (targets != IGNORE).sum().clamp(min=1)
        total, grads_h = hidden.new_zeros((), dtype=wide), []
        grad_w = torch.zeros_like(weight, dtype=wide)
        grad_b = torch.zeros_like(bias, dtype=wide) if bias is not None else None
        for h, t in zip(hidden.to(dtype).chunk(chunks), targets.chunk(chunks)):
            loss, grad = chunk_fn(h, w, b, t, count)                     # grad: d loss / d logits, (c, V)
            total = total + loss
            grads_h.append(grad @ w)                                     # (c, d)
            grad_w = _add_product(grad_w, grad.t(), h)                   # (V, d), summed in fp32
            if grad_b is not None:
                grad_b += grad.sum(0)
        ctx.save_for_backward(torch.cat(grads_h).to(hidden.dtype), grad_w, *([grad_b] if bias is not None else []))
        ctx.dtypes = weight.dtype, bias.dtype if bias is not None else None
        return total / count

    @staticmethod
    def backward(ctx, grad_out):
        grad_h, grad_w, *grad_b = ctx.saved_tensors
        w_dtype, b_dtype = ctx.dtypes
        return (grad_h * grad_out, (grad_w * grad_out).to(w_dtype),
                (grad_b[0] * grad_out).to(b_dtype) if grad_b else None, None, None, None)


def _matmul_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype the head's matmul runs in: autocast's where it is on (bf16 for amp_bf16), else the input's."""
    kind = x.device.type
    return torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else x.dtype


def _chunk(h, w, b, t, count):
    """One chunk: (summed loss, d loss / d logits in the matmul's dtype); its logits made here, dropped on return.
    Written so that torch.compile fuses all of it: the row reductions (the log-sum-exp and the target's logit, picked by
    comparing a column index, not gathered) and the gradient (softmax minus the one-hot, scaled and cast in the same
    expression; scatter_add_ is a mutation Inductor does not fuse). On an H100 (2026-11-27) the version with gather and
    scatter_add_ spent 5.3 ms of a GPT-2 step in two kernels and an fp32 copy; this one is one kernel of 2.34 ms."""
    wide = F.linear(h, w, b)                              # (c, V): bf16 under autocast, as the plain head's
    wide = wide.to(torch.promote_types(wide.dtype, torch.float32))   # log-softmax in fp32, as autocast does it
    valid = (t != IGNORE).to(wide.dtype)
    hit = torch.arange(wide.shape[1], device=wide.device)[None, :] == t[:, None]   # (c, V); IGNORE hits nothing
    lse = torch.logsumexp(wide, dim=1)
    picked = torch.where(hit, wide, 0.0).sum(dim=1)       # the target's logit
    loss = ((lse - picked) * valid).sum()
    grad = (torch.exp(wide - lse[:, None]) - hit.to(wide.dtype)) * (valid / count)[:, None]
    return loss, grad.to(h.dtype)


def _add_product(total: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """total + a @ b, total wider than a and b (fp32 against bf16): on a GPU in the matmul's epilogue (addmm's
    out_dtype, torch >= 2.8), else a matmul and an add. The add alone read and wrote GPT-2's (50304, 768) fp32
    sum once a chunk: 1.28 ms of a 39 ms step on an H100 (2026-11-27)."""
    if total.dtype == a.dtype:
        return torch.addmm(total, a, b)
    if total.is_cuda:
        try:
            return torch.addmm(total, a, b, out_dtype=total.dtype)
        except (RuntimeError, TypeError):   # torch without addmm's out_dtype, or a dtype pair cuBLAS has not
            pass
    return total + a @ b


@functools.cache
def _compiled_chunk():
    """_chunk compiled once a process (static shapes: the chunks are equal but for a shorter last one)."""
    return torch.compile(_chunk, dynamic=False)
