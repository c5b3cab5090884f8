"""Tensor Core rules: alignment, hard limits, tile and wave quantization, and the padding fix.

The rules (anchors.md, from the cuBLAS and PyTorch documentation): every dimension a multiple of 16 bytes
(8 elements fp16/bf16, 4 tf32, 16 int8/fp8, 2 fp64) for full speed; torch._int_mm needs M > 16 and K, N
multiples of 8; torch._scaled_mm (fp8) needs K and N multiples of 16. Strict fp32 never uses Tensor Cores.

    gemm_verdict(8191, 8191, 8191, "bf16", sm_count=132)["fix"]   # 'pad m 8191->8192, n 8191->8192, k 8191->8192'

The same rules per operation (conv_verdict, attention_verdict, rnn_verdict, sparse_verdict); describe() turns a
verdict into the lines `tcperf lint` prints, padding_note() words the measured fix.
"""
from __future__ import annotations

import math

from .precision import get

NOMINAL_TILE = (128, 128)   # a typical cuBLAS output tile on sm80/sm90; the real one varies by kernel
POOR_WAVE = 0.75            # flag when the last wave leaves more than a quarter of the SMs idle


def pad_to(x: int, multiple: int) -> int:
    return -(-x // multiple) * multiple


def uses_tensor_cores(precision: str) -> bool:
    """Can this precision reach Tensor Cores at all? (fp64 does on sm80+ through DMMA; strict fp32 never.)"""
    return precision != "fp32"


def gemm_hard_limit(m: int, n: int, k: int, precision: str) -> str | None:
    """A limit the kernel refuses to run past (not just runs slower), or None."""
    if precision == "int8":
        if m <= 16:
            return f"torch._int_mm needs M > 16 (M={m})"
        if k % 8 or n % 8:
            return f"torch._int_mm needs K and N multiples of 8 (K={k}, N={n})"
    if precision == "fp8" and (k % 16 or n % 16):
        return f"torch._scaled_mm (fp8) needs K and N multiples of 16 (K={k}, N={n})"
    return None


def misaligned(dims: dict, precision: str) -> list[str]:
    """The dimensions that miss the 16-byte rule, e.g. ['k=8191 (not a multiple of 8)']."""
    align = get(precision).align
    return [f"{d}={v} (not a multiple of {align})" for d, v in dims.items() if v % align]


def wave_quantization(m: int, n: int, sm_count: int | None, tile=NOMINAL_TILE) -> dict:
    """Output tiles against the SM count: the share of the last wave's SMs that have work."""
    return _waves(math.ceil(m / tile[0]) * math.ceil(n / tile[1]), sm_count)


def _waves(tiles: int, sm_count: int | None) -> dict:
    if not sm_count:
        return {"tiles": tiles}
    waves = math.ceil(tiles / sm_count)
    return {"tiles": tiles, "waves": waves, "wave_efficiency": round(tiles / (waves * sm_count), 3)}


def _poor_wave(waves: dict, sm_count: int | None, tile=NOMINAL_TILE) -> list[str]:
    if waves.get("wave_efficiency", 1.0) < POOR_WAVE and waves.get("waves", 99) <= 4:
        return [f"{waves['tiles']} tiles of {tile[0]}x{tile[1]} over {sm_count} SMs: "
                f"last wave {waves['wave_efficiency']:.0%} busy"]
    return []


def _alignment(dims: dict, precision: str) -> tuple[bool, list[str], dict]:
    """(Tensor Cores reachable, the dimensions that miss the 16-byte rule, {dimension: (size, padded size)})."""
    if not uses_tensor_cores(precision):
        return False, [], {}
    align = get(precision).align
    return True, misaligned(dims, precision), {d: (v, pad_to(v, align)) for d, v in dims.items() if v % align}


def _fix(pads: dict, extra: list[str] = ()) -> str | None:
    """'pad C 3->8, K 30->32; use NHWC (channels_last)' from {'C': (3, 8), ...} and extra advice."""
    parts = [", ".join(f"{d} {a}->{b}" for d, (a, b) in pads.items())] if pads else []
    parts = (["pad " + parts[0]] if parts else []) + list(extra)
    return "; ".join(parts) or None


def _verdict(tc: bool, bad: list[str], issues: list[str], fix: str | None, waves: dict, limit: str | None = None,
             **facts) -> dict:
    """The verdict every operation gives, in one shape; `facts` are the operation's own (layout, ...)."""
    return {"tensor_cores": tc, "aligned": not bad, "misaligned": bad, "hard_limit": limit, "issues": issues,
            "fix": fix, **facts, **waves}


INT8_ROW_MAJOR_B = ("int8 with B row-major: cuBLAS picks an sm80 WMMA kernel (an H200 measured 128 TOPS at 8192^3); "
                    "store B transposed (b_t=T, as nn.Linear stores its [N, K] weight) for the Hopper kernel")


def gemm_verdict(m: int, n: int, k: int, precision: str, sm_count: int | None = None, b_t: str = "N") -> dict:
    """Everything tcperf can say about a GEMM's Tensor Core eligibility without running it."""
    tc, bad, pads = _alignment({"m": m, "n": n, "k": k}, precision)
    waves = wave_quantization(m, n, sm_count)
    issues = bad + _poor_wave(waves, sm_count)
    if precision == "int8" and b_t != "T":
        issues.append(INT8_ROW_MAJOR_B)
    return _verdict(tc, bad, issues, _fix(pads), waves, gemm_hard_limit(m, n, k, precision))


# --- convolution, attention, RNN and 2:4 sparse: the same rules, applied to each op's implicit GEMM ------------
TC_LAYOUT = "NHWC"          # cuDNN's Tensor Core kernels read and write NHWC; NCHW costs a transpose each way
ATTENTION_TILE = 128        # flash / memory-efficient kernels walk the sequence in blocks of 64-128 rows
POOR_FILL = 0.9             # flag a sequence whose last block leaves more than a tenth of the block work idle


def conv_gemm_dims(g: dict) -> dict:
    """The implicit GEMM a convolution pass runs (cuDNN's view): fwd M=N*P*Q, N=K, K=C*R*S; backward-data
    M=N*H*W, N=C, K=K*R*S; backward-weight M=K, N=C*R*S, K=N*P*Q."""
    n, c, h, w, k, r, s, p, q = (g[x] for x in ("N", "C", "H", "W", "K", "R", "S", "P", "Q"))
    return {"fwd": {"m": n * p * q, "n": k, "k": c * r * s},
            "bwd_data": {"m": n * h * w, "n": c, "k": k * r * s},
            "bwd_weight": {"m": k, "n": c * r * s, "k": n * p * q}}[g["pass"]]


def conv_verdict(g: dict, precision: str, sm_count: int | None = None) -> dict:
    """Channels C and K against the 16-byte rule, the layout, and the implicit GEMM's waves. `g` is the
    normalised geometry (tcperf.ops.conv.geometry): N C H W K R S P Q layout pass."""
    tc, bad, pads = _alignment({"C": g["C"], "K": g["K"]}, precision)
    issues, extra, align = list(bad), [], get(precision).align
    if tc and g["C"] < align:
        issues.append(f"C={g['C']} (an image input): padding to {align} channels often costs more than it saves")
    if tc and g["layout"] != TC_LAYOUT:
        issues.append(f"{g['layout']}: Tensor Core kernels work in NHWC, so cuDNN transposes in and out")
        extra.append("use NHWC (channels_last)")
    gemm = conv_gemm_dims(g)
    waves = wave_quantization(gemm["m"], gemm["n"], sm_count)
    return _verdict(tc, bad, issues + _poor_wave(waves, sm_count), _fix(pads, extra), waves, layout=g["layout"],
                    implicit_gemm=gemm)


def attention_verdict(batch: int, heads: int, seq: int, head_dim: int, precision: str,
                      sm_count: int | None = None) -> dict:
    """head_dim against the 16-byte rule, the sequence against the kernels' 128-row blocks, and the waves of
    (batch * heads * sequence blocks) thread blocks over the SMs."""
    tc, bad, pads = _alignment({"head_dim": head_dim}, precision)
    issues = list(bad)
    if precision == "fp32":
        issues.append("fp32: the memory-efficient kernel may still use 3xTF32 Tensor Core math (sm80+)")
    if head_dim > 256:
        issues.append(f"head_dim={head_dim} > 256: no fused kernel; the math backend materialises seq x seq")
    blocks = math.ceil(seq / ATTENTION_TILE)
    fill = seq / (blocks * ATTENTION_TILE)
    if fill < POOR_FILL:
        issues.append(f"seq={seq}: the last {ATTENTION_TILE}-row block is partly empty "
                      f"({fill:.0%} of block work useful)")
    waves = _waves(batch * heads * blocks, sm_count)
    issues += _poor_wave(waves, sm_count, (ATTENTION_TILE, head_dim))
    return _verdict(tc, bad, issues, _fix(pads), waves, sequence_block_fill=round(fill, 3))


def rnn_verdict(cell: str, hidden: int, batch: int, inp: int, precision: str, sm_count: int | None = None) -> dict:
    """cuDNN runs an RNN as GEMMs (input projections, one per sequence) plus a recurrent GEMM per step:
    hidden, input and batch should all be multiples of 16 bytes for Tensor Core kernels."""
    tc, bad, pads = _alignment({"hidden": hidden, "input": inp, "batch": batch}, precision)
    issues = list(bad)
    if precision == "bf16":
        issues.append("bf16: cuDNN's persistent RNN kernels are fp16/fp32 only; bf16 may step through GEMMs")
    gates = {"vanilla": 1, "lstm": 4, "gru": 3}.get(cell, 1)
    waves = wave_quantization(batch, gates * hidden, sm_count)   # the per-step recurrent GEMM
    return _verdict(tc, bad, issues + _poor_wave(waves, sm_count), _fix(pads), waves)


def sparse_verdict(m: int, n: int, k: int, precision: str, fmt: str, min_rows: int, min_cols: int,
                   sm_count: int | None = None) -> dict:
    """2:4 sparse GEMM (A m x k sparse, B k x n dense): A must tile by the backend's minimum block
    (cuSPARSELt fp16/bf16 16x16, CUTLASS 32x64); n is padded by torch to a multiple of 8."""
    if fmt != "2:4":
        return gemm_verdict(m, n, k, precision, sm_count)
    limit = None
    if m % min_rows or k % min_cols:
        limit = (f"2:4 sparse A ({m}x{k}) must tile by {min_rows}x{min_cols}: "
                 f"pad m {m}->{pad_to(m, min_rows)}, k {k}->{pad_to(k, min_cols)}")
    bad = misaligned({"n": n}, precision)
    waves = wave_quantization(m, n, sm_count)
    issues = list(bad) + ([f"n={n}: the dense operand runs padded to {pad_to(n, 8)} columns"] if n % 8 else [])
    issues += _poor_wave(waves, sm_count)
    return {"tensor_cores": True, "aligned": not bad and limit is None, "misaligned": bad, "hard_limit": limit,
            "issues": issues, "fix": limit.split(": ", 1)[1] if limit else None, **waves}


# --- words for people ---------------------------------------------------------------------------------------------
def describe(verdict: dict) -> list[str]:
    """The verdict as lines of text (what `tcperf lint` prints)."""
    if not verdict:
        return ["no Tensor Core rule for this operation"]
    lines = [("Tensor Cores: eligible" if verdict.get("tensor_cores") else
              "Tensor Cores: no (strict fp32 runs on the CUDA cores; use tf32, bf16 or fp16)")
             + ("" if not verdict.get("tensor_cores") else
                (", aligned" if verdict.get("aligned") else ", but misaligned"))]
    if verdict.get("hard_limit"):
        lines.append(f"hard limit: {verdict['hard_limit']} (the kernel refuses this shape)")
    lines += [f"issue: {i}" for i in verdict.get("issues", [])]
    if "waves" in verdict:
        lines.append(f"waves: {verdict['tiles']} tiles over the SMs in {verdict['waves']} wave(s), "
                     f"last wave {verdict['wave_efficiency']:.0%} busy")
    if verdict.get("fix"):
        lines.append(f"fix: {verdict['fix']}")
    elif not verdict.get("tensor_cores"):
        lines.append("fix: run at tf32, bf16 or fp16 to reach the Tensor Cores")
    elif verdict.get("hard_limit"):
        lines.append("fix: change the shape as the hard limit says, or use another precision")
    else:
        lines.append("fix: none needed")
    return lines


def padding_note(shape: dict, padded: dict) -> str:
    """The fix, measured: 'pad m 8191->8192, n 8191->8192: 5.1x faster' or why padding does not pay."""
    new = padded["shape"]
    changes = ", ".join(f"{k} {shape[k]}->{new[k]}" for k in new if k in shape and new[k] != shape[k])
    why = ": padding costs more than it saves" if padded["gain"] <= 0.95 else ""
    return f"pad {changes}: {padding_cell(padded['gain'])}{why}"


def padding_cell(gain: float) -> str:
    """'5.1x faster' / 'no gain' / '7.5x slower', where gain = original time / padded time."""
    if gain >= 1.05:
        return f"{gain:.2g}x faster"
    if gain <= 0.95:
        return f"{1 / gain:.2g}x slower"
    return "no gain"
