"""Data-parallel training on N GPUs: `tcperf models --nproc N` beside plain torch.distributed loops of the same
step, in one call, at each rank count of --world (default: every visible GPU). Each row of ROWS is measured both
ways and printed as the ratio tcperf / plain of the N-GPU throughput; tcperf's rows add the scaling efficiency
(against one GPU) and where the step's time goes (compute, exposed all-reduce / all-gather / reduce-scatter, idle:
tcperf.distributed.overlap.breakdown) with its cause in one sentence. Nothing here is fixed to 2 or 4 ranks: 8 runs
the same code.

    resnet50-ddp        ResNet-50, batch 256 a GPU, amp_bf16 + channels_last, DDP            (tcperf: channels_last)
    gpt2-ddp-compile    GPT-2 small, batch 16 x 1024 a GPU, amp_bf16 + torch.compile + fused AdamW, DDP
                                                                                             (tcperf: fused)
    gpt2-fsdp2          GPT-2 small under FSDP2, amp_bf16, eager                             (tcperf: amp_bf16)
    gpt2-fsdp2-compile  GPT-2 small under FSDP2, amp_bf16 + torch.compile + fused AdamW       (tcperf: fused)
    gpt2-fsdp2-compile-dynamic  the same with torch.compile's default `dynamic` (a user's first try), against
                        the same tcperf row: what the default costs under FSDP2, not a twin of tcperf's step

The plain loop is what a user writes: torch.multiprocessing.spawn, one process a GPU, DDP(gradient_as_bucket_view=
True, bucket_cap_mb=25, static_graph unless compiled) or FSDP2 (fully_shard on every block with
MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32), every block but the last resharded after forward, the
root last), torch.compile(dynamic=False) of the wrapped model as tcperf's recipes compile (on two H200s at c41fb7d
the plain FSDP2 loop compiled with the default took 1.43x tcperf's step time, no faster than eager), AdamW (fused
where tcperf's recipe is, the `fused` rung; as users write it, foreach, below: until 2026-11-26 the plain loops were
fused on every row, tcperf's rungs below `fused` were not, and the GPT-2 rows read 0.88-0.97 of the plain loop),
autocast bf16 for forward and loss; WARMUP steps, then STEPS steps between two CUDA events, the slowest rank's mean
(all_reduce MAX), the median of REPEATS. Only the model definitions and synthetic batches come from tcperf.models
(so both sides train the same network); nothing of tcperf's measuring is used.

    python benchmarks/ddp_gpu.py --out DIR [--world 2,4] [--db PATH] [--rows resnet50-ddp,gpt2-fsdp2] [--one-gpu]
    python benchmarks/ddp_gpu.py --check --out DIR     # CPU: gloo on 2 and on 4 processes, small models, eager rows

Target: ratio tcperf / plain within 3% of 1 on every row, scaling efficiency >= 0.97. Anchor on 2 x H200 (NVLink,
torch 2.11): ResNet-50 bf16 + channels_last eager, DDP: 4,641 img/s on one GPU, 9,254 on two. Writes ddp_gpu.json
under --out after every part (a part that fails or runs out of time is recorded, the next one runs): rows[name]["x4"]
holds a row's plain loop, tcperf's figures and their ratio at 4 ranks. About 7 minutes a rank count on 2 x H200
(torch.compile of GPT-2 is most of it); --budget stops starting parts when time runs short.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass

import torch
import torch.distributed as dist

# beside this script: a command run with a timeout and killed whole, the report's parts, a rank, the clock
from comm_gpu import child_json, free_port, join, loop_ms, recorder, slowest, tcperf
from hand_loops import adamw  # beside this script: the plain loops' optimizer, as users write it
from tcperf.distributed import overlap  # the breakdown's line, as `tcperf models` prints it

WITHIN, TARGET = 0.03, 0.97
WARMUP = {"gpu": 5, "cpu": 2}
STEPS = {"gpu": 20, "cpu": 3}
REPEATS = {"gpu": 3, "cpu": 2}


@dataclass(frozen=True)
class Row:
    name: str
    model: str
    parallel: str           # ddp | fsdp2
    compile: bool
    recipe: str             # tcperf's recipe for the same step
    channels_last: bool = False
    fused: bool = False     # AdamW(fused=True): as the recipe (the `fused` rung and above), else foreach
    dynamic: bool | None = False    # torch.compile's dynamic: False as tcperf's recipes; None, its default
    bucket_cap_mb: float = 25.0     # DDP's buckets (tcperf.distributed.parallel.PARALLELS' options, by hand)
    bucket_view: bool = True        # DDP's gradient_as_bucket_view
    reshard: bool = True            # FSDP2: every block but the last resharded after forward; False: none


ROWS = [Row("resnet50-ddp", "resnet50", "ddp", False, "channels_last", channels_last=True),
        Row("gpt2-ddp", "gpt2", "ddp", False, "amp_bf16"),
        Row("gpt2-ddp-compile", "gpt2", "ddp", True, "fused", fused=True),
        Row("gpt2-fsdp2", "gpt2", "fsdp2", False, "amp_bf16"),
        Row("gpt2-fsdp2-compile", "gpt2", "fsdp2", True, "fused", fused=True),
        Row("gpt2-fsdp2-compile-dynamic", "gpt2", "fsdp2", True, "fused", fused=True, dynamic=None)]
def strategy_row(model: str, option: str) -> str:
    """The row of `option` for the advice's recipe on `model`: 'gpt2-fused-ddp_bucket100'."""
    return f"{model}-{STRATEGY_RECIPES[model]['recipe']}-{option}"


# The options `tcperf advise --nproc N` times (tcperf.advisor.strategy.OPTIONS), each by hand, for the recipe the
# advice is run with on each model (benchmarks/strategy_gpu.py): GPT-2 small under `fused`, ResNet-50 `channels_last`
OPTION_FIELDS = {"ddp": {}, "ddp_bucket100": {"bucket_cap_mb": 100.0}, "ddp_no_view": {"bucket_view": False},
                 "fsdp2": {}, "fsdp2_no_reshard": {"reshard": False}}
STRATEGY_RECIPES = {"gpt2": dict(recipe="fused", compile=True, fused=True), "resnet50": dict(recipe="channels_last",
                    compile=False, channels_last=True)}
ROWS += [Row(strategy_row(model, option), model, option.split("_")[0], **STRATEGY_RECIPES[model], **fields)
         for model in STRATEGY_RECIPES for option, fields in OPTION_FIELDS.items()]
DEFAULT_ROWS = {"gpu": "resnet50-ddp,gpt2-ddp-compile,gpt2-fsdp2,gpt2-fsdp2-compile,gpt2-fsdp2-compile-dynamic",
                "cpu": "gpt2-ddp,gpt2-fsdp2"}


# --- the plain loop (in each spawned rank) ------------------------------------------------------------------------
def plain_rank(rank: int, world: int, port: int, row: dict, kind: str, config: str, out_file: str) -> None:
    """One rank of the plain loop for `row`; rank 0 writes what it measured."""
    if kind != "gpu":
        torch.set_num_threads(1)        # ranks share the host's cores
    device = join(rank, world, port, kind)
    step, items = plain_step(Row(**row), device, config)
    for _ in range(WARMUP[kind]):
        step()                          # the first compiles
    times = [slowest(loop_ms(step, device, STEPS[kind]), device) for _ in range(REPEATS[kind])]
    if rank == 0:
        step_ms = statistics.median(times)
        with open(out_file, "w") as f:
            json.dump({"step_ms": step_ms, "repeats_ms": times, "throughput": world * items / (step_ms * 1e-3),
                       "world": world}, f)
    dist.barrier()                  # no rank tears down gloo/NCCL while another is mid-collective
    dist.destroy_process_group()


def plain_step(row: Row, device, config: str):
    """The training step a user writes for `row`: (step, items a rank processes in one)."""
    from tcperf import models        # the model definitions and synthetic batches only
    mod = models.get(row.model)
    cfg = mod.CONFIGS[config]
    inputs, targets = mod.make_batch(cfg, cfg["batch"], device, torch.Generator(device=device).manual_seed(1))
    torch.manual_seed(0)
    model = mod.build(cfg).to(device)
    if row.channels_last:
        model = model.to(memory_format=torch.channels_last)
        inputs = tuple(x.contiguous(memory_format=torch.channels_last) for x in inputs)
    torch.backends.cudnn.benchmark = True
    model = ddp(model, device, row) if row.parallel == "ddp" else fsdp2(model, row.reshard)
    runner = torch.compile(model, dynamic=row.dynamic) if row.compile else model
    opt = adamw(model.parameters(), mod.OPTIMIZER, fused=row.fused and device.type == "cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = mod.loss_fn(runner(*inputs), targets)
        loss.backward()
        opt.step()
    return step, mod.items_per_batch(cfg, cfg["batch"])


def ddp(model, device, row: Row):
    ids = [device.index] if device.type == "cuda" else None
    return torch.nn.parallel.DistributedDataParallel(model, device_ids=ids, gradient_as_bucket_view=row.bucket_view,
                                                     bucket_cap_mb=row.bucket_cap_mb, static_graph=not row.compile)


def fsdp2(model, reshard: bool = True):
    """torchtitan's way: every block (a model without `blocks`, such as ResNet-50: none), then the root; bf16
    parameters, fp32 gradient reduction; reshard: every block but the last resharded after forward, else none."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    blocks = list(getattr(model, "blocks", []))
    for i, block in enumerate(blocks):
        fully_shard(block, mp_policy=policy, reshard_after_forward=reshard and i < len(blocks) - 1)
    fully_shard(model, mp_policy=policy, reshard_after_forward=reshard)
    return model


def plain_main(a) -> int:
    """--plain ROW: spawn the ranks, print rank 0's figures as JSON (run in a child the parent can time out)."""
    import torch.multiprocessing as mp
    row = next(r for r in ROWS if r.name == a.plain)
    world = int(a.world)
    path = os.path.join(a.out, f"plain-{row.name}-x{world}.json")
    mp.spawn(plain_rank, args=(world, free_port(), asdict(row), a.kind, a.config, path), nprocs=world)
    with open(path) as f:
        print(json.dumps(json.load(f)))
    return 0


# --- the parent ---------------------------------------------------------------------------------------------------
def plain(row: Row, world: int, kind: str, config: str, out: str, timeout: float) -> dict:
    """The plain loop of `row` on `world` ranks, in a child process this one can stop whole."""
    return child_json([sys.executable, os.path.abspath(__file__), "--plain", row.name, "--world", str(world),
                       "--kind", kind, "--config", config, "--out", out], timeout)


def tcperf_rows(model: str, rows: list[Row], kind: str, config: str, batch: int, world: int, db,
                timeout: float) -> list[dict]:
    """One `tcperf models MODEL --nproc WORLD` call for every row of the model: its rows as stored."""
    recipes = ",".join(dict.fromkeys(r.recipe for r in rows))
    parallels = ",".join(dict.fromkeys(r.parallel for r in rows))
    argv = ["models", model, "--recipes", recipes, "--nproc", str(world), "--parallel", parallels, "--batch",
            str(batch), "--steps", "4" if kind == "gpu" else "2", "--rep-ms", "600" if kind == "gpu" else "20",
            "--timeout", str(timeout), *(["--device", "cpu", "--small"] if kind == "cpu" else []), *db]
    return tcperf(argv, timeout)["results"]


def tcperf_figures(row: Row, results: list[dict]) -> dict:
    """tcperf's N-rank row for `row` (recipe and parallel) and its one-GPU throughput."""
    for r in results:
        s, m = r.get("shape") or {}, r.get("metrics") or {}
        if r["precision"] == row.recipe and s.get("parallel") == row.parallel:
            return {"status": r["status"], "message": r.get("message"), "throughput": m.get("throughput"),
                    "step_ms": r.get("mean_ms"), "scaling_efficiency": m.get("scaling_efficiency"),
                    "one_gpu_throughput": m.get("one_gpu_throughput"), "unit": m.get("unit"),
                    "exposed_comm_share": m.get("exposed_comm_share"), "comm_ms": m.get("comm_ms"),
                    "exposed_comm_ms": m.get("exposed_comm_ms"), "parallel_options": m.get("parallel_options"),
                    "breakdown": m.get("breakdown"), "breakdown_ms": m.get("breakdown_ms"), "cause": m.get("cause")}
    return {"status": "missing", "message": f"no {row.recipe} {row.parallel} row in tcperf's output"}


def main() -> int:
    a = parse()
    if a.plain:
        return plain_main(a)
    kind = "cpu" if a.check else "gpu"
    worlds, why = rank_counts(a.world, kind)
    if why:
        print(f"ddp_gpu.py: {why}", file=sys.stderr)
        return 2
    names = (a.rows or DEFAULT_ROWS[kind]).split(",")
    unknown = [n for n in names if n not in {r.name for r in ROWS}]
    if unknown:
        print(f"ddp_gpu.py: unknown row {unknown[0]!r}; choose from {', '.join(r.name for r in ROWS)}", file=sys.stderr)
        return 2
    os.makedirs(a.out, exist_ok=True)
    report = run_rows([r for r in ROWS if r.name in names], worlds, kind, a)
    entries = [e for row in report["rows"].values() for w, e in row.items() if w in {f"x{n}" for n in worlds}]
    ok = [e for e in entries if e.get("ratio")]
    if a.check:
        return 0 if len(ok) == len(names) * len(worlds) else 1
    twins = [e for e in ok if e["dynamic"] is not None]     # the -dynamic row is a user's default, not a twin
    return 0 if len(ok) == len(names) * len(worlds) and all(e["within_3pct"] for e in twins) else 1


def rank_counts(text: str | None, kind: str) -> tuple[list[int], str | None]:
    """--world '2,4' -> [2, 4]; default every visible GPU (at least 2), or 2 and 4 gloo processes with --check;
    (counts, None) or ([], why not)."""
    gpus = torch.cuda.device_count() if kind == "gpu" else None
    if text is None:
        text = "2,4" if kind == "cpu" else str(max(2, gpus))
    try:
        worlds = [int(w) for w in text.split(",")]
    except ValueError:
        return [], f"bad --world {text!r}; give rank counts such as 2,4"
    if min(worlds) < 2:
        return [], f"bad --world {text!r}; data-parallel training needs at least 2 ranks"
    if gpus is not None and max(worlds) > gpus:
        return [], f"--world {max(worlds)} needs {max(worlds)} CUDA GPUs, {gpus} visible (or give --check)"
    return worlds, None


def run_rows(rows: list[Row], worlds: list[int], kind: str, a) -> dict:
    """Model by model and rank count by rank count: the plain loop of each row, then one tcperf call for the model;
    ratios as they come."""
    config = "small" if kind == "cpu" else "full"
    report: dict = {"device": torch.cuda.get_device_name(0) if kind == "gpu" else "cpu (gloo)",
                    "torch": torch.__version__, "config": config, "target": TARGET, "worlds": worlds, "parts": {},
                    "rows": {}}
    part, start = recorder(report, os.path.join(a.out, "ddp_gpu.json")), time.time()
    left = lambda: min(a.part_timeout, a.budget - (time.time() - start))   # noqa: E731
    from tcperf import models
    for model in dict.fromkeys(r.model for r in rows):
        mine = [r for r in rows if r.model == model]
        batch = models.get(model).CONFIGS[config]["batch"]
        if a.one_gpu:
            for r in mine:
                report["rows"].setdefault(r.name, {})["plain_x1"] = part(
                    f"plain {r.name} x1", lambda: guarded(left(), plain, r, 1, kind, config, a.out))
        for world in worlds:
            rank_count(report, part, left, model, mine, world, batch, kind, config, a)
    return report


def rank_count(report: dict, part, left, model: str, mine: list[Row], world: int, batch: int, kind: str,
               config: str, a) -> None:
    """The rows of one model at `world` ranks: each plain loop, one tcperf call, the comparison printed."""
    key = f"x{world}"
    for r in mine:
        report["rows"].setdefault(r.name, {})[key] = {"plain": part(
            f"plain {r.name} {key}", lambda: guarded(left(), plain, r, world, kind, config, a.out))}
    db = ["--db", a.db] if a.db else []
    results = part(f"tcperf {model} {key}", lambda: guarded(left(), tcperf_rows, model, mine, kind, config, batch,
                                                            world, db)) or []
    for r in mine:
        entry = report["rows"][r.name]
        entry[key].update(tcperf=tcperf_figures(r, results), world=world, **asdict(r))
        finish(entry[key], entry.get("plain_x1"))
    part(f"compare {model} {key}", lambda: None)


def guarded(limit: float, fn, *args):
    """fn(*args, timeout=limit), unless too little of the budget is left to start it."""
    if limit < 30:
        raise TimeoutError(f"only {limit:.0f} s of the budget left: not started")
    return fn(*args, limit)


def finish(entry: dict, plain1: dict | None) -> None:
    """The ratio tcperf / plain of the N-GPU throughput (and the plain loop's own scaling with --one-gpu); printed
    with tcperf's efficiency and where its step goes."""
    plain, tc, n = entry.get("plain") or {}, entry["tcperf"], entry["world"]
    ratio = tc.get("throughput") / plain["throughput"] if tc.get("throughput") and plain.get("throughput") else None
    entry.update(ratio=ratio, within_3pct=ratio is not None and abs(ratio - 1) <= WITHIN)
    if (plain1 or {}).get("throughput") and plain.get("throughput"):
        entry["plain_scaling_efficiency"] = plain["throughput"] / (n * plain1["throughput"])
    print(f"  {entry['name']} x{n}: plain {plain.get('throughput') or 0:,.0f}, tcperf {tc.get('throughput') or 0:,.0f} "
          f"{tc.get('unit') or ''}: ratio tcperf/plain {ratio or 0:.3f}; tcperf efficiency "
          f"{tc.get('scaling_efficiency') or 0:.3f} {tc.get('message') or ''}"[:300], flush=True)
    print(f"    where a step goes: {overlap.breakdown_line(tc['breakdown'])}; the cause: {tc['cause']}"
          if tc.get("breakdown") else "    where a step goes: not measured", flush=True)


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="out")
    p.add_argument("--db", default=None)
    p.add_argument("--rows", default=None, help=f"comma-separated, from {', '.join(r.name for r in ROWS)}")
    p.add_argument("--one-gpu", action="store_true", help="also the plain loops on one GPU (their own efficiency)")
    p.add_argument("--budget", type=float, default=540.0, help="seconds for all parts (no part starts with < 30 s)")
    p.add_argument("--part-timeout", type=float, default=300.0)
    p.add_argument("--world", default=None,
                   help="rank counts, e.g. 2,4 (default: every visible GPU, at least 2; --check: 2,4)")
    p.add_argument("--check", action="store_true", help="CPU: gloo on 2 and 4 processes, small models (does it run?)")
    p.add_argument("--plain", default=None, help=argparse.SUPPRESS)     # in the child: one row's plain loop
    p.add_argument("--kind", default="gpu", help=argparse.SUPPRESS)
    p.add_argument("--config", default="full", help=argparse.SUPPRESS)
    return p.parse_args()


if __name__ == "__main__":
    sys.exit(main())
