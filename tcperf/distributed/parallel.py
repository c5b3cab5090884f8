"""The model ladder on many GPUs (`tcperf models --nproc N`): each training cell is measured on one GPU, as the
ladder always does, and then on N ranks under DistributedDataParallel and, for the transformer models, FSDP2
(`torch.distributed.fsdp.fully_shard` on every block of the model's ModuleLists, then on the whole model).

The N-rank cell runs through the same engine as every other cell (tcperf.engine.measure), with `wrap` putting DDP
or fully_shard around the recipe's copy before torch.compile and the optimizer see it. Every rank trains on the
same synthetic batch, so the averaged gradients are the one-GPU gradients and the accuracy check holds the losses
against the same fp32 reference. Each rank times TIMED_STEPS back-to-back steps (the same number everywhere: each
step holds collectives); the slowest rank's mean sets the step time, and

    total throughput   = N x items a step / step time
    scaling efficiency = total throughput / (N x the same recipe's throughput on one GPU)
    exposed comm share = time a communication kernel runs while no other kernel does, over the step time, from
                         torch.profiler over PROFILED_STEPS steps (on a CPU, gloo works on threads of its own
                         and the figure only reflects the profiler's CPU events)

On 2 x H200 (NVLink, torch 2.11), ResNet-50 bf16 + channels_last, batch 256 a GPU, DDP: 4,641 img/s on one GPU,
9,254 on two (issue 14: efficiency 0.997).

    cases = cells(ladder.cells(["gpt2"], "train", ["amp_bf16"], None), nproc=2, parallels=["ddp", "fsdp2"])
    rows = climb(cases, torch.device("cuda"), timeout=600, on_result=store_it)
"""
from __future__ import annotations

import functools

import torch
import torch.distributed as dist

from .. import engine, ladder, models, recipes
from .. import spec as specmod
from ..errors import choices
from . import launch

PARALLELS = ("ddp", "fsdp2")
TASK = "tcperf.distributed.parallel:cell_task"      # on every rank
RUN_TASK = "tcperf.distributed.parallel:run_cell"   # in the ladder's worker: starts the ranks
TIMED_STEPS = 20
PROFILED_STEPS = 3
RANK_SHARE = 0.9        # of the cell's --timeout, for the ranks: the worker that started them answers in time


# --- cases (parent side) --------------------------------------------------------------------------------------------
def parse(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    for n in names or [""]:
        if n not in PARALLELS:
            raise choices("--parallel", n, PARALLELS)
    return names


def applies(parallel: str, model: str) -> bool:
    """FSDP2 is measured on the transformer models (their blocks are the units it shards); DDP on every model."""
    return parallel == "ddp" or models.get(model).KIND == "transformer"


def cells(one_gpu: list[dict], nproc: int, parallels, timeout: float) -> list[dict]:
    """Each one-GPU cell followed by the same cell on `nproc` ranks under each parallel that applies to it."""
    out = []
    for case in one_gpu:
        out.append(case)
        out += [{**case, "task": RUN_TASK, "rank_timeout": timeout * RANK_SHARE,
                 "shape": {**case["shape"], "nproc": nproc, "parallel": p}}
                for p in parallels if applies(p, case["shape"]["model"])]
    return out


def climb(cases: list[dict], device, *, on_result=None, **kw) -> list[dict]:
    """ladder.climb (run_cases's signature), each N-rank row completed with its scaling efficiency."""
    seen: list[dict] = []

    def finish(r: dict) -> None:
        add_scaling(r, seen)
        seen.append(r)
        if on_result:
            on_result(r)
    return ladder.climb(cases, device, on_result=finish, **kw)


def add_scaling(row: dict, earlier: list[dict]) -> None:
    """scaling_efficiency and speedup_1gpu of an N-rank row against the same recipe's one-GPU row."""
    s, m = row.get("shape") or {}, row.get("metrics") or {}
    if not s.get("nproc") or not m.get("throughput"):
        return
    same = {k: s[k] for k in ("model", "mode", "batch")}
    one = [r for r in earlier if r.get("shape") == same and r["precision"] == row["precision"]
           and (r.get("metrics") or {}).get("throughput")]
    if one:
        single = one[-1]["metrics"]["throughput"]
        m.update(one_gpu_throughput=single, speedup_1gpu=m["throughput"] / single,
                 scaling_efficiency=m["throughput"] / (s["nproc"] * single))


def run_cell(case: dict, device, job: dict) -> dict:
    """In the ladder's worker process: the cell on its ranks; the row rank 0 made (or the failure recorded)."""
    rows = launch.run_cases([{**case, "task": TASK}], device, nproc=case["shape"]["nproc"],
                            timeout=case["rank_timeout"], extra={k: job[k] for k in ("ceilings",) if k in job})
    return rows[0]


# --- on every rank --------------------------------------------------------------------------------------------------
def cell_task(case: dict, device, job: dict) -> dict:
    """The cell on this rank: engine.measure with DDP or FSDP2 around the recipe's model, then the totals."""
    s, config = case["shape"], case.get("config", "full")
    rec = recipes.get(case["precision"])
    launch.beat(f"{s['model']} {rec.name} {s['parallel']}: set-up")
    base = ladder._base(s["model"], s["mode"], rec, s["batch"], models.get(s["model"]), config)
    cell = specmod.builtin(s["model"], config, s["batch"], case.get("seed", 0), device)
    timing = {"warmup_ms": 0.0, "rep_ms": 0.0, "min_reps": TIMED_STEPS, "max_reps": TIMED_STEPS}
    row = engine.measure(cell, rec, s["mode"], device, reference_file=case.get("reference"),
                         steps=case.get("steps", ladder.DEFAULT_STEPS), timing=timing, flops=True,
                         ceilings=job.get("ceilings"), wrap=functools.partial(wrap, parallel=s["parallel"]),
                         probe=exposed_comm)
    row["metrics"] = {**base["metrics"], **row["metrics"], "parallel": s["parallel"], "nproc": s["nproc"],
                      "label": f"{s['model']} {s['mode']} b={s['batch']} x{s['nproc']} {s['parallel']}"}
    _totals(row, cell.items, device)
    return {**base, **row, "shape": s}


def wrap(model: torch.nn.Module, parallel: str) -> torch.nn.Module:
    """DDP around the model, or FSDP2: fully_shard on every block of its ModuleLists, then on the model."""
    if parallel == "ddp":
        device = next(model.parameters()).device
        ids = [device.index] if device.type == "cuda" else None
        return torch.nn.parallel.DistributedDataParallel(model, device_ids=ids, gradient_as_bucket_view=True)
    from torch.distributed.fsdp import fully_shard
    for blocks in [m for m in model.modules() if isinstance(m, torch.nn.ModuleList)]:
        for block in blocks:
            fully_shard(block)
    fully_shard(model)
    return model


def _totals(row: dict, items: int | None, device) -> None:
    """Total throughput from the slowest rank's mean step (every rank steps together)."""
    if row.get("mean_ms") is None:
        return
    t = torch.tensor([row["mean_ms"]], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    n = dist.get_world_size()
    row["metrics"].update(rank0_mean_ms=row["mean_ms"], slowest_rank_ms=t.item())
    row["mean_ms"] = t.item()
    if items:
        row["metrics"].update(throughput=n * items / (t.item() * 1e-3), per_gpu=items / (t.item() * 1e-3))


# --- exposed communication ------------------------------------------------------------------------------------------
def exposed_comm(row: dict, step, device) -> None:
    """engine.measure's probe: PROFILED_STEPS steps under torch.profiler; the share of a step in which only
    communication runs."""
    from torch.profiler import ProfilerActivity, profile
    gpu = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
    with profile(activities=activities) as prof:
        for _ in range(PROFILED_STEPS):
            step()
        if gpu:
            torch.cuda.synchronize(device)    # sync point: every kernel inside the profile
    comm, other = split_events(prof.events(), gpu)
    exposed_ms = exposed(comm, other) / 1e3
    step_ms = row.get("mean_ms") or 0.0
    row["metrics"].update(comm_ms=total(union(comm)) / 1e3 / PROFILED_STEPS,
                          exposed_comm_ms=exposed_ms / PROFILED_STEPS,
                          exposed_comm_share=min(1.0, exposed_ms / PROFILED_STEPS / step_ms) if step_ms else None,
                          exposed_basis="GPU kernels" if gpu else "CPU events (gloo runs on its own threads)")


def is_comm(name: str) -> bool:
    low = name.lower()
    return any(k in low for k in ("nccl", "gloo", "c10d::", "allreduce", "all_reduce", "reduce_scatter",
                                  "all_gather", "allgather"))


def split_events(events, gpu: bool) -> tuple[list, list]:
    """(communication intervals, other intervals) in microseconds: GPU kernels on a GPU, operators on a CPU."""
    from torch.autograd import DeviceType
    want = DeviceType.CUDA if gpu else DeviceType.CPU
    comm, other = [], []
    for e in events:
        if e.device_type != want or (not gpu and not (e.name.startswith("aten::") or is_comm(e.name))):
            continue
        (comm if is_comm(e.name) else other).append((e.time_range.start, e.time_range.end))
    return comm, other


def union(intervals) -> list[tuple[float, float]]:
    """Overlapping (start, end) intervals merged, in order."""
    out: list[list[float]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [tuple(i) for i in out]


def total(intervals) -> float:
    return sum(end - start for start, end in intervals)


def exposed(comm, other) -> float:
    """Time covered by `comm` and not by `other`."""
    a, b = union(comm), union(other)
    hidden, j = 0.0, 0
    for start, end in a:
        while j < len(b) and b[j][1] <= start:
            j += 1
        k = j
        while k < len(b) and b[k][0] < end:
            hidden += min(end, b[k][1]) - max(start, b[k][0])
            k += 1
    return total(a) - hidden
