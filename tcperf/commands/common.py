"""Options and steps the commands share: --device, --db, --json, --timeout, and running cases into the store
with a progress bar."""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from .. import env as envmod
from ..errors import UserError, finite_positive, os_reason
from ..records import Job, Result, TimingConfig
from ..runner import run_cases
from ..store import Store, mask

# Piped or logged output gets 120 columns, what the tables are laid out for, rather than rich's 80-column default
# (COLUMNS still wins).
_WIDTH = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 120
console = Console(width=_WIDTH)
err_console = Console(stderr=True)


def add_device(p) -> None:
    p.add_argument("--device", default=None, help="cpu | cuda | cuda:N (default: the first CUDA GPU, else the CPU)")


def add_db(p) -> None:
    p.add_argument("--db", default=None, metavar="PATH_OR_URL",
                   help="results store: a SQLite file or a SQLAlchemy URL such as postgresql+psycopg://USER@HOST/DB "
                        "(default: $TCPERF_DB or ~/.local/share/tcperf/results.db)")


def add_json(p) -> None:
    p.add_argument("--json", action="store_true", help="print JSON for machines instead of a table")


def add_measuring(p) -> None:
    """--device, --db, --json, --timeout and the timing knobs."""
    add_device(p)
    add_db(p)
    add_json(p)
    p.add_argument("--timeout", type=positive_number, default=120.0, help="seconds one case may take (default 120)")
    p.add_argument("--no-flush-l2", action="store_true", help="do not clear the L2 cache between timed calls")
    p.add_argument("--graph", action="store_true", help="time CUDA-graph replays (less launch overhead)")
    p.add_argument("--rep-ms", type=positive_number, default=100.0,
                   help="time budget for the timed calls of one case")


def positive_number(text: str) -> float:
    """argparse type of every time, budget, tolerance and factor option: refused at parsing ('0', '-5', 'nan',
    'inf'), so a bad value stops the command before a run is stored. The message is one line: cli.Parser.error."""
    try:
        value = float(text)
    except ValueError:
        value = None
    if not finite_positive(value):
        raise argparse.ArgumentTypeError(f"give a finite number above 0, not {text!r}")
    return value


def positive_ints(text: str, flag: str, example: str = "1,2,4") -> list[int]:
    """'1,2,4' -> [1, 2, 4]; a UserError naming `flag` for anything but positive integers."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise UserError(f"bad {flag} {text!r}; give positive integers such as {example}")
    return values


def write_file(path: str | os.PathLike, data: str | bytes) -> Path:
    """A file a command makes (export --out, report --out and --png), its folder made if missing and said so on
    stderr (a typo in --out should not pass unseen); one line naming the path and why when it cannot be written (a
    folder given, a file in the way, no permission, a read-only disk)."""
    path = Path(path)
    missing = not path.parent.exists()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    except OSError as e:
        raise UserError(f"cannot write {path}: {os_reason(e)}") from None
    if missing:
        err_console.print(f"made the folder {path.parent} for {path.name}", markup=False, highlight=False,
                          soft_wrap=True)
    return path


def beside_store(store: Store, name: str) -> Path:
    """Where a command writes a file the user did not place (--out not given): in the store's folder (a SQLite
    store), else in the working directory (a server's store has no folder); the command prints the path."""
    return (store.path.parent if store.path is not None else Path.cwd()) / name


def job_from(args, **fields) -> Job:
    """The measuring options (--timeout and the timing knobs) as the run's Job, with the command's own fields."""
    timing = TimingConfig(rep_ms=args.rep_ms, flush_l2=not args.no_flush_l2, graph=args.graph)
    return Job(timing=timing, timeout=args.timeout, **fields)


def command_line() -> str:
    """The command as typed, any URL's password masked."""
    return mask("tcperf " + " ".join(shlex.quote(a) for a in sys.argv[1:]))


def quiet_warning(device) -> list[str]:
    """A warning when other processes use the GPU, or on a CPU the cores (checked while no worker of ours is alive):
    two runs sharing a 2-core CPU read fp32 attention at 8.0 ms where it takes 1.2-2.3 alone (issue 58)."""
    if device.type == "cuda":
        others = envmod.other_gpu_processes(device.index or 0)
        return [f"other processes use the GPU (pids {', '.join(map(str, others))}): figures may be low"] if others \
            else []
    busy = envmod.other_cpu_processes()
    if not busy:
        return []
    who = ", ".join(f"pid {pid} {name} {cores:.0%}" for pid, name, cores in busy[:5])
    more = f" and {len(busy) - 5} more" if len(busy) > 5 else ""
    load = f"; load {os.getloadavg()[0]:.1f} on {envmod.usable_cores()} cores" if hasattr(os, "getloadavg") else ""
    return [f"other processes use the CPU ({who}{more} of a core{load}): figures may be slow and noisy"]


def measure_into_store(kind: str, cases: list, args, job: Job | None = None, *, label: str = "measuring",
                       runner=None) -> tuple[int, list[Result], Store]:
    """Start a run, measure every case in workers with a progress bar, store each result as it comes. job: how
    (default: job_from(args)). runner: a stand-in for run_cases with its signature (the model ladder's climb keeps
    its recipe order)."""
    device = envmod.parse_device(args.device)
    store = Store.open(args.db)
    run_id = store.start_run(kind, command_line(), envmod.collect(device))
    warnings = quiet_warning(device)
    for w in warnings:
        err_console.print(f"[yellow]warning:[/] {w}")
    results = []
    status = "interrupted"
    try:
        with _progress(args) as progress:
            task = progress.add_task(label, total=len(cases))

            def on_result(r: Result):
                store.add_result(run_id, r)
                results.append(r)
                progress.update(task, advance=1, description=f"{label} {r.op} {r.precision}")

            (runner or run_cases)(cases, device, job or job_from(args), on_result=on_result)
        warnings += quiet_warning(device)
        status = "done"
    finally:
        store.finish_run(run_id, status, sorted(set(warnings)))
    return run_id, results, store


def _progress(args) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=err_console, transient=True, disable=getattr(args, "json", False))


def print_json(obj) -> None:
    print(json.dumps(obj, indent=2, default=str))


def print_stored(args, store: Store, run_id: int, print_tables) -> int:
    """A stored run as JSON (--json: the run and its results), else as print_tables() prints it; exit status 0."""
    if args.json:
        print_json({"run": store.run(run_id), "results": store.results(run_id)})
    else:
        print_tables()
    return 0
