"""A Llama-style decoder written plainly, with a static KV cache: the model `tcperf generate` decodes with, in the
manner of gpt-fast's model.py (one module, no abstraction over the math).

The cache is allocated once for the largest batch of a sweep and `max_seq` positions; every call slices the first
B rows of it, so one compiled decode step serves every batch size (torch.compile marks B dynamic after the second
size it sees instead of compiling once a batch). Attention runs over the whole static cache with a causal mask, as
gpt-fast's does: the shapes never change, so the step can be captured in a CUDA graph.

    args = CONFIGS["llama-1b"]                       # Llama-3.2-1B's shape, random weights
    model = build(args, torch.device("cuda"), torch.bfloat16)
    model.setup_caches(max_batch=8, max_seq=256)
    logits = model(idx, input_pos)                    # idx (B, T) token ids, input_pos (T,) positions
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..errors import choices
from ..quant import apart


@dataclass(frozen=True)
class ModelArgs:
    name: str
    dim: int
    n_layer: int
    n_head: int
    n_kv_head: int
    intermediate: int
    vocab: int
    tied: bool = True                 # the output projection is the embedding matrix
    rope_base: float = 500000.0
    norm_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_head


# Shapes of the public checkpoints (hidden, layers, heads, kv heads, MLP, vocab); the weights are random.
CONFIGS: dict[str, ModelArgs] = {a.name: a for a in (
    ModelArgs("llama-1b", 2048, 16, 32, 8, 8192, 128256),                 # Llama-3.2-1B: 1.24e9 parameters
    ModelArgs("llama-3b", 3072, 28, 24, 8, 8192, 128256),                 # Llama-3.2-3B
    ModelArgs("llama-8b", 4096, 32, 32, 8, 14336, 128256, tied=False),    # Llama-3.1-8B
    ModelArgs("tiny", 128, 2, 4, 2, 256, 512),                            # the CPU tests' model
)}
DEFAULT = "llama-1b"


def get(name: str) -> ModelArgs:
    try:
        return CONFIGS[name]
    except KeyError:
        raise choices("built-in model", name, CONFIGS) from None


class KVCache(nn.Module):
    """Keys and values of every position so far: (max_batch, kv heads, max_seq, head_dim) in `dtype` (bf16, or
    float8_e4m3fn cast without a scale: e4m3's +-448 holds the keys and values of the models built here)."""

    def __init__(self, max_batch: int, n_kv_head: int, max_seq: int, head_dim: int, dtype: torch.dtype, device):
        super().__init__()
        shape = (max_batch, n_kv_head, max_seq, head_dim)
        self.register_buffer("k_cache", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v_cache", torch.zeros(shape, dtype=dtype, device=device), persistent=False)

    def update(self, input_pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        """Write k, v (B, kv heads, T, head_dim) at input_pos; return the whole cache of these B rows."""
        b = k.shape[0]
        k_out, v_out = self.k_cache[:b], self.v_cache[:b]
        k_out[:, :, input_pos] = k.to(k_out.dtype)
        v_out[:, :, input_pos] = v.to(v_out.dtype)
        return k_out.to(k.dtype), v_out.to(v.dtype)      # no copy for a bf16 cache; fp8 is widened to read


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def precompute_freqs_cis(seq: int, head_dim: int, base: float) -> torch.Tensor:
    """RoPE's (cos, sin) per position and frequency: (seq, head_dim / 2, 2), float32."""
    freqs = 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim))
    angles = torch.outer(torch.arange(seq).float(), freqs)
    return torch.stack([angles.cos(), angles.sin()], dim=-1)


def apply_rotary_emb(x: torch.Tensor, freqs_cis: torch.Tensor) -> torch.Tensor:
    """Rotate each (even, odd) pair of x (B, T, heads, head_dim) by its position's angle."""
    xs = x.float().reshape(*x.shape[:-1], -1, 2)                        # (B, T, H, hd/2, 2)
    f = freqs_cis.view(1, xs.size(1), 1, xs.size(3), 2)
    out = torch.stack([xs[..., 0] * f[..., 0] - xs[..., 1] * f[..., 1],
                       xs[..., 1] * f[..., 0] + xs[..., 0] * f[..., 1]], dim=-1)
    return out.flatten(3).type_as(x)


class Attention(nn.Module):
    def __init__(self, a: ModelArgs):
        super().__init__()
        self.a = a
        self.wqkv = nn.Linear(a.dim, (a.n_head + 2 * a.n_kv_head) * a.head_dim, bias=False)   # q, k, v fused
        self.wo = nn.Linear(a.n_head * a.head_dim, a.dim, bias=False)
        self.kv_cache: KVCache | None = None

    def forward(self, x, freqs_cis, mask, input_pos):
        a, (b, t, _) = self.a, x.shape
        q, k, v = self.wqkv(apart(x)).split([a.n_head * a.head_dim, a.n_kv_head * a.head_dim,
                                      a.n_kv_head * a.head_dim], dim=-1)
        q = apply_rotary_emb(q.view(b, t, a.n_head, a.head_dim), freqs_cis).transpose(1, 2)   # (B, H, T, hd)
        k = apply_rotary_emb(k.view(b, t, a.n_kv_head, a.head_dim), freqs_cis).transpose(1, 2)
        v = v.view(b, t, a.n_kv_head, a.head_dim).transpose(1, 2)
        if self.kv_cache is not None:                                     # decoding; training attends over its T
            k, v = self.kv_cache.update(input_pos, k, v)                 # (B, kv heads, max_seq, hd)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        return self.wo(apart(y.transpose(1, 2).reshape(b, t, a.n_head * a.head_dim)))


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x), w1 and w3 fused into one projection."""

    def __init__(self, a: ModelArgs):
        super().__init__()
        self.w13 = nn.Linear(a.dim, 2 * a.intermediate, bias=False)
        self.w2 = nn.Linear(a.intermediate, a.dim, bias=False)

    def forward(self, x):
        gate, up = self.w13(apart(x)).chunk(2, dim=-1)
        return self.w2(apart(F.silu(gate) * up))


class Block(nn.Module):
    def __init__(self, a: ModelArgs):
        super().__init__()
        self.attention, self.feed_forward = Attention(a), FeedForward(a)
        self.attention_norm, self.ffn_norm = RMSNorm(a.dim, a.norm_eps), RMSNorm(a.dim, a.norm_eps)

    def forward(self, x, freqs_cis, mask, input_pos):
        h = x + self.attention(self.attention_norm(x), freqs_cis, mask, input_pos)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, a: ModelArgs):
        super().__init__()
        self.args = a
        self.tok_embeddings = nn.Embedding(a.vocab, a.dim)
        self.layers = nn.ModuleList(Block(a) for _ in range(a.n_layer))
        self.norm = RMSNorm(a.dim, a.norm_eps)
        self.output = nn.Linear(a.dim, a.vocab, bias=False)
        if a.tied:
            self.output.weight = self.tok_embeddings.weight
        self.max_batch = self.max_seq = 0

    def setup_caches(self, max_batch: int, max_seq: int, kv_dtype: torch.dtype | None = None) -> None:
        """Allocate the static KV cache (kv_dtype: default the embedding's dtype), the causal mask and RoPE."""
        a, device = self.args, self.tok_embeddings.weight.device
        kv_dtype = kv_dtype or self.tok_embeddings.weight.dtype
        for layer in self.layers:
            layer.attention.kv_cache = None                               # free the old cache before the new one
            layer.attention.kv_cache = KVCache(max_batch, a.n_kv_head, max_seq, a.head_dim, kv_dtype, device)
        self.register_buffer("causal_mask", torch.tril(torch.ones(max_seq, max_seq, dtype=torch.bool,
                                                                  device=device)), persistent=False)
        self.register_buffer("freqs_cis", precompute_freqs_cis(max_seq, a.head_dim, a.rope_base).to(device),
                             persistent=False)
        self.max_batch, self.max_seq = max_batch, max_seq

    def setup_training(self, seq: int) -> None:
        """No KV cache: every forward reads its own T <= seq tokens at positions 0..T-1 (tcperf.generate.trained
        trains the model this way); setup_caches afterwards to decode."""
        self.setup_caches(1, seq)
        for layer in self.layers:
            layer.attention.kv_cache = None
        self.max_batch = 0

    def forward(self, idx: torch.Tensor, input_pos: torch.Tensor, last_only: bool = False) -> torch.Tensor:
        """idx (B, T) token ids at positions input_pos (T,) -> logits (B, T, vocab), or (B, 1, vocab) of the last
        position only (prefill: the output layer is the largest, and only the last position picks a token)."""
        keys = self.max_seq if self.max_batch else idx.shape[1]         # the cache's positions, or (training) T
        mask = self.causal_mask[None, None, input_pos, :keys]            # (1, 1, T, keys)
        freqs_cis = self.freqs_cis[input_pos]
        x = self.tok_embeddings(idx)
        for layer in self.layers:
            x = layer(x, freqs_cis, mask, input_pos)
        return self.output(apart(self.norm(x[:, -1:] if last_only else x)))


def build(a: ModelArgs, device, dtype: torch.dtype = torch.bfloat16, seed: int = 0) -> Transformer:
    """The model with random weights drawn at `seed` on `device` (normal, std 0.02; norms at 1): nothing is
    downloaded, and every process that builds it at the same seed on the same device gets the same weights."""
    torch.manual_seed(seed)
    with torch.device(device):
        model = Transformer(a)
    for name, p in model.named_parameters():
        if not name.endswith("norm.weight") and "norm." not in name:
            nn.init.normal_(p, std=0.02)
    return model.to(dtype).eval().requires_grad_(False)
