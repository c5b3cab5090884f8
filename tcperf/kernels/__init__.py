"""tcperf's own GPU kernels, written in Triton, one module each: the kernel lab's tutorial (tcperf.lab.KERNELS), the
model ladder's rungs and decode's weight-only matmuls (docs/design.md lists them).

The Triton interpreter (TRITON_INTERPRET=1, CPU tensors) is chosen when a kernel module is imported, not when
triton is: `@triton.jit` reads the variable as it decorates. So this package imports no kernel module itself; each
is imported where it runs, after the variable is set or not.
"""
from __future__ import annotations

from ..env import triton_interpreting

interpreting = triton_interpreting      # True when kernels run in the Triton interpreter (on CPU tensors)
