"""`tcperf advise path/to/file.py:factory`: for your own model, which precision setup to use, how much faster it is,
and what it costs in accuracy; stored as a run of kind "advise".

    tcperf advise examples/awkward_mlp.py:factory                  # inference, default tolerance 0.05
    tcperf advise examples/fp16_overflow.py:factory --mode train --json
    tcperf advise examples/bert_stream.py:factory --steps 10000    # a workload of varying shapes, a job's length
    tcperf advise examples/gpt2_small.py:factory --mode train --nproc 4   # DDP or FSDP2 on 4 GPUs, and how

factory() returns a model, (model, example_inputs), or {"model", "inputs", "loss_fn"?, "metric_fn"?, "workload"?}
(workload: a list of per-step inputs or workload(step) -> inputs; tcperf.workload). --steps N weighs one-time costs
(compiles, CUDA graph captures) against N steps of saving; without it, training and serving jobs are taken to run far
longer than a compile, and the advice says from how many steps each one-time cost pays back.
Nothing of the user's runs in this process: a problem loading the model (the file, the factory, inputs the model
rejects, a hang, a crash) is one line naming the stage and exit status 2, before anything is stored
(tcperf.advisor.probe). A recipe that hangs past --timeout or kills its worker is recorded as such and the others go
on; each row is stored as it arrives, so an interrupted advice keeps them.

With --nproc N (training): which way to spread the step over N GPUs instead of which precision
(tcperf.advisor.strategy): DDP and FSDP2 with their options, each timed on your model at N ranks under one recipe,
the fastest that passes the accuracy check picked, where each one's step goes, and a training script to paste with
its torchrun line. It is an advise option, not a `models --parallel auto`, because the question is about the
user's model, which only advise loads (FILE:factory); the ladder's models reach it through examples/gpt2_small.py
and examples/resnet50.py.
"""
from __future__ import annotations

import os
import tempfile

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from .. import env as envmod
from .. import peaks, source
from ..advisor import api, strategy, trials
from ..advisor.result import recipe_row
from ..distributed import overlap
from ..recipes import get as get_recipe
from ..recipes import parse_list
from ..records import Job
from ..store import Store
from ..errors import UserError
from ..table import fmt_ms, status_cell
from .common import (add_db, add_device, add_json, command_line, console, err_console, measure_into_store,
                     positive_number, print_json, print_stored)
from .models import accuracy_cell


def add_parser(sub) -> None:
    p = sub.add_parser("advise")
    p.add_argument("target", help="path/to/file.py:factory (factory() returns a model, (model, inputs) or a dict)")
    p.add_argument("--mode", default="infer", help="infer | train (default: infer)")
    p.add_argument("--tolerance", type=positive_number, default=None,
                   help="infer: output relative error allowed against fp32 strict (default 0.05); train: share "
                        "of fp32's loss fall over the steps a recipe may lose (default 0.10)")
    p.add_argument("--recipes", default=None, help="recipes to try: ladder (default) or a comma-separated list, e.g. fp32,tf32,amp_bf16")
    p.add_argument("--steps", type=int, default=None,
                   help="steps the job runs: the pick is the cheapest job (one-time compile and capture cost + steps "
                        "x step time); default: a job long enough that one-time costs vanish")
    p.add_argument("--check-steps", type=int, default=trials.TRAIN_STEPS,
                   help=f"training steps the accuracy check compares against fp32 (train mode; default "
                        f"{trials.TRAIN_STEPS})")
    p.add_argument("--timeout", type=positive_number, default=trials.DEFAULT_TIMEOUT,
                   help=f"seconds one recipe (or one stage of loading the model) may take, compile included "
                        f"(default {trials.DEFAULT_TIMEOUT:.0f})")
    p.add_argument("--budget", type=positive_number, default=None,
                   help="seconds the whole advice may take: recipes that would not finish in time are not started, "
                        "a warm-up under way is stopped, and the advice names them (default: no limit on one "
                        f"input; {api.WORKLOAD_BUDGET_S:.0f} s with a workload, whose recipes are measured one at a "
                        "time)")
    p.add_argument("--jobs", type=int, default=None,
                   help="recipes prepared (compiled) at once in parallel workers (default: 5 for every 8 "
                        "cores, at most 10, on a GPU)")
    p.add_argument("--nproc", type=int, default=None,
                   help="--mode train on N ranks (one a GPU; gloo processes on a CPU): DDP and FSDP2 with their "
                        "options timed on your model, the fastest that passes the accuracy check picked, and a "
                        "script to paste; --recipes names the one recipe they share (default: amp_bf16 on a GPU, "
                        "fp32 on a CPU); --timeout is per option")
    add_device(p)
    add_db(p)
    add_json(p)


def main(args) -> int:
    if args.nproc is not None:
        return strategy_main(args)
    device = envmod.parse_device(args.device)
    recipes = parse_list(args.recipes) if args.recipes else None
    tol = api.check_args(args.mode, args.tolerance, recipes, args.check_steps, args.timeout, args.budget, args.jobs,
                         args.steps)
    path, factory = source.split_target(args.target)
    if not path.is_file():
        raise UserError(f"no such file: {path} (give path/to/file.py:factory)")
    name = f"{path.name}:{factory}"      # what the output is titled and stored as: one file may hold many factories
    log = (lambda text: err_console.print(text, style="dim", markup=False))     # stderr: --json's stdout stays JSON
    store = Store.open(args.db).writable()     # the run starts with the first result: refuse a read-only store now
    run_id, status = None, "interrupted"
    shape = {"model": name, "mode": args.mode}

    def stored(r) -> None:
        nonlocal run_id
        if run_id is None:           # the run starts with the first result: bad input stores nothing
            run_id = store.start_run("advise", command_line(), envmod.collect(device))
        store.add_result(run_id, recipe_row(r, shape, tol))

    try:
        with _progress(args.json) as progress:
            advice = api.run(mode=args.mode, tolerance=args.tolerance, device=device, recipes=recipes,
                             steps=args.steps, check_steps=args.check_steps, log=log, timeout=args.timeout,
                             target=args.target, on_result=stored, budget=args.budget, jobs=args.jobs,
                             ceilings=peaks.measured(args.db, device), progress=progress)
        advice.model = name
        if run_id is None:
            run_id = store.start_run("advise", command_line(), advice.env)
        store.add_result(run_id, advice.verdict_row())
        status = "done"
    finally:
        if run_id is not None:
            store.finish_run(run_id, status, advice.notes if status == "done" else [])
    if args.json:
        print_json({"run": run_id, **advice.to_dict()})
    else:
        console.print(advice)
        err_console.print(f"[dim]stored as run {run_id}[/]")
    return 0


class _progress:
    """A rich progress bar on stderr with the search's estimate of the time left (nothing with --json)."""

    def __init__(self, quiet: bool):
        self.bar = None if quiet else Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                               TextColumn("~{task.fields[left]} left"), console=err_console,
                                               transient=True)

    def __enter__(self):
        if self.bar is None:
            return None
        self.bar.start()
        self.task = self.bar.add_task("advise: the probe", total=None, left="?")
        return self

    def __call__(self, done: int, total: int, seconds_left: float, recipe: str) -> None:
        self.bar.update(self.task, completed=done, total=total, description=f"advise: {recipe}",
                        left=f"{seconds_left:.0f} s")

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.stop()


# --- --nproc N: the parallel strategy ---------------------------------------------------------------------------------
def strategy_main(args) -> int:
    """DDP against FSDP2 and their options on the user's model at N ranks (tcperf.advisor.strategy), each row stored
    as it comes, then the pick's row; printed from the store."""
    device = envmod.parse_device(args.device)
    recipe = _strategy_recipe(args, device)
    with tempfile.TemporaryDirectory() as folder:
        cases = strategy.cases(args.target, recipe, args.nproc, args.check_steps, os.path.join(folder, "ref.pt"))
        job = Job(timeout=args.timeout, ceilings=peaks.measured(args.db, device) or None)

        def run_and_pick(cases, device, job, *, on_result):
            on_result(strategy.pick_row(strategy.run(cases, device, job, on_result=on_result), args.target))
        run_id, _, store = measure_into_store("advise", cases, args, job, label="parallel strategies",
                                              runner=run_and_pick)
    return print_stored(args, store, run_id, lambda: print_strategy(store.results(run_id), console))


def _strategy_recipe(args, device) -> str:
    """--nproc's input checked (one line and exit 2 when wrong): the recipe the options share."""
    from ..distributed import launch
    if launch.under_torchrun():
        raise UserError("tcperf advise --nproc starts its own ranks on this host; run it without torchrun")
    if args.mode != "train":
        raise UserError("--nproc advises on data-parallel training; give --mode train")
    if args.nproc < 2:
        raise UserError(f"bad --nproc {args.nproc}; DDP and FSDP2 spread training over 2 ranks or more")
    launch.check_nproc(args.nproc, device)          # more ranks than GPUs: one line
    names = parse_list(args.recipes) if args.recipes else ["amp_bf16" if device.type == "cuda" else "fp32"]
    if len(names) != 1:
        raise UserError(f"--nproc compares the parallel strategies under one recipe; give one, not {len(names)}")
    if get_recipe(names[0]).step_graph:
        raise UserError(f"--nproc: {names[0]} captures the whole step in a CUDA graph, which is not measured across "
                        "ranks; give a recipe below it (e.g. fused)")
    path, _ = source.split_target(args.target)
    if not path.is_file():
        raise UserError(f"no such file: {path} (give path/to/file.py:factory)")
    return names[0]


def print_strategy(rows: list[dict], out) -> None:
    """The options' table (one GPU first), where each step goes, the pick and the script to paste."""
    verdict = next((r for r in rows if r["op"].endswith(".pick")), None)
    timed = [r for r in rows if r is not verdict]
    t = Table(title=f"{timed[0]['shape']['model']} · train · {timed[0]['precision']} · parallel strategies"
              if timed else "parallel strategies")
    for col in ("option", "status", "total throughput", "per GPU", "efficiency", "step ms (median ± IQR)",
                "accuracy", "note"):
        t.add_column(col, justify="left" if col in ("option", "status", "accuracy", "note") else "right")
    for r in timed:
        m = r.get("metrics") or {}
        n = (r.get("shape") or {}).get("nproc") or 1
        t.add_row(m.get("parallel") or "one GPU", status_cell(r["status"]),
                  f"{m['throughput']:,.0f} {m.get('unit', '')}" if m.get("throughput") else "",
                  f"{m['throughput'] / n:,.0f}" if m.get("throughput") else "",
                  f"{m['scaling_efficiency']:.2f}" if m.get("scaling_efficiency") else "", fmt_ms(r),
                  accuracy_cell(r), r.get("message") or "; ".join(r.get("warnings") or []))
    out.print(t)
    for r in timed:
        m = r.get("metrics") or {}
        if m.get("breakdown"):
            out.print(f"  {m['parallel']}: {overlap.breakdown_line(m['breakdown'])}; {m['cause']}",
                      markup=False, highlight=False)
    if verdict is not None:
        v = verdict["metrics"]
        out.print(v["verdict"], markup=False, highlight=False)
        if v.get("script"):
            out.print(f"launch: {v['launch']}\n", markup=False, highlight=False)
            out.print(v["script"], markup=False, highlight=False)
