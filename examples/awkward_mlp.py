"""A small language model with the dimensions people pick, not the ones Tensor Cores like: a 1000-wide MLP block
and GPT-2's 50257-word vocabulary (nanoGPT pads it to 50304 for exactly this reason).

`tcperf advise` flags both: 50257 misses the 16-byte alignment of every Tensor Core precision (8 elements for
bf16/fp16, 4 for tf32, 16 for fp8/int8), and 1000 misses fp8's and int8's hard rule (K and N multiples of 16),
so the fp8/int8 recipes leave those layers in bf16. On a GPU it also times each flagged GEMM at its shape and
padded, and says what padding is worth as a share of the model's step.

    tcperf advise examples/awkward_mlp.py:factory                 # batch 8 x 128 tokens (GPU)
    tcperf advise examples/awkward_mlp.py:factory --mode train
    tcperf advise examples/awkward_mlp.py:small                   # the same awkward shapes at CPU size
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 50257        # GPT-2's vocabulary, unpadded
HIDDEN = 1000        # a round number in decimal, not in binary


class MLPBlock(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)

    def forward(self, x):                                   # (B, T, dim)
        return x + self.down(F.gelu(self.up(self.norm(x))))


class AwkwardLM(nn.Module):
    def __init__(self, vocab: int = VOCAB, dim: int = 768, hidden: int = HIDDEN, blocks: int = 2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(MLPBlock(dim, hidden) for _ in range(blocks))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)       # (B*T) x 50257 x dim: the largest GEMM

    def forward(self, tokens):                              # (B, T) int64 -> (B, T, vocab) logits
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def next_token_loss(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))


def _make(dim: int, batch: int, seq: int, seed: int = 0) -> dict:
    torch.manual_seed(seed)
    model = AwkwardLM(dim=dim)
    tokens = torch.randint(0, VOCAB, (batch, seq + 1))
    return {"model": model, "inputs": (tokens[:, :-1],), "targets": tokens[:, 1:], "loss_fn": next_token_loss}


def factory() -> dict:
    """GPU size: 8 x 128 tokens, width 768."""
    return _make(dim=768, batch=8, seq=128)


def small() -> dict:
    """CPU size: 2 x 8 tokens, width 64; the same awkward 1000 and 50257."""
    return _make(dim=64, batch=2, seq=8)
