"""The tasks a worker process runs: each name a case may carry in case["task"], and the function (or, for a
session, the class) it stands for. Cases carry these names; `resolve` is the one place they are looked up, and
tests/test_layering.py resolves every entry, so a rename fails a CPU test instead of a GPU call.

The table names feature modules as import paths only: nothing here imports them, a worker does when it runs the
task. A task is called as task(case, device, job) -> result dict (a session's class is made the same way and then
answers calls). A case may also name 'module:attribute' directly (tests' fakes; a plug-in of one's own).

    fn = resolve("recipe")          # tcperf.engine.task
"""
from __future__ import annotations

import importlib

DEFAULT = "kernel"
TASKS = {
    "kernel": "tcperf.worker:measure_case",                 # one operation at one shape and precision
    "ceiling": "tcperf.commands.ceilings:measure_ceiling",  # tcperf ceilings: repeated until stable
    "lab": "tcperf.lab.bench:measure_case",                 # a hand-written kernel against NumPy and the library
    "recipe": "tcperf.engine:task",                         # one recipe on one model
    "recipe_session": "tcperf.engine:RecipeSession",        # the same, kept alive (the advisor's search)
    "stream_session": "tcperf.engine:StreamSession",        # a recipe on a workload's stream (the advisor)
    "model_cell": "tcperf.ladder:cell_task",                # one cell of the model ladder
    "probe": "tcperf.advisor.probe:Probe",                  # the advisor's first look at the user's model
    "sensitive": "tcperf.advisor.api:sensitive_task",       # the advisor's sensitive-layer search
    "generate": "tcperf.generate.measure:task",             # one decode configuration
    "train_to_target": "tcperf.totarget.loop:task",         # one seeded run to the target
    "collective": "tcperf.distributed.collectives:task",    # on every rank
    "parallel_cell": "tcperf.distributed.parallel:cell_task",   # a ladder cell on every rank
    "parallel_run": "tcperf.distributed.parallel:run_cell",     # in the ladder's worker: starts the ranks
}


def path_of(task: str | None) -> str:
    """A task name (or a 'module:attribute' given as such) -> 'module:attribute'; KeyError for an unknown name."""
    task = task or DEFAULT
    if task in TASKS:
        return TASKS[task]
    if ":" in task:
        return task
    raise KeyError(f"unknown worker task {task!r}; registered: {', '.join(TASKS)}")


def module_of(task: str | None):
    return importlib.import_module(path_of(task).split(":")[0])


def resolve(task: str | None):
    """The function or class the task stands for."""
    return getattr(module_of(task), path_of(task).split(":")[1])
