"""`tcperf comm` against a plain torch.distributed all-reduce loop, in the same call (issue 14), then the full sweep.

1. plain: every GPU a rank (torch.multiprocessing.spawn, NCCL), for each size 1 MiB, 16 MiB, 256 MiB, 1 GiB: fp32
   all_reduce, WARMUP calls, then ITERS calls between two CUDA events; time = elapsed / ITERS; busbw = size / time
   x 2(n-1)/n. Nothing of tcperf's is used.
2. tcperf: `tcperf comm --ops all_reduce --dtypes fp32 -b 1M -e 1G -f 16 --json` on the same GPUs.
3. the ratio tcperf / plain per size: it must lie within 3% of 1.
4. (unless --no-sweep) the sweep: five collectives, fp32 and bf16, 1 KiB .. 1 GiB by x4, stored in --db.

    python benchmarks/comm_gpu.py --out DIR [--db PATH] [--no-sweep] [--part-timeout 150]

Anchors on 2 x H200 (NVLink NV18, torch 2.11), plain loop, fp32 busbw: 39 GB/s at 1 MiB, 223 at 16 MiB, 300 at
256 MiB, 328 at 1 GiB. Writes comm_gpu.json under --out after every part (a part that fails or times out is
recorded and the next one runs). About 2 minutes on 2 x H200.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = [2**20, 2**24, 2**28, 2**30]
WARMUP, ITERS = 10, 50
WITHIN = 0.03


def plain_rank(rank: int, world: int, port: int, out_file: str) -> None:
    """A plain all-reduce loop on one rank; rank 0 writes {size: seconds a call}."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    times = {}
    for size in SIZES:
        x = torch.ones(size // 4, dtype=torch.float32, device="cuda")
        for _ in range(WARMUP):
            dist.all_reduce(x)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(ITERS):
            dist.all_reduce(x)
        end.record()
        torch.cuda.synchronize()
        t = torch.tensor([start.elapsed_time(end) / ITERS], device="cuda")
        dist.all_reduce(t, op=dist.ReduceOp.MAX)       # the slowest rank, as tcperf reports it
        times[size] = t.item() * 1e-3
        del x
    if rank == 0:
        with open(out_file, "w") as f:
            json.dump(times, f)
    dist.destroy_process_group()


def plain(world: int, folder: str) -> dict:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path = os.path.join(folder, "plain.json")
    mp.spawn(plain_rank, args=(world, port, path), nprocs=world)
    with open(path) as f:
        times = {int(k): v for k, v in json.load(f).items()}
    factor = 2 * (world - 1) / world
    return {str(s): {"time_us": t * 1e6, "busbw_gbps": s / t / 1e9 * factor} for s, t in times.items()}


def tcperf(args: list[str], timeout: float) -> dict:
    """`python -m tcperf ARGS --json` in its own process group (killed whole on timeout)."""
    cmd = [sys.executable, "-m", "tcperf", *args, "--json"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise TimeoutError(f"{' '.join(args[:3])}...: over {timeout:.0f} s, killed") from None
    if proc.returncode != 0:
        raise RuntimeError(f"exit {proc.returncode}: {err.strip()[-600:]}")
    return json.loads(out)


def compare(plain_rows: dict, tc: dict) -> dict:
    rows = {}
    for r in tc["results"]:
        size = str(r["shape"]["bytes"])
        mine = (r.get("metrics") or {}).get("busbw_gbps")
        ref = plain_rows.get(size, {}).get("busbw_gbps")
        ratio = mine / ref if mine and ref else None
        rows[size] = {"plain_busbw_gbps": ref, "tcperf_busbw_gbps": mine, "ratio": ratio, "status": r["status"],
                      "within_3pct": ratio is not None and abs(ratio - 1) <= WITHIN}
    return rows


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="out")
    p.add_argument("--db", default=None)
    p.add_argument("--no-sweep", action="store_true")
    p.add_argument("--part-timeout", type=float, default=150.0)
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    world = torch.cuda.device_count()
    report = {"gpus": world, "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "parts": {}}
    db = ["--db", a.db] if a.db else []
    path = os.path.join(a.out, "comm_gpu.json")

    def part(name: str, fn) -> object:
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

    report["plain"] = part("plain", lambda: plain(world, a.out)) or {}
    sizes = ["--ops", "all_reduce", "--dtypes", "fp32", "-b", "1M", "-e", "1G", "-f", "16", "--rep-ms", "300"]
    tc = part("tcperf", lambda: tcperf(["comm", *sizes, *db], a.part_timeout))
    if tc:
        report["link"] = tc.get("link")
        report["compare"] = compare(report["plain"], tc)
        report["all_within_3pct"] = all(r["within_3pct"] for r in report["compare"].values())
        part("compare", lambda: None)
        for size, r in report["compare"].items():
            print(f"  {int(size) >> 20:>5} MiB: plain {r['plain_busbw_gbps'] or 0:7.1f} GB/s, tcperf "
                  f"{r['tcperf_busbw_gbps'] or 0:7.1f} GB/s, ratio {r['ratio'] or 0:.3f}", flush=True)
    if not a.no_sweep:
        sweep = part("sweep", lambda: tcperf(["comm", "-f", "4", *db], a.part_timeout))
        if sweep:
            report["sweep"] = [{"op": r["op"], "dtype": r["precision"], "bytes": r.get("bytes"),
                                "status": r["status"], "time_us": (r.get("metrics") or {}).get("time_us"),
                                "algbw_gbps": (r.get("metrics") or {}).get("algbw_gbps"),
                                "busbw_gbps": (r.get("metrics") or {}).get("busbw_gbps")} for r in sweep["results"]]
            part("sweep-summary", lambda: None)
    return 0 if report.get("all_within_3pct") else 1


if __name__ == "__main__":
    sys.exit(main())
