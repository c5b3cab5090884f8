"""`tcperf run`: the quick suite in every precision this device has, stored and printed in a table that fits 120
columns (`tcperf show` prints every column).

GEMMs at 1024/4096/8192 and a misaligned 8191 (with the padded shape timed beside it), a convolution in NCHW and
NHWC, an attention and a device-to-device copy. Without a GPU: the same kinds of case on the CPU at CPU-sized shapes,
in fp32, bf16 and fp64, the suite timed twice (the second time in reverse order: a ratio is stated only where both
timings find it). Every case runs in one worker process (runner.task_key), so the CUDA start-up is paid once.
show.ceilings_for says what '% ceiling' reads. The table ends with where the time went; --verbose adds each case's.
"""
from __future__ import annotations

from functools import partial

from .. import env as envmod
from .. import suites
from ..precision import KERNEL_PRECISIONS
from ..runner import run_cases, task_key
from ..table import COMPACT
from .common import add_measuring, console, err_console, job_from, measure_into_store, print_stored
from .show import add_verbose, print_run

CPU_PRECISIONS = ("fp32", "bf16", "fp64")


def add_parser(sub) -> None:
    p = sub.add_parser("run")
    add_measuring(p)
    add_verbose(p)
    p.set_defaults(rep_ms=50.0)


def main(args) -> int:
    device = envmod.parse_device(args.device)
    if device.type == "cpu":
        err_console.print("No CUDA GPU found: measuring the CPU instead (fp32, bf16, fp64 at CPU-sized shapes).")
    precisions = list(KERNEL_PRECISIONS) if device.type == "cuda" else list(CPU_PRECISIONS)
    cases = suites.with_precisions(suites.load("quick", device.type), precisions)
    cases.sort(key=lambda case: precisions.index(case.precision))   # precision by precision, suite order inside
    if device.type == "cpu":
        cases += repeat(cases)
    run_id, results, store = measure_into_store("run", cases, args, job_from(args, profile=device.type == "cuda",
                                                                             pad=True),
                                                label="quick suite", runner=partial(run_cases, group_by=task_key))
    status = print_stored(args, store, run_id,
                          lambda: print_run(store, run_id, console, columns=COMPACT, verbose=args.verbose))
    if not args.json:
        err_console.print(next_steps(run_id, store.where, bool(store.ceilings(store.run(run_id)["device"]))),
                          markup=False, highlight=False)
    return status


def repeat(cases: list) -> list:
    """The suite again, in reverse order, for a CPU, whose load changes while it measures (one timing of each case
    said bf16 attention 1.29x fp32 in one run and 0.90x in the next, issue 58): a change of load between the
    precisions' blocks then favours one precision in the first timing and the other in the second."""
    return list(reversed(cases))


def next_steps(run_id: int, where: str, has_ceilings: bool) -> str:
    """Where the run went, and what a user runs next."""
    steps = [(f"tcperf report {run_id}", "an HTML report of this run, with charts"),
             ("tcperf advise model.py:factory", "the fastest accurate recipe for your model"),
             ("tcperf models", "the training ladder, fp32 to compile and fp8")]
    if not has_ceilings:
        steps.append(("tcperf ceilings", "ceilings measured until stable (% ceiling)"))
    return "\n".join([f"stored as run {run_id} in {where}", "next:",
                      *(f"  {command:<32} {what}" for command, what in steps)])
