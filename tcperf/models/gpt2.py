"""GPT-2 small (124M) decoder written nanoGPT-style: 12 layers, d=768, 12 heads, seq 1024, vocab 50304 (50257
padded to a multiple of 64, as nanoGPT does), tied input/output embeddings, causal SDPA attention.

Training step: next-token cross-entropy on random tokens, AdamW (fused from the fused rung on). Inference: logits.
On an H200 (hand-written loop, anchors.md): batch 16 x 1024, training fp32 54k tokens/s, amp_bf16 326k.

    tcperf models gpt2 --mode train --batch 16
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn

from .transformer import Block, init_weights, token_batch, token_loss, tokens_per_batch

KIND = "transformer"
UNIT = "tokens/s"
OPTIMIZER = {"lr": 6e-4, "betas": (0.9, 0.95)}
CONFIGS = {
    "full": {"layers": 12, "dim": 768, "heads": 12, "seq": 1024, "vocab": 50304, "batch": 16},
    "small": {"layers": 2, "dim": 64, "heads": 4, "seq": 32, "vocab": 512, "batch": 2},
}


class GPT(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        d = cfg["dim"]
        self.wte, self.wpe = nn.Embedding(cfg["vocab"], d), nn.Embedding(cfg["seq"], d)
        self.blocks = nn.ModuleList(Block(d, cfg["heads"], 4 * d, causal=True, pre_norm=True, gelu="tanh")
                                    for _ in range(cfg["layers"]))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, cfg["vocab"], bias=False)
        init_weights(self)
        self.lm_head.weight = self.wte.weight           # weight tying, as GPT-2
        for block in self.blocks:                        # residual projections scaled by 1/sqrt(2 * layers)
            nn.init.normal_(block.attn.proj.weight, 0.0, 0.02 / math.sqrt(2 * cfg["layers"]))
            nn.init.normal_(block.mlp.proj.weight, 0.0, 0.02 / math.sqrt(2 * cfg["layers"]))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.wte(idx) + self.wpe(pos)                # (B, T, C)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))                # (B, T, V)


build = GPT  # build(cfg) -> the model, randomly initialised
make_batch = token_batch
loss_fn = token_loss
items_per_batch = tokens_per_batch
