"""The kernel lab: GPU kernels written from Python in Triton, held against NumPy on the CPU and cuBLAS on the GPU.

Read the modules (in tcperf/kernels/) in this order; each one is a short tutorial (kernel, launch wrapper, NumPy version, FLOP and
byte counts, top to bottom), and each adds one idea to the one before:

    vector_add     one program per block of elements: pointers, masks, the launch grid
    matrix_add     a 2-D grid of 2-D blocks, strides
    sigmoid        arithmetic in registers costs nothing next to memory traffic
    matmul_naive   one output element per program: correct, and 100x off the hardware
    matmul_tiled   tiles of A and B reused from on-chip memory; tl.dot on CUDA cores (fp32, "ieee")
    matmul_tc      the same tiles in fp16/bf16: tl.dot becomes Tensor Core instructions (mma / wgmma)
    dense          y = sigmoid(x @ W + b) with the bias and the sigmoid in the matmul's epilogue
    matmul_int8    int8 operands, int32 accumulation on the Tensor Cores (stretch)

    tcperf lab                                    # every kernel over its default sizes, stored as a run
    tcperf lab --kernels matmul_tc,dense --sizes 4096,8192

Every kernel module offers the same names, which tcperf.lab.bench calls: `make_inputs(n, dtype, gen)` (host
tensors), `triton_fn(*xs)` (the launch wrapper), `torch_fn(*xs)` (the library equivalent), `numpy_fn(*arrays,
out=None)` (the CPU version, also the float64 reference), `flops(n)` and `bytes_moved(n, itemsize)`.

The Triton interpreter (TRITON_INTERPRET=1, CPU tensors) is chosen when a kernel module is imported, not when
triton is: `@triton.jit` reads the variable as it decorates. So this package imports no kernel module itself;
`load()` does, in the process that runs the kernels (a tcperf worker), after the variable is set or not.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass

from ..env import triton_interpreting
from ..errors import choices


@dataclass(frozen=True)
class Entry:
    kind: str                  # "vector": n elements | "matrix": n x n operands (n^3 multiply-adds for products)
    precisions: tuple          # operand precisions, tcperf.precision names
    bound: str                 # "memory" (rated in GB/s) | "compute" (rated in TFLOPS)
    max_default: int | None = None   # the default sweep stops here (the naive matmul takes minutes beyond)


# name (the module tcperf.kernels.NAME) -> kernel; the order is the tutorial's order. Adding a kernel is one module and
# one line here.
KERNELS: dict[str, Entry] = {
    "vector_add": Entry("vector", ("fp32",), "memory"),
    "matrix_add": Entry("matrix", ("fp32",), "memory"),
    "sigmoid": Entry("vector", ("fp32",), "memory"),
    "matmul_naive": Entry("matrix", ("fp32",), "compute", max_default=2048),
    "matmul_tiled": Entry("matrix", ("fp32",), "compute"),
    "matmul_tc": Entry("matrix", ("fp16", "bf16"), "compute"),
    "dense": Entry("matrix", ("fp16", "bf16"), "compute"),
    "matmul_int8": Entry("matrix", ("int8",), "compute"),
}


def names() -> list[str]:
    return list(KERNELS)


def get(name: str) -> Entry:
    if name not in KERNELS:
        raise choices("kernel", name, KERNELS)
    return KERNELS[name]


def load(name: str):
    """Import a kernel module (compiled for the GPU, or interpreted if TRITON_INTERPRET=1 is set by now)."""
    get(name)                  # UserError naming the kernels
    return importlib.import_module(f"tcperf.kernels.{name}")


interpreting = triton_interpreting      # True when kernels run in the Triton interpreter (on CPU tensors)
