"""The user's model, wherever it comes from, as a tcperf.spec.Spec; and the same Spec again in a worker process.
This is the one place a model is loaded: `tcperf advise`, `models`, `train-to-target` and `generate` all load here.

Sources:
    path/to/file.py:factory      the user's file; factory() returns one of
        model                                   (example inputs then come from the file's `example_inputs`, a value
                                                 or a function, or from `model.example_inputs`)
        (model, example_inputs)
        {"model": ..., "inputs": ..., "loss_fn": ..., "metric_fn": ..., "targets": ..., "workload": ...}
                                                (all but model optional; "workload": tcperf.workload)
    a built-in ladder model      builtin("gpt2", "small", batch=2, seed=0, device="cpu")
    a transformers config        load_config("gpt2")

Example inputs are a tensor, a tuple/list of positional arguments, or a dict of keyword arguments.
loss_fn(outputs) -> scalar (training mode), or loss_fn(outputs, targets) when the dict gives "targets";
metric_fn(outputs) -> float (inference: compared against fp32 strict, relative change).
Every failure (no file, no such name, a factory that raises or returns the wrong type, inputs the model rejects)
is one `UserError` line: the command exits 2 before anything is measured or stored.

In a worker:
    source = save_source(spec, folder, target="examples/awkward_mlp.py:factory")   # the parent: a records.Source
    spec = load_source(source, device)            # a worker: the same weights and inputs
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import math
import pickle
import sys
import types
from pathlib import Path
from typing import Any

import torch

from . import workload as workmod
from .errors import UserError, one_line
from .records import Source
from .spec import Spec, tensors, to_device

DICT_KEYS = ("model", "inputs", "example_inputs", "targets", "loss_fn", "metric_fn", "workload")
RETURNS = "a torch.nn.Module, a (model, example_inputs) pair, or a dict with 'model' and 'inputs'"


def split_target(target: str) -> tuple[Path, str]:
    """'path/to/file.py:factory' -> (path, 'factory'); without ':name' the name is 'factory'."""
    path, sep, name = target.rpartition(":") if target.count(":") else (target, "", "")
    if not sep or not name.isidentifier():     # 'C:\\x.py' style or no name: the whole thing is the path
        path, name = target, "factory"
    return Path(path), name


def import_file(path: Path):
    """The user's file imported once a process, under the same module name in every process."""
    if not path.is_file():
        raise UserError(f"no such file: {path} (give path/to/file.py:factory)")
    name = module_name(path)
    if name in sys.modules:
        return sys.modules[name]                 # imported once a process: its classes stay the same classes
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UserError(f"cannot import {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module                   # inspect and torch.compile look modules up here
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)               # sibling imports work as they would for `python file.py`
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        sys.modules.pop(name, None)
        raise UserError(f"cannot import {path}: {one_line(e)}") from None
    return module


def load_spec(target: str, fallback_inputs=None, seed: int = 0) -> Spec:
    """Import the file, call the factory, and normalise what it returned into a Spec. fallback_inputs: the inputs
    when neither the factory nor the file gives any (train-to-target and generate pass (): they bring their own)."""
    path, name = split_target(target)
    module = import_file(path)
    factory = getattr(module, name, None)
    if factory is None:
        found = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_")
                       and getattr(v, "__module__", None) == module.__name__)
        raise UserError(f"{path} has no {name!r}; functions and classes in it: {', '.join(found) or 'none'}")
    if not callable(factory):
        raise UserError(f"{path}:{name} is a {type(factory).__name__}, not a function")
    torch.manual_seed(seed)    # a factory that draws random weights or inputs draws the same ones in every process
    try:
        made = factory()
    except Exception as e:
        raise UserError(f"{path}:{name}() raised {one_line(e)}") from None
    spec = from_value(made, f"{path}:{name}()", fallback_inputs=getattr(module, "example_inputs", fallback_inputs))
    spec.name = path.stem
    return spec


def from_value(made: Any, where: str = "factory()", fallback_inputs=None) -> Spec:
    """What a factory returned -> Spec (UserError naming what was expected)."""
    loss_fn = metric_fn = targets = workload = None
    if isinstance(made, dict):
        unknown = sorted(set(made) - set(DICT_KEYS))
        if unknown or "model" not in made:
            raise UserError(f"{where} returned a dict with keys {sorted(made)}; it needs 'model' and 'inputs' "
                            f"(optional: 'loss_fn', 'metric_fn', 'targets', 'workload')")
        model, inputs = made["model"], made.get("inputs", made.get("example_inputs", fallback_inputs))
        loss_fn, metric_fn, targets = made.get("loss_fn"), made.get("metric_fn"), made.get("targets")
        workload = made.get("workload")
    elif isinstance(made, (tuple, list)) and len(made) == 2 and isinstance(made[0], torch.nn.Module):
        model, inputs = made
    elif isinstance(made, torch.nn.Module):
        model, inputs = made, getattr(made, "example_inputs", fallback_inputs)
    else:
        raise UserError(f"{where} returned {type(made).__name__}; expected {RETURNS}")
    return build(model, inputs, loss_fn, metric_fn, where, targets, workload)


def build(model, inputs, loss_fn=None, metric_fn=None, where: str = "advise()", targets=None,
          workload=None) -> Spec:
    """Check the types of a model, its inputs and the optional functions; UserError on the first wrong one. A
    workload is drawn into its stream here (tcperf.workload.draw); without inputs, its first step is the example."""
    if not isinstance(model, torch.nn.Module):
        raise UserError(f"{where}: the model is a {type(model).__name__}, not a torch.nn.Module")
    stream = None
    if workload is not None:
        stream = _stream(workload, where, targets)
        if inputs is None:
            inputs = stream[0][1] if stream[0][1] else stream[0][0]
    if callable(inputs) and not isinstance(inputs, (torch.Tensor, torch.nn.Module)):
        try:
            inputs = inputs()
        except Exception as e:
            raise UserError(f"{where}: example_inputs() raised {one_line(e)}") from None
    if inputs is None:
        raise UserError(f"{where}: no example inputs; return (model, example_inputs) or "
                        f"{{'model': ..., 'inputs': ...}}")
    for fn_name, fn in (("loss_fn", loss_fn), ("metric_fn", metric_fn)):
        if fn is not None and not callable(fn):
            raise UserError(f"{where}: {fn_name} is a {type(fn).__name__}, not a function")
    args, kwargs = split_inputs(inputs, where)
    if stream is not None and workmod.structure(args, kwargs) != workmod.structure(*stream[0]):
        raise UserError(f"{where}: the example inputs ({workmod.describe(args, kwargs)}) are unlike the "
                        f"workload's steps ({workmod.describe(*stream[0])})")
    return Spec(model, args, kwargs, loss_fn, metric_fn, type(model).__name__, targets, workload=stream)


def _stream(workload, where: str, targets) -> list:
    if targets is not None:
        raise UserError(f"{where}: with a workload, give each step's labels among its inputs (e.g. labels=...) and "
                        f"a loss_fn(outputs) that reads them, not one 'targets' for every step")
    return workmod.draw(workload, where=where)


def split_inputs(inputs, where: str) -> tuple[tuple, dict]:
    found = workmod.split(inputs)
    if found is None:
        raise UserError(f"{where}: example inputs are a {type(inputs).__name__}; give {workmod.INPUTS}")
    return found


def module_name(path: Path) -> str:
    """A module name for a user's file, the same in every process (sys.modules and pickles refer to it)."""
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:10]
    return f"tcperf_user_{path.stem}_{digest}"


def on_device(spec: Spec, device: torch.device) -> Spec:
    """The spec with its model and inputs on `device` (the model moved in place, as .to() does)."""
    try:
        model = spec.model.to(device)
    except Exception as e:
        raise UserError(f"cannot move the model to {device}: {one_line(e)}") from None
    return dataclasses.replace(spec, model=model, args=to_device(spec.args, device),
                               kwargs=to_device(spec.kwargs, device), targets=to_device(spec.targets, device),
                               workload=to_device(spec.workload, device))


def check(spec: Spec, mode: str) -> Any:
    """Run the model once in fp32 on its inputs (and the loss and metric on the output); UserError if any of it
    fails. Returns the output."""
    spec.model.train(mode == "train")
    try:
        with torch.no_grad():
            out = spec.model(*spec.args, **spec.kwargs)
    except Exception as e:
        raise UserError(f"the model rejects its example inputs: {one_line(e)}") from None
    if not tensors(out):
        raise UserError(f"the model's output ({type(out).__name__}) holds no floating-point tensor to compare")
    _check_finite(out)
    for fn_name, fn in (("metric_fn", spec.metric_fn), ("loss_fn", spec.loss_fn if mode == "train" else None)):
        if fn is None:
            continue
        try:
            value = float(fn(out, spec.targets) if fn_name == "loss_fn" and spec.targets is not None else fn(out))
        except Exception as e:
            raise UserError(f"{fn_name}(outputs) failed: {one_line(e)}; it must return a number") from None
        if not math.isfinite(value):
            raise UserError(f"{fn_name}(outputs) is {value} in fp32 itself: no recipe can be judged against it")
    return out


def _check_finite(out) -> None:
    """NaN or inf in the fp32 output itself is the model's (or its inputs'), not a precision's: refused here, or every
    recipe would miss the tolerance and a layer would be blamed for it."""
    for i, t in enumerate(tensors(out)):
        bad = int((~torch.isfinite(t)).sum())
        if bad:
            raise UserError(f"the model's own fp32 output holds NaN/inf ({bad} of {t.numel()} values of output "
                            f"tensor {i}): no recipe can be judged against it; fix the model or its inputs")


# --- built-in models ------------------------------------------------------------------------------------------------
def builtin(name: str, config: str, batch: int, seed: int, device) -> Spec:
    """A model of the ladder (tcperf.models) at `seed`, made on the device, with its synthetic batch."""
    from . import models
    mod = models.get(name)
    cfg = models.config(mod, config)
    device = torch.device(device)
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    inputs, targets = mod.make_batch(cfg, batch, device, gen)
    torch.manual_seed(seed)
    with device:
        model = mod.build(cfg)
    formula = getattr(mod, "flops", None)
    return Spec(model, tuple(inputs), {}, mod.loss_fn, None, name, targets,
                optimizer=lambda params: models.make_optimizer(mod, params),
                items=mod.items_per_batch(cfg, batch), unit=mod.UNIT,
                flops=(lambda mode: formula(cfg, batch, mode)) if formula else None)


# --- the same spec in a worker --------------------------------------------------------------------------------------
def save_source(spec: Spec, folder, target: str | None = None) -> Source:
    """What a worker needs to rebuild `spec`: the factory target (called again) plus the parent's weights and inputs,
    so that every worker measures the very same model; without a target, the whole spec pickled (_pickler), which
    raises where it cannot be (without cloudpickle: a lambda, a class defined in a function)."""
    folder = Path(folder)
    if target:
        path = folder / "spec-state.pt"
        torch.save({"state": spec.model.state_dict(), "args": spec.args, "kwargs": spec.kwargs,
                    "targets": spec.targets, "workload": spec.workload}, path)
        return Source(target=target, state=str(path), name=spec.name)
    path = folder / "spec.pt"
    torch.save(spec, path, pickle_module=_pickler())
    return Source(pickle=str(path), files=tuple(_user_files()))


def _user_files() -> list[str]:
    """The users' files imported by import_file: a pickled model whose class lives in one refers to it by its
    module name, so a worker imports the ones the pickle names under the same names as it unpickles (_on_demand)."""
    return [m.__file__ for name, m in list(sys.modules.items())
            if name.startswith("tcperf_user_") and getattr(m, "__file__", None)]


def _pickler():
    """cloudpickle where it is installed (it carries lambdas, and classes defined in a script, by value); else
    the standard library's pickle."""
    try:
        import cloudpickle
        return cloudpickle
    except ImportError:
        import pickle
        return pickle


def load_source(source: Source, device) -> Spec:
    """The spec a source names, on `device`: the pickled spec, or the factory called again (with the parent's
    weights and inputs where they were saved)."""
    if source.kind == "pickle":
        spec = torch.load(source.pickle, weights_only=False, pickle_module=_on_demand(source.files))
    elif source.kind == "factory":
        spec = load_spec(source.target)
        if source.state:
            saved = torch.load(source.state, weights_only=False)
            spec.model.load_state_dict(saved["state"])
            spec.args, spec.kwargs, spec.targets = saved["args"], saved["kwargs"], saved["targets"]
            spec.workload = saved.get("workload")
        spec.name = source.name or spec.name
    else:
        raise ValueError(f"{source} names no model: only files to import")
    return on_device(spec, torch.device(device))


def _on_demand(files) -> types.ModuleType:
    """pickle, whose Unpickler imports a user's file (import_file) when the pickle names a class of it, and only
    then: a worker imports the model's own file, not every file its parent had imported (in one Python session,
    transformers', timm's and diffusers' factories before made each worker of the next model import all three)."""
    paths = {module_name(Path(file)): Path(file) for file in files}

    class Unpickler(pickle.Unpickler):
        def find_class(self, module, name):
            if module in paths and module not in sys.modules:
                import_file(paths[module])
            return super().find_class(module, name)

    shim = types.ModuleType("pickle")
    shim.Unpickler, shim.load = Unpickler, lambda f, **kw: Unpickler(f, **kw).load()
    return shim


def imports_source(files: list[str]) -> Source:
    """Not a model yet: the user's files, for a worker to import while the parent still loads the model."""
    return Source(files=tuple(files))


def import_files(files) -> None:
    for file in files:
        import_file(Path(file))


# --- transformers ---------------------------------------------------------------------------------------------------
def load_config(name: str, known=()):
    """A transformers config (no weights) by name or local folder: a local folder or the hub's cache first, the hub
    only when it can be reached (hub_reachable), so an offline machine answers at once. UserError when none is
    found, listing `known`, the other names the caller takes."""
    from transformers import AutoConfig
    try:
        return AutoConfig.from_pretrained(name, local_files_only=True)
    except Exception as e:                  # noqa: BLE001 - not local, not cached, or not a config
        local = e
    choose = f"; choose from: {', '.join([*known, 'or a local transformers folder'])}" if known else ""
    if Path(name).is_dir():
        raise UserError(f"{name} holds no transformers config ({one_line(local)})") from None
    if not hub_reachable():
        raise UserError(f"unknown model {name!r} (not a local folder, not in the Hugging Face cache, and the hub "
                        f"cannot be reached){choose}") from None
    return _hub_config(name, choose)


def _hub_config(name: str, choose: str):
    import logging
    from transformers import AutoConfig
    hub = logging.getLogger("huggingface_hub")
    level, hub.level = hub.level, logging.ERROR          # its retry warnings are not the one line we print
    try:
        return AutoConfig.from_pretrained(name)
    except Exception as e:                  # noqa: BLE001 - no such name, not a config
        raise UserError(f"unknown model {name!r} (transformers could not load its config: {type(e).__name__})"
                        f"{choose}") from None
    finally:
        hub.setLevel(level)


def hub_reachable(timeout_s: float = 3.0) -> bool:
    """Whether the Hugging Face hub's host takes a TCP connection within timeout_s (its name lookup included); False
    when HF_HUB_OFFLINE is set. Offline, the hub client retries five times (29 s) before it fails: this answers
    first. Behind a proxy the host is not probed (the client goes through the proxy): True."""
    import socket
    import threading
    import urllib.parse
    import urllib.request
    from huggingface_hub import constants
    if constants.is_offline_mode():
        return False
    if urllib.request.getproxies().get("https"):
        return True
    url = urllib.parse.urlsplit(constants.ENDPOINT)
    answered = []

    def probe():                            # in a thread: a name lookup may hang past any socket timeout
        try:
            socket.create_connection((url.hostname, url.port or 443), timeout=timeout_s).close()
            answered.append(True)
        except OSError:
            pass
    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout_s)
    return bool(answered)
