"""Plain hand-written training loops for tcperf's built-in models: no tcperf code between the model and the clock.
The yardstick of benchmarks/overhead.py (tcperf's overhead) and benchmarks/models_gpu.py (the ladder's best rung).

    how = {"autocast": torch.bfloat16, "channels_last": True, "compile": True, "fused": True, "graph": True}
    items_per_s = plain_loop("resnet50", "full", 256, how, steps=30, device=torch.device("cuda"))
    windows = plain_loop(..., windows=3)      # [items/s, items/s, items/s]: one build and compile, 3 windows

how: autocast (a dtype or None), channels_last, compile (torch.compile of the model), fused (AdamW with fused=True;
else as users write it, foreach), graph (the whole step, optimizer included, captured in one CUDA graph after
warm-up on a side stream, as torch.cuda.graphs documents; capturable AdamW). Timed as CUDA-event windows, each
around `steps` back-to-back steps, after warm-up.
"""
from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tcperf import models  # noqa: E402

WARMUP = 5


def plain_loop(name: str, config: str, batch: int, how: dict, steps: int, device, windows: int | None = None):
    """Items/s of the hand-written loop; with `windows`, a list of that many windows' items/s."""
    mod = models.get(name)
    cfg = mod.CONFIGS[config]
    torch.manual_seed(0)
    model = mod.build(cfg).to(device)
    inputs, targets = mod.make_batch(cfg, batch, device, torch.Generator(device=device).manual_seed(1))
    if how.get("channels_last"):
        model = model.to(memory_format=torch.channels_last)
        inputs = tuple(x.contiguous(memory_format=torch.channels_last) if x.dim() == 4 else x for x in inputs)
    extra = {"fused": True} if how.get("fused") else {}
    opt = torch.optim.AdamW(model.parameters(), **mod.OPTIMIZER, **extra,
                            **({"capturable": True} if how.get("graph") else {}))
    runner = torch.compile(model) if how.get("compile") else model
    torch.backends.cudnn.benchmark = True

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=how["autocast"], enabled=how.get("autocast") is not None):
            loss = mod.loss_fn(runner(*inputs), targets)
        loss.backward()
        opt.step()
        return loss

    if how.get("graph"):
        step = _captured(step, device)
    for _ in range(max(WARMUP, steps // 3)):
        step()
    rates = [mod.items_per_batch(cfg, batch) / _window(step, steps) for _ in range(windows or 1)]
    return rates if windows else rates[0]


def _window(step, steps: int) -> float:
    """Seconds a step over one CUDA-event window of `steps` back-to-back steps."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(steps):
        step()
    end.record()
    torch.cuda.synchronize()         # sync point: read the events once all steps are done
    return start.elapsed_time(end) / 1e3 / steps


def _captured(step, device):
    """torch.cuda.graphs' whole-network recipe: warm up on a side stream, capture one step, replay it."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph.replay
