"""tcperf's own GPU kernels, written in Triton, one module each: the kernel lab's tutorial (tcperf.lab.KERNELS), the
model ladder's rungs and decode's weight-only matmuls (docs/design.md lists them).

The Triton interpreter (TRITON_INTERPRET=1, CPU tensors) is chosen when a kernel module is imported, not when
triton is: `@triton.jit` reads the variable as it decorates. So this package imports no kernel module itself; each
is imported where it runs, after the variable is set or not.
"""
from __future__ import annotations

from ..env import triton_interpreting

interpreting = triton_interpreting      # True when kernels run in the Triton interpreter (on CPU tensors)


def _squeeze_interpreted_index() -> None:
    """Triton 3.6's interpreter makes a Python int of a scalar tensor (a loop bound: `range(0, K, BLOCK_K)`) by int()
    of a one-element array, which NumPy 2.5 refuses ("only 0-dimensional arrays can be converted to Python
    scalars"; the GPU machine's Triton 3.6 and NumPy 2.5.2, 2026-11-28); Triton 3.8 squeezes the array first. The
    same squeeze, wrapped around the interpreter's own patch of its tensors (applied at every launch)."""
    try:
        from triton.runtime import interpreter
    except ImportError:
        return
    patch = getattr(interpreter, "_patch_lang_tensor", None)
    if patch is None or getattr(patch, "squeezes", False):
        return

    def squeezed(tensor, scope):
        patch(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    squeezed.squeezes = True
    interpreter._patch_lang_tensor = squeezed


if triton_interpreting():
    _squeeze_interpreted_index()
