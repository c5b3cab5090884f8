"""Plain hand-written loops and the clock they are read with: no tcperf code between the model and the clock.
The yardstick of benchmarks/overhead.py (tcperf's overhead), benchmarks/models_gpu.py (the ladder's best rung) and
benchmarks/advise_gpu.py (the advisor's pick); `window` is also comm_gpu.py's, ddp_gpu.py's and step_timing.py's
clock.

    how = {"autocast": torch.bfloat16, "channels_last": True, "compile": True, "fused": True, "graph": True}
    items_per_s = plain_loop("resnet50", "full", 256, how, steps=30, device=torch.device("cuda"))
    windows = plain_loop(..., windows=WINDOWS)   # [items/s, items/s, items/s]: one build and compile, 3 windows
    ms, calls = window(step, device, seconds=1.0)  # one CUDA-event window of back-to-back calls
    rates = interleaved({"hand": step, "rung": other}, {"hand": 256, "rung": 256}, device)  # A B, B A, ... rounds

how: autocast (a dtype or None), channels_last, compile (torch.compile of the model), fused (AdamW with fused=True;
else as users write it, foreach), graph (the whole step, optimizer included, captured in one CUDA graph after
warm-up on a side stream, as torch.cuda.graphs documents; capturable AdamW). Timed as CUDA-event windows, each
around `steps` back-to-back steps, after warm-up.
"""
from __future__ import annotations

import time

import torch

from tcperf import models

WARMUP = 5
WINDOWS = 3          # windows a hand loop is timed in: one build and compile, the spread of 3 readings
AB_ROUNDS, AB_SECONDS = 8, 0.5      # interleaved(): rounds, and each step's window a round


def window(step, device, calls: int | None = None, seconds: float | None = None) -> tuple[float, int]:
    """Back-to-back calls of step() in one window, `calls` of them or as many as `seconds` of host time allow:
    (ms the window took, calls made). On a GPU the window is read between two CUDA events, on a CPU with
    perf_counter."""
    cuda = torch.device(device).type == "cuda"
    if cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
    deadline = None if seconds is None else time.perf_counter() + seconds
    t0, made = time.perf_counter(), 0
    while (made < calls) if deadline is None else (time.perf_counter() < deadline):
        step()
        made += 1
    if not cuda:
        return (time.perf_counter() - t0) * 1e3, made
    end.record()
    torch.cuda.synchronize()         # sync point: read the events once all calls are done
    return start.elapsed_time(end), made


def interleaved(steps: dict, items: dict, device, rounds: int = AB_ROUNDS, seconds: float = AB_SECONDS) -> dict:
    """Items a second of each already warm step, timed in `rounds` rounds of one `seconds` window each, the order
    reversed every other round (A B, B A, A B, ...): whatever drifts over a call (clocks that fall as a GPU under a
    power cap warms) lands on every step alike, where steps timed one after the other each get their own moment.
    steps: {name: step()}; items: {name: items a step} -> {name: [items/s a round]}."""
    names, rates = list(steps), {name: [] for name in steps}
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            ms, calls = window(steps[name], device, seconds=seconds)
            rates[name].append(items[name] * calls / (ms / 1e3))
    return rates


def adamw(params, settings: dict, *, fused: bool = False, capturable: bool = False) -> torch.optim.AdamW:
    """AdamW as a user writes it: `fused` and `capturable` passed only when asked for. An explicit fused=False is not
    PyTorch's default: torch.optim.AdamW picks foreach (one kernel for many parameters) only when neither fused nor
    foreach is given, so fused=False updates one parameter at a time (read in torch.optim.adam; under FSDP2 it made
    the plain loop 1.7x slower than tcperf's step, whose recipe leaves both unset)."""
    return torch.optim.AdamW(params, **settings, **({"fused": True} if fused else {}),
                             **({"capturable": True} if capturable else {}))


def plain_step(name: str, config: str, batch: int, how: dict, device):
    """The hand-written training step of `how` for a model of tcperf.models: (step, model, inputs, items a step).
    The model and inputs are those the step trains (NHWC under channels_last); `graph` captures the step, so the
    step returned is the replay."""
    mod = models.get(name)
    cfg = mod.CONFIGS[config]
    torch.manual_seed(0)
    model = mod.build(cfg).to(device)
    inputs, targets = mod.make_batch(cfg, batch, device, torch.Generator(device=device).manual_seed(1))
    if how.get("channels_last"):
        model = model.to(memory_format=torch.channels_last)
        inputs = tuple(x.contiguous(memory_format=torch.channels_last) if x.dim() == 4 else x for x in inputs)
    opt = adamw(model.parameters(), mod.OPTIMIZER, fused=how.get("fused", False), capturable=how.get("graph", False))
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
    return step, model, inputs, mod.items_per_batch(cfg, batch)


def plain_loop(name: str, config: str, batch: int, how: dict, steps: int, device, windows: int | None = None):
    """Items/s of the hand-written loop; with `windows`, a list of that many windows' items/s."""
    step, _, _, items = plain_step(name, config, batch, how, device)
    for _ in range(max(WARMUP, steps // 3)):
        step()
    rates = [items / _seconds(step, steps, device) for _ in range(windows or 1)]
    return rates if windows else rates[0]


def _seconds(step, steps: int, device) -> float:
    """Seconds a step over one window of `steps` back-to-back steps, started on an idle GPU."""
    torch.cuda.synchronize()
    ms, _ = window(step, device, calls=steps)
    return ms / 1e3 / steps


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
