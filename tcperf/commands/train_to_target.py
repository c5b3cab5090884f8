"""`tcperf train-to-target [WORKLOAD]`: time to accuracy per precision recipe, DAWNBench's end-to-end measure.
Each recipe trains the workload N times (seeds 0..N-1) until the validation metric first reaches the target;
every run is stored as it ends (run kind "train-to-target"), then one summary row per recipe; the table gives the
median time to target and its spread, steps and epochs to target, the share of runs that reached it, the final
metric, throughput, warm-up/compile time and cost, and says when N is too small to tell two recipes apart.

    tcperf train-to-target                                          # bytes-gpt, sized for the device
    tcperf train-to-target bytes-gpt --target bpb=1.6 --recipe fp32,amp_bf16,compile --runs 5 --usd-per-hour 3
    tcperf train-to-target cifar10 --data ~/data/cifar-10-python.tar.gz --clock train
    tcperf train-to-target my_net.py:factory --data digits.npz --target accuracy=0.95 --device cpu

Every recipe runs in a worker process of its own: a crash, OOM or hang is recorded for that recipe and the others
go on. On a CPU (2 cores) the default (bytes-gpt "small", fp32, bpb 3.4) reaches its target in 5-20 s a run.
"""
from __future__ import annotations

from rich.table import Table

from .. import env as envmod
from .. import recipes
from .. import totarget
from ..errors import UserError
from ..store import Store
from ..table import status_cell
from ..totarget import clock as clocks
from ..totarget import bytes_gpt, loop, stats
from .common import add_db, add_device, add_json, console, measure_into_store, positive_number, print_stored

KIND = "train-to-target"
GPU_RECIPES = "fp32,tf32,amp_bf16,compile"
CPU_RECIPES = "fp32"


def add_parser(sub) -> None:
    p = sub.add_parser(KIND, description=__doc__.split("\n\n")[0])
    p.add_argument("workload", nargs="?", default=totarget.DEFAULT,
                   help=f"{' | '.join(totarget.WORKLOADS)} | file.py:factory (default: {totarget.DEFAULT})")
    p.add_argument("--target", default=None, metavar="METRIC=VALUE",
                   help="e.g. bpb=1.6 or accuracy=0.94 (default: the workload's, sized for the device)")
    p.add_argument("--recipe", "--recipes", dest="recipe", default=None,
                   help=f"ladder or a comma list (default: {GPU_RECIPES} on a GPU, {CPU_RECIPES} on a CPU)")
    p.add_argument("--runs", type=int, default=3, help="seeded runs per recipe (default 3)")
    p.add_argument("--seed", type=int, default=0, help="the first seed (default 0)")
    p.add_argument("--clock", default=clocks.DEFAULT, choices=list(clocks.CLOCKS),
                   help=f"what the clock counts (default {clocks.DEFAULT}): {clocks.help_text()}")
    p.add_argument("--data", default=None, help="cifar10: the official archive; imagefolder: DIR; npz: FILE; "
                                                "file.py:factory: DIR or FILE.npz")
    p.add_argument("--max-minutes", type=positive_number, default=None,
                   help="budget per run, wall time after initialisation (default 10 on a GPU, 3 on a CPU)")
    p.add_argument("--max-steps", type=int, default=None, help="budget per run in training steps")
    p.add_argument("--usd-per-hour", type=positive_number, default=None,
                   help="price of the machine, for the cost column")
    p.add_argument("--size", choices=list(bytes_gpt.SIZES), default=None,
                   help="bytes-gpt's configuration (default: gpu on a GPU, small on a CPU; gpu-narrow: the d=384 "
                        "model of the 2026-11-23 figures)")
    p.add_argument("--batch", type=int, default=None, help="batch size (default: the workload's)")
    p.add_argument("--epochs", type=positive_number, default=None,
                   help="cifar10: epochs the LR schedule plans (default 10)")
    p.add_argument("--image-size", type=int, default=None, help="imagefolder: images resized to this (default 32)")
    add_device(p)
    add_db(p)
    add_json(p)


def options_of(args, device) -> dict:
    for name in ("runs", "max_steps", "batch", "image_size"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UserError(f"bad --{name.replace('_', '-')} {value}; give a positive number")
    totarget.module_for(args.workload)
    size = args.size or ("gpu" if device.type == "cuda" else "small")
    return {"workload": args.workload, "data": args.data, "size": size, "batch": args.batch, "epochs": args.epochs,
            "image_size": args.image_size}


def main(args) -> int:
    device = envmod.parse_device(args.device)
    options = options_of(args, device)
    task = totarget.build(options, "cpu")          # bad data fails here, before anything is stored
    target = totarget.parse_target(args.target, task)
    clock = clocks.get(args.clock)
    minutes = args.max_minutes or (10.0 if device.type == "cuda" else 3.0)
    budget = loop.Budget(args.max_steps, minutes)
    names = recipes.parse_list(args.recipe or (GPU_RECIPES if device.type == "cuda" else CPU_RECIPES))
    runnable = [n for n in names if not recipes.get(n).skip_reason("train", device)]
    cases = [loop.case(options, n, args.seed + i, target, budget, clock.name, task.metric)
             for n in runnable for i in range(args.runs)]
    args.timeout, args.rep_ms, args.no_flush_l2, args.graph = minutes * 60 + 300, 0.0, True, False
    run_id, _, store = measure_into_store(KIND, cases, args, label="train to target")
    shape = {"workload": args.workload, task.metric: target, "clock": clock.name}
    runs = store.results(run_id)                   # the seeded runs, as stored
    for name in names:
        rows = [r for r in runs if r["precision"] == name] or [_skipped(name, device)]
        store.add_result(run_id, stats.summary_row(name, rows, shape, clock, target, task.higher_is_better,
                                                   args.usd_per_hour))
    return print_stored(args, store, run_id, lambda: print_run(store, run_id, console))


def _skipped(name: str, device) -> dict:
    return {"precision": name, "status": "skipped", "message": recipes.get(name).skip_reason("train", device) or "",
            "metrics": {}}


# --- the table ------------------------------------------------------------------------------------------------------
def _s(value, unit: str = " s") -> str:
    return f"{value:.3g}{unit}" if value is not None else ""


def summary_table(rows: list[dict], title: str) -> Table:
    t = Table(title=title)
    for col in ("recipe", "status", "reached", "time to target (median ± IQR)", "min-max", "steps", "epochs",
                "final", "throughput", "cost", "note"):
        t.add_column(col, overflow="fold", justify="left" if col in ("recipe", "status", "note") else "right")
    for r in rows:
        m = r.get("metrics") or {}
        t.add_row(r["precision"], status_cell(r["status"]), f"{m.get('reached', 0)}/{m.get('runs', 0)}",
                  f"{_s(m.get('median_s'))} ± {_s(m.get('iqr_s'), '')}" if m.get("median_s") is not None else "never",
                  f"{_s(m.get('min_s'), '')}-{_s(m.get('max_s'))}" if m.get("min_s") is not None else "",
                  _s(m.get("steps"), ""), _s(m.get("epochs"), ""), _s(m.get("final_metric"), ""),
                  f"{m['throughput']:,.0f} {m.get('unit', '')}" if m.get("throughput") else "",
                  f"${m['usd']:.4f}" if m.get("usd") is not None else "", r.get("message") or "")
    return t


SPLIT_COLUMNS = (("prep_s", "data prep", "prep"), ("warmup_s", "warm-up steps", "warmup"),
                 ("compile_s", "of it compiling", "warmup"), ("train_s", "training steps", None),
                 ("eval_s", "evaluations", "evaluation"))


def split_table(rows: list[dict], clock: clocks.Clock) -> Table | None:
    """Where each recipe's time to target went (medians over its runs), the parts its clock counts marked *."""
    rows = [r for r in rows if (r.get("metrics") or {}).get("split")]
    if not rows:
        return None
    t = Table(title=f"where the time went (median s; * on the {clock.name} clock)")
    t.add_column("recipe")
    for _, head, part in SPLIT_COLUMNS:
        t.add_column(head + ("*" if part is None or getattr(clock, part) else ""), justify="right")
    t.add_column("measured to")
    for r in rows:
        m = r["metrics"]
        t.add_row(r["precision"], *(_s(m["split"].get(key), "") for key, _, _ in SPLIT_COLUMNS),
                  "the target" if m.get("split_at") == "target" else "the run's end (target not reached)")
    return t


def verdicts(rows: list[dict]) -> list[str]:
    """Each recipe against the first (fp32 when it ran): the speed-up of the median, over how many runs, the steps
    it took against the first's, and whether N tells them apart."""
    timed = [r for r in rows if (r.get("metrics") or {}).get("median_s")]
    if len(timed) < 2:
        return []
    base = timed[0]["metrics"]
    return [f"{r['precision']} vs {timed[0]['precision']}: {base['median_s'] / r['metrics']['median_s']:.2f}x faster "
            f"to target (medians of {r['metrics']['reached']} and {base['reached']} runs){_steps(r['metrics'], base)}; "
            f"{stats.tell_apart(base['times_s'], r['metrics']['times_s'])}" for r in timed[1:]]


def _steps(m: dict, base: dict) -> str:
    if not m.get("steps") or not base.get("steps"):
        return ""
    return f", {m['steps']:,.0f} steps against {base['steps']:,.0f} ({m['steps'] / base['steps'] - 1:+.0%})"


def print_run(store: Store, run_id: int, out) -> None:
    """The summary table of a train-to-target run (what `tcperf show` prints for one)."""
    run = store.run(run_id)
    results = store.results(run_id)
    summary = [r for r in results if r["op"] == "totarget.recipe"]
    shape = summary[0]["shape"] if summary else (results[0]["shape"] if results else {})
    metric = next((k for k in shape if k not in ("workload", "clock", "seed")), "metric")
    clock = clocks.CLOCKS.get(shape.get("clock"), clocks.CLOCKS[clocks.DEFAULT])
    title = (f"run {run_id} · {shape.get('workload')} to {metric} {shape.get(metric)} · {run['device']} · "
             f"clock {clock.name} · {run['status']}")
    out.print(summary_table(summary, title) if summary else f"{title}: no summary (the run was cut short); "
              f"{len(results)} seeded run(s) stored")
    out.print(f"  clock {clock.name}: {clock.about}")
    split = split_table(stats.with_split(summary, results, shape.get(metric)), clock)
    if split is not None:
        out.print(split)
    for line in verdicts(summary):
        out.print("  " + line)
