"""The records that cross a module or a process boundary, with named fields, from the command line to the store:
Source (where a worker finds the user's model), Case (one thing to measure and the function that measures it), Job
(what a run's cases share) and Result (one measured row, in the store's columns).

They become plain data only at the pipe to a worker and at the store: `to_wire` turns a record, and any record or
function inside it, into JSON-ready data (a function or class by module and qualified name); `from_wire` makes the
same objects again in the other process. A recipe is tcperf.recipes.Recipe, a record of its own.

    case = Case("gemm", {"m": 4096, "n": 4096, "k": 4096}, "bf16", measure_case, suite="quick")
    result = from_wire(json.loads(json.dumps(to_wire(case))))      # the same Case in a worker
"""
from __future__ import annotations

import dataclasses
import importlib
import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TypedDict

STATUSES = ("ok", "wrong", "skipped", "error", "oom", "timeout")


@dataclass(frozen=True)
class Source:
    """The user's model as a worker loads it (tcperf.source.load_source): the factory `target` called again with the
    parent's weights and inputs from `state`; or the spec unpickled from `pickle` (its classes imported from `files`
    as the pickle names them); or, with neither, only `files` to import ahead (the model is not saved yet)."""
    target: str | None = None        # 'path/to/file.py:factory'
    state: str | None = None         # torch.save'd weights, inputs, targets and workload of the parent's spec
    pickle: str | None = None        # torch.save'd spec
    files: tuple[str, ...] = ()      # the user's files
    name: str | None = None          # the spec's name, where the factory's file name is not it

    @property
    def kind(self) -> str:
        """'pickle' | 'factory' | 'imports'."""
        return "pickle" if self.pickle else "factory" if self.target else "imports"


@dataclass(frozen=True)
class TimingConfig:
    """How a kernel case is timed (tcperf.timing.time_fn): warm-up and timed budgets, L2 flush, CUDA-graph replays."""
    warmup_ms: float = 25.0
    rep_ms: float = 100.0
    flush_l2: bool = True
    graph: bool = False


@dataclass(frozen=True)
class Job:
    """What every case of one run shares."""
    timing: TimingConfig = TimingConfig()
    profile: bool = False            # the kernels that ran and their Tensor Core share
    pad: bool = False                # a misaligned shape's padded twin timed beside it
    until_stable: dict | None = None     # ceilings: repeated until the best stops improving (timing.time_until_stable)
    ceilings: dict | None = None     # this GPU's measured ceilings {precision: TFLOPS, "bandwidth": GB/s}, for MFU
    timeout: float = 120.0           # seconds a case may take
    compile_cache: str | None = None     # a folder for torch.compile's products (tcperf.compile_cache)


class Metrics(TypedDict, total=False):
    """The keys of Result.metrics that more than one part reads (each producer adds its own as well)."""
    label: str                  # the case as people name it
    tags: dict                  # the suite row's application, set, note
    verdict: dict               # tcperf.tensorcore's verdict on the shape
    kernels: list               # the top kernels (names, or {name, time_us, tensor_core})
    tc_share: float             # share of GPU kernel time in Tensor Core kernels
    padded: dict                # {shape, median_ms, gain}
    recipe: str                 # what the recipe does, in words
    base: str                   # a mixed recipe's base recipe
    keep_fp32: list             # modules kept in float32
    accuracy: dict              # tcperf.accuracy's comparison
    throughput: float           # items a second (model rows)
    unit: str                   # img/s | tokens/s | samples/s
    wall_s: float               # the case's seconds in its worker
    phases_s: dict              # where those seconds went
    exit: int                   # a dead worker's exit code


@dataclass
class Result:
    """One row, in the store's columns (tcperf.store.RESULT_COLUMNS). `precision` names what the row ran at: a
    precision, or a recipe (a mixed recipe's name says its base and the modules it keeps in fp32)."""
    op: str
    shape: dict
    precision: str
    status: str = "ok"               # STATUSES
    suite: str = ""
    message: str = ""
    error: float | None = None       # relative error against the reference
    tolerance: float | None = None
    median_ms: float | None = None
    iqr_ms: float | None = None
    min_ms: float | None = None
    mean_ms: float | None = None
    n: int | None = None
    samples: list = field(default_factory=list)
    flops: float | None = None
    bytes: float | None = None
    tflops: float | None = None
    gbps: float | None = None
    metrics: Metrics = field(default_factory=dict)
    warnings: list = field(default_factory=list)

    def replace(self, **changes) -> "Result":
        return dataclasses.replace(self, **changes)

    def to_row(self) -> dict:
        """The store's columns."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_row(cls, row: dict) -> "Result":
        fields = {f.name: f for f in dataclasses.fields(cls)}
        given = {k: v for k, v in row.items() if k in fields}
        for name in ("shape", "metrics", "samples", "warnings", "suite", "message", "status"):
            if given.get(name) is None:          # a stored NULL: the field's default
                given.pop(name, None)
        return cls(**{"shape": {}, **given})

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True)
class Case:
    """One thing to measure. `task(case, device, job) -> Result` measures it in a worker; `args` is the task's own
    record (tcperf.engine.RecipeArgs, ...). `known`: the row, decided without a worker (a skip). `preload(case)`:
    what a worker may do before its turn (load the model into host memory)."""
    op: str
    shape: dict
    precision: str
    task: Callable | None = None     # None: tcperf.worker.measure_case, one kernel
    suite: str = ""
    args: Any = None
    tags: dict = field(default_factory=dict)
    seed: int = 0
    known: Result | None = None
    preload: Callable | None = None

    def replace(self, **changes) -> "Case":
        return dataclasses.replace(self, **changes)

    def failed(self, status: str, message: str, **metrics) -> Result:
        """The row of this case where its worker died, hung or was stopped."""
        return Result(self.op, self.shape, self.precision, status, suite=self.suite, message=message,
                      metrics={"tags": self.tags, **metrics})

    def own(self, result: Result) -> Result:
        """The row always says which case it was, whatever the task returned."""
        for key in ("op", "suite", "precision"):
            if getattr(result, key) in (None, "") and getattr(self, key):
                setattr(result, key, getattr(self, key))
        if not result.shape and self.shape:
            result.shape = self.shape
        return result


# --- the pipe -------------------------------------------------------------------------------------------------------
def name_of(obj) -> str:
    """'module:qualified.name' of a module-level function or class (what crosses the pipe in its place)."""
    qualname = getattr(obj, "__qualname__", "")
    if not qualname or "<locals>" in qualname or "<lambda>" in qualname:
        raise TypeError(f"{obj!r} cannot be sent to a worker: only functions and classes defined at a module's top "
                        f"level (or their methods) can")
    return f"{obj.__module__}:{qualname}"


def resolve(name: str):
    """The function or class `name_of` named, imported here."""
    module, _, qualname = name.partition(":")
    found = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


def to_wire(x):
    """x as JSON-ready data: records tagged with their class, functions and classes by name, a torch.device as such."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {"__record__": name_of(type(x)),
                **{f.name: to_wire(getattr(x, f.name)) for f in dataclasses.fields(x)}}
    if isinstance(x, type) or inspect.isfunction(x):
        return {"__callable__": name_of(x)}
    if isinstance(x, dict):
        return {k: to_wire(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [to_wire(v) for v in x]
    if isinstance(x, Path):
        return str(x)
    if type(x).__name__ == "device" and type(x).__module__ == "torch":
        return {"__device__": str(x)}
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):      # a NumPy or torch scalar
        return x.item()
    if x is None or isinstance(x, (str, int, float, bool)):
        return x
    return str(x)       # a torch.device, a dtype: what they print as


def from_wire(x):
    """The objects `to_wire` described."""
    if isinstance(x, list):
        return [from_wire(v) for v in x]
    if not isinstance(x, dict):
        return x
    if "__callable__" in x:
        return resolve(x["__callable__"])
    if "__device__" in x:
        import torch
        return torch.device(x["__device__"])
    if "__record__" in x:
        cls = resolve(x["__record__"])
        values = {k: from_wire(v) for k, v in x.items() if k != "__record__"}
        return cls(**{k: tuple(v) if isinstance(v, list) and _is_tuple(cls, k) else v for k, v in values.items()})
    return {k: from_wire(v) for k, v in x.items()}


def _is_tuple(cls, name: str) -> bool:
    """Whether the record's field is declared a tuple (JSON has only lists)."""
    for f in dataclasses.fields(cls):
        if f.name == name:
            kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")
            return kind.startswith("tuple")
    return False
