"""Why do small all-reduces read two speeds? A probe of the ranks' host placement (issue 60).

On 4 x H200 (2026-11-28, cf96fd1) the timed loops of sizes up to 4 MiB read one of two times: ~24-40 µs a call,
with the host's time to issue a call as long (host-bound), or ~60-80 µs. A plain loop run twice read 26 and 37 GB/s
at 1 MiB; tcperf's 5 repeats at 16 KiB read 35, 34, 35, 66, 67 µs. Nothing in either loop changes between repeats,
so the suspects are outside it: where each rank's thread runs (a core on the GPU's own NUMA node or the far one,
moved by the scheduler between loops), or the GPU's clocks.

Each placement below starts every GPU a rank (torch.multiprocessing.spawn, NCCL) and times REPEATS loops of an
fp32 all_reduce at each size (WARMUP calls, then ~LOOP_MS of calls between two CUDA events, the slowest rank's mean;
the host's time to issue the first HOST_CALLS calls beside it) and, for each loop, the core each rank's thread
ran on at its start and end (/proc/self/stat) with that core's NUMA node:
    free     no affinity set (as both loops ran until now)
    local    each rank pinned to the CPUs local to its GPU (/sys/bus/pci/devices/BUS/local_cpulist)
    remote   each rank pinned to CPUs of another NUMA node than its GPU's (where the host has one)
The outputs are checked against the expected sums before anything is timed.

    python benchmarks/comm_pin_probe.py --out DIR [--placements free,local,remote] [--repeats 15]
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SIZES = [2**14, 2**16, 2**20, 2**22]
WARMUP, LOOP_MS, HOST_CALLS = 5, 20.0, 32


def cpus(text: str) -> list[int]:
    """'0-3,8' -> [0, 1, 2, 3, 8]"""
    out = []
    for part in text.strip().split(","):
        if part:
            a, _, b = part.partition("-")
            out += range(int(a), int(b or a) + 1)
    return out


def nodes() -> dict[int, list[int]]:
    """{NUMA node: its CPUs} from sysfs ({0: every CPU} where it says nothing)."""
    found = {int(p.rsplit("node", 1)[1].split("/")[0]): cpus(open(p).read())
             for p in glob.glob("/sys/devices/system/node/node[0-9]*/cpulist")}
    return found or {0: list(range(os.cpu_count() or 1))}


def gpu_cpus(index: int) -> list[int]:
    """The CPUs local to CUDA device `index` (its PCI device's local_cpulist), or every CPU."""
    p = torch.cuda.get_device_properties(index)
    bus = f"{getattr(p, 'pci_domain_id', 0):04x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0"
    try:
        with open(f"/sys/bus/pci/devices/{bus}/local_cpulist") as f:
            return cpus(f.read())
    except OSError:
        return list(range(os.cpu_count() or 1))


def placement_cpus(kind: str, rank: int) -> list[int] | None:
    local = gpu_cpus(rank)
    if kind == "free":
        return None
    if kind == "local":
        return local
    other = [c for node in nodes().values() for c in node if c not in local]
    return other or None


def core_now() -> int:
    with open("/proc/self/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[36])


def node_of(core: int, layout: dict[int, list[int]]) -> int:
    return next((n for n, cs in layout.items() if core in cs), -1)


def loop(x: torch.Tensor, iters: int) -> tuple[float, float]:
    """(µs a call on the GPU clock, µs of host time to issue a call over the first HOST_CALLS)."""
    for _ in range(WARMUP):
        dist.all_reduce(x)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    first = min(iters, HOST_CALLS)
    start.record()
    t0 = time.perf_counter()
    for _ in range(first):
        dist.all_reduce(x)
    host = (time.perf_counter() - t0) / first * 1e6
    for _ in range(iters - first):
        dist.all_reduce(x)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / iters, host


def gathered(values: list[float]) -> list[list[float]]:
    t = torch.tensor(values, dtype=torch.float64, device="cuda")
    out = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(out, t)
    return [o.tolist() for o in out]


def rank_main(rank: int, world: int, port: int, kind: str, repeats: int, path: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    chosen = placement_cpus(kind, rank)
    if chosen:
        os.sched_setaffinity(0, chosen)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    layout = nodes()
    gpu_node = node_of(gpu_cpus(rank)[0], layout) if len(layout) > 1 else 0
    report = {"placement": kind, "world": world, "gpu_nodes": [], "sizes": {}}
    report["gpu_nodes"] = [g[0] for g in gathered([float(gpu_node)])]
    for size in SIZES:
        x = torch.full((size // 4,), float(rank + 1), device="cuda")
        dist.all_reduce(x)
        want = world * (world + 1) / 2
        if not torch.allclose(x, torch.full_like(x, want)):
            raise RuntimeError(f"rank {rank}: all_reduce of {size} B is wrong")
        x.fill_(1.0)
        probe, _ = loop(x, 3)
        iters = int(max(5, min(4000, LOOP_MS * 1e3 / max(gathered([probe])[0][0], 1.0))))
        iters = int(max(gathered([float(iters)])[r][0] for r in range(world)))
        rows = []
        for _ in range(repeats):
            c0 = core_now()
            us, host = loop(x, iters)
            c1 = core_now()
            every = gathered([us, host, c0, c1, node_of(c0, layout), node_of(c1, layout)])
            rows.append({"us": max(e[0] for e in every), "host_us": max(e[1] for e in every),
                         "cores": [[int(e[2]), int(e[3])] for e in every],
                         "off_node": sum(e[4] != g or e[5] != g for e, g in zip(every, report["gpu_nodes"]))})
        report["sizes"][str(size)] = {"iters": iters, "loops": rows}
    if rank == 0:
        with open(path, "w") as f:
            json.dump(report, f)
    dist.barrier()
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def summary(report: dict) -> list[str]:
    lines = [f"{report['placement']}: GPUs' NUMA nodes {report['gpu_nodes']}"]
    for size, r in report["sizes"].items():
        us = [loop["us"] for loop in r["loops"]]
        host = [loop["host_us"] for loop in r["loops"]]
        off = [loop["off_node"] for loop in r["loops"]]
        slow = [u for u in us if u > 1.5 * min(us)]
        lines.append(f"  {int(size) // 1024:>6} KiB: µs a call median {statistics.median(us):6.1f} min {min(us):6.1f} "
                     f"max {max(us):6.1f}; {len(slow)}/{len(us)} loops > 1.5x the fastest; host µs median "
                     f"{statistics.median(host):5.1f}; loops with a rank off its GPU's node: "
                     f"{sum(o > 0 for o in off)}/{len(off)} (slow ones: "
                     f"{sum(o > 0 for o, u in zip(off, us) if u > 1.5 * min(us))})")
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="out")
    p.add_argument("--placements", default="free,local,remote,free")
    p.add_argument("--repeats", type=int, default=15)
    a = p.parse_args()
    world = torch.cuda.device_count()
    if world < 2:
        print(f"comm_pin_probe.py: needs 2 CUDA GPUs, {world} visible", file=sys.stderr)
        return 2
    os.makedirs(a.out, exist_ok=True)
    print(f"NUMA nodes: { {n: f'{c[0]}-{c[-1]} ({len(c)})' for n, c in nodes().items()} }", flush=True)
    results = []
    for i, kind in enumerate(a.placements.split(",")):
        path = os.path.join(a.out, f"pin_{i}_{kind}.json")
        mp.spawn(rank_main, args=(world, free_port(), kind, a.repeats, path), nprocs=world)
        with open(path) as f:
            results.append(json.load(f))
        print("\n".join(summary(results[-1])), flush=True)
    with open(os.path.join(a.out, "comm_pin_probe.json"), "w") as f:
        json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
