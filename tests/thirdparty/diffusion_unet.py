"""A diffusion-style UNet in plain torch.nn: residual conv blocks (GroupNorm, SiLU, 3x3 convs) with the timestep's
embedding added in each, one block a level on the way down and up with skip connections, and self-attention at
the lowest resolution. It takes (x, t): noisy images and integer timesteps; training is the denoising loss, the
mean square error against the noise (the targets). The same factory serves inference and training.

One code path, two sizes (the factory's name picks it):
    factory        CPU size: base width 8, levels (1, 2), 2 x 3 x 16 x 16
    gpu_factory    GPU size: base width 128, levels (1, 2, 2): 64 -> 32 -> 16, attention over 16 x 16 at width
                   256 (13M params), batch 32 x 3 x 64 x 64

    tcperf advise tests/thirdparty/diffusion_unet.py:factory --mode train --device cpu
    tcperf advise tests/thirdparty/diffusion_unet.py:gpu_factory
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

SIZES = {"cpu": (8, (1, 2), 2, 16), "gpu": (128, (1, 2, 2), 32, 64)}   # size -> (width, levels, batch, side)
STEPS = 1000            # timesteps t are drawn from [0, STEPS)
HEAD_DIM = 64


def norm(ch: int) -> nn.GroupNorm:
    return nn.GroupNorm(min(32, ch // 4), ch)


def timestep_embedding(t, dim: int):
    """Sinusoidal embedding of integer timesteps: (B,) -> (B, dim)."""
    half = dim // 2
    freqs = torch.exp(-math.log(10_000) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
    angles = t.float()[:, None] * freqs[None]                                     # (B, half)
    return torch.cat([angles.cos(), angles.sin()], dim=1)


class ResBlock(nn.Module):
    def __init__(self, cin: int, cout: int, temb: int):
        super().__init__()
        self.norm1, self.conv1 = norm(cin), nn.Conv2d(cin, cout, 3, padding=1)
        self.temb = nn.Linear(temb, cout)
        self.norm2, self.conv2 = norm(cout), nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, emb):                       # (B, cin, H, W), (B, temb) -> (B, cout, H, W)
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.temb(F.silu(emb))[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        return self.skip(x) + h


class Attention(nn.Module):
    def __init__(self, ch: int):
        super().__init__()
        self.heads = max(1, ch // HEAD_DIM)
        self.norm, self.qkv, self.proj = norm(ch), nn.Linear(ch, 3 * ch), nn.Linear(ch, ch)

    def forward(self, x):                            # (B, C, H, W) -> (B, C, H, W)
        b, c, h, w = x.shape
        seq = self.norm(x).flatten(2).transpose(1, 2)                            # (B, HW, C)
        q, k, v = self.qkv(seq).view(b, h * w, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v)                            # (B, heads, HW, C / heads)
        out = self.proj(out.transpose(1, 2).reshape(b, h * w, c))
        return x + out.transpose(1, 2).reshape(b, c, h, w)


class UNet(nn.Module):
    def __init__(self, width: int, levels: tuple, channels: int = 3):
        super().__init__()
        temb = 4 * width
        self.width = width
        self.embed = nn.Sequential(nn.Linear(width, temb), nn.SiLU(), nn.Linear(temb, temb))
        self.stem = nn.Conv2d(channels, width, 3, padding=1)
        chans = [width * m for m in levels]
        self.down = nn.ModuleList(ResBlock(cin, cout, temb) for cin, cout in zip([width, *chans[:-1]], chans))
        self.pool = nn.ModuleList(nn.Conv2d(c, c, 3, stride=2, padding=1) for c in chans[:-1])
        self.mid1, self.attn, self.mid2 = ResBlock(chans[-1], chans[-1], temb), Attention(chans[-1]), \
            ResBlock(chans[-1], chans[-1], temb)
        ups = list(zip([chans[-1], *chans[::-1][:-1]], chans[::-1]))                 # (in, skip = out)
        self.up = nn.ModuleList(ResBlock(cin + cout, cout, temb) for cin, cout in ups)
        self.unpool = nn.ModuleList(nn.Conv2d(c, c, 3, padding=1) for c in chans[::-1][:-1])
        self.out_norm, self.out = norm(width), nn.Conv2d(width, channels, 3, padding=1)

    def forward(self, x, t):                         # (B, 3, H, W), (B,) long -> (B, 3, H, W) predicted noise
        emb = self.embed(timestep_embedding(t, self.width))                        # (B, temb)
        h, skips = self.stem(x), []
        for i, block in enumerate(self.down):
            h = block(h, emb)
            skips.append(h)
            if i < len(self.pool):
                h = self.pool[i](h)                  # half the resolution
        h = self.mid2(self.attn(self.mid1(h, emb)), emb)
        for i, block in enumerate(self.up):
            h = block(torch.cat([h, skips.pop()], dim=1), emb)
            if i < len(self.unpool):
                h = self.unpool[i](F.interpolate(h, scale_factor=2.0, mode="nearest"))   # double it
        return self.out(F.silu(self.out_norm(h)))


def noise_loss(pred, noise):
    return F.mse_loss(pred.float(), noise)


def _make(size: str) -> dict:
    width, levels, batch, side = SIZES[size]
    torch.manual_seed(0)
    model = UNet(width, levels)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(batch, 3, side, side, generator=g)                           # (B, 3, H, W) noisy images
    t = torch.randint(0, STEPS, (batch,), generator=g)                           # (B,) timesteps
    noise = torch.randn(batch, 3, side, side, generator=g)                       # (B, 3, H, W) the targets
    return {"model": model, "inputs": (x, t), "targets": noise, "loss_fn": noise_loss}


def factory():
    return _make("cpu")


def gpu_factory():
    return _make("gpu")
