"""The factory format in one file: tcperf advise examples/classifier.py:factory (README.md shows it whole)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Classifier(nn.Module):
    def __init__(self, features: int = 512, hidden: int = 2048, classes: int = 10):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(features, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(),
                                 nn.Linear(hidden, classes))

    def forward(self, x):                               # (B, features) -> (B, classes) logits
        return self.net(x)


def confidence(logits) -> float:                        # a number the user cares about, judged against fp32's
    return float(logits.float().softmax(-1).max(-1).values.mean())


def factory() -> dict:
    x = torch.randn(1024, 512)                          # (B, features): one step's inputs
    y = torch.randint(0, 10, (1024,))                   # (B,) class indices
    return {"model": Classifier(),                      # any torch.nn.Module, on the CPU: tcperf moves it
            "inputs": (x,),                             # a tensor, a tuple of arguments or a dict of keywords
            "targets": y,                               # --mode train: loss_fn(outputs, targets)
            "loss_fn": F.cross_entropy,                 # --mode train: the loss the check follows
            "metric_fn": confidence}                    # inference: compared with fp32 strict's
