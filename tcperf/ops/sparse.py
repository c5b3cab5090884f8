"""2:4 structured-sparse GEMM on the sparse Tensor Cores (torch.sparse.to_sparse_semi_structured), and the dense
GEMM of the same shape beside it.

Shape keys: m, n, k, format (2:4 | dense). C[m, n] = A[m, k] @ B[k, n] with A the sparse operand (weights, as in
DeepBench's sparse table) pruned to 2:4 along k: in every group of 4 the 2 largest magnitudes are kept. format=dense
runs torch.mm on an unpruned random A of the same shape, the baseline a 2:4 kernel must beat.

FLOPs: 2*m*n*k for both formats: dense-equivalent, so a 2:4 kernel twice as fast as dense shows twice the TFLOPS
(the multiply-adds it really performs are half that). Bytes: 2:4 reads half of A plus 2 bits of metadata per kept
value (m*k/2 elements + m*k/8 bytes), B and writes C; dense reads A and B and writes C.

DeepBench's sparse table (deepbench-sparse) is about unstructured sparsity at 90 and 95 % (density 0.10 / 0.05),
for which no Tensor Core kernel exists: tcperf runs each of its shapes as 2:4 (what the hardware accelerates) and
as dense, keeping DeepBench's density as a tag. A shape that does not tile by the backend's minimum block (min_tile;
e.g. DeepBench's m=7860) is skipped with that reason rather than padded silently. The dense operand B is padded to
DENSE_COLS columns once, before timing (n = 1, 2, 4 in DeepBench's table): newer torch pads it inside every call,
older cuSPARSELt paths reject it.

    tcperf bench --suite deepbench-sparse --precision fp16
On an H200 (anchors.md): fp16 8192^3 2:4 ~ 747 dense-equivalent TFLOPS, no gain over dense.
"""
from __future__ import annotations

import torch

from ..precision import Precision
from .base import Op, Prepared, generator, one_of, randn

FORMATS = ("2:4", "dense")
DEFAULT_MIN = {"cusparselt": (16, 16), "cutlass": (32, 64)}   # fp16/bf16 sparse-operand tiles (rows, cols)
DENSE_COLS = 8     # the dense operand's columns are padded to a multiple of 8 (fp16/bf16 minimum) before timing


def dims(shape: dict) -> tuple[int, int, int, str]:
    fmt = one_of(str(shape.get("format", "2:4")), FORMATS, "sparse format")
    return int(shape["m"]), int(shape["n"]), int(shape["k"]), fmt


def backend() -> str:
    """Which 2:4 backend torch will use: cuSPARSELt when this build has it, else CUTLASS."""
    from torch.sparse import SparseSemiStructuredTensor
    cusparselt = getattr(torch.backends, "cusparselt", None)
    if getattr(SparseSemiStructuredTensor, "_FORCE_CUTLASS", False) or not (cusparselt and cusparselt.is_available()):
        return "cutlass"
    return "cusparselt"


def min_tile(dtype: torch.dtype, name: str) -> tuple[int, int]:
    """(rows, cols) the sparse operand must be a multiple of, read from torch where it says."""
    import torch.sparse as ts
    cls = getattr(ts, "SparseSemiStructuredTensorCUSPARSELT" if name == "cusparselt"
                  else "SparseSemiStructuredTensorCUTLASS", None)
    config = getattr(cls, "_DTYPE_SHAPE_CONSTRAINTS", {}).get(dtype)
    return (config.sparse_min_rows, config.sparse_min_cols) if config else DEFAULT_MIN[name]


class Sparse(Op):
    name = "sparse"
    precisions = ("fp16", "bf16")
    shape_keys = ("m", "n", "k", "format")

    def flops(self, shape: dict) -> float:
        m, n, k, _ = dims(shape)
        return 2.0 * m * n * k

    def bytes(self, shape: dict, prec: Precision) -> float:
        m, n, k, fmt = dims(shape)
        a = m * k / 2 * prec.element_bytes + m * k / 8 if fmt == "2:4" else m * k * prec.element_bytes
        return float(a + (k * n + m * n) * prec.element_bytes)

    def label(self, shape: dict) -> str:
        m, n, k, fmt = dims(shape)
        return f"{m}x{n}x{k} {fmt}"

    def unsupported(self, shape: dict, prec: Precision, device: torch.device) -> str | None:
        why = super().unsupported(shape, prec, device)
        m, n, k, fmt = dims(shape)
        if why or fmt == "dense":
            return why
        if device.type != "cuda":
            return "2:4 sparse GEMM needs a CUDA GPU (cuSPARSELt or CUTLASS); there is none on the CPU"
        if torch.cuda.get_device_capability(device) < (8, 0):
            return "2:4 sparse Tensor Cores need compute capability >= 8.0"
        return self.verdict(shape, prec, None)["hard_limit"]

    def verdict(self, shape: dict, prec: Precision, sm_count: int | None) -> dict:
        from ..tensorcore import sparse_verdict
        m, n, k, fmt = dims(shape)
        rows, cols = min_tile(prec.dtype, backend())
        return sparse_verdict(m, n, k, prec.name, fmt, rows, cols, sm_count)

    def prepare(self, shape: dict, prec: Precision, device: torch.device, seed: int = 0) -> Prepared:
        m, n, k, fmt = dims(shape)
        gen = generator(device, seed)
        a = randn((m, k), prec.dtype, device, gen)
        b = randn((k, n), prec.dtype, device, gen)
        if fmt == "dense":
            return Prepared(run=lambda: torch.mm(a, b), reference=lambda: a.double() @ b.double(),
                            info={"format": "dense"})
        from torch.sparse import SparseSemiStructuredTensor, to_sparse_semi_structured
        name = backend()
        SparseSemiStructuredTensor._FORCE_CUTLASS = name == "cutlass"   # process-wide; this worker only
        pruned = prune_2_4(a)
        a_sparse = to_sparse_semi_structured(pruned)
        cols = -(-n // DENSE_COLS) * DENSE_COLS
        b_run = torch.nn.functional.pad(b, (0, cols - n)) if cols != n else b    # k x cols, padded once, here
        return Prepared(run=lambda: torch.mm(a_sparse, b_run)[:, :n], reference=lambda: pruned.double() @ b.double(),
                        info={"format": "2:4", "sparse_backend": name, "dense_columns_run": cols})


def prune_2_4(a: torch.Tensor) -> torch.Tensor:
    """Keep the 2 largest magnitudes of every 4 consecutive values along a row; zero the other 2."""
    m, k = a.shape
    groups = a.reshape(m, k // 4, 4)
    keep = torch.zeros_like(groups, dtype=torch.bool)
    keep.scatter_(-1, groups.abs().topk(2, dim=-1).indices, True)
    return (groups * keep).reshape(m, k)


OP = Sparse()
