"""The first look at a user's model, in a worker process like every recipe: the factory called, the model run once in
fp32 on its inputs, its GEMM-like ops recorded for the shape lint, which recipes apply to it, and the fp32 reference
every recipe is checked against. Each stage is one command to the worker (tcperf.worker's session mode) with the
advice's --timeout, so a factory that never returns, a forward that hangs or a forward that kills its process ends
the advice with one line naming the stage (exit 2), before anything is stored as if measured.

    facts = run_probe(ProbeArgs(Source(target="model.py:factory"), "infer", ...), device, timeout=600)   # Facts

The probe saves what the factory made (_saved), so every later worker measures the very same model. Without a
worker (a model pickle cannot carry), the same Probe runs in this process (tcperf.runner.InProcess).
"""
from __future__ import annotations

import dataclasses
import functools
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from .. import engine, recipes
from .. import precision as precmod
from .. import workload as workmod
from ..errors import UserError, one_line
from ..records import Result, Source
from ..runner import InProcess, Worker
from ..source import check, load_source, load_spec, on_device, save_source
from ..spec import tensors
from . import lint

STAGES = ("load", "check", "workload", "lint", "reference")
WHAT = {"load": "calling the model's factory", "check": "the model's first fp32 forward on its inputs",
        "workload": "the model's fp32 forward on each shape of its workload",
        "lint": "recording the model's GEMM shapes (the shape lint)", "reference": "the fp32 reference run"}


@dataclass(frozen=True)
class ProbeArgs:
    """The model to look at and what the look needs."""
    source: Source | None         # None: `spec`, in this process
    mode: str                     # infer | train
    reference: str                # the file fp32's reference is saved in, for the recipes' workers
    steps: int                    # training steps the reference holds
    recipes: tuple[str, ...]      # the recipes whose applicability is asked
    folder: str                   # where the model is saved for the workers
    spec: Any = None


@dataclass
class Facts:
    """What the probe found: the parent decides the search from these without touching the model."""
    name: str
    kind: str                     # cnn | transformer (snippets)
    layers: list                  # lint.Layer, every GEMM-like op of one forward
    skips: dict                   # recipe -> why it does not apply to this model (None: it applies)
    notes: list = field(default_factory=list)
    source: Source | None = None  # what later workers load
    times: dict = field(default_factory=dict)   # "start" (the worker up) and each stage -> seconds it took
    flops: float | None = None    # one forward's FLOPs on the example input (torch.utils.flop_counter)
    params: int = 0               # parameters (their bytes at a recipe's precision: what a step must read)
    workload: dict | None = None  # the stream: length, distinct shapes, varying dimensions, FLOPs a step


def user_errors(method):
    """A UserError (the model rejects its inputs, the factory returns the wrong thing) as a row the parent reads."""
    @functools.wraps(method)
    def wrapped(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except UserError as e:
            return self.row().replace(status="error", message=str(e), metrics={"user_error": True})
    return wrapped


class Probe:
    """The stages, one method each (the worker calls them by name)."""

    def __init__(self, args: ProbeArgs, device):
        self.args, self.device, self.spec = args, torch.device(device), None

    def row(self, **metrics) -> Result:
        return Result("advise.probe", {}, "probe", suite="advise", metrics=metrics)

    @user_errors
    def load(self) -> Result:
        source, t0 = self.args.source, time.perf_counter()
        parts = {}                               # seconds: the factory, saving the model, moving it to the device
        if source is None:                       # in this process: the spec itself (pickle cannot carry it)
            spec = self.args.spec
        elif source.kind == "factory":
            spec = load_spec(source.target)
            parts["factory"], t0 = time.perf_counter() - t0, time.perf_counter()
            source = _saved(spec, self.args.folder, source.target)      # what every worker loads
            parts["save"], t0 = time.perf_counter() - t0, time.perf_counter()
        else:
            spec = load_source(source, "cpu")
        self.spec = on_device(spec, self.device)
        parts["to_device"] = time.perf_counter() - t0
        named = dataclasses.replace(source, name=self.spec.name) if source is not None else None
        return self.row(name=self.spec.name, source=named, notes=self._notes(), parts=parts)

    def _notes(self) -> list[str]:
        notes, train = [], self.args.mode == "train"
        if train and self.spec.metric_fn is not None:
            notes.append("metric_fn is used in inference mode only; training compares the loss")
        if train and self.spec.loss_fn is None:
            notes.append("no loss_fn: training used the recipes' default loss (cross-entropy against integer "
                         "targets, else the mean square of the outputs)")
        return notes

    @user_errors
    def check(self) -> Result:
        from torch.utils.flop_counter import FlopCounterMode
        with precmod.apply("fp32", self.device.type), FlopCounterMode(display=False) as flops:
            check(self.spec, self.args.mode)
        params = sum(p.numel() for p in self.spec.model.parameters())
        return self.row(flops=float(flops.get_total_flops()), params=params)

    @user_errors
    def workload(self) -> Result:
        """The fp32 forward on the first step of each distinct shape of the stream (a shape the model rejects is
        one line naming the step): its FLOPs, FLOPs a step averaged over the stream, and whether padding the varying
        dimensions could be undone on the outputs (tcperf.workload.unpaddable)."""
        if not self.spec.workload:
            return self.row(workload=None)
        from torch.utils.flop_counter import FlopCounterMode
        steps, flops_of, outputs = self.spec.workload, {}, {}
        stream = [workmod.flat(a, k) for a, k in steps]
        self.spec.model.eval()
        for i, x in enumerate(stream):
            key = workmod.shape_key(x)
            if key not in flops_of:
                flops_of[key], outputs[key] = self._forward(steps[i], i, FlopCounterMode)
        varying = workmod.varying_dims(stream)
        names = workmod.names(*steps[0])
        return self.row(workload={
            "length": len(stream), "distinct": len(flops_of),
            "varying": {names[i]: {str(d): n for d, n in dims.items()} for i, dims in varying.items()},
            "flops_per_step": sum(flops_of[workmod.shape_key(x)] for x in stream) / len(stream),
            "pad_refused": workmod.unpaddable(list(outputs), list(outputs.values())) if varying else None,
            "untraced": untraced(self.spec.model)})

    def _forward(self, step: tuple, i: int, counter) -> tuple[float, tuple]:
        """(FLOPs, the shapes of the floating-point outputs) of one fp32 forward on a workload step."""
        args, kwargs = step
        try:
            with precmod.apply("fp32", self.device.type), torch.no_grad(), counter(display=False) as flops:
                out = self.spec.model(*args, **kwargs)
        except Exception as e:
            raise UserError(f"the model rejects workload step {i} ({workmod.describe(args, kwargs)}): "
                            f"{one_line(e)}") from None
        return float(flops.get_total_flops()), tuple(tuple(t.shape) for t in tensors(out))

    @user_errors
    def lint(self) -> Result:
        with precmod.apply("fp32", self.device.type):
            layers = lint.record(self.spec.model, self.spec.args, self.spec.kwargs)
        skips = {name: engine.skip_reason(recipes.get(name), self.spec, self.args.mode, self.device)
                 for name in self.args.recipes}
        kind = "cnn" if engine.has_conv2d(self.spec.model) else "transformer"
        return self.row(layers=[l.to_dict() for l in layers], skips=skips, kind=kind)

    @user_errors
    def reference(self) -> Result:
        ref = engine.load_reference(self.args.reference, self.spec, self.args.mode, self.device, self.args.steps)
        note = engine.reference_note(ref)
        return self.row(notes=[note] if note else [])


def _saved(spec, folder: str, target: str) -> Source:
    """The model pickled whole where pickle can carry it (a worker then loads it without calling the factory: on an
    H200, eight workers calling a transformers factory at once took 11-19 s to build and load a 134M model), else
    the factory with the weights and inputs it made here."""
    try:
        return save_source(spec, folder)
    except Exception:            # noqa: BLE001 - a lambda, a local class: the workers call the factory
        return save_source(spec, folder, target)


def run_probe(args: ProbeArgs, device, *, timeout: float, isolate: bool = True, loaded=None) -> Facts:
    """Every stage in turn (in a worker when isolate), each under `timeout`; UserError naming the stage that
    failed. loaded(source): called once the model is saved for the workers, before the other stages."""
    t0 = time.perf_counter()
    worker = Worker(device) if isolate else InProcess(device)
    opened = worker.call(Probe, args, device, hold=True, timeout=timeout)
    times = {"start": time.perf_counter() - t0}
    try:
        found, notes = {}, []
        for stage in STAGES:
            t0 = time.perf_counter()
            row = worker.call(stage, timeout=timeout) if opened.ok else opened   # a worker that could not start
            times[stage] = time.perf_counter() - t0
            if row.status != "ok":
                raise UserError(_failure(stage, row, timeout))
            metrics = dict(row.metrics)
            notes += metrics.pop("notes", [])
            times.update({f"{stage}_{part}": t for part, t in metrics.pop("parts", {}).items()})
            found.update(metrics)
            if stage == "load" and loaded is not None:
                loaded(found["source"])
    finally:
        worker.close()
    return Facts(found["name"], found["kind"], [lint.Layer(**d) for d in found["layers"]], found["skips"],
                 notes, found["source"], times, found.get("flops"), found.get("params", 0), found.get("workload"))


def _failure(stage: str, row: Result, timeout: float) -> str:
    """One line: the stage, and what happened there."""
    what, status, message = WHAT[stage], row.status, row.message or ""
    if row.metrics.get("user_error"):
        return message
    if status == "timeout":
        return f"{what} did not finish within --timeout {timeout:g} s; the worker was stopped"
    if message.startswith("worker died ("):
        how, _, last = message.removeprefix("worker died (").partition("): ")
        return f"{what} ended its worker process ({how}; its last line on stderr: {last or 'none'})"
    return f"{what} failed: {message}"


def untraced(model: torch.nn.Module) -> list[str]:
    """The classes of the model's modules that torch.compile runs eagerly, between graphs: recurrent layers
    (nn.RNN, nn.LSTM, nn.GRU), unless torch._dynamo.config.allow_rnn is set. CUDA graphs through torch.compile cannot
    capture them, so they do not remove those layers' launches (a bidirectional GRU on an H200: 25.6-34.0 ms a step
    graphed against 22.9 eager, its kernels 9-15 ms)."""
    dynamo = sys.modules.get("torch._dynamo")          # not imported: its default stands (and importing it costs)
    if dynamo is not None and getattr(dynamo.config, "allow_rnn", False):
        return []
    return sorted({type(m).__name__ for m in model.modules() if isinstance(m, torch.nn.RNNBase)})
