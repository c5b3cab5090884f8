"""`tcperf comm` against a plain torch.distributed all-reduce loop, in the same call, then the sweep.

1. plain: every GPU a rank (torch.multiprocessing.spawn, NCCL), for each size 4 KiB, 64 KiB, 1 MiB, 16 MiB, 256 MiB,
   1 GiB: fp32 all_reduce timed as nccl-tests times it: WARMUP calls, then `iters` calls back to back between two
   CUDA events, the elapsed time over `iters`, the slowest rank's (all_reduce MAX), REPEATS times, the median.
   busbw = size / time x 2(n-1)/n. Beside it the host's time to issue a call (HOST_CALLS calls on the host clock):
   where it reaches the time a call, the GPU waited on the host. Nothing of tcperf's is used.
2. tcperf: `tcperf comm --ops all_reduce --dtypes fp32 -b 4K -e 1G -f 4 --json` on the same GPUs.
3. --rounds times (default 3): plain, tcperf, ..., plain, so every tcperf run lies between two plain ones and the
   machine's own drift shows in the plain runs.
4. at the plain loop's sizes, the ratio of the medians tcperf / plain busbw: "within 3%"; outside it, "n.s." where
   tcperf's runs and the plain loop's overlap (the difference does not survive the repeat), else "slower" or
   "faster". Exit 0 when no size is "slower" or "faster".
5. (unless --no-sweep) the sweep: five collectives, fp32 and bf16, 1 KiB .. 1 GiB by x4, stored in --db.

    python benchmarks/comm_gpu.py --out DIR [--db PATH] [--no-sweep] [--part-timeout 150]
    python benchmarks/comm_gpu.py --check --out DIR    # CPU: gloo on 2 processes, 4 KiB and 64 KiB, no sweep

Anchors on 2 x H200 (NVLink NV18, torch 2.11), plain loop, fp32 busbw: 34-39 GB/s at 1 MiB, 223 at 16 MiB, 300 at
256 MiB, 328 at 1 GiB. On 4 x H200 (2026-11-28, c944114), with CPU tests running on 8 of the host's cores: plain
33 GB/s at 1 MiB, tcperf 26 (0.79), its repeats 49-67 µs against the plain loop's 48; 16 MiB to 1 GiB within 0.4%.
Writes comm_gpu.json under --out after every part (a part that fails or times out is recorded and the next one
runs); --check: exit 0 when both sides ran and checked out. About 2.5 minutes with the sweep.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from hand_loops import window  # beside this script: one clock for the hand loops

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = {"gpu": [2**12, 2**16, 2**20, 2**24, 2**28, 2**30], "cpu": [2**12, 2**16]}
HOST_CALLS = 32                         # calls whose issuing the host probe times
WARMUP, REPEATS = 5, 5
LOOP_MS = {"gpu": 60.0, "cpu": 5.0}     # one timed loop's length: sets its number of calls
WITHIN = 0.03


# --- the plain loop ---------------------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def join(rank: int, world: int, port: int, kind: str) -> torch.device:
    """This rank in the process group (NCCL, one GPU a rank; gloo on a CPU): its device."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if kind == "gpu":
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
        return torch.device("cuda", rank)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    return torch.device("cpu")


def plain_rank(rank: int, world: int, port: int, kind: str, out_file: str) -> None:
    """A plain all-reduce loop on one rank; rank 0 writes {size: seconds a call}."""
    device = join(rank, world, port, kind)
    times = {}
    for size in SIZES[kind]:
        x = torch.ones(size // 4, dtype=torch.float32, device=device)
        iters = loop_iters(x, device, LOOP_MS[kind])
        times[size] = statistics.median(slowest(all_reduce_ms(x, device, iters), device) for _ in range(REPEATS)) * 1e-3
        times[f"host{size}"] = statistics.median(slowest(host_ms(x), device) for _ in range(REPEATS)) * 1e-3
        del x
    if rank == 0:
        with open(out_file, "w") as f:
            json.dump(times, f)
    dist.barrier()                  # no rank tears down gloo/NCCL while another is mid-collective
    dist.destroy_process_group()


def loop_ms(step, device, iters: int) -> float:
    """`iters` calls of step() back to back in one window (hand_loops.window: CUDA events, perf_counter on a CPU):
    ms a call."""
    ms, calls = window(step, device, calls=iters)
    return ms / calls


def all_reduce_ms(x: torch.Tensor, device, iters: int) -> float:
    """nccl-tests' loop: a warm-up, then `iters` all-reduces between two events; ms a call."""
    for _ in range(WARMUP):
        dist.all_reduce(x)
    return loop_ms(lambda: dist.all_reduce(x), device, iters)


def host_ms(x: torch.Tensor) -> float:
    """The host's time to issue one all-reduce: HOST_CALLS calls issued back to back on the host clock, then
    waited for. Where it reaches the loop's time a call, the GPU waited on the host."""
    t0 = time.perf_counter()
    for _ in range(HOST_CALLS):
        dist.all_reduce(x)
    ms = (time.perf_counter() - t0) * 1e3 / HOST_CALLS
    if x.is_cuda:
        torch.cuda.synchronize()
    return ms


def slowest(value: float, device) -> float:
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def loop_iters(x: torch.Tensor, device, loop_ms_budget: float) -> int:
    """Calls a loop makes (the same on every rank): the budget over the slowest rank's time for a short loop."""
    return int(min(2000, max(5, loop_ms_budget / max(slowest(all_reduce_ms(x, device, 3), device), 1e-4))))


def plain(world: int, kind: str, folder: str, name: str = "plain") -> dict:
    path = os.path.join(folder, f"{name}.json")
    mp.spawn(plain_rank, args=(world, free_port(), kind, path), nprocs=world)
    with open(path) as f:
        times = json.load(f)
    factor = 2 * (world - 1) / world
    return {str(s): {"time_us": times[str(s)] * 1e6, "host_us": times[f"host{s}"] * 1e6,
                     "busbw_gbps": s / times[str(s)] / 1e9 * factor} for s in SIZES[kind]}


# --- tcperf, the comparison -------------------------------------------------------------------------------------------
def tcperf(args: list[str], timeout: float) -> dict:
    """`python -m tcperf ARGS --json`'s output."""
    return child_json([sys.executable, "-m", "tcperf", *args, "--json"], timeout)


def child_json(cmd: list[str], timeout: float) -> dict:
    """The JSON a command prints, run in its own process group (killed whole, ranks included, on timeout)."""
    args = cmd[2:]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise TimeoutError(f"{' '.join(args[:3])}...: over {timeout:.0f} s, killed") from None
    if proc.returncode != 0:      # a rank's own words (gloo's "terminate called ..." among them), then the tail
        said = [line for line in err.splitlines() if re.search(r"terminate|what\(\)|Error|error", line)][:4]
        raise RuntimeError(f"exit {proc.returncode}: {' | '.join(said)[:600]} ... {err.strip()[-400:]}")
    return json.loads(out)


def compare(plain_runs: list[dict], tc_runs: list[dict]) -> dict:
    """At each size the plain loop timed: tcperf's median busbw over its runs against the plain loop's median over its
    runs (they alternate, plain first and last). A ratio outside 3% whose runs' ranges overlap the plain loop's is
    "n.s.": the machine moved as much between two plain runs, and the difference does not survive the repeat."""
    rows = {}
    by_size = {}
    for tc in tc_runs:
        for r in tc["results"]:
            by_size.setdefault(str(r["shape"]["bytes"]), []).append(r)
    for size, found in by_size.items():
        runs = [p[size] for p in plain_runs if size in p]
        if not runs:      # a size between the plain loop's: measured by tcperf, not compared
            continue
        mine = [(r.get("metrics") or {}) for r in found if (r.get("metrics") or {}).get("busbw_gbps")]
        plain_gbps, tc_gbps = [p["busbw_gbps"] for p in runs], [m["busbw_gbps"] for m in mine]
        ratio = statistics.median(tc_gbps) / statistics.median(plain_gbps) if tc_gbps else None
        within = ratio is not None and abs(ratio - 1) <= WITHIN
        apart = bool(tc_gbps) and (max(tc_gbps) < min(plain_gbps) or min(tc_gbps) > max(plain_gbps))
        rows[size] = {"plain_runs_gbps": plain_gbps, "tcperf_runs_gbps": tc_gbps,
                      "plain_busbw_gbps": statistics.median(plain_gbps),
                      "tcperf_busbw_gbps": statistics.median(tc_gbps) if tc_gbps else None,
                      "plain_host_us": statistics.median(p["host_us"] for p in runs),
                      "tcperf_host_us": statistics.median(m["host_us"] for m in mine) if mine else None,
                      "status": ",".join(sorted({r["status"] for r in found})), "ratio": ratio,
                      "within_3pct": within,
                      "verdict": "within 3%" if within else "n.s." if ratio is not None and not apart else
                      "slower" if ratio is not None and ratio < 1 else "faster" if ratio else "failed"}
    return rows


def tcperf_args(kind: str, world: int) -> list[str]:
    """The `tcperf comm` call that sits beside the plain loop: the same sizes, fp32 all_reduce."""
    sizes = SIZES[kind]      # powers of 4 apart: -f 4 takes every one of them (-f 16 stopped at 256 MiB, 1 GiB missed)
    span = ["-b", str(sizes[0]), "-e", str(sizes[-1]), "-f", "4"]
    where = ["--device", "cpu", "--nproc", str(world)] if kind == "cpu" else ["--nproc", str(world)]
    return ["comm", "--ops", "all_reduce", "--dtypes", "fp32", *span, "--rep-ms", str(LOOP_MS[kind] * REPEATS), *where]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="out")
    p.add_argument("--db", default=None)
    p.add_argument("--no-sweep", action="store_true")
    p.add_argument("--part-timeout", type=float, default=150.0)
    p.add_argument("--check", action="store_true", help="CPU: gloo on 2 processes, tiny sizes (does it run?)")
    p.add_argument("--rounds", type=int, default=None,
                   help="tcperf runs, each between two plain ones (default 3; 1 with --check)")
    a = p.parse_args()
    kind = "cpu" if a.check else "gpu"
    if kind == "gpu" and torch.cuda.device_count() < 2:
        print(f"comm_gpu.py: needs 2 CUDA GPUs, {torch.cuda.device_count()} visible (or give --check)",
              file=sys.stderr)
        return 2
    os.makedirs(a.out, exist_ok=True)
    world = 2 if a.check else torch.cuda.device_count()
    report = {"gpus": world if kind == "gpu" else 0, "device": torch.cuda.get_device_name(0) if kind == "gpu"
              else "cpu (gloo)", "torch": torch.__version__, "timing": f"nccl-tests: {WARMUP} warm-up calls, a "
              f"loop of ~{LOOP_MS[kind]:.0f} ms between two events, slowest rank, median of {REPEATS}", "parts": {}}
    db = ["--db", a.db] if a.db else []
    path = os.path.join(a.out, "comm_gpu.json")
    part = recorder(report, path)
    rounds = a.rounds or (1 if a.check else 3)
    plains, tcs = [], []
    for i in range(rounds):          # plain, tcperf, plain, tcperf, ..., plain: tcperf bracketed by the plain loop
        plains.append(part(f"plain-{i + 1}", lambda: plain(world, kind, a.out, f"plain_{i + 1}")) or {})
        tcs.append(part(f"tcperf-{i + 1}", lambda: tcperf([*tcperf_args(kind, world), *db], a.part_timeout)))
    plains.append(part(f"plain-{rounds + 1}", lambda: plain(world, kind, a.out, f"plain_{rounds + 1}")) or {})
    report["plain_runs"], tcs = plains, [tc for tc in tcs if tc]
    if tcs:
        report["link"] = tcs[0].get("link")
        report["compare"] = compare([p for p in plains if p], tcs)
        report["all_within_3pct"] = all(r["within_3pct"] for r in report["compare"].values())
        report["none_apart"] = all(r["verdict"] in ("within 3%", "n.s.") for r in report["compare"].values())
        part("compare", lambda: None)
        for size, r in report["compare"].items():
            print(f"  {int(size) / 2**20:>8.4f} MiB: plain {' / '.join(f'{g:.2f}' for g in r['plain_runs_gbps'])} "
                  f"GB/s (host {r['plain_host_us']:.1f} µs a call), tcperf "
                  f"{' / '.join(f'{g:.2f}' for g in r['tcperf_runs_gbps'])} (host {r['tcperf_host_us'] or 0:.1f} µs), "
                  f"ratio of medians tcperf/plain {r['ratio'] or 0:.3f}: {r['verdict']}", flush=True)
    if not a.no_sweep and not a.check:
        sweep = part("sweep", lambda: tcperf(["comm", "-f", "4", *db], a.part_timeout))
        if sweep:
            report["sweep"] = [{"op": r["op"], "dtype": r["precision"], "bytes": r.get("bytes"),
                                "status": r["status"], "time_us": (r.get("metrics") or {}).get("time_us"),
                                "algbw_gbps": (r.get("metrics") or {}).get("algbw_gbps"),
                                "busbw_gbps": (r.get("metrics") or {}).get("busbw_gbps")} for r in sweep["results"]]
            part("sweep-summary", lambda: None)
    if a.check:
        ran = bool(tcs) and all(r["ratio"] and r["status"] == "ok" for r in report["compare"].values())
        return 0 if ran else 1
    return 0 if report.get("none_apart") else 1


def recorder(report: dict, path: str):
    """part(name, fn): fn's value, or None when it raised (recorded); the report rewritten after each part."""
    def part(name: str, fn):
        t0 = time.time()
        try:
            value = fn()
            report["parts"][name] = {"ok": True, "seconds": round(time.time() - t0, 1)}
        except Exception as e:     # recorded; the next part runs
            value = None
            report["parts"][name] = {"ok": False, "seconds": round(time.time() - t0, 1),
                                     "error": f"{type(e).__name__}: {e}"[:800]}
        with open(path, "w") as f:
            json.dump(report, f, indent=2, default=str)
        print(f"{name}: {report['parts'][name]}", flush=True)
        return value
    return part


if __name__ == "__main__":
    sys.exit(main())
