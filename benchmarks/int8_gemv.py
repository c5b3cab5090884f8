"""Why int8 weight-only decode was slower than bf16: one decode-shaped Linear, timed each way on a GPU.

The shapes are Llama-3.2-1B's (MLP up 8192 x 2048, the vocabulary head 128256 x 2048, MLP down 2048 x 8192) at
batch 1 and 16. Each row: bf16 cuBLAS (F.linear), then gpt-fast's int8 weight-only form `F.linear(x, W.to(bf16))
* scales` under torch.compile without and with Inductor's coordinate-descent tuning, the same as a broadcast
multiply-and-sum, and as an explicit dequantise + mm. Each is checked against a float64 reference of the int8
product first, then timed with triton.testing.do_bench_cudagraph (CUDA graph replays, median). GB/s counts the
weight bytes only (2 a weight for bf16, 1 for int8).

    python benchmarks/int8_gemv.py

Measured on an H200 (torch 2.11, 2026-11-24) by this script's first form, the same timings without the float64
check (added after; the device time was spent), ms at batch 1: 128256 x 2048: bf16 0.126, int8 untuned 1.18, tuned
0.074; 8192 x 2048: bf16 0.0086, int8 untuned 0.106, tuned 0.014. At batch 16 the tuned reduction is no help
(9.2 ms for the head): Inductor's fused dequantising kernel pays only at batch 1. tcperf.generate.loop compiles
the decode step with the tuning on (GPU_OPTIONS).
"""
from __future__ import annotations

import argparse

import torch
import torch._inductor.config as inductor_config
import torch.nn.functional as F

SHAPES = [(8192, 2048), (128256, 2048), (2048, 8192)]
BATCHES = (1, 16)
TUNED = {"coordinate_descent_tuning": True}


def int8_linear(x, q, s):
    return F.linear(x, q.to(x.dtype)) * s


def int8_sum(x, q, s):
    return (x.unsqueeze(-2) * q.to(x.dtype)).sum(-1) * s


def int8_mm(x, q, s):
    return torch.mm(x.view(-1, x.shape[-1]), q.t().to(x.dtype)).view(*x.shape[:-1], -1) * s


FORMS = [("int8 compiled", int8_linear, {}), ("int8 compiled, tuned", int8_linear, TUNED),
         ("int8 multiply-sum, tuned", int8_sum, TUNED), ("int8 dequantise + mm", int8_mm, {})]


def quantized(n: int, k: int, device):
    w = torch.randn(n, k, device=device, dtype=torch.bfloat16)
    s = (w.float().abs().amax(1) / 127).to(torch.bfloat16)
    q = torch.round(w.float() / s.float()[:, None]).clamp(-127, 127).to(torch.int8)
    return w, q, s


def checked(out: torch.Tensor, x, q, s) -> None:
    ref = (x.double() @ q.double().t()) * s.double()
    err = ((out.double() - ref).norm() / ref.norm()).item()
    if err > 2e-2:
        raise AssertionError(f"relative error {err:.3g} against the float64 reference")


def row(n: int, k: int, m: int, device) -> dict:
    from triton.testing import do_bench_cudagraph
    w, q, s = quantized(n, k, device)
    x = torch.randn(m, 1, k, device=device, dtype=torch.bfloat16)
    times = {"bf16 cuBLAS": do_bench_cudagraph(lambda: F.linear(x, w))}
    for name, fn, config in FORMS:
        torch._dynamo.reset()
        with inductor_config.patch(config):
            compiled = torch.compile(fn, fullgraph=True, dynamic=False)
            checked(compiled(x, q, s), x, q, s)
            times[name] = do_bench_cudagraph(lambda: compiled(x, q, s))
    return times


def main() -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()     # no options: --help only
    if not torch.cuda.is_available():
        print("int8_gemv.py needs a CUDA GPU")
        return 1
    device = torch.device("cuda")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}: ms (weight GB/s)")
    for n, k in SHAPES:
        for m in BATCHES:
            times = row(n, k, m, device)
            cells = [f"{name} {ms:.4f} ({n * k * (2 if 'bf16' in name else 1) / ms / 1e6:.0f})"
                     for name, ms in times.items()]
            print(f"{n} x {k}, batch {m}: " + ", ".join(cells), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
