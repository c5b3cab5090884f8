"""A Linear-heavy model whose time goes into an unpadded vocabulary head: a small residual MLP on 4096 features,
then nn.Linear(4096, 50257), GPT-2's vocabulary at a large model's width, for a batch of 24 rows.

The head holds 206M of the model's 214M parameters and 96% of its FLOPs (24 x 50257 x 4096), so the recipe that
runs that one GEMM fastest is the one to pick. 50257 is odd: it misses the 16-byte alignment of every Tensor Core
precision and fp8's and int8's shape rule (N a multiple of 16 / 8), so the fp8 and int8 recipes leave the head in
bf16 and gain little. benchmarks/advise_gpu.py holds the advisor's pick for it against a hand-written loop.

    tcperf advise examples/linear_head.py:factory                 # 24 x 4096 inputs (GPU)
    tcperf advise examples/linear_head.py:factory --mode train    # cross-entropy over 50257 classes
    tcperf advise examples/linear_head.py:small                   # the same head at CPU size
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 50257        # GPT-2's vocabulary, unpadded
DIM = 4096
HIDDEN = 1024
BATCH = 24


class LinearHead(nn.Module):
    def __init__(self, dim: int = DIM, hidden: int = HIDDEN, vocab: int = VOCAB):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)
        self.head_norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)                   # 24 x 50257 x 4096: nearly all of the FLOPs

    def forward(self, x):                                   # (B, dim) float -> (B, vocab) logits
        x = x + self.down(F.gelu(self.up(self.norm(x))))
        return self.head(self.head_norm(x))


def class_loss(logits, targets):
    return F.cross_entropy(logits.float(), targets)


def _make(dim: int, hidden: int, batch: int, seed: int = 0) -> dict:
    torch.manual_seed(seed)
    model = LinearHead(dim, hidden)
    x = torch.randn(batch, dim)                                       # (B, dim)
    targets = torch.randint(0, VOCAB, (batch,))                       # (B,) class indices
    return {"model": model, "inputs": (x,), "targets": targets, "loss_fn": class_loss}


def factory() -> dict:
    """GPU size: 24 rows of 4096 features, the 4096 x 50257 head."""
    return _make(DIM, HIDDEN, BATCH)


def small() -> dict:
    """CPU size: 2 rows of 64 features; the same unpadded 50257-wide head."""
    return _make(64, 32, 2)
