"""A bidirectional-GRU acoustic model (DeepSpeech-2 style) on utterances of varying length: two strided 1-D
convolutions subsample the 80 log-mel features' frames by 4, four bidirectional GRU layers read the result, and a
linear layer gives each subsampled frame's logits over 256 sub-word units (random weights). In eval mode, on batches
of 16 utterances whose length is drawn from 200..1600 frames (2-16 s at 10 ms a frame) at every step, as a loader
that buckets utterances by length gives them.

The output is SHORTER than the input: (16, ceil(T/4), 256) logits for (16, T, 80) features. A padded batch gives
ceil(T_padded/4) frames, which follow no input dimension: padding is refused for this model (issue 57).

    tcperf advise benchmarks/streams/gru_asr.py:factory --steps 10000      # GPU: batch 16, 200..1600 frames
    tcperf advise benchmarks/streams/gru_asr.py:tiny --device cpu          # the same code at CPU size
"""
import functools

import torch
from torch import nn

SIZES = {  # size -> (model arguments, batch, (shortest, longest) frames)
    "full": (dict(features=80, channels=256, hidden=384, layers=4, units=256), 16, (200, 1600)),
    "tiny": (dict(features=16, channels=16, hidden=16, layers=2, units=12), 2, (20, 80)),
}


class GRUAcousticModel(nn.Module):
    def __init__(self, features: int, channels: int, hidden: int, layers: int, units: int):
        super().__init__()
        self.subsample = nn.Sequential(                           # time / 4, as the GRU's input
            nn.Conv1d(features, channels, 3, stride=2, padding=1), nn.GELU(),
            nn.Conv1d(channels, channels, 3, stride=2, padding=1), nn.GELU())
        self.rnn = nn.GRU(channels, hidden, num_layers=layers, batch_first=True, bidirectional=True)
        self.out = nn.Linear(2 * hidden, units)

    def forward(self, features):                                  # (B, T, F)
        x = self.subsample(features.transpose(1, 2)).transpose(1, 2)   # (B, ceil(T/4), C)
        x, _ = self.rnn(x)                                        # (B, T/4, 2H)
        return self.out(x)                                        # (B, T/4, units)


def batch_at(step: int, batch: int, frames: tuple[int, int], features: int) -> torch.Tensor:
    """Step `step`'s features: a length T in frames (both ends included), standard-normal log-mel values."""
    g = torch.Generator().manual_seed(step)
    length = int(torch.randint(frames[0], frames[1] + 1, (), generator=g))
    return torch.randn(batch, length, features, generator=g)                         # (B, T, F)


def _make(size: str) -> dict:
    config, batch, frames = SIZES[size]
    torch.manual_seed(0)
    model = GRUAcousticModel(**config).eval()
    workload = functools.partial(batch_at, batch=batch, frames=frames, features=config["features"])  # pickles
    return {"model": model, "inputs": workload(0), "workload": workload}


def factory():
    """Conv subsampling x4 + 4 bidirectional GRU layers of 384, batch 16, 200..1600 frames."""
    return _make("full")


def tiny():
    """The same code at CPU size: 16 features and units of 16, 2 layers, batch 2, 20..80 frames."""
    return _make("tiny")
