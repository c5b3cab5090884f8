"""`tcperf advise path/to/file.py:factory`: for your own model, which precision setup to use, how much faster it is,
and what it costs in accuracy; stored as a run of kind "advise".

    tcperf advise examples/awkward_mlp.py:factory                  # inference, default tolerance 0.05
    tcperf advise examples/fp16_overflow.py:factory --mode train --json

factory() returns a model, (model, example_inputs), or {"model", "inputs", "loss_fn"?, "metric_fn"?}.
Any problem with the file, the factory or the inputs is one line and exit status 2, before anything is stored.
Each recipe runs in a worker process of its own; one that hangs past --timeout or kills its process is recorded
as such and the others go on. Each recipe's row is stored as it arrives, so an interrupted advice keeps them.
"""
from __future__ import annotations

from .. import env as envmod
from ..advisor import api, load, measure
from ..advisor.result import recipe_row
from ..recipes import parse_list
from ..store import Store
from .common import add_db, add_device, add_json, command_line, console, err_console, print_json


def add_parser(sub) -> None:
    p = sub.add_parser("advise", help="which precision setup to use for your model, measured (speed and accuracy)")
    p.add_argument("target", help="path/to/file.py:factory (factory() returns a model, (model, inputs) or a dict)")
    p.add_argument("--mode", default="infer", help="infer | train (default: infer)")
    p.add_argument("--tolerance", type=float, default=None,
                   help="infer: output relative error allowed against fp32 strict (default 0.05); train: share "
                        "of fp32's loss fall over the steps a recipe may lose (default 0.10)")
    p.add_argument("--recipes", default=None, help="recipes to try: ladder (default) or a comma-separated list, e.g. fp32,tf32,amp_bf16")
    p.add_argument("--steps", type=int, default=measure.TRAIN_STEPS,
                   help=f"training steps compared against fp32 (train mode; default {measure.TRAIN_STEPS})")
    p.add_argument("--timeout", type=float, default=measure.DEFAULT_TIMEOUT,
                   help=f"seconds one recipe may take, compile included (default {measure.DEFAULT_TIMEOUT:.0f})")
    add_device(p)
    add_db(p)
    add_json(p)
    p.set_defaults(func=main)


def main(args) -> int:
    device = envmod.parse_device(args.device)
    recipes = parse_list(args.recipes) if args.recipes else None
    tol = api.check_args(args.mode, args.tolerance, recipes, args.steps, args.timeout)   # before the model is built
    spec = load.load_spec(args.target)
    log = (lambda text: None) if args.json else (lambda text: err_console.print(text, style="dim", markup=False))
    store = Store.open(args.db)
    run_id, status = None, "interrupted"
    shape = {"model": spec.name, "mode": args.mode}

    def stored(r) -> None:
        nonlocal run_id
        if run_id is None:           # the run starts with the first result: bad input stores nothing
            run_id = store.start_run("advise", command_line(), envmod.collect(device))
        store.add_result(run_id, recipe_row(r, shape, tol))

    try:
        advice = api.run(spec, mode=args.mode, tolerance=args.tolerance, device=device, recipes=recipes,
                         steps=args.steps, log=log, timeout=args.timeout, target=args.target, on_result=stored)
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
