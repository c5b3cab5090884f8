"""tcperf's own GPU kernels, written in Triton, one module each:

    the kernel lab's tutorial (tcperf lab; read in this order): vector_add, matrix_add, sigmoid, matmul_naive,
        matmul_tiled, matmul_tc, dense, matmul_int8
    the model ladder's rungs: maxpool (3x3/2 max-pool, alone or after a batch norm -> ReLU), batchnorm (batch norm
        -> ReLU as one), fusions (the transforms that swap them into a model), cross_entropy (a wide head's loss in
        chunks)
    decode: gemv (weight-only int8 and int4 matmuls)

The Triton interpreter (TRITON_INTERPRET=1, CPU tensors) is chosen when a kernel module is imported, not when
triton is: `@triton.jit` reads the variable as it decorates. So this package imports no kernel module itself; each
is imported where it runs, after the variable is set or not.
"""
from __future__ import annotations

from ..env import triton_interpreting

interpreting = triton_interpreting      # True when kernels run in the Triton interpreter (on CPU tensors)
