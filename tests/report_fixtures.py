"""Stored runs for the report, compare and export tests, written through Store.start_run/add_result in the row
formats of docs/design.md (kernel suites, ceilings, model ladder, advisor, lab). Samples are drawn from a seeded
generator around a chosen median, so tests know the true differences."""
from __future__ import annotations

import numpy as np

from tcperf.records import Result
from tcperf.store import Store
from tcperf.tensorcore import gemm_verdict


def gpu_env(name: str = "NVIDIA H200", sms: int = 132, torch_version: str = "2.11.0+cu130") -> dict:
    return {"device": "cuda:0", "platform": "Linux-6.8-x86_64",
            "libraries": {"tcperf": "0.1.0", "python": "3.12.3", "torch": torch_version, "cuda": "13.0",
                          "cudnn": 91900, "triton": "3.6.0"},
            "cpu": {"model": "AMD EPYC 9654", "cores": 16, "torch_threads": 16},
            "gpu": {"name": name, "index": 0, "sm_count": sms, "compute_capability": "9.0", "memory_gib": 139.8,
                    "driver": "580.95", "sm_clock_max_mhz": 1980, "mem_clock_max_mhz": 3201, "power_limit_w": 700,
                    "source": "nvml"}}


def samples(median_ms: float, spread: float = 0.02, n: int = 40, seed: int = 0) -> list[float]:
    """n timing samples around median_ms with an IQR of about spread * median."""
    rng = np.random.default_rng(seed)
    return list(median_ms * (1 + rng.normal(0, spread / 1.35, n)))


def timed(row: dict, median_ms: float, spread: float = 0.02, seed: int = 0, n: int = 40) -> dict:
    """Fill a row's timing columns (and its rates) from samples drawn around median_ms."""
    s = samples(median_ms, spread, n, seed)
    q1, med, q3 = np.percentile(s, [25, 50, 75])
    row.update(status="ok", samples=s, median_ms=float(med), iqr_ms=float(q3 - q1), min_ms=min(s),
               mean_ms=float(np.mean(s)), n=len(s))
    if row.get("flops"):
        row["tflops"] = row["flops"] / (med * 1e-3) / 1e12
    if row.get("bytes"):
        row["gbps"] = row["bytes"] / (med * 1e-3) / 1e9
    return row


def gemm(size, precision: str, median_ms: float, suite: str = "quick", seed: int = 0, **extra) -> dict:
    m, n, k = (size, size, size) if isinstance(size, int) else size
    shape = {"m": m, "n": n, "k": k, "a_t": "N", "b_t": "N"}
    row = {"op": "gemm", "suite": suite, "shape": shape, "precision": precision, "flops": 2.0 * m * n * k,
           "bytes": 2.0 * (m * k + k * n + m * n), "warnings": [],
           "metrics": {"label": f"{m}x{n}x{k} NN", "tags": {"application": "square GEMM"},
                       "verdict": gemm_verdict(m, n, k, precision, 132)}}
    row["metrics"].update(extra.pop("metrics", {}))
    return {**timed(row, median_ms, seed=seed), **extra}


def copy_row(median_ms: float, seed: int = 0) -> dict:
    row = {"op": "copy", "suite": "quick", "shape": {"n": 268435456}, "precision": "fp32",
           "bytes": 2.0 * 4 * 268435456, "warnings": [],
           "metrics": {"label": "n=268435456", "tags": {"application": "device-to-device copy"}}}
    return timed(row, median_ms, seed=seed)


def kernel_rows(scale: float = 1.0, seed: int = 0) -> list[dict]:
    """A quick-suite-like set: bf16 and fp32 GEMMs with the 8191 cliff (padded timed beside it), a copy, an
    unstable case and a wrong one."""
    rows = [gemm(1024, "bf16", 0.006 * scale, seed=seed), gemm(4096, "bf16", 0.2 * scale, seed=seed + 1),
            gemm(8192, "bf16", 1.48 * scale, seed=seed + 2, metrics={"tensor_cores_used": True, "tc_share": 0.98}),
            gemm(8191, "bf16", 7.6 * scale, seed=seed + 3,
                 metrics={"padded": {"shape": {"m": 8192, "n": 8192, "k": 8192}, "median_ms": 1.49 * scale,
                                     "gain": 7.6 / 1.49}}),
            gemm(4096, "fp32", 2.7 * scale, seed=seed + 4), gemm(8192, "fp32", 22.0 * scale, seed=seed + 5),
            copy_row(0.51 * scale, seed=seed + 6)]
    unstable = gemm(2048, "fp16", 0.03 * scale, seed=seed + 7)
    unstable["warnings"] = ["unstable: IQR/median = 23%"]
    wrong = {"op": "gemm", "suite": "quick", "shape": {"m": 8192, "n": 8192, "k": 8192, "a_t": "N", "b_t": "N"},
             "precision": "fp8", "status": "wrong", "error": 0.4, "tolerance": 0.1,
             "message": "relative error 0.4 > tolerance 1e-01: not timed", "metrics": {"label": "8192x8192x8192 NN"}}
    return rows + [unstable, wrong]


def model_rows() -> list[dict]:
    """A ResNet-50 training ladder at batch 256 and a batch sweep of two recipes; one rung ran out of memory."""
    recipes = [("fp32", 1064), ("tf32", 2219), ("amp_bf16", 2452), ("amp_bf16_cl", 4717)]
    rows = []
    for rung, (recipe, ips) in enumerate(recipes):
        for batch in (64, 128, 256):
            speed = ips * (0.7 + 0.3 * batch / 256)
            row = {"op": "model", "suite": "models", "shape": {"model": "resnet50", "mode": "train", "batch": batch},
                   "precision": recipe, "warnings": [],
                   "metrics": {"throughput": speed, "unit": "img/s", "speedup_fp32": ips / 1064, "rung": rung,
                               "peak_mem_gib": 27.0 / (1 + rung), "mfu": 0.1 * (rung + 1),
                               "accuracy": {"rel_error": 1e-3 * rung, "top1_agree": 1.0 - 0.01 * rung}}}
            rows.append(timed(row, batch / speed * 1e3, seed=rung * 10 + batch))
    rows.append({"op": "model", "suite": "models", "shape": {"model": "resnet50", "mode": "train", "batch": 256},
                 "precision": "amp_fp16_compile", "status": "oom", "message": "CUDA out of memory",
                 "metrics": {"rung": 4, "unit": "img/s"}})
    return rows


def advise_rows() -> list[dict]:
    """An advise run as tcperf.advisor stores it: one `advise.recipe` row a recipe, then one `advise.verdict`."""
    shape = {"model": "resnet50", "mode": "train"}
    rows = []
    for recipe, ms, status in (("fp32", 90.0, "ok"), ("tf32", 45.0, "ok"), ("fp16", 30.0, "wrong"),
                               ("amp_bf16", 38.0, "ok")):
        row = {"op": "advise.recipe", "shape": shape, "precision": recipe, "tolerance": 0.05, "warnings": [],
               "error": 0.3 if status == "wrong" else 0.01,
               "metrics": {"label": "resnet50", "speedup_fp32": 90.0 / ms,
                           "tc_share": 0.0 if recipe == "fp32" else 0.9}}
        row = timed(row, ms, seed=int(ms))
        row.update(status=status, message="relative error 0.3 > 0.05" if status == "wrong" else "")
        rows.append(row)
    verdict = {"speed_measured": True, "recommended": "amp_bf16", "candidate": None,
               "passing": ["fp32", "tf32", "amp_bf16"], "failing": {"fp16": "relative error 0.3 > 0.05"},
               "fixes": [{"module": "fc", "kind": "linear", "shape": "256x2048x1001", "fix": "pad n 1001->1008",
                          "gain": 1.4, "saved_share": 0.01, "share": 0.02}],
               "snippets": {"training": "model = model.to(memory_format=torch.channels_last)\n"
                                        "with torch.autocast('cuda', torch.bfloat16):\n    loss = model(x).sum()"},
               "speedup": 90.0 / 38.0, "median_ms": 38.0, "iqr_ms": 0.4,
               "accuracy": {"criterion": "rel_error", "error": 0.01}, "gave_up": []}
    rows.append({"op": "advise.verdict", "shape": shape, "precision": "amp_bf16", "status": "ok", "tolerance": 0.05,
                 "metrics": {"label": "resnet50", "verdict": verdict, "snippets": verdict["snippets"],
                             "lint": [{"module": "fc", "shape": "256x2048x1001",
                                       "issues": "n=1001 not a multiple of 8"}],
                             "sensitive": {}}})
    return rows


def lab_rows() -> list[dict]:
    """vector_add from 2^12 to 2^26 elements: numpy wins small, the GPU (copies included) wins from 2^20."""
    rows = []
    for i, exp in enumerate(range(12, 27, 2)):
        size = 2 ** exp
        numpy_ms = size * 4e-7
        row = {"op": "lab.vector_add", "suite": "lab", "shape": {"size": size}, "precision": "fp32", "warnings": [],
               "metrics": {"numpy_ms": numpy_ms, "torch_ms": 0.004 + size * 1e-9,
                           "e2e_pageable_ms": 0.05 + size * 1.2e-7 + (0.3 if exp < 20 else 0),
                           "e2e_pinned_ms": 0.03 + size * 6e-8 + (0.3 if exp < 20 else 0)}}
        rows.append(timed(row, 0.003 + size * 1e-9, seed=100 + i))
    return rows


def ceiling_rows(scale: float = 1.0) -> list[dict]:
    figures = {"fp64": 62, "fp32": 50, "tf32": 390, "fp16": 747, "bf16": 744, "fp8": 1297}
    rows = [{"op": "ceiling", "suite": "ceilings", "shape": {"what": "gemm 8192"}, "precision": p, "status": "ok",
             "tflops": v * scale, "median_ms": 1.0, "iqr_ms": 0.01, "n": 20} for p, v in figures.items()]
    rows.append({"op": "ceiling", "suite": "ceilings", "shape": {"what": "copy"}, "precision": "bandwidth",
                 "status": "ok", "gbps": 4250.0 * scale, "median_ms": 0.5, "iqr_ms": 0.005, "n": 20})
    return rows


def store_run(store: Store, kind: str, rows: list[dict], env: dict | None = None, status: str = "done",
              warnings=()) -> int:
    run_id = store.start_run(kind, f"tcperf {kind}", env or gpu_env())
    for r in rows:
        store.add_result(run_id, Result.from_row(r))
    store.finish_run(run_id, status, list(warnings))
    return run_id


def full_run(store: Store, env: dict | None = None) -> int:
    """One run holding every kind of row, and a run-level warning."""
    return store_run(store, "run", kernel_rows() + model_rows() + advise_rows() + lab_rows(), env,
                     warnings=["other processes use the GPU (pids 4242): figures may be low"])
