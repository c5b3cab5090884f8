"""Shared test set-up: GPU tests are marked `gpu` and skip without CUDA; every test gets its own results store;
Triton kernels run in the interpreter in child processes, every module's side by side (`INTERPRETED`); several
command lines run in one fresh process (`commands_in_one_process`); checks that each wait on processes of their own
run side by side (`side_by_side`); checks that are one core's work on processes of their own start with the session
in a lane of low priority beside it (`early`); the heap alive before each module is frozen
(`_heap_frozen_between_modules`)."""
import concurrent.futures
import functools
import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tcperf.env import usable_cores

HAS_CUDA = torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def child_env(**more: str) -> dict:
    """The environment of a child Python a test starts: this checkout and tests/ (for shared helpers) first on its
    PYTHONPATH, the caller's after them (the GPU machine's carried wheels, torchao among them, live there)."""
    here = Path(__file__).resolve().parent
    path = [str(here.parent), str(here), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path), **more}


def in_interpreter(code: str, argument, timeout: float) -> dict:
    """Run `code` in a child Python with TRITON_INTERPRET=1 (read when Triton kernels are imported, so not in this
    process) and `argument` as JSON in argv[1]; its last line of output, as JSON."""
    env = child_env(TRITON_INTERPRET="1")
    done = subprocess.run([sys.executable, "-c", code, json.dumps(argument)], env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# name -> (code, argument, timeout): each module's interpreter child, registered when the module is imported and run
# with every other one by the session fixture `interpreted_children`
INTERPRETED: dict[str, tuple] = {}


@pytest.fixture(scope="session")
def interpreted_children() -> dict:
    """Every registered interpreter child (in_interpreter), side by side: {name: its answer, or the exception it
    raised}. The interpreter runs a kernel in NumPy on one core; the three modules' children one after the other
    took 23 s on 2 cores."""
    def child(name):
        try:
            return in_interpreter(*INTERPRETED[name])
        except Exception as e:          # noqa: BLE001 - raised again by the module that asks for this child
            return e
    return dict(zip(INTERPRETED, side_by_side(*(functools.partial(child, name) for name in INTERPRETED))))


def interpreted(children: dict, name: str) -> dict:
    """Module `name`'s answer from interpreted_children, or the exception its child raised, raised here."""
    answer = children[name]
    if isinstance(answer, Exception):
        raise answer
    return answer


END = "\x00end of command\x00"
COMMANDS_IN_ONE_PROCESS = f"""
import json, sys
from tcperf.cli import main
for argv in json.loads(sys.argv[1]):
    try:
        code = main(argv)
    except SystemExit as e:               # what `python -m tcperf` would exit with
        code = e.code
    print({END!r}, code, flush=True)
    print({END!r}, file=sys.stderr, flush=True)
"""


def commands_in_one_process(argvs: list[list[str]], *, prefix: tuple = (), timeout: float = 300,
                            **run) -> list[tuple[int, str, str]]:
    """Each argv as main() runs it for `python -m tcperf`, in order, all in one fresh Python (a process each cost 2-4 s
    on 2 cores, importing torch again), started under `prefix` (a wrapper such as unshare) with subprocess.run's
    `run` options: [(exit code, stdout, stderr)], one a command line. A command's module is imported by the first
    line that names it, so what an import prints lands in that line's output."""
    p = subprocess.run([*prefix, sys.executable, "-c", COMMANDS_IN_ONE_PROCESS, json.dumps(argvs)],
                       capture_output=True, text=True, timeout=timeout, **run)
    assert p.returncode == 0, p.stderr[-3000:]
    outs, errs = p.stdout.split(END), p.stderr.split(END)
    codes = [int(o.split(None, 1)[0]) for o in outs[1:]]
    outs = [outs[0]] + [o.split("\n", 1)[1] if "\n" in o else "" for o in outs[1:-1]]     # less the code line
    errs = [errs[0]] + [e.split("\n", 1)[1] if "\n" in e else "" for e in errs[1:-1]]
    assert len(codes) == len(outs) == len(errs) == len(argvs), (p.stdout[-2000:], p.stderr[-2000:])
    return list(zip(codes, outs, errs))


def side_by_side(*calls) -> list:
    """Each call (a function of no arguments) in a thread of its own, all at once; their answers in order, the first
    exception raised again. For checks that each wait on processes of their own (a command and its workers): one
    after the other, a core of two sat idle while a worker imported torch or a hang ran out its --timeout. The
    processes started meanwhile get each call's share of the cores for PyTorch's threads (OMP_NUM_THREADS, unless
    it is set), as tcperf gives each of N ranks theirs: side by side with as many threads as there are cores each,
    they spin-waited on each other (test_workload's two processes took 48 s so, 32 s with their share)."""
    share = {} if "OMP_NUM_THREADS" in os.environ else {"OMP_NUM_THREADS": str(max(1, usable_cores() // len(calls)))}
    with pytest.MonkeyPatch.context() as mp, concurrent.futures.ThreadPoolExecutor(len(calls)) as pool:
        for name, value in share.items():
            mp.setenv(name, value)
        futures = [pool.submit(call) for call in calls]
        return [f.result() for f in futures]


def commands_side_by_side(lines: dict[str, list[str]], processes: int = 2, **run) -> dict[str, tuple[int, str, str]]:
    """Named command lines, dealt in turn to `processes` fresh processes that run side by side (side_by_side), each
    its share in order (commands_in_one_process, with subprocess.run's `run` options): {name: (exit code, stdout,
    stderr)}. Put the long ones first, one a process."""
    names = list(lines)
    shares = [names[i::processes] for i in range(processes)]
    ran = side_by_side(*(functools.partial(commands_in_one_process, [lines[n] for n in share], **run)
                         for share in shares))
    return {name: result for share, results in zip(shares, ran) for name, result in zip(share, results)}


# name -> a function of a folder: a check's processes, run in the early lane (below) for the tests marked
# @pytest.mark.early(name), registered when their module is imported (the decorator `early_lane`)
EARLY: dict[str, object] = {}
NICE = ("nice", "-n", "10")     # the lane's processes: a core the tests leave idle, not one a test is using


def lane_env(**more: str) -> dict:
    """child_env for a process of the early lane: one thread for PyTorch (OMP_NUM_THREADS=1), so that it takes one
    core at most and no thread of its waits on another that a test's process holds up."""
    return child_env(OMP_NUM_THREADS="1", **more)


def early_lane(job):
    """Register `job` (a function of a fresh folder; its name the key) for @pytest.mark.early(its name)."""
    EARLY[job.__name__] = job
    return job


@pytest.fixture(scope="session", autouse=True)
def _early_lane(request, tmp_path_factory):
    """The registered jobs the selected tests ask for, started with the session one after the other in one thread,
    their processes under NICE: {name: its future}. Checks that wait on one process at a time (a compile, a benchmark
    script's recipes one by one) left a core of two idle for their whole length (80 s of the suite, 2026-11-28); here
    they run in the idle time of the modules before them, and their tests read the answers (`early`)."""
    names = dict.fromkeys(m.args[0] for item in request.session.items if _runs(item)
                          for m in item.iter_markers("early"))
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        yield {name: pool.submit(EARLY[name], tmp_path_factory.mktemp(name)) for name in names}


def _runs(item) -> bool:
    """False for a test that will skip: marked skip (no CUDA, above), or skipif with a true condition."""
    return not any(True for _ in item.iter_markers("skip")) and \
        not any(m.args and m.args[0] is True for m in item.iter_markers("skipif"))


@pytest.fixture
def early(request, _early_lane):
    """The answer of the early job this test is marked with (@pytest.mark.early(name)), waited for; its exception
    raised here."""
    return _early_lane[request.node.get_closest_marker("early").args[0]].result()


@pytest.fixture(autouse=True, scope="module")
def _heap_frozen_between_modules():
    """Before each module, a full collection, then gc.freeze(): what is alive then (torch, transformers, timm, tcperf,
    the tests, and what earlier modules imported and cached: half a million objects and more) is set apart, and no
    later full collection in this process walks it again. tcperf.engine collects three times a measured recipe (a
    clean slate for each): 0.2-0.3 s each here without the freeze. test_ladder, test_engine and test_workload spent
    33 s of CPU in full collections without it, 11 s with it. Garbage is collected before each freeze, and what a
    module makes is collected as ever; a frozen object that became garbage later (a compiled graph torch.compile
    had cached, dropped by a later reset) would stay until the session ends."""
    gc.collect()
    gc.freeze()
    yield


@pytest.fixture(autouse=True)
def _own_store(tmp_path, monkeypatch):
    """No test writes to the user's real store."""
    monkeypatch.setenv("TCPERF_DB", str(tmp_path / "results.db"))
    yield


@pytest.fixture
def db_path(tmp_path):
    return str(tmp_path / "results.db")


@pytest.fixture
def cuda():
    if not HAS_CUDA:
        pytest.skip("needs a CUDA GPU")
    return torch.device("cuda")
