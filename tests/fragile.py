"""A model one Linear of which breaks in bf16, for the advisor's tests. It lives apart from test_advisor so that the
workers, which unpickle it, import torch and this file only (tests/ is on the sys.path the parent passes them)."""
import torch
import torch.nn as nn


class Offset(nn.Module):
    """Adds 1000 in a Linear's bias and takes it off again: bf16 keeps 8 bits, so the small part is lost."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(32, 32)
        with torch.no_grad():
            self.lin.bias.add_(1000.0)

    def forward(self, x):
        return self.lin(x) - 1000.0


class Fragile(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(20, 32), nn.GELU())
        self.offset = Offset()
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        return self.head(self.offset(self.enc(x)))
