"""A sequence tagger in plain torch.nn: token embedding, a 2-layer LSTM (cuDNN on a GPU), a Linear head over the
tags; cross-entropy over every token. The class lives here, in a file, so that the advisor's workers import it.
The same factory serves inference (the targets are unused) and training.

One code path, two sizes (the factory's name picks it):
    factory        CPU size: vocab 100, embedding 16, hidden 32, 8 tags, 2 x 12 tokens
    gpu_factory    GPU size: vocab 10,000, embedding 512, hidden 1024, 64 tags (20M params), 64 x 128 tokens

    tcperf advise tests/thirdparty/lstm_tagger.py:factory --mode train --device cpu
    tcperf advise tests/thirdparty/lstm_tagger.py:gpu_factory
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

SIZES = {  # size -> (vocab, embedding, hidden, tags, batch, tokens)
    "cpu": (100, 16, 32, 8, 2, 12),
    "gpu": (10_000, 512, 1024, 64, 64, 128),
}
LAYERS = 2


class LSTMTagger(nn.Module):
    def __init__(self, vocab: int, embedding: int, hidden: int, tags: int, layers: int = LAYERS):
        super().__init__()
        self.embed = nn.Embedding(vocab, embedding)
        self.lstm = nn.LSTM(embedding, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, tags)

    def forward(self, tokens):                       # (B, T) long -> (B, T, tags) logits
        h, _ = self.lstm(self.embed(tokens))         # (B, T, hidden)
        return self.head(h)


def tag_loss(logits, tags):
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tags.reshape(-1))


def _make(size: str) -> dict:
    vocab, embedding, hidden, n_tags, batch, tokens = SIZES[size]
    torch.manual_seed(0)
    model = LSTMTagger(vocab, embedding, hidden, n_tags)
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, vocab, (batch, tokens), generator=g)                    # (B, T)
    tags = torch.randint(0, n_tags, (batch, tokens), generator=g)               # (B, T)
    return {"model": model, "inputs": (x,), "targets": tags, "loss_fn": tag_loss}


def factory():
    return _make("cpu")


def gpu_factory():
    return _make("gpu")
