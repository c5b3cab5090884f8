"""A workload: the inputs a job feeds its model step after step, where they are not one tensor (a classifier or an
encoder served batches of varying length, a decoder's prefill, a language model's data loader).

The user's factory gives, beside or instead of `inputs`, a `workload`: a list of per-step inputs (each as `inputs`
would be: INPUTS) or a callable `workload(step) -> inputs`. tcperf draws a seeded stream from it once, where the
factory runs (tcperf.source), and times every recipe on that stream (tcperf.stream). A padded recipe ("...@pad64")
pads the dimensions that vary across the stream up to a multiple, so that one compiled graph serves each bucket;
its outputs are sliced back to the real positions, and it is accepted only where those match fp32 on the unpadded
inputs (tcperf.engine checks the first CHECK_STEPS steps).

    steps = draw(workload, where="model.py:factory()")      # [(args, kwargs)], UserError naming a bad step
    varying = varying_dims([flat(a, k) for a, k in steps])    # {tensor index: {dim that varies: its longest}}
    padded, sizes = pad(tensors, varying, 64, names)          # to multiples of 64; unpad(outputs, sizes)

Padding values: 0 for every tensor (token ids of the pad token 0, an attention mask's "ignore"), but for keyword
inputs named in PAD_VALUES (labels: -100, PyTorch's and Hugging Face's ignore_index, so a padded position adds
nothing to the loss).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .errors import UserError, one_line

STREAM_STEPS = 64      # steps in the timed stream: enough to meet most shapes of a varying workload (a 60-batch
#                        BERT stream of lengths 16-512 met 57 distinct lengths and every bucket of 64), few
#                        enough that a recipe's warm-up on it stays within the advice's time
CHECK_STEPS = 3        # the stream's first steps, whose outputs every recipe is checked on against fp32
PAD_VALUES = {"labels": -100}


def draw(workload, count: int = STREAM_STEPS, seed: int = 0, where: str = "factory()") -> list[tuple[tuple, dict]]:
    """The seeded stream: a list's items in a seeded order (all of them when it holds no more than `count`,
    else `count` of them), or workload(step) for step 0..count-1, each drawn after torch.manual_seed(seed + step).
    UserError naming the step for a callable that raises or a step unlike the first."""
    if callable(workload):
        raw = []
        for step in range(count):
            torch.manual_seed(seed + step)
            try:
                raw.append(workload(step))
            except Exception as e:
                raise UserError(f"{where}: workload({step}) raised {one_line(e)}") from None
    elif isinstance(workload, (list, tuple)) and len(workload) > 0:
        order = torch.randperm(len(workload), generator=torch.Generator().manual_seed(seed)).tolist()
        raw = [workload[i] for i in order[:count]]
    else:
        raise UserError(f"{where}: the workload is a {type(workload).__name__}; give a non-empty list of per-step "
                        f"inputs or a function workload(step) -> inputs")
    steps = [_split(x, i, where) for i, x in enumerate(raw)]
    _same_structure(steps, where)
    return steps


INPUTS = "a tensor, a tuple of positional arguments or a dict of keyword arguments"


def split(inputs) -> tuple[tuple, dict] | None:
    """Inputs as the user gives them (INPUTS) -> (positional, keyword) arguments; None for anything else."""
    if isinstance(inputs, torch.Tensor):
        return (inputs,), {}
    if isinstance(inputs, (tuple, list)):
        return tuple(inputs), {}
    if isinstance(inputs, dict) and all(isinstance(k, str) for k in inputs):
        return (), dict(inputs)
    return None


def _split(inputs, step: int, where: str) -> tuple[tuple, dict]:
    found = split(inputs)
    if found is None:
        raise UserError(f"{where}: workload step {step} is a {type(inputs).__name__}; each step's inputs are "
                        f"{INPUTS}")
    return found


def structure(args: tuple, kwargs: dict) -> tuple:
    """What must not change from step to step: the arguments, each tensor's dtype and rank, other values as they
    are."""
    def one(x):
        return ("tensor", str(x.dtype), x.dim()) if torch.is_tensor(x) else ("value", repr(x)[:80])
    return tuple(one(a) for a in args), tuple((k, one(v)) for k, v in kwargs.items())


def describe(args: tuple, kwargs: dict) -> str:
    def one(x):
        return f"{str(x.dtype).replace('torch.', '')}{list(x.shape)}" if torch.is_tensor(x) else repr(x)[:40]
    return ", ".join([one(a) for a in args] + [f"{k}={one(v)}" for k, v in kwargs.items()])


def _same_structure(steps: list[tuple[tuple, dict]], where: str) -> None:
    first = structure(*steps[0])
    for i, (args, kwargs) in enumerate(steps[1:], 1):
        if structure(args, kwargs) != first:
            raise UserError(f"{where}: workload step {i} gives ({describe(args, kwargs)}), unlike step 0 "
                            f"({describe(*steps[0])}): every step needs the same arguments, tensors of the same "
                            f"dtype and number of dimensions")


def flat(args: tuple, kwargs: dict) -> tuple[torch.Tensor, ...]:
    """The step's tensors, positional first, then keyword (tcperf.spec.tensor_inputs' order)."""
    return (*(a for a in args if torch.is_tensor(a)), *(v for v in kwargs.values() if torch.is_tensor(v)))


def names(args: tuple, kwargs: dict) -> list[str]:
    """Each of flat()'s tensors by name: 'arg0', ... or its keyword."""
    return [*(f"arg{i}" for i, a in enumerate(args) if torch.is_tensor(a)),
            *(k for k, v in kwargs.items() if torch.is_tensor(v))]


def varying_dims(stream: list[tuple]) -> dict[int, dict[int, int]]:
    """{tensor index: {dimension whose size changes across the stream: the longest it gets}} (tensors that never
    change left out). Padding never goes past the longest: a model's limit (BERT's 512 positions) is often the
    workload's."""
    out = {}
    for i, first in enumerate(stream[0]):
        sizes = {d: {x[i].shape[d] for x in stream} for d in range(first.dim())}
        dims = {d: max(s) for d, s in sizes.items() if len(s) > 1}
        if dims:
            out[i] = dims
    return out


def shape_key(tensors: tuple) -> tuple:
    return tuple(tuple(t.shape) for t in tensors)


def unpaddable(inputs: list[tuple], outputs: list[tuple]) -> str | None:
    """Why padding cannot be undone on this model's outputs, or None: the shapes of its inputs (shape_key) and of
    its outputs at each distinct input shape. unpad cuts back the dimensions that follow an input's varying one; an
    output dimension that varies without following one (a model that subsamples time by 4 gives T/4 for T), or two
    lengths that vary apart (an encoder-decoder's source and target), leave it no way to tell padding from data."""
    if len({len(o) for o in outputs}) > 1 or len({tuple(len(t) for t in o) for o in outputs}) > 1:
        return "the outputs' number or rank changes with the input shape"
    follow = [[shape[i][d] for shape in inputs] for i in range(len(inputs[0])) for d in range(len(inputs[0][i]))]
    lengths = {tuple(sizes) for sizes in follow if len(set(sizes)) > 1}
    if len(lengths) > 1:
        return f"{len(lengths)} input lengths vary apart: padded to one bucket, their outputs could not be told apart"
    for k, first in enumerate(outputs[0]):
        for d in range(len(first)):
            sizes = [o[k][d] for o in outputs]
            if len(set(sizes)) > 1 and sizes not in follow:
                return (f"output {k}'s dimension {d} varies ({min(sizes)}..{max(sizes)}) without following any input "
                        f"dimension: padded positions could not be cut back out of it")
    return None


def distinct_shapes(stream: list[tuple]) -> int:
    return len({shape_key(x) for x in stream})


def bucket(size: int, multiple: int, longest: int | None = None) -> int:
    """The padded size: the next multiple, but never past the longest size the workload has."""
    full = max(multiple, math.ceil(size / multiple) * multiple)
    return min(full, max(longest, size)) if longest else full


def pad(tensors: tuple, varying: dict, multiple: int, tensor_names: list[str]) -> tuple[tuple, dict]:
    """Each varying dimension padded at its end up to a multiple of `multiple` (at most its longest: varying_dims);
    (padded tensors, {(dimension, padded size): real size}) for unpad."""
    sizes, out = {}, list(tensors)
    for i, dims in varying.items():
        t = out[i]
        widths = [0] * (2 * t.dim())
        for d, longest in dims.items():
            real = t.shape[d]
            full = bucket(real, multiple, longest)
            widths[2 * (t.dim() - 1 - d) + 1] = full - real         # F.pad counts dimensions from the last
            if full != real:
                sizes[(d, full)] = real
        if any(widths):
            out[i] = F.pad(t, widths, value=PAD_VALUES.get(tensor_names[i], 0))
    return tuple(out), sizes


def unpad(outputs, sizes: dict):
    """Every output dimension padded in the inputs (the same dimension, of the padded size: a (batch, length)
    input gives (batch, length, hidden) outputs) cut back to its real size. tcperf.spec.map_tensors keeps the
    output's own type: a ModelOutput stays one."""
    if not sizes:
        return outputs
    from .spec import map_tensors

    def cut(t: torch.Tensor) -> torch.Tensor:
        for d, n in enumerate(t.shape):
            if (d, n) in sizes:
                t = t.narrow(d, 0, sizes[(d, n)])
        return t
    return map_tensors(cut, outputs)
