"""BERT-base encoder with a masked-language-model head: 12 post-LayerNorm layers, d=768, 12 heads, feed-forward
3072, seq 128, vocab 30522 (BERT's own, which is not a multiple of 8: the ladder shows what that costs; NVIDIA pads
it to 30528), bidirectional SDPA attention, decoder tied to the token embedding.

Training step: MLM cross-entropy predicting every position of random tokens (pretraining predicts 15%; every
position keeps the step's cost fixed), AdamW (fused from the ladder's fused rung on). Inference: logits (B, T, V).
Throughput in sequences/s.
Published (NVIDIA DeepLearningExamples, A100-80GB): BERT-large pretraining seq 128, TF32 317 / AMP 580 seq/s.

    tcperf models bert --mode train --batch 32
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .transformer import Block, init_weights, token_batch, token_loss

KIND = "transformer"
UNIT = "samples/s"
OPTIMIZER = {"lr": 1e-4}
CONFIGS = {
    "full": {"layers": 12, "dim": 768, "heads": 12, "ff": 3072, "seq": 128, "vocab": 30522, "batch": 32},
    "small": {"layers": 2, "dim": 64, "heads": 4, "ff": 256, "seq": 32, "vocab": 500, "batch": 2},
}


class Bert(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        d = cfg["dim"]
        self.tok, self.pos = nn.Embedding(cfg["vocab"], d), nn.Embedding(cfg["seq"], d)
        self.ln = nn.LayerNorm(d)
        self.blocks = nn.ModuleList(Block(d, cfg["heads"], cfg["ff"], causal=False, pre_norm=False, gelu="none")
                                    for _ in range(cfg["layers"]))
        self.head_fc, self.head_ln = nn.Linear(d, d), nn.LayerNorm(d)      # the MLM transform
        self.decoder = nn.Linear(d, cfg["vocab"])
        init_weights(self)
        self.decoder.weight = self.tok.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.ln(self.tok(idx) + self.pos(pos))       # (B, T, C)
        for block in self.blocks:
            x = block(x)
        x = self.head_ln(F.gelu(self.head_fc(x)))
        return self.decoder(x)                           # (B, T, V)


build = Bert  # build(cfg) -> the model, randomly initialised
make_batch = token_batch
loss_fn = token_loss


def items_per_batch(cfg: dict, batch: int) -> int:
    return batch                    # sequences
