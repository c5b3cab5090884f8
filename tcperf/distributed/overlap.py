"""Exposed communication: how much of a training step waits on communication that no computation hides.

    exposed communication = the time in which a communication kernel runs and no other kernel does, per step
    exposed share         = exposed communication / the step time

Communication kernels are those whose name says so (NCCL's ncclDevKernel_* / ncclKernel_*, gloo's operators on a
CPU); every other kernel (GEMMs, elementwise, copies) is computation that can hide them. Both sets are merged into
unions of intervals first, so kernels overlapping each other on several streams count once, and the exposed time is
the union of the communication intervals less its intersection with the union of the others. Everything here is
pure (kernels in, figures out); tcperf.distributed.parallel feeds it torch.profiler's GPU kernels.

    k = [Kernel("ncclDevKernel_AllReduce", 0, 10), Kernel("sm90_gemm", 4, 8)]
    exposed_share(k, steps=1, step_ms=0.02)   # {'comm_ms': 0.01, 'exposed_comm_ms': 0.006, 'exposed_comm_share': 0.3}
"""
from __future__ import annotations

from dataclasses import dataclass

COMM_MARKS = ("nccl", "gloo", "c10d::", "allreduce", "all_reduce", "reduce_scatter", "reducescatter", "all_gather",
              "allgather", "all_to_all", "alltoall")     # not "broadcast": compute kernels carry that word too


@dataclass(frozen=True)
class Kernel:
    name: str
    start_us: float
    end_us: float


def is_comm(name: str) -> bool:
    """A communication kernel (or, on a CPU, a communication operator), by its name."""
    low = name.lower()
    return any(mark in low for mark in COMM_MARKS)


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
