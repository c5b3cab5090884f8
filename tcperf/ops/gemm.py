"""GEMM: C[m, n] = op(A)[m, k] @ op(B)[k, n], in DeepBench's convention (a_t / b_t = 'N' or 'T').

FLOPs: 2*m*n*k (one multiply and one add per term). Bytes: A and B read once, C written once.
fp64/fp32/tf32/fp16/bf16 go through torch.matmul; fp8 through torch._scaled_mm (e4m3 operands, one float32
scale per tensor, bf16 out, B column-major as cuBLASLt requires, so the layout columns do not apply);
int8 through torch._int_mm (int32 out, exact), honouring the layouts: with B row-major (b_t=N) cuBLAS runs an
sm80 WMMA kernel on an H200 (128 TOPS at 8192^3), with B column-major (b_t=T) a Hopper one.

On an H200 (torch 2.11, 2026-11): bf16 8192^3 ~ 744 TFLOPS, fp16 8191^3 ~ 145 (anchors.md).
"""
from __future__ import annotations

import torch

from ..precision import Precision
from ..quant import fp8_quantize
from .base import Op, Prepared, generator, rand_int8, randn


class Gemm(Op):
    name = "gemm"
    precisions = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8")
    shape_keys = ("m", "n", "k", "a_t", "b_t")

    def flops(self, shape: dict) -> float:
        return 2.0 * shape["m"] * shape["n"] * shape["k"]

    def bytes(self, shape: dict, prec: Precision) -> float:
        m, n, k = shape["m"], shape["n"], shape["k"]
        out_bytes = {"int8": 4, "fp8": 2}.get(prec.name, prec.element_bytes)
        return (m * k + k * n) * prec.element_bytes + m * n * out_bytes

    def label(self, shape: dict) -> str:
        return f"{shape['m']}x{shape['n']}x{shape['k']} {shape.get('a_t', 'N')}{shape.get('b_t', 'N')}"

    def unsupported(self, shape: dict, prec: Precision, device: torch.device) -> str | None:
        why = super().unsupported(shape, prec, device)
        if why:
            return why
        from ..tensorcore import gemm_hard_limit   # the rules live in one place
        return gemm_hard_limit(shape["m"], shape["n"], shape["k"], prec.name)

    def verdict(self, shape: dict, prec: Precision, sm_count: int | None) -> dict:
        from ..tensorcore import gemm_verdict
        return gemm_verdict(shape["m"], shape["n"], shape["k"], prec.name, sm_count, b_t=shape.get("b_t", "N"))

    def padded(self, shape: dict, prec: Precision) -> dict | None:
        from ..tensorcore import pad_to
        new = {**shape, **{d: pad_to(shape[d], prec.align) for d in ("m", "n", "k")}}
        return None if new == shape or prec.name in ("fp32", "fp64") else new

    def prepare(self, shape: dict, prec: Precision, device: torch.device, seed: int = 0) -> Prepared:
        if prec.name == "fp8":
            return _prepare_fp8(shape, device, seed)
        if prec.name == "int8":
            return _prepare_int8(shape, device, seed)
        gen = generator(device, seed)
        make = lambda rows, cols: randn((rows, cols), prec.dtype, device, gen)
        a = _operand(shape["m"], shape["k"], shape.get("a_t", "N"), make)
        b = _operand(shape["k"], shape["n"], shape.get("b_t", "N"), make)
        c = torch.empty(shape["m"], shape["n"], dtype=prec.dtype, device=device)
        return Prepared(run=lambda: torch.matmul(a, b, out=c), reference=lambda: a.double() @ b.double(), out=c)


def _operand(rows: int, cols: int, trans: str, make) -> torch.Tensor:
    """A rows x cols operand from make(rows, cols); 'T' stores it as cols x rows and hands over the transposed
    view (for B: column-major)."""
    return make(cols, rows).t() if trans == "T" else make(rows, cols)


def _prepare_fp8(shape: dict, device, seed: int) -> Prepared:
    gen = generator(device, seed)
    m, n, k = shape["m"], shape["n"], shape["k"]
    # per-tensor scales: the largest magnitude maps to e4m3's largest finite value
    a8, sa = fp8_quantize(randn((m, k), torch.float32, device, gen), rowwise=False)
    b8, sb = fp8_quantize(randn((n, k), torch.float32, device, gen), rowwise=False)
    b8 = b8.t()                                     # k x n, column-major: what _scaled_mm requires
    run = lambda: torch._scaled_mm(a8, b8, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
    ref = lambda: (a8.double() * sa.double()) @ (b8.double() * sb.double())
    return Prepared(run=run, reference=ref, info={"scale_a": sa.item(), "scale_b": sb.item()})


def _prepare_int8(shape: dict, device, seed: int) -> Prepared:
    gen = generator(device, seed)
    make = lambda rows, cols: rand_int8((rows, cols), device, gen)
    a = _operand(shape["m"], shape["k"], shape.get("a_t", "N"), make)
    b = _operand(shape["k"], shape["n"], shape.get("b_t", "N"), make)   # 'T': column-major, cuBLASLt's int8 layout
    return Prepared(run=lambda: torch._int_mm(a, b), reference=lambda: a.double() @ b.double())


OP = Gemm()
