"""What the one-layer GPU probes share (maxpool_probe.py, bn_relu_probe.py): the command line (--batch and --out; a
batch below 1 or no GPU refused in one line, exit 2; the report written as JSON under --out), and the batch norm
they fuse, with scales of both signs."""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch


def parse(doc: str, batch: int = 256) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--batch", type=int, default=batch)
    p.add_argument("--out", default="out")
    return p.parse_args()


def start(doc: str, script: str) -> argparse.Namespace | None:
    """The arguments, or None after one line on stderr saying why `script` cannot run with them here."""
    args = parse(doc)
    why = refusal(script, args)
    if why:
        print(why, file=sys.stderr)
        return None
    return args


def refusal(script: str, args: argparse.Namespace) -> str | None:
    """Why `script` cannot run with these arguments here, in one line; None when it can."""
    if args.batch < 1:
        return f"{script}: --batch takes a positive whole number"
    if not torch.cuda.is_available():
        return f"{script} needs a CUDA GPU"
    return None


def write(args: argparse.Namespace, name: str, report: dict) -> str:
    """The report as --out/NAME; the path."""
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, name)
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
    return path


def signed_batch_norm(channels: int, seed: int = 0) -> torch.nn.BatchNorm2d:
    """An nn.BatchNorm2d whose weight and bias are random normal: scales of both signs (a negative one turns a
    following max-pool's maximum into the minimum), the same for a seed."""
    torch.manual_seed(seed)
    bn = torch.nn.BatchNorm2d(channels)
    with torch.no_grad():
        bn.weight.copy_(torch.randn(channels))
        bn.bias.copy_(torch.randn(channels))
    return bn
