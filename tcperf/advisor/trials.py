"""The advisor's recipes on the user's model, measured by tcperf.engine (the model ladder's engine), each in a worker
process of its own with a timeout, so a recipe that hangs or kills its process is recorded and the others go on.

Accuracy is tcperf.accuracy's (the outputs against fp32 strict's; in training, the loss's fall against fp32's). On
a GPU each recipe is then timed (the mean of 2 s of back-to-back steps: near its power cap an H200 runs a step at two
speeds in spells, and a short window's median reports whichever it caught) and profiled for its Tensor Core share
and how busy the GPU is.

    with Bench("infer", device, tolerance=0.05, target="model.py:factory") as bench:
        facts = bench.probe(names)                   # the model's first look, in a worker
        worker = bench.open(Item("amp_bf16"))        # a worker for the recipe; tcperf.advisor.pool prepares it:
        row = worker.call(bench.kind, worker.case, device, hold=True, timeout=600)   # an engine.RecipeSession
"""
from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field

import torch

from .. import accuracy, engine, precision, recipes
from ..engine import RecipeArgs, RecipeSession
from ..errors import one_line
from ..records import Case, Job, Result, Source
from ..runner import InProcess, Spares, Worker, run_case, run_cases
from ..source import imports_source, save_source, split_target
from ..spec import Spec
from .snippets import Setup

DEFAULT_TOLERANCE = accuracy.DEFAULT_TOLERANCE   # output relative error / share of fp32's loss fall lost
TRAIN_STEPS = accuracy.DEFAULT_STEPS
DEFAULT_TIMEOUT = 600.0     # seconds one recipe may take (torch.compile of a large model takes minutes)
CONTEXT_BYTES = 600e6       # GPU memory a worker holds idle: its CUDA context, cuBLAS handle and the profiler, roughly
SPARE_MEMORY_SHARE = 0.12   # idle spares hold at most this share of the GPU's memory (spare_limit)


@dataclass
class RecipeResult:
    recipe: str
    status: str                      # ok | fails | skipped | error | oom | timeout
    message: str = ""
    error: float | None = None       # the deciding error, held against the tolerance
    criterion: str = ""              # what `error` is: output rel. error | metric change | share of fp32's loss
    #                                  fall lost | loss gap / starting loss (training where fp32's loss does not fall)
    accuracy: dict = field(default_factory=dict)
    timing: dict | None = None       # mean_ms (the step time), median_ms, iqr_ms, min_ms, n, samples
    first_call_s: float | None = None   # prepare + first call: includes torch.compile
    speedup: float | None = None     # fp32's step_ms / this step_ms
    tc_share: float | None = None    # share of GPU kernel time in Tensor Core kernels
    gpu_busy: float | None = None    # kernel time a step over the step time (< 1: the GPU waits for the host)
    kernels: list = field(default_factory=list)
    keep_fp32: list = field(default_factory=list)   # mixed recipes: modules kept in float32
    base: str | None = None          # mixed and compiled-on-top recipes: the recipe they run
    warnings: list = field(default_factory=list)
    stream: dict | None = None       # on a workload (tcperf.engine.StreamSession): first pass, steady, one_time_s
    kernel_ms: float | None = None   # a step's GPU kernel time (profiled) ...
    matmul_ms: float | None = None   # ... of it in GEMM, convolution and attention kernels
    op: str = "advise.recipe"        # advise.recipe (on the example input) | advise.stream (on the workload)
    new_shape_s: float | None = None  # eager, with a workload: its first call at the stream's second shape

    @property
    def passes(self) -> bool:
        return self.status == "ok"

    @property
    def step_ms(self) -> float | None:
        """The time a step: the mean of the back-to-back samples (see the module's doc)."""
        return self.timing["mean_ms"] if self.timing else None

    @property
    def runs(self) -> str:
        """The recipe that really ran (a mixed recipe's label names its base and kept modules)."""
        return self.base or self.recipe

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_result(cls, row: Result) -> "RecipeResult":
        """An engine's (or a failed worker's) row -> RecipeResult."""
        m = row.metrics
        timing = None
        if row.mean_ms:
            timing = {"median_ms": row.median_ms, "iqr_ms": row.iqr_ms, "min_ms": row.min_ms, "mean_ms": row.mean_ms,
                      "n": row.n, "samples": row.samples, "spread": m.get("spread"), "unstable": m.get("unstable")}
        return cls(row.precision, {"wrong": "fails"}.get(row.status, row.status), row.message or "", row.error,
                   m.get("criterion", ""), m.get("accuracy") or {}, timing, m.get("first_call_s"), None,
                   m.get("tc_share"), m.get("gpu_busy"), m.get("kernels") or [], m.get("keep_fp32") or [],
                   m.get("base"), row.warnings, m.get("stream"), m.get("kernel_ms"), m.get("matmul_ms"),
                   row.op or "advise.recipe", m.get("new_shape_s"))


# --- what a recipe is (tcperf.recipes) --------------------------------------------------------------------------
def setup_of(name: str, kind: str = "transformer", keep: tuple = (), varying: dict | None = None) -> Setup:
    """A recipe -> the Setup its code snippets are written from (what was measured, flag for flag). varying: a
    workload's varying dimensions by input name."""
    r = recipes.get(name)
    p = precision.get(r.precision)
    return Setup(name=r.describe(kind) + (" + fp32 modules" if keep else ""), tf32=p.tf32,
                 autocast=str(p.autocast).replace("torch.", "") if p.autocast is not None else None,
                 channels_last=r.channels_last and kind == "cnn",
                 compile="default" if r.compile_options else r.compile_mode,
                 compile_options=tuple((r.compile_options or {}).items()), fp8=r.fp8, int8=r.int8,
                 keep_fp32=tuple(keep), weights=r.weights, step_graph=r.step_graph,
                 fused=r.fused, shapes=r.shapes if varying else "static", pad_to=r.pad_to if varying else None,
                 cudnn_benchmark=r.cudnn_benchmark,
                 varying=tuple((k, tuple((int(d), n) for d, n in dims.items())) for k, dims in (varying or {}).items()))


def lowp_of(name: str) -> tuple[str, bool] | None:
    """(dtype, weights cast?) a recipe runs its matmuls in: ('bfloat16', False) for amp_bf16, ('float16', True) for
    fp16 weights; None for fp32, tf32 and the fp8/int8 swaps."""
    r = recipes.get(name)
    if r.fp8 or r.int8:
        return None
    if r.weights:
        return r.weights, True
    dtype = precision.get(r.precision).autocast
    return (str(dtype).replace("torch.", ""), False) if dtype is not None else None


def kernel_precision(name: str) -> str:
    """The GEMM precision a recipe runs at, for the shape lint: fp32 | tf32 | fp16 | bf16 | fp8 | int8."""
    return recipes.get(name).peak_precision


def lint_precisions(mode: str, names=None) -> list[str]:
    """The GEMM precisions of the recipes that may run in this mode on some GPU, strict fp32 aside: the shape lint
    checks each."""
    found = {recipes.get(n).peak_precision for n in (names or recipes.LADDER) if mode in recipes.get(n).modes}
    return [p for p in ("tf32", "fp16", "bf16", "fp8", "int8") if p in found]


def default_recipes() -> list[str]:
    """The ladder's recipes that need no torch.compile of their own, and fp8/int8: the search's bases; compile and
    CUDA graphs are put on top of each that passes (tcperf.advisor.search)."""
    return [n for n in recipes.LADDER if not recipes.get(n).compile or recipes.get(n).fp8 or recipes.get(n).int8]


def candidates(mode: str, device: torch.device, names=None) -> list[tuple[str, str | None]]:
    """(recipe, skip reason or None) for each recipe to try, in ladder order. On a CPU only the recipes whose
    numerics differ are run (no compile, no CUDA graphs): speed is not measured there."""
    out = []
    for name in list(names or default_recipes()):
        r = recipes.get(name)
        why = r.skip_reason(mode, device)
        if why is None and device.type == "cpu" and r.compile:
            why = "torch.compile changes speed, not accuracy: not run on the CPU"
        out.append((name, why))
    return out


# --- running recipes --------------------------------------------------------------------------------------------
@dataclass
class Item:
    """One recipe to run: the recipe, the modules kept in fp32, the row's label and what it is based on."""
    recipe: str
    keep: tuple = ()
    label: str | None = None
    base: str | None = None


class Bench:
    """Runs recipes on one model, each in a worker (in this process when the model cannot be sent to one). The model
    comes as a factory `target` ('file.py:factory': the probe saves what it made, for every worker to load) or as a
    `spec` in memory (pickled to the workers); the fp32 reference goes from the probe to the recipes in a file of a
    temporary folder. Each recipe's worker holds an engine.RecipeSession (`kind`)."""
    kind = RecipeSession

    def __init__(self, mode: str, device: torch.device, tolerance: float, steps: int = TRAIN_STEPS, *,
                 spec: Spec | None = None, target: str | None = None, timeout: float = DEFAULT_TIMEOUT,
                 isolate: bool = True, on_result=None):
        self.spec, self.mode, self.device, self.tolerance, self.steps = spec, mode, device, tolerance, steps
        self.timeout, self.on_result, self.notes, self.env = timeout, on_result, [], {}
        self.folder = tempfile.mkdtemp(prefix="tcperf-advise-")
        self.reference_file = engine.reference_path(self.folder, "fp32", mode)
        self.name = spec.name if spec is not None else None
        self.source = Source(target=target) if target else self._pickled() if isolate else None
        self.spares = None          # tcperf.runner.Spares: workers started ahead of the recipes (start_spares)

    def _pickled(self) -> Source | None:
        try:
            return save_source(self.spec, self.folder)
        except Exception as e:       # a lambda or a local class: pickle cannot carry it to a worker
            self.notes.append(f"recipes ran in this process, without a timeout: the model cannot be sent to a "
                              f"worker process ({one_line(e)}); tcperf advise file.py:factory isolates each recipe")
            return None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.spares is not None:
            self.spares.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def start_spares(self, count: int) -> None:
        """Start `count` workers now (torch imported, the GPU readied) for the recipes to come, at most spare_limit();
        they load the model once the probe has saved it (_preload_spares). Only with workers, on a GPU."""
        if self.source is not None and self.device.type == "cuda" and count > 0:
            total = torch.cuda.get_device_properties(self.device).total_memory
            self.spares = Spares(self.device, min(count, spare_limit(total)), self.env)
            if self.source.kind == "factory":     # the user's file (and transformers, timm ...) imported meanwhile
                path, _ = split_target(self.source.target)
                self.spares.preload(self.case(Item("fp32"), source=imports_source([str(path)])))

    def _preload_spares(self) -> None:
        """The spares load the model the probe saved, as many as host memory holds a quarter of."""
        if self.spares is None:
            return
        path = self.source.state or self.source.pickle
        size = os.path.getsize(path) if path and os.path.exists(path) else 0
        if size:
            self.spares.resize(max(1, min(self.spares.count, int(0.25 * _free_memory() / size))))
        self.spares.preload(self.case(Item("fp32")))

    def probe(self, names: list[str]):
        """The model's first look, in a worker (tcperf.advisor.probe): Facts; UserError naming the stage that failed."""
        from .probe import ProbeArgs, run_probe
        args = ProbeArgs(self.source, self.mode, self.reference_file, self.steps, tuple(names), self.folder,
                         spec=self.spec if self.source is None else None)
        facts = run_probe(args, self.device, timeout=self.timeout, isolate=self.source is not None,
                          loaded=self._loaded)
        self.name = facts.name
        return facts

    def _loaded(self, source: Source) -> None:
        """The probe saved the model (its first stage): the spares load it while the probe checks it."""
        if self.source is not None:
            self.source = source
            self._preload_spares()

    def args(self, item: Item, source: Source | None = None, **more) -> RecipeArgs:
        """The recipe as its worker runs it; the model from `source` (default: the bench's)."""
        cuda = self.device.type == "cuda"
        return RecipeArgs(item.recipe, self.mode, source=source or self.source,
                          spec=self.spec if self.source is None else None, reference=self.reference_file,
                          steps=self.steps, tolerance=self.tolerance, timing=engine.TIMING, time_it=cuda, profile=cuda,
                          keep=tuple(item.keep), base=item.base, **more)

    def case(self, item: Item, source: Source | None = None) -> Case:
        return engine.recipe_case(self.args(item, source), op="advise.recipe",
                                  shape={"model": self.name, "mode": self.mode}, label=item.label, suite="advise")

    def open(self, item: Item):
        """A worker for this item's recipe, its case set (a spare where one is up; InProcess where no worker can
        receive the model): the pool makes the recipe there (worker.call(self.kind, worker.case, ...))."""
        return self.worker_for(self.case(item))

    def worker_for(self, case: Case):
        if self.source is None:
            return InProcess(self.device, case=case)
        if self.spares is not None:
            return self.spares.take(case)
        return Worker(self.device, env=self.env, own_group=True, case=case)

    def report(self, r: RecipeResult) -> None:
        if self.on_result:
            self.on_result(r)

    def call(self, case: Case) -> Result:
        """One case of any task (the sensitive-layer search) in a worker, or here where none can receive the model."""
        if self.source is not None:
            return run_cases([case], self.device, Job(timeout=self.timeout))[0]
        return InProcess(self.device, case=case).call(run_case, case, self.device, Job(), timeout=self.timeout)


def spare_limit(gpu_bytes: int) -> int:
    """How many idle spares a GPU of this much memory keeps: their CUDA contexts (with cuBLAS and the profiler
    started, CONTEXT_BYTES each) hold at most SPARE_MEMORY_SHARE of it (16 on an 80 GB GPU, 4 on a 24 GB one)."""
    return max(1, int(SPARE_MEMORY_SHARE * gpu_bytes / CONTEXT_BYTES))


def _free_memory() -> int:
    """Bytes of host memory available now (MemAvailable; a large guess where the system does not say)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 1 << 40


def skipped(name: str, why: str) -> RecipeResult:
    return RecipeResult(name, "skipped", message=why)


def add_speedups(results: list[RecipeResult]) -> None:
    base = next((r.step_ms for r in results if r.recipe == "fp32" and r.step_ms), None)
    for r in results:
        r.speedup = base / r.step_ms if base and r.step_ms else None
