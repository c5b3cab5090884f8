"""What every operation module provides, and the correctness gate that stands before any timing.

An operation is one module in tcperf/ops/ holding one `Op` instance named `OP`, registered in
tcperf/ops/__init__.py. It turns a shape (a dict of the op's parameters, as read from a suite CSV) and a
precision into a `Prepared`: the call to time, the float64 reference of the same function on the very same
operands, and optionally the preallocated output the call writes (poisoned with NaN before it is checked).

    prep = OP.prepare({"m": 4096, "n": 4096, "k": 4096}, get("bf16"), "cuda", seed=0)
    err = check(prep, tolerance)      # relative-norm error; the case is timed only if err <= tolerance
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from ..errors import UserError, choices
from ..precision import Precision


@dataclass
class Prepared:
    run: Callable[[], torch.Tensor]          # the timed call; returns its output
    reference: Callable[[], torch.Tensor]    # float64 result of the same function on the same operands
    out: torch.Tensor | None = None          # preallocated output `run` writes into; poisoned before the check
    compare: Callable[[torch.Tensor], torch.Tensor] | None = None   # maps run()'s output to reference's terms
    info: dict = field(default_factory=dict)  # facts worth storing (attention backend, scales, ...)


class Op:
    """Base class: subclasses set `name` and `precisions` and implement prepare/flops/bytes."""
    name: str = ""
    precisions: tuple[str, ...] = ()
    shape_keys: tuple[str, ...] = ()         # the parameters a shape must have, in CLI order

    def prepare(self, shape: dict, prec: Precision, device: torch.device, seed: int = 0) -> Prepared:
        raise NotImplementedError

    def flops(self, shape: dict) -> float:
        """Floating-point (or integer) operations of one call, multiply and add counted as two."""
        raise NotImplementedError

    def bytes(self, shape: dict, prec: Precision) -> float:
        """The fewest bytes one call must move through device memory: inputs read once, outputs written once."""
        raise NotImplementedError

    def unsupported(self, shape: dict, prec: Precision, device: torch.device) -> str | None:
        """None if this shape runs at this precision on this device, else why not (one line)."""
        if prec.name not in self.precisions:
            return f"{self.name} has no {prec.name} variant (has: {', '.join(self.precisions)})"
        return None

    def label(self, shape: dict) -> str:
        return " ".join(f"{k}={shape[k]}" for k in self.shape_keys if k in shape)

    def verdict(self, shape: dict, prec: Precision, sm_count: int | None) -> dict:
        """Tensor Core eligibility for this case (see tcperf.tensorcore); {} when the op has no rule."""
        return {}

    def padded(self, shape: dict, prec: Precision) -> dict | None:
        """The aligned shape to time beside a misaligned one, or None when the shape is aligned."""
        return None


def one_of(value: str, valid, what: str) -> str:
    """A shape's option checked: `value` if it is one of `valid`, else a UserError naming them."""
    if value not in valid:
        raise choices(what, value, valid)
    return value


def sizes(values: dict, what: str) -> dict:
    """A shape's sizes checked: `values` (name -> int) if every one is >= 1, else a UserError listing them."""
    if min(values.values()) < 1:
        raise UserError(f"{what} sizes must be >= 1 ({', '.join(f'{k}={v}' for k, v in values.items())})")
    return values


def generator(device: torch.device, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def randn(shape, dtype: torch.dtype, device, gen: torch.Generator, scale: float = 1.0) -> torch.Tensor:
    """Random non-zero normal values (seeded), made in float32 and cast: never zeros, which run faster and hide
    unwritten outputs."""
    x = torch.randn(shape, generator=gen, device=device, dtype=torch.float32) * scale
    x = torch.where(x == 0, torch.full_like(x, 1e-3), x)
    return x.to(dtype)


def rand_int8(shape, device, gen: torch.Generator) -> torch.Tensor:
    """Random non-zero int8 values in [-64, 64]: no zeros, and k * 64 * 64 stays far inside int32 (and inside
    float64's exact range, so a float64 reference is exact)."""
    mag = torch.randint(1, 65, shape, generator=gen, device=device, dtype=torch.int32)
    sign = torch.randint(0, 2, shape, generator=gen, device=device, dtype=torch.int32) * 2 - 1
    return (mag * sign).to(torch.int8)


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64; inf for NaN/inf or a shape mismatch, so NaN never passes."""
    if out.shape != ref.shape:
        return float("inf")
    out, ref = out.detach().to(torch.float64), ref.detach().to(torch.float64)
    if not torch.isfinite(out).all():
        return float("inf")
    denom = torch.linalg.vector_norm(ref).item()
    diff = torch.linalg.vector_norm(out - ref).item()
    return diff / denom if denom > 0 else diff


def flat(grads) -> torch.Tensor:
    """Gradients (dx, every weight's, ...) as one float64 vector, so one relative error covers them all."""
    return torch.cat([g.reshape(-1).double() for g in grads])


def poison(t: torch.Tensor) -> None:
    """Fill an output with values no correct kernel leaves behind: NaN for floats, the minimum for integers."""
    if t.is_floating_point():
        t.fill_(float("nan"))
    else:
        t.fill_(torch.iinfo(t.dtype).min)


def check(prep: Prepared) -> float:
    """Run once on a poisoned output and return the relative error against the float64 reference."""
    if prep.out is not None:
        poison(prep.out)
    out = prep.run()
    if prep.compare is not None:
        out = prep.compare(out)
    return rel_error(out, prep.reference())
