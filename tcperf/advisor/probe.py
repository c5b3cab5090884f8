"""The first look at a user's model, in a worker process like every recipe: the factory called, the model run once in
fp32 on its inputs, its GEMM-like ops recorded for the shape lint, which recipes apply to it, and the fp32 reference
every recipe is checked against. Each stage is one command to the worker (tcperf.worker's session mode) with the
advice's --timeout, so a factory that never returns, a forward that hangs or a forward that kills its process ends
the advice with one line naming the stage (exit 2), before anything is stored as if measured.

    facts = run_probe(source, case, device, timeout=600)     # Facts(name, kind, layers, skips, notes)

`source` is tcperf.source's: {"kind": "file", "target": "model.py:factory"}: the probe calls the factory and pickles
what it returned, so every later worker measures the very same model ({"kind": "pickle", ...}; where pickle cannot
carry it, {"kind": "file", ..., "state": PATH}: the workers call the factory and load the weights and inputs
saved at PATH). Without a worker (a model pickle cannot carry), the same Probe runs in this process.
"""
from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field

import torch

from .. import engine, recipes
from .. import precision as precmod
from .. import workload as workmod
from ..errors import UserError, one_line
from ..source import check, load_source, load_spec, on_device, save_source
from . import lint

STAGES = ("load", "check", "workload", "lint", "reference")
WHAT = {"load": "calling the model's factory", "check": "the model's first fp32 forward on its inputs",
        "workload": "the model's fp32 forward on each shape of its workload",
        "lint": "recording the model's GEMM shapes (the shape lint)", "reference": "the fp32 reference run"}


@dataclass
class Facts:
    """What the probe found: the parent decides the search from these without touching the model."""
    name: str
    kind: str                     # cnn | transformer (snippets)
    layers: list                  # lint.Layer, every GEMM-like op of one forward
    skips: dict                   # recipe -> why it does not apply to this model (None: it applies)
    notes: list = field(default_factory=list)
    source: dict | None = None    # what later workers load
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
            return {**self.row(), "status": "error", "message": str(e), "metrics": {"user_error": True}}
    return wrapped


class Probe:
    """The stages, one method each (the worker calls them by name). case: {"source", "mode", "reference",
    "steps", "recipes", "folder"}."""

    def __init__(self, case: dict, device, job: dict | None = None):
        self.case, self.device, self.spec = case, torch.device(device), None

    def row(self, **metrics) -> dict:
        return {"op": "advise.probe", "suite": "advise", "shape": {}, "precision": "probe", "status": "ok",
                "metrics": metrics}

    @user_errors
    def load(self) -> dict:
        source, t0 = self.case.get("source"), time.perf_counter()
        parts = {}                               # seconds: the factory, saving the model, moving it to the device
        if source is None:                       # in this process: the spec itself (pickle cannot carry it)
            spec, source = self.case["spec"], {"kind": "local"}
        elif source["kind"] == "file":
            spec = load_spec(source["target"])
            parts["factory"], t0 = time.perf_counter() - t0, time.perf_counter()
            source = _saved(spec, self.case["folder"], source["target"])      # what every worker loads
            parts["save"], t0 = time.perf_counter() - t0, time.perf_counter()
        else:
            spec = load_source(source, "cpu")
        self.spec = on_device(spec, self.device)
        parts["to_device"] = time.perf_counter() - t0
        return self.row(name=self.spec.name, source={**source, "name": self.spec.name}, notes=self._notes(),
                        parts=parts)

    def _notes(self) -> list[str]:
        notes, train = [], self.case["mode"] == "train"
        if train and self.spec.metric_fn is not None:
            notes.append("metric_fn is used in inference mode only; training compares the loss")
        if train and self.spec.loss_fn is None:
            notes.append("no loss_fn: training used the recipes' default loss (cross-entropy against integer "
                         "targets, else the mean square of the outputs)")
        return notes

    @user_errors
    def check(self) -> dict:
        from torch.utils.flop_counter import FlopCounterMode
        with precmod.apply("fp32", self.device.type), FlopCounterMode(display=False) as flops:
            check(self.spec, self.case["mode"])
        params = sum(p.numel() for p in self.spec.model.parameters())
        return self.row(flops=float(flops.get_total_flops()), params=params)

    @user_errors
    def workload(self) -> dict:
        """The fp32 forward on the first step of each distinct shape of the stream (a shape the model rejects is
        one line naming the step) and its FLOPs; FLOPs a step averaged over the stream."""
        if not self.spec.workload:
            return self.row(workload=None)
        from torch.utils.flop_counter import FlopCounterMode
        steps, flops_of = self.spec.workload, {}
        stream = [workmod.flat(a, k) for a, k in steps]
        self.spec.model.eval()
        for i, x in enumerate(stream):
            key = workmod.shape_key(x)
            if key not in flops_of:
                flops_of[key] = self._forward_flops(steps[i], i, FlopCounterMode)
        varying = workmod.varying_dims(stream)
        names = workmod.names(*steps[0])
        return self.row(workload={
            "length": len(stream), "distinct": len(flops_of),
            "varying": {names[i]: {str(d): n for d, n in dims.items()} for i, dims in varying.items()},
            "flops_per_step": sum(flops_of[workmod.shape_key(x)] for x in stream) / len(stream)})

    def _forward_flops(self, step: tuple, i: int, counter) -> float:
        args, kwargs = step
        try:
            with precmod.apply("fp32", self.device.type), torch.no_grad(), counter(display=False) as flops:
                self.spec.model(*args, **kwargs)
        except Exception as e:
            raise UserError(f"the model rejects workload step {i} ({workmod.describe(args, kwargs)}): "
                            f"{one_line(e)}") from None
        return float(flops.get_total_flops())

    @user_errors
    def lint(self) -> dict:
        with precmod.apply("fp32", self.device.type):
            layers = lint.record(self.spec.model, self.spec.args, self.spec.kwargs)
        mode = self.case["mode"]
        skips = {name: engine.skip_reason(recipes.get(name), self.spec, mode, self.device)
                 for name in self.case["recipes"]}
        kind = "cnn" if engine.has_conv2d(self.spec.model) else "transformer"
        return self.row(layers=[l.to_dict() for l in layers], skips=skips, kind=kind)

    @user_errors
    def reference(self) -> dict:
        ref = engine.load_reference(self.case["reference"], self.spec, self.case["mode"], self.device,
                                    self.case["steps"])
        note = engine.reference_note(ref)
        return self.row(notes=[note] if note else [])


def _saved(spec, folder: str, target: str) -> dict:
    """The model pickled whole where pickle can carry it (a worker then loads it without calling the factory: on an
    H200, eight workers calling a transformers factory at once took 11-19 s to build and load a 134M model), else
    the factory with the weights and inputs it made here."""
    try:
        return save_source(spec, folder)
    except Exception:            # noqa: BLE001 - a lambda, a local class: the workers call the factory
        return save_source(spec, folder, target)


def run_probe(case: dict, device, *, timeout: float, isolate: bool = True, loaded=None) -> Facts:
    """Every stage in turn (in a worker when isolate), each under `timeout`; UserError naming the stage that
    failed. loaded(source): called once the model is saved for the workers, before the other stages."""
    t0 = time.perf_counter()
    call = _worker_calls(case, device, timeout) if isolate else _local_calls(case, device)
    times = {"start": time.perf_counter() - t0}
    try:
        found, notes = {}, []
        for stage in STAGES:
            t0 = time.perf_counter()
            row = call(stage)
            times[stage] = time.perf_counter() - t0
            if row["status"] != "ok":
                raise UserError(_failure(stage, row, timeout))
            metrics = dict(row.get("metrics") or {})
            notes += metrics.pop("notes", [])
            times.update({f"{stage}_{part}": t for part, t in metrics.pop("parts", {}).items()})
            found.update(metrics)
            if stage == "load" and loaded is not None:
                loaded(found["source"])
    finally:
        call(None)
    return Facts(found["name"], found["kind"], [lint.Layer(**d) for d in found["layers"]], found["skips"],
                 notes, found["source"], times, found.get("flops"), found.get("params", 0), found.get("workload"))


def _worker_calls(case: dict, device, timeout: float):
    from ..runner import Session
    session = Session({**case, "task": "probe"}, device, preload=False)
    session.call("open", timeout)

    def call(stage):
        if stage is None:
            return session.close()
        return session.call(stage, timeout)
    return call


def _local_calls(case: dict, device):
    probe = Probe(case, device)

    def call(stage):
        return getattr(probe, stage)() if stage else None
    return call


def _failure(stage: str, row: dict, timeout: float) -> str:
    """One line: the stage, and what happened there."""
    what, status, message = WHAT[stage], row["status"], row.get("message") or ""
    if (row.get("metrics") or {}).get("user_error"):
        return message
    if status == "timeout":
        return f"{what} did not finish within --timeout {timeout:g} s; the worker was stopped"
    if message.startswith("worker died ("):
        how, _, last = message.removeprefix("worker died (").partition("): ")
        return f"{what} ended its worker process ({how}; its last line on stderr: {last or 'none'})"
    return f"{what} failed: {message}"
