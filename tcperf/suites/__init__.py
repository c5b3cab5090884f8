"""Benchmark suites as data: CSV files in this folder, one row a case, each row naming its application.

Two CSV shapes are read:
- tcperf's own (quick.csv, llm.csv, ...): columns `op`, `params` ('m=8192 n=8192 k=8192 a_t=N b_t=N'),
  `application`, and optionally `device` (gpu | cpu | both, default both).
- DeepBench's tables (deepbench/*.csv, copied from DeepBench, Apache-2.0), read through a per-table mapping.

    rows = load("quick", "cuda")                    # [Row(op="gemm", shape={...}, suite="quick", tags={...}), ...]
    cases = with_precisions(rows, ["bf16", "fp16"])  # [tcperf.records.Case, ...]
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import partial
from importlib import resources
from typing import Callable

from ..errors import UserError, choices
from ..records import Case


@dataclass(frozen=True)
class Row:
    """A suite's case before its precision: the op at one shape, its tags (application, set, note, density), and
    the precisions the row allows (None: every precision its op has)."""
    op: str
    shape: dict
    suite: str
    tags: dict
    only: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Suite:
    name: str
    file: str
    about: str
    op: str | None = None                      # fixed op for DeepBench tables; None: the row's `op` column
    to_shape: Callable[[dict], dict | list[dict]] | None = None   # DeepBench row -> op shape(s); None: `params`
    source: str = "tcperf"
    keep: Callable[[dict], bool] | None = None   # rows to read (None: all)


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


# --- DeepBench's tables: one row -> the case(s) tcperf measures for it (see deepbench/README.md) ----------------
def _ints(row: dict, keys) -> dict:
    return {k: int(row[k]) for k in keys}


def deepbench_gemm(row: dict) -> dict:
    return {**_ints(row, ("m", "n", "k")), "a_t": row["a_t"], "b_t": row["b_t"]}


def deepbench_conv(row: dict, passes=("fwd",)) -> list[dict]:
    """Each pass in NCHW (as DeepBench ran it) and NHWC (what Tensor Cores want), side by side."""
    base = _ints(row, ("N", "C", "H", "W", "K", "R", "S", "pad_h", "pad_w", "stride_h", "stride_w"))
    return [{**base, "layout": layout, "pass": p} for p in passes for layout in ("NCHW", "NHWC")]


def deepbench_rnn(row: dict, passes=("fwd",)) -> list[dict]:
    base = {"cell": row["cell"], **_ints(row, ("hidden", "batch", "timesteps"))}
    return [{**base, "pass": p} for p in passes]


def deepbench_sparse(row: dict) -> list[dict]:
    """DeepBench's unstructured 90-95 % sparse GEMMs, run as 2:4 structured sparse and as dense."""
    return [{**_ints(row, ("m", "n", "k")), "format": f} for f in ("2:4", "dense")]


def in_deepbench_code(row: dict) -> bool:
    """False for the conv_infer row DeepBench's conv_problems.h comments out (it segfaulted on ARM)."""
    return "commented out" not in row.get("note", "")


# table -> (its rows -> cases, what it holds): suite deepbench-gemm-train reads deepbench/gemm_train.csv as gemm cases
DEEPBENCH = {
    "gemm_train": (deepbench_gemm, "DeepBench training GEMMs (DeepSpeech, language models, speaker ID, ...): NN/NT/TN"),
    "gemm_infer": (deepbench_gemm, "DeepBench inference GEMMs, server and device sets"),
    "conv_train": (partial(deepbench_conv, passes=("fwd", "bwd_data", "bwd_weight")),
                   "DeepBench training convolutions: forward, backward-data, backward-weight, NCHW and NHWC"),
    "conv_infer": (deepbench_conv, "DeepBench inference convolutions: forward, NCHW and NHWC"),
    "rnn_train": (partial(deepbench_rnn, passes=("fwd", "bwd")),
                  "DeepBench training RNNs (vanilla, LSTM, GRU): forward and backward"),
    "rnn_infer": (deepbench_rnn, "DeepBench inference RNNs: forward"),
    "sparse": (deepbench_sparse, "DeepBench's 90-95 % sparse GEMMs, run as 2:4 structured sparse and as dense"),
}

# --- every suite: tcperf's own CSV files, DeepBench's tables, then the modern suites -----------------------------
SUITES: dict[str, Suite] = {s.name: s for s in (
    Suite("quick", "quick.csv", "what `tcperf run` measures: GEMMs (one misaligned), a convolution in NCHW and NHWC, "
                                "an attention and a device-to-device copy"),
    *(Suite("deepbench-" + table.replace("_", "-"), f"deepbench/{table}.csv", about, op=table.split("_")[0],
            to_shape=to_shape, source="DeepBench", keep=in_deepbench_code if table == "conv_infer" else None)
      for table, (to_shape, about) in DEEPBENCH.items()),
    Suite("llm", "llm.csv", "LLM linear layers: GPT-2 124M (vocabulary 50257 and padded 50304), Llama-3 8B and 70B "
                            "projections, prefill and decode (M = 1..256)"),
    Suite("attention", "attention.csv", "scaled-dot-product attention: sequence 512..16k, head_dim 64 and 128, "
                                        "causal and full, forward and backward"),
    Suite("vit", "vit.csv", "ViT-B/16 at 224x224, batch 64: patch embedding, attention and MLP layers"),
    Suite("resnet50", "resnet50.csv", "ResNet-50 convolutions at batch 64 (every distinct layer), NCHW and NHWC, "
                                      "forward and backward"),
)}


def names() -> list[str]:
    return list(SUITES)


def get(name: str) -> Suite:
    if name not in SUITES:
        raise choices("suite", name, SUITES)
    return SUITES[name]


def rows(suite: Suite) -> list[dict]:
    with resources.files(__name__).joinpath(suite.file).open(newline="") as f:
        return [r for r in csv.DictReader(f) if suite.keep is None or suite.keep(r)]


def load(name: str, device_type: str = "cuda") -> list[Row]:
    """The suite's rows for this kind of device (no precision yet)."""
    suite = get(name)
    out = []
    for row in rows(suite):
        if row.get("device", "both") not in ("both", "", device_type if device_type == "cpu" else "gpu"):
            continue
        shapes = suite.to_shape(row) if suite.to_shape else parse_params(row["params"])
        tags = {k: v for k, v in row.items() if k in ("application", "set", "note", "density") and v}
        only = tuple(row["precisions"].split()) if row.get("precisions") else None
        for shape in shapes if isinstance(shapes, list) else [shapes]:
            out.append(Row(suite.op or row["op"], shape, name, tags, only))
    return out


def with_precisions(rows: list[Row], precisions: list[str]) -> list[Case]:
    """Each row at each asked precision its op has (and the row allows, where it lists some): kernel cases."""
    from .. import ops
    out = []
    for row in rows:
        have = ops.get(row.op).precisions
        out += [Case(row.op, row.shape, p, suite=row.suite, tags=row.tags) for p in precisions
                if p in have and p in (row.only or have)]
    return out


def count(name: str) -> int:
    return len(rows(get(name)))
