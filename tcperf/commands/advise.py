"""`tcperf advise path/to/file.py:factory`: for your own model, which precision setup to use, how much faster it is,
and what it costs in accuracy; stored as a run of kind "advise".

    tcperf advise examples/awkward_mlp.py:factory                  # inference, default tolerance 0.05
    tcperf advise examples/fp16_overflow.py:factory --mode train --json
    tcperf advise examples/bert_stream.py:factory --steps 10000    # a workload of varying shapes, a job's length

factory() returns a model, (model, example_inputs), or {"model", "inputs", "loss_fn"?, "metric_fn"?, "workload"?}
(workload: a list of per-step inputs or workload(step) -> inputs; tcperf.workload). --steps N weighs one-time costs
(compiles, CUDA graph captures) against N steps of saving; without it, training and serving jobs are taken to run far
longer than a compile, and the advice says from how many steps each one-time cost pays back.
Nothing of the user's runs in this process: a problem loading the model (the file, the factory, inputs the model
rejects, a hang, a crash) is one line naming the stage and exit status 2, before anything is stored
(tcperf.advisor.probe). A recipe that hangs past --timeout or kills its worker is recorded as such and the others go
on; each row is stored as it arrives, so an interrupted advice keeps them.
"""
from __future__ import annotations

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from .. import env as envmod
from .. import peaks, source
from ..advisor import api, trials
from ..advisor.result import recipe_row
from ..recipes import parse_list
from ..store import Store
from ..errors import UserError
from .common import (add_db, add_device, add_json, command_line, console, err_console, positive_number,
                     print_json)


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
    add_device(p)
    add_db(p)
    add_json(p)


def main(args) -> int:
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
