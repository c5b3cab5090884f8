"""A convolutional sequence model on utterances of varying length: a QuartzNet-style stack of 1-D time-channel
separable convolutions (depthwise over time, then pointwise over channels, batch norm, ReLU, a residual a block),
stride 1 throughout, giving a logit over 29 characters at every 10 ms frame (random weights). In eval mode, on
batches of 32 utterances of 80 log-mel features whose length is drawn from 256..2048 frames at every step.

The time axis is the LAST input dimension, (32, 80, T), and the output keeps it: (32, 29, T). A padded batch's
output can be cut back to the real frames, but the frames near the end read the padding through the wide kernels
(a receptive field of about 1,400 frames, 700 either side): whether that stays within tolerance is the accuracy
check's question.

    tcperf advise benchmarks/streams/conv_seq.py:factory --steps 10000      # GPU: batch 32, 256..2048 frames
    tcperf advise benchmarks/streams/conv_seq.py:tiny --device cpu          # the same code at CPU size
"""
import functools

import torch
from torch import nn

SIZES = {  # size -> (model arguments, batch, (shortest, longest) frames)
    "full": (dict(features=80, blocks=((256, 33), (256, 39), (512, 51), (512, 63), (512, 75)), repeat=5,
                  head=1024, units=29), 32, (256, 2048)),
    "tiny": (dict(features=8, blocks=((16, 5), (24, 7)), repeat=2, head=32, units=6), 2, (16, 96)),
}


def separable(cin: int, cout: int, kernel: int, relu: bool = True) -> list[nn.Module]:
    """Depthwise over time, pointwise over channels, batch norm (and ReLU): one time-channel separable conv."""
    return [nn.Conv1d(cin, cin, kernel, padding=kernel // 2, groups=cin, bias=False),
            nn.Conv1d(cin, cout, 1, bias=False), nn.BatchNorm1d(cout), *([nn.ReLU()] if relu else [])]


class Block(nn.Module):
    def __init__(self, cin: int, cout: int, kernel: int, repeat: int):
        super().__init__()
        layers = []
        for i in range(repeat):
            layers += separable(cin if i == 0 else cout, cout, kernel, relu=i < repeat - 1)
        self.body = nn.Sequential(*layers)
        self.skip = nn.Sequential(nn.Conv1d(cin, cout, 1, bias=False), nn.BatchNorm1d(cout))

    def forward(self, x):                                         # (B, C, T)
        return torch.relu(self.body(x) + self.skip(x))


class ConvSequenceModel(nn.Module):
    def __init__(self, features: int, blocks: tuple, repeat: int, head: int, units: int):
        super().__init__()
        width = blocks[0][0]
        layers = [nn.Sequential(*separable(features, width, blocks[0][1]))]
        for channels, kernel in blocks:
            layers.append(Block(width, channels, kernel, repeat))
            width = channels
        last = blocks[-1][1] + 12
        layers += [nn.Sequential(*separable(width, width, last)), nn.Conv1d(width, head, 1), nn.ReLU(),
                   nn.Conv1d(head, units, 1)]
        self.net = nn.Sequential(*layers)

    def forward(self, features):                                  # (B, F, T)
        return self.net(features)                                 # (B, units, T)


def batch_at(step: int, batch: int, frames: tuple[int, int], features: int) -> torch.Tensor:
    """Step `step`'s features: a length T in frames (both ends included), channels first."""
    g = torch.Generator().manual_seed(step)
    length = int(torch.randint(frames[0], frames[1] + 1, (), generator=g))
    return torch.randn(batch, features, length, generator=g)                         # (B, F, T)


def _make(size: str) -> dict:
    config, batch, frames = SIZES[size]
    torch.manual_seed(0)
    model = ConvSequenceModel(**config).eval()
    workload = functools.partial(batch_at, batch=batch, frames=frames, features=config["features"])  # pickles
    return {"model": model, "inputs": workload(0), "workload": workload}


def factory():
    """QuartzNet-style 5 blocks x 5 separable convs, 256..512 wide, batch 32, 256..2048 frames."""
    return _make("full")


def tiny():
    """The same code at CPU size: 2 blocks x 2, 16..24 wide, batch 2, 16..96 frames."""
    return _make("tiny")
