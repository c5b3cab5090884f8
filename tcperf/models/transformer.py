"""Transformer pieces shared by the GPT-2 and BERT models, written nanoGPT-style: every projection is a plain
nn.Linear called as a module (so the fp8/int8 recipes can swap it) and attention is F.scaled_dot_product_attention,
which picks the flash / efficient / cuDNN kernel itself. The token data and loss at the end serve every language model
(GPT-2, BERT, the LSTM); their loss, token_loss, is tcperf.kernels.cross_entropy's.

Dropout is left out on purpose: the ladder's accuracy check compares recipes on the same data, and random masks
(drawn differently by eager and compiled code) would hide the arithmetic difference it is looking for.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..kernels.cross_entropy import token_loss  # noqa: F401  the language models' loss (logits or a deferred head's)


class SelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int, causal: bool):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape                                                   # (B, T, C)
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))  # (B, h, T, d)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))


class MLP(nn.Module):
    def __init__(self, dim: int, hidden: int, gelu: str):
        super().__init__()
        self.fc, self.proj, self.gelu = nn.Linear(dim, hidden), nn.Linear(hidden, dim), gelu

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x), approximate=self.gelu))


class Block(nn.Module):
    """pre_norm=True: GPT-2 (x + f(LN(x))); False: BERT (LN(x + f(x)))."""

    def __init__(self, dim: int, heads: int, hidden: int, *, causal: bool, pre_norm: bool, gelu: str):
        super().__init__()
        self.pre_norm = pre_norm
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, heads, causal)
        self.mlp = MLP(dim, hidden, gelu)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.pre_norm:
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))
        x = self.ln1(x + self.attn(x))
        return self.ln2(x + self.mlp(x))


def init_weights(module: nn.Module, std: float = 0.02) -> None:
    """GPT-2 / BERT initialisation: normal(0, 0.02) weights, zero biases, unit LayerNorms."""
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, std)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)


def tokens(cfg: dict, batch: int, device, gen: torch.Generator) -> torch.Tensor:
    """Random token ids, (B, T)."""
    return torch.randint(0, cfg["vocab"], (batch, cfg["seq"]), generator=gen, device=device)


def token_batch(cfg: dict, batch: int, device, gen: torch.Generator):
    """A language model's make_batch: random tokens in, random tokens as the targets (B, T) each."""
    return (tokens(cfg, batch, device, gen),), tokens(cfg, batch, device, gen)


def tokens_per_batch(cfg: dict, batch: int) -> int:
    return batch * cfg["seq"]


