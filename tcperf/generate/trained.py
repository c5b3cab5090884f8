"""The small causal LM tcperf trains itself, so that `tcperf generate stdlib` judges each precision's model accuracy
on weights that mean something (a random network has no margin between its top logits: there int4 "agrees" on 1%
of tokens whether its kernel is right or not).

It is tcperf.generate.model's decoder, the one every built-in runs, reading bytes (vocabulary 256), trained on the
running Python's standard-library source with tcperf.totarget.bytes_gpt's data (the same files in the same order,
random windows, AdamW; the last 10% held out), and saved beside the results store: a machine trains it once a size
(a different Python is different data, and the file's name carries the data's checksum).

    path = ensure(folder, device)              # trains, unless the file is there
    model = load(path, device, torch.bfloat16)
    tokens = held_out(size_of(device), rows=16)    # (rows, seq) held-out bytes
    perplexity(logits, tokens)                 # exp(mean next-byte cross-entropy)

Sizes: "cpu": 2 layers, d=128, 0.36 M parameters, 120 steps of 8 x 64 bytes: 70 s on 2 busy CPU cores (torch 2.13,
2026-11-25); held-out perplexity 8.2 a byte, int8wo +0.0%, int4wo-128 +0.2%, int4wo-32 +0.3%. "gpu": 6 layers,
d=512, about 19 M parameters, 1,500 steps of 32 x 256 bytes in bf16 autocast: 36 s on an H100 (2026-11-26). Both
untie the output layer: a tied one lost 0.7% to int8 alone.
"""
from __future__ import annotations

import functools
import hashlib
import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ..models.transformer import token_loss
from ..totarget import bytes_gpt
from . import model as plain

NAME = "stdlib"


@dataclass(frozen=True)
class Size:
    args: plain.ModelArgs
    seq: int                  # training and held-out window, bytes
    batch: int
    steps: int
    lr: float
    max_bytes: int            # of the standard library's source read
    eval_windows: int         # held-out windows perplexity is measured on


SIZES = {
    "cpu": Size(plain.ModelArgs(NAME, 128, 2, 4, 2, 256, 256, tied=False, rope_base=10000.0), seq=64, batch=8, steps=120,
                lr=3e-3, max_bytes=1_000_000, eval_windows=32),
    "gpu": Size(plain.ModelArgs(NAME, 512, 6, 8, 4, 1536, 256, tied=False, rope_base=10000.0), seq=256, batch=32,
                steps=1500, lr=1e-3, max_bytes=12_000_000, eval_windows=64),
}


def size_of(device) -> str:
    return "gpu" if torch.device(device).type == "cuda" else "cpu"


@functools.lru_cache(maxsize=2)
def text(size: str) -> tuple[torch.Tensor, torch.Tensor, str]:
    """(training bytes, held-out bytes, the data's SHA-256), uint8 on the CPU; read once a process."""
    _, blob = bytes_gpt.corpus(SIZES[size].max_bytes)
    data = torch.frombuffer(bytearray(blob), dtype=torch.uint8)
    cut = int(len(data) * (1 - bytes_gpt.VALIDATION))
    return data[:cut], data[cut:], hashlib.sha256(blob).hexdigest()


def path_for(folder: str | Path, size: str) -> Path:
    return Path(folder) / f"generate-{NAME}-{size}-{text(size)[2][:12]}.pt"


def ensure(folder: str | Path, device) -> Path:
    """The trained weights for this device's size, training them first when the file is missing."""
    size = size_of(device)
    path = path_for(folder, size)
    if not path.exists():
        model, info = train(size, torch.device(device))
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"size": size, "state": model.state_dict(), "info": info}, path)
    return path


def train(size: str, device: torch.device, seed: int = 0) -> tuple[plain.Transformer, dict]:
    """Train the size's model from a seeded start; returns it (float32, eval mode) and what to record."""
    s = SIZES[size]
    train_bytes, val, sha = text(size)
    torch.manual_seed(seed)
    with torch.device(device):
        model = plain.Transformer(s.args)
    model.setup_training(s.seq)
    draw = bytes_gpt.windows(train_bytes.to(device), s.seq, s.batch)
    opt = bytes_gpt.adamw(s.lr, device)(model.parameters())
    gen, start = torch.Generator(device).manual_seed(seed), time.perf_counter()
    for step in range(s.steps):
        for group in opt.param_groups:
            group["lr"] = s.lr * min(1.0, (step + 1) / 20)               # 20 warm-up steps
        x, y = draw(gen)
        with torch.autocast(device.type, torch.bfloat16, enabled=device.type == "cuda"):
            loss = token_loss(model(x, torch.arange(s.seq, device=device)), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    model.eval().requires_grad_(False)
    info = {"size": size, "steps": s.steps, "train_s": time.perf_counter() - start, "sha256": sha,
            "parameters": sum(p.numel() for p in model.parameters()), "final_loss": float(loss.detach())}
    return model, info


def info(path: str | Path) -> dict:
    """What training recorded: size, steps, train_s, sha256, parameters, final_loss."""
    return torch.load(path, map_location="cpu")["info"]


def describe(size: str) -> str:
    s, a = SIZES[size], SIZES[size].args
    return f"{a.n_layer} layers, d={a.dim}, {s.steps} steps of {s.batch} x {s.seq} bytes"


def load(path: str | Path, device, dtype: torch.dtype) -> plain.Transformer:
    saved = torch.load(path, map_location=device)
    with torch.device(device):
        model = plain.Transformer(SIZES[saved["size"]].args)
    model.load_state_dict(saved["state"])
    return model.to(dtype).eval().requires_grad_(False)


def held_out(size: str, rows: int | None = None) -> torch.Tensor:
    """`rows` (default the size's eval_windows) evenly spaced windows of held-out bytes: (rows, seq) int64."""
    s = SIZES[size]
    val = text(size)[1]
    rows = rows or s.eval_windows
    starts = torch.linspace(0, len(val) - s.seq - 1, rows).long()[:, None]
    return val[starts + torch.arange(s.seq)].long()


def perplexity(logits: torch.Tensor, tokens: torch.Tensor) -> float:
    """exp of the mean next-token cross-entropy: logits (B, T, V) of tokens (B, T), each predicting the next."""
    return math.exp(float(token_loss(logits[:, :-1].float().contiguous(), tokens[:, 1:].contiguous())))
