"""One tiny MLP whose forward returns its float outputs in the containers real models use: a tuple, a dataclass
instance (fields are tensors), and a dict. The advisor has to find and compare the tensors inside each.

    tcperf advise tests/thirdparty/outputs.py:factory_tuple --device cpu
    tcperf advise tests/thirdparty/outputs.py:factory_dataclass --mode train --device cpu
"""
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH, IN, HIDDEN, CLASSES = 8, 32, 64, 10


@dataclass
class MLPOutput:
    logits: torch.Tensor          # (B, CLASSES)
    features: torch.Tensor        # (B, HIDDEN)


class MLP(nn.Module):
    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind          # "tuple" | "dataclass" | "dict"
        self.up = nn.Linear(IN, HIDDEN)
        self.norm = nn.LayerNorm(HIDDEN)
        self.head = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x):
        features = self.norm(F.gelu(self.up(x)))
        logits = self.head(features)
        if self.kind == "tuple":
            return logits, features
        if self.kind == "dataclass":
            return MLPOutput(logits=logits, features=features)
        return {"logits": logits, "features": features}


def _make(kind: str, loss_fn) -> dict:
    torch.manual_seed(0)
    model = MLP(kind)
    x = torch.randn(BATCH, IN)
    targets = torch.randint(0, CLASSES, (BATCH,))
    return {"model": model, "inputs": (x,), "targets": targets, "loss_fn": loss_fn}


def factory_tuple():
    return _make("tuple", lambda out, y: F.cross_entropy(out[0].float(), y))


def factory_dataclass():
    return _make("dataclass", lambda out, y: F.cross_entropy(out.logits.float(), y))


def factory_dict():
    return _make("dict", lambda out, y: F.cross_entropy(out["logits"].float(), y))
