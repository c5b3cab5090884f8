"""Benchmark suites as data: CSV files in this folder, one row a case, each row naming its application.

Two CSV shapes are read:
- tcperf's own (quick.csv, llm.csv, ...): columns `op`, `params` ('m=8192 n=8192 k=8192 a_t=N b_t=N'),
  `application`, and optionally `device` (gpu | cpu | both, default both).
- DeepBench's tables (deepbench/*.csv, copied from DeepBench, Apache-2.0), read through a per-table mapping.

    cases = load("quick", device)    # [{"op": "gemm", "shape": {...}, "suite": "quick", "tags": {...}}, ...]
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from importlib import resources
from typing import Callable

from ..errors import UserError, choices


@dataclass(frozen=True)
class Suite:
    name: str
    file: str
    about: str
    op: str | None = None                      # fixed op for DeepBench tables; None: the row's `op` column
    to_shape: Callable[[dict], dict] | None = None   # DeepBench row -> op shape; None: parse `params`
    source: str = "tcperf"


def parse_params(text: str) -> dict:
    """'m=8192 n=8192 a_t=N' -> {'m': 8192, 'n': 8192, 'a_t': 'N'} (ints where they parse)."""
    shape = {}
    for item in text.split():
        if "=" not in item:
            raise UserError(f"malformed shape parameter {item!r}; expected key=value")
        key, value = item.split("=", 1)
        shape[key] = _number(value)
    return shape


def _number(value: str):
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(value.lower(), value)


SUITES: dict[str, Suite] = {}


def register(suite: Suite) -> None:
    SUITES[suite.name] = suite


register(Suite("quick", "quick.csv", "what `tcperf run` measures: GEMMs (one misaligned), a convolution in NCHW "
                                      "and NHWC, an attention and a device-to-device copy"))


def names() -> list[str]:
    return list(SUITES)


def get(name: str) -> Suite:
    if name not in SUITES:
        raise choices("suite", name, SUITES)
    return SUITES[name]


def rows(suite: Suite) -> list[dict]:
    with resources.files(__name__).joinpath(suite.file).open(newline="") as f:
        return [r for r in csv.DictReader(f)]


def load(name: str, device_type: str = "cuda") -> list[dict]:
    """The suite's cases for this kind of device (no precision yet)."""
    suite = get(name)
    cases = []
    for row in rows(suite):
        if row.get("device", "both") not in ("both", "", device_type if device_type == "cpu" else "gpu"):
            continue
        shape = suite.to_shape(row) if suite.to_shape else parse_params(row["params"])
        tags = {k: v for k, v in row.items() if k in ("application", "set", "note") and v}
        case = {"op": suite.op or row["op"], "shape": shape, "suite": name, "tags": tags}
        if row.get("precisions"):
            case["only"] = row["precisions"].split()
        cases.append(case)
    return cases


def with_precisions(cases: list[dict], precisions: list[str]) -> list[dict]:
    """Each case at each asked precision its op has (and its row allows, where the row lists some)."""
    from .. import ops
    out = []
    for case in cases:
        have = ops.get(case["op"]).precisions
        for p in precisions:
            if p in have and p in case.get("only", have):
                out.append({**{k: v for k, v in case.items() if k != "only"}, "precision": p})
    return out


def count(name: str) -> int:
    return len(rows(get(name)))
