"""The default workload, offline everywhere: a byte-level GPT (tcperf.models.gpt2's decoder, vocabulary 256)
trained on the running Python's own standard-library source until the validation loss reaches a target in bits
per byte. The files (sorted, tests and site-packages left out, up to max_bytes) and their SHA-256 are recorded:
a different Python is different data, and the checksum says so.

The last VALIDATION share of the bytes (whole files at the end of the sorted list) is held out; the metric is the
mean next-byte cross-entropy over a fixed set of validation windows, in bits (nats / ln 2).

    tcperf train-to-target                               # this, with the configuration the device calls for
    tcperf train-to-target bytes-gpt --target bpb=2.2 --recipe fp32,amp_bf16,compile --runs 3

Sizes (SIZES): "gpu" (the default on a GPU), "gpu-narrow" (the earlier default, d=384) and "small" (for CPUs:
reaches bpb 3.4 in about 250 steps, 5-20 s on 2 cores). Why "gpu" is d=768: at d=384 the bf16 step is mostly
memory-bound work (layer norms, GELU, attention at T=256), so no recipe can be more than 2.5x fp32 strict a step, and
a one-time compile of 25 s eats what is left; at d=768 the layers' matmuls are GPT-2 small's. Six layers, not
twelve: compile time grows with the layers, the per-step ratio with the width. On an H100 (2026-11-25, 07e9441) it
reached bpb 1.4 in 31.4 s with amp_bf16 + compile against 149.4 s in fp32 strict (4.76x; docs/train-to-target.md).
"""
from __future__ import annotations

import hashlib
import math
import sysconfig
from pathlib import Path

import torch

from ..models.gpt2 import GPT
from ..models.transformer import token_loss
from . import Task

VALIDATION = 0.1
SKIP = {"test", "tests", "site-packages", "idlelib", "__pycache__"}
SIZES = {
    "gpu": {"layers": 6, "dim": 768, "heads": 12, "seq": 256, "batch": 64, "lr": 1e-3, "warmup": 100,
            "eval_every": 100, "eval_windows": 1024, "max_bytes": 12_000_000, "target": 1.4},
    "gpu-narrow": {"layers": 6, "dim": 384, "heads": 6, "seq": 256, "batch": 64, "lr": 1e-3, "warmup": 100,
                   "eval_every": 100, "eval_windows": 1024, "max_bytes": 12_000_000, "target": 1.4},
    "small": {"layers": 2, "dim": 64, "heads": 4, "seq": 64, "batch": 16, "lr": 3e-3, "warmup": 20,
              "eval_every": 25, "eval_windows": 128, "max_bytes": 1_000_000, "target": 3.4},
}


def build(options: dict, device) -> Task:
    size = options.get("size") or ("gpu" if device.type == "cuda" else "small")
    cfg = {**SIZES[size], **{k: options[k] for k in ("batch",) if options.get(k)}}
    files, text = corpus(cfg["max_bytes"])
    data = torch.frombuffer(bytearray(text), dtype=torch.uint8).to(device)
    cut = int(len(data) * (1 - VALIDATION))
    train, val = data[:cut], data[cut:]
    model_cfg = {**{k: cfg[k] for k in ("layers", "dim", "heads", "seq")}, "vocab": 256}
    return Task(workload="bytes-gpt", metric="bpb", higher_is_better=False, target=cfg["target"], bounds=(0.0, 8.0),
                make_model=lambda: GPT(model_cfg), batch=windows(train, cfg["seq"], cfg["batch"]),
                evaluate=bits_per_byte(val, cfg["seq"], cfg["eval_windows"]), loss_fn=token_loss,
                optimizer=adamw(cfg["lr"], device), steps_per_epoch=len(train) / (cfg["batch"] * cfg["seq"]),
                items_per_step=cfg["batch"] * cfg["seq"], unit="tokens/s", eval_every=cfg["eval_every"],
                lr_at=lambda step: min(1.0, (step + 1) / cfg["warmup"]),
                info={"size": size, "config": cfg, "python": sysconfig.get_python_version(),
                      "files": files, "bytes": len(text), "sha256": hashlib.sha256(text).hexdigest()})


def corpus(max_bytes: int) -> tuple[list[str], bytes]:
    """The standard library's .py files in sorted order, whole files, up to max_bytes: (relative paths, bytes)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files, parts, total = [], [], 0
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if SKIP & set(rel.parts) or total >= max_bytes:
            continue
        blob = path.read_bytes()
        files.append(str(rel))
        parts.append(blob)
        total += len(blob)
    return files, b"".join(parts)


def windows(train: torch.Tensor, seq: int, batch: int):
    """A batch of random windows: (inputs (B, T), next-byte targets (B, T)), int64 on train's device."""
    offsets = torch.arange(seq + 1, device=train.device)

    def draw(gen: torch.Generator):
        starts = torch.randint(0, len(train) - seq - 1, (batch, 1), device=train.device, generator=gen)
        chunk = train[starts + offsets].long()                    # (B, T+1)
        return chunk[:, :-1].contiguous(), chunk[:, 1:].contiguous()
    return draw


def bits_per_byte(val: torch.Tensor, seq: int, count: int, batch: int = 64):
    """model -> mean next-byte cross-entropy in bits over `count` fixed, evenly spaced validation windows."""
    starts = torch.linspace(0, len(val) - seq - 2, count, device=val.device).long()[:, None]
    chunks = val[starts + torch.arange(seq + 1, device=val.device)].long()    # (count, T+1)
    inputs, targets = chunks[:, :-1].contiguous(), chunks[:, 1:].contiguous()

    def evaluate(model) -> float:
        total = sum(token_loss(model(x), y).float() * len(x) for x, y in zip(inputs.split(batch), targets.split(batch)))
        return float(total) / count / math.log(2)                  # sync point: once per evaluation
    return evaluate


def adamw(lr: float, device):
    """params -> AdamW as this workload trains (tcperf.generate.trained trains with it too)."""
    fused = device.type == "cuda"
    return lambda params: torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.99), weight_decay=0.1, fused=fused)
