"""The kernel lab: GPU kernels written from Python in Triton, held against NumPy on the CPU and cuBLAS on the GPU.

Read the modules (in tcperf/kernels/) in the order of KERNELS, whose comments say what each adds to the one before;
each one is a short tutorial (kernel, launch wrapper, NumPy version, FLOP and byte counts, top to bottom), and
docs/lab.md walks through them with the measured figures.

    tcperf lab                                    # every kernel over its default sizes, stored as a run
    tcperf lab --kernels matmul_tc,dense --sizes 4096,8192

Every kernel module offers the same names, which tcperf.lab.bench calls: `make_inputs(n, dtype, gen)` (host
tensors), `triton_fn(*xs)` (the launch wrapper), `torch_fn(*xs)` (the library equivalent), `numpy_fn(*arrays,
out=None)` (the CPU version, also the float64 reference), `flops(n)` and `bytes_moved(n, itemsize)`.

This package imports no kernel module itself (tcperf.kernels says why: the Triton interpreter is chosen as one is
imported); `load()` does, in the process that runs the kernels (a tcperf worker), after TRITON_INTERPRET is set or not.
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
    "vector_add": Entry("vector", ("fp32",), "memory"),          # a program per block of elements: masks, the grid
    "matrix_add": Entry("matrix", ("fp32",), "memory"),          # a 2-D grid of 2-D blocks, strides
    "sigmoid": Entry("vector", ("fp32",), "memory"),             # arithmetic in registers is free next to memory
    "matmul_naive": Entry("matrix", ("fp32",), "compute", max_default=2048),   # an output a program: 100x off the GPU
    "matmul_tiled": Entry("matrix", ("fp32",), "compute"),       # tiles reused on chip; tl.dot on CUDA cores (ieee)
    "matmul_tc": Entry("matrix", ("fp16", "bf16"), "compute"),   # the same tiles in 16 bits: Tensor Cores (mma, wgmma)
    "dense": Entry("matrix", ("fp16", "bf16"), "compute"),       # y = sigmoid(x @ W + b): bias, sigmoid in the epilogue
    "matmul_int8": Entry("matrix", ("int8",), "compute"),        # int8 operands, int32 sums on Tensor Cores (stretch)
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
