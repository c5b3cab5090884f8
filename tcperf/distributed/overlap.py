"""Exposed communication: how much of a training step waits on communication that no computation hides.

    exposed communication = the time in which a communication kernel runs and no other kernel does, per step
    exposed share         = exposed communication / the step time

Communication kernels are those whose name says so (NCCL's ncclDevKernel_* / ncclKernel_*, gloo's operators on a
CPU); every other kernel (GEMMs, elementwise, copies) is computation that can hide them. Both sets are merged into
unions of intervals first, so kernels overlapping each other on several streams count once, and the exposed time is
the union of the communication intervals less its intersection with the union of the others. Everything here is
pure (kernels in, figures out); tcperf.distributed.parallel feeds it torch.profiler's GPU kernels.

Where a step's time goes (breakdown): every instant of the step is computation (some non-communication kernel
runs), exposed communication of one kind (all-reduce, all-gather, reduce-scatter or other: only communication
kernels run; an instant two kinds share is split evenly between them), or idle (no kernel runs: the host is late
launching work; a rank waiting for a peer inside an NCCL kernel counts as communication). The parts add up to the step; `cause` names
the largest part beyond computation in one sentence.

    k = [Kernel("ncclDevKernel_AllReduce", 0, 10), Kernel("sm90_gemm", 4, 8)]
    exposed_share(k, steps=1, step_ms=0.02)   # {'comm_ms': 0.01, 'exposed_comm_ms': 0.006, 'exposed_comm_share': 0.3}
    breakdown(k, steps=1, step_ms=0.02)["share"]   # compute 0.2, all_reduce 0.3, idle 0.5 (the other parts 0)
    cause(breakdown(k, 1, 0.02)["share"])          # 'idle 50% of a step: no kernel runs: host-bound ...'
"""
from __future__ import annotations

from dataclasses import dataclass

COMM_MARKS = ("nccl", "gloo", "c10d::", "allreduce", "all_reduce", "reduce_scatter", "reducescatter", "all_gather",
              "allgather", "all_to_all", "alltoall")     # not "broadcast": compute kernels carry that word too


# The parts of a step, in the order they are printed: (name, label, what it means when it is the largest beyond
# computation). Communication kinds are read from the kernel's name, underscores dropped (NCCL's
# ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL, gloo's c10d::_allgather_base_ on a CPU).
PARTS = (
    ("compute", "compute", "compute-bound: some kernel runs through almost all of the step"),
    ("all_reduce", "exposed all-reduce", "gradient all-reduces that backward does not hide (DDP: the last buckets, "
                                         "or too little computation to cover them)"),
    ("all_gather", "exposed all-gather", "parameter all-gathers that computation does not hide (FSDP2: gathered "
                                         "again for backward; reshard_after_forward=False or prefetching hides them)"),
    ("reduce_scatter", "exposed reduce-scatter", "gradient reduce-scatters that backward does not hide (FSDP2: the "
                                                 "last blocks' gradients, reduced in float32)"),
    ("other_comm", "exposed other communication", "communication that is neither all-reduce, all-gather nor "
                                                  "reduce-scatter, not hidden"),
    ("idle", "idle", "no kernel runs: the step is host-bound (Python, kernel launches, hooks, a sync on the "
                     "host)"),
)
COMM_KINDS = (("reduce_scatter", ("reducescatter",)), ("all_gather", ("allgather",)),
              ("all_reduce", ("allreduce",)))
LOSS_FLOOR = 0.05       # parts beyond computation smaller than this share of a step do not make a cause


@dataclass(frozen=True)
class Kernel:
    name: str
    start_us: float
    end_us: float


def is_comm(name: str) -> bool:
    """A communication kernel (or, on a CPU, a communication operator), by its name."""
    low = name.lower()
    return any(mark in low for mark in COMM_MARKS)


def comm_kind(name: str) -> str | None:
    """The part of a step a kernel belongs to when nothing else runs: a communication kind, or None (computation)."""
    if not is_comm(name):
        return None
    flat = name.lower().replace("_", "")
    return next((kind for kind, marks in COMM_KINDS if any(m in flat for m in marks)), "other_comm")


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
    """Time covered by `comm` and not by `other` (both lists of (start, end))."""
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


def exposed_share(kernels: list[Kernel], steps: int, step_ms: float | None) -> dict:
    """Per step, from the kernels of `steps` steps: communication time (comm_ms), the part no other kernel overlaps
    (exposed_comm_ms) and its share of step_ms (None without one), and computation time (compute_ms): a step whose
    computation and exposed communication fall well short of it waits on the host."""
    comm = [(k.start_us, k.end_us) for k in kernels if is_comm(k.name)]
    other = [(k.start_us, k.end_us) for k in kernels if not is_comm(k.name)]
    comm_ms, exposed_ms = total(union(comm)) / 1e3 / steps, exposed(comm, other) / 1e3 / steps
    return {"comm_ms": comm_ms, "exposed_comm_ms": exposed_ms, "compute_ms": total(union(other)) / 1e3 / steps,
            "exposed_comm_share": exposed_ms / step_ms if step_ms else None}


def breakdown(kernels: list[Kernel], steps: int, step_ms: float | None) -> dict:
    """Where a step's time goes: {"ms": ms a step per part of PARTS, "share": each part over the step}. Idle is the
    step time no kernel covers; when the kernels cover more than step_ms (the profiled steps ran slower than the
    timed ones), idle is 0 and the shares are of the kernels' span, so they always add up to 1."""
    spans = {part: union((k.start_us, k.end_us) for k in kernels if (comm_kind(k.name) or "compute") == part)
             for part, _, _ in PARTS[:-1]}
    ms = {part: us / 1e3 / steps for part, us in _sweep(spans).items()}
    busy = sum(ms.values())
    ms["idle"] = max(0.0, (step_ms or busy) - busy)
    whole = max(step_ms or 0.0, busy)
    return {"ms": ms, "share": {part: (v / whole if whole else 0.0) for part, v in ms.items()}}


def _sweep(spans: dict[str, list[tuple[float, float]]]) -> dict[str, float]:
    """Each instant to one part: computation where any computation runs, else the communication kinds that run,
    split evenly. spans: each part's merged intervals; returns µs per part."""
    out = dict.fromkeys(spans, 0.0)
    edges = sorted({t for intervals in spans.values() for span in intervals for t in span})
    at = dict.fromkeys(spans, 0)
    for a, b in zip(edges, edges[1:]):
        mid, live = (a + b) / 2, []
        for part, intervals in spans.items():
            while at[part] < len(intervals) and intervals[at[part]][1] <= mid:
                at[part] += 1
            if at[part] < len(intervals) and intervals[at[part]][0] <= mid:
                live.append(part)
        live = ["compute"] if "compute" in live else live
        for part in live:
            out[part] += (b - a) / len(live)
    return out


def cause(share: dict[str, float]) -> str:
    """One sentence from a breakdown's shares: the largest part beyond computation, or computation when every such
    part is under LOSS_FLOOR of the step."""
    named = {p: (label, meaning) for p, label, meaning in PARTS}
    losses = {p: share.get(p) or 0.0 for p in named if p != "compute"}
    worst = max(losses, key=losses.get)
    if losses[worst] < LOSS_FLOOR:
        worst = "compute"
    label, meaning = named[worst]
    return f"{label} {share.get(worst) or 0.0:.0%} of a step: {meaning}"


def breakdown_line(share: dict[str, float]) -> str:
    """'compute 55%, exposed all-reduce 7%, idle 38%' (parts of 0.5% or more, in PARTS' order)."""
    return ", ".join(f"{lab} {share[p]:.0%}" for p, lab, _ in PARTS if (share.get(p) or 0.0) >= 0.005)
