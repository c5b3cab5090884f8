"""A 2-layer LSTM language model (hidden 1024) in the shape of PyTorch's word_language_model example on
WikiText-2: embedding 1024, nn.LSTM (cuDNN on CUDA), a decoder to the 33,278-word vocabulary (not a multiple of 8,
as in the example: the fp8/int8 rungs cannot take that layer), 100 steps of unrolling.

Training step: next-token cross-entropy on random tokens, AdamW (fused from the fused rung on). Inference: logits.
FLOPs come from the formula below: torch.utils.flop_counter does not see inside cuDNN's RNN kernel.

    tcperf models lstm --mode train --batch 64
"""
from __future__ import annotations

import torch
import torch.nn as nn

from .transformer import token_batch, token_loss, tokens_per_batch

KIND = "rnn"
UNIT = "tokens/s"
OPTIMIZER = {"lr": 1e-3}
CONFIGS = {
    "full": {"layers": 2, "emb": 1024, "hidden": 1024, "seq": 100, "vocab": 33278, "batch": 64},
    "small": {"layers": 2, "emb": 32, "hidden": 64, "seq": 16, "vocab": 500, "batch": 2},
}


class LSTMLM(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        self.emb = nn.Embedding(cfg["vocab"], cfg["emb"])
        self.lstm = nn.LSTM(cfg["emb"], cfg["hidden"], num_layers=cfg["layers"], batch_first=True)
        self.decoder = nn.Linear(cfg["hidden"], cfg["vocab"])

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        y, _ = self.lstm(self.emb(idx))      # (B, T, H)
        return self.decoder(y)               # (B, T, V)


build = LSTMLM  # build(cfg) -> the model, randomly initialised
make_batch = token_batch
loss_fn = token_loss
items_per_batch = tokens_per_batch


def flops(cfg: dict, batch: int, mode: str) -> float:
    """Per token and layer the gates cost 2 * 4H * (in + H) (input and recurrent GEMMs, multiply-add = 2);
    the decoder 2 * H * V. Training = 3x forward (backward computes two GEMMs per forward GEMM)."""
    h = cfg["hidden"]
    ins = [cfg["emb"]] + [h] * (cfg["layers"] - 1)
    per_token = sum(2 * 4 * h * (i + h) for i in ins) + 2 * h * cfg["vocab"]
    forward = float(per_token * batch * cfg["seq"])
    return 3 * forward if mode == "train" else forward
