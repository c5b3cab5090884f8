"""DCGAN (Radford et al. 2015, as PyTorch's dcgan example) for 64x64 images: generator and discriminator trained
together in one step.

One training step is the usual pair of updates, written as one loss so that it runs through the same recipe
machinery as every other model (one backward, one AdamW with DCGAN's lr 2e-4, betas 0.5/0.999 for both nets):
  D's loss  = BCE(D(real), 1) + BCE(D(fake.detach()), 0)     -> gradients reach D only
  G's loss  = BCE(D'(fake), 1), D' = D with detached weights  -> gradients reach G only
so each net gets exactly its own gradient (the tests check it); both update at once, where the example updates D
first. D runs three times per step, as in the example. Inference generates images: G(z) -> (B, 3, 64, 64).
nz = 100 as in the paper, so G's first layer has a channel count that is not a multiple of 8.

    tcperf models dcgan --mode train --batch 128
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

KIND = "cnn"
UNIT = "img/s"
OPTIMIZER = {"lr": 2e-4, "betas": (0.5, 0.999)}
CONFIGS = {
    "full": {"nz": 100, "ngf": 64, "ndf": 64, "batch": 128},
    "small": {"nz": 8, "ngf": 4, "ndf": 4, "batch": 2},
}


def _up(cin: int, cout: int, first: bool = False) -> list[nn.Module]:
    return [nn.ConvTranspose2d(cin, cout, 4, 1 if first else 2, 0 if first else 1, bias=False),
            nn.BatchNorm2d(cout), nn.ReLU(True)]


def _down(cin: int, cout: int, bn: bool = True) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, 4, 2, 1, bias=False), *([nn.BatchNorm2d(cout)] if bn else []),
            nn.LeakyReLU(0.2, inplace=True)]


def generator(nz: int, ngf: int) -> nn.Module:
    """z (B, nz, 1, 1) -> 4x4 -> 8x8 -> 16x16 -> 32x32 -> image (B, 3, 64, 64) in [-1, 1]."""
    return nn.Sequential(*_up(nz, ngf * 8, first=True), *_up(ngf * 8, ngf * 4), *_up(ngf * 4, ngf * 2),
                         *_up(ngf * 2, ngf), nn.ConvTranspose2d(ngf, 3, 4, 2, 1, bias=False), nn.Tanh())


def discriminator(ndf: int) -> nn.Module:
    """image (B, 3, 64, 64) -> 32 -> 16 -> 8 -> 4 -> one logit per image (B,)."""
    return nn.Sequential(*_down(3, ndf, bn=False), *_down(ndf, ndf * 2), *_down(ndf * 2, ndf * 4),
                         *_down(ndf * 4, ndf * 8), nn.Conv2d(ndf * 8, 1, 4, 1, 0, bias=False), nn.Flatten(0))


class DCGAN(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        self.generator, self.discriminator = generator(cfg["nz"], cfg["ngf"]), discriminator(cfg["ndf"])
        for m in self.modules():                 # the paper's initialisation
            if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.normal_(m.weight, 1.0, 0.02)
                nn.init.zeros_(m.bias)

    def forward(self, z: torch.Tensor, real: torch.Tensor):
        fake = self.generator(z)                                  # (B, 3, 64, 64)
        if not self.training:
            return fake                                           # inference: generate images
        d = self.discriminator
        frozen = {name: p.detach() for name, p in d.named_parameters()}
        d_gen = torch.func.functional_call(d, frozen, (fake,))    # G's loss path: no gradient into D's weights
        return d(real), d(fake.detach()), d_gen                   # logits (B,) each


build = DCGAN  # build(cfg) -> the two nets, initialised as the paper does


def make_batch(cfg: dict, batch: int, device, gen: torch.Generator):
    z = torch.randn(batch, cfg["nz"], 1, 1, generator=gen, device=device)                 # (B, nz, 1, 1)
    real = torch.rand(batch, 3, 64, 64, generator=gen, device=device) * 2 - 1               # (B, 3, 64, 64)
    return (z, real), None


def loss_fn(outputs, targets=None) -> torch.Tensor:
    """D's loss on real and fake plus G's non-saturating loss; logits through BCE-with-logits (autocast-safe)."""
    d_real, d_fake, d_gen = outputs
    bce = F.binary_cross_entropy_with_logits
    d_loss = bce(d_real, torch.ones_like(d_real)) + bce(d_fake, torch.zeros_like(d_fake))
    return d_loss + bce(d_gen, torch.ones_like(d_gen))


def items_per_batch(cfg: dict, batch: int) -> int:
    return batch
