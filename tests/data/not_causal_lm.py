"""A model that maps token ids to logits (B, T, vocab) but lets every position see the whole sequence: not causal,
so `tcperf generate` refuses it (exit 2)."""
import torch


class Bidirectional(torch.nn.Module):
    def __init__(self, vocab: int = 32, dim: int = 16):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, ids):
        x = self.embed(ids)
        return self.head(x + x.mean(dim=1, keepdim=True))       # every position sees the future


def factory():
    return Bidirectional()
