"""Is a recipe's result as good as fp32 strict's? One answer for the model ladder and the advisor.

Inference: the relative error of every floating-point output together, ||out - ref|| / ||ref||, against fp32
strict on the same weights and inputs; the largest absolute error; top-1 agreement for logits; NaN/inf; and the
user's metric. A reference that says nothing (all zero or constant, as torchvision's ViT gives with its
zero-initialised head) is named as such, and the input of the last layer is compared instead.

Training: a few steps from random initialisation can be chaotic (on an H200, BERT-base at AdamW lr 1e-3: fp32
with its weights scaled by 1 + 1e-6 noise moved the step-5 loss from 0.709 to 1.803), so a fixed bound on the
loss difference fails healthy recipes. A recipe is judged against fp32's own run-to-run noise instead:

    gap     = mean over the steps of |loss - fp32 loss|, each step held against fp32's loss after as many
              optimizer updates (GradScaler's skipped steps are calibration, not divergence)
    noise   = the same gap for fp32 itself with its weights perturbed by (1 + 1e-6 N(0,1)), the largest of 2 runs
    allowed = max(3 x noise, tolerance x fp32's starting loss)

It fails on NaN/inf, on GradScaler skipping more than half the steps, and on gap > allowed.

    acc = compare_outputs(check_outputs(out), ref_outputs)       # {"rel_error": 0.0031, ...}
    acc = compare_training(losses, skipped, reference)           # {"gap": ..., "noise": ..., "allowed": ...}
    err, what, passes, why = judge(acc, "train", 0.02)
"""
from __future__ import annotations

import math

import torch

from .spec import tensors

DEFAULT_TOLERANCE = {"infer": 0.05, "train": 0.02}   # output rel. error / loss gap as a share of the starting loss
DEFAULT_STEPS = 16        # training steps compared
NOISE_RUNS = 2            # perturbed fp32 runs that measure fp32's own run-to-run noise
PERTURBATION = 1e-6       # relative size of the weight perturbation in those runs
NOISE_FACTOR = 3.0        # a recipe may stray this many times fp32's own noise
MAX_ELEMENTS = 1 << 24    # outputs larger than this are compared on their first rows (memory, not rigour)


# --- inference --------------------------------------------------------------------------------------------------
def check_outputs(out) -> list[torch.Tensor]:
    """The floating-point outputs to compare, as float32 copies in host memory (CUDA-graph replays overwrite the
    originals); an output of over MAX_ELEMENTS elements keeps only its first rows."""
    kept = []
    for t in tensors(out):
        t = t.detach()
        if t.dim() >= 1 and t.numel() > MAX_ELEMENTS:
            rows = max(1, MAX_ELEMENTS * t.shape[0] // t.numel())
            t = t[:rows]
        kept.append(t.to("cpu", torch.float32, copy=True))
    return kept


def degenerate(refs: list[torch.Tensor]) -> str | None:
    """Why fp32's outputs cannot tell a good recipe from a bad one (every output all zero or constant), or None."""
    if not refs:
        return "the model has no floating-point output"
    for r in refs:
        if r.numel() == 0:
            continue
        if not torch.isfinite(r).all():
            return None                     # NaN in fp32 itself: compared as it is, and fails
        spread = float(r.max() - r.min())
        if spread > 1e-6 * max(1.0, float(r.abs().max())):
            return None
    value = float(refs[0].flatten()[0]) if refs[0].numel() else 0.0
    return "all zero" if value == 0 else f"constant ({value:.3g})"


def compare_outputs(outs: list[torch.Tensor], refs: list[torch.Tensor]) -> dict:
    """Relative error over all outputs together, largest absolute error, top-1 agreement, NaN/inf."""
    outs, refs = [o.double() for o in outs], [r.double() for r in refs]
    if len(outs) != len(refs) or any(o.shape != r.shape for o, r in zip(outs, refs)):
        return {"rel_error": math.inf, "nonfinite": False, "note": "outputs differ in number or shape from fp32"}
    diff = math.sqrt(sum(float(torch.linalg.vector_norm(o - r)) ** 2 for o, r in zip(outs, refs)))
    norm = math.sqrt(sum(float(torch.linalg.vector_norm(r)) ** 2 for r in refs))
    nonfinite = any(not torch.isfinite(o).all() for o in outs)
    sized = [(o, r) for o, r in zip(outs, refs) if o.numel()]
    acc = {"nonfinite": nonfinite, "rel_error": math.inf if nonfinite else (diff / norm if norm > 0 else diff),
           "max_abs_error": max((float((o - r).abs().max()) for o, r in sized), default=0.0),
           "max_abs_ref": max((float(r.abs().max()) for _, r in sized), default=0.0)}
    if outs and outs[0].dim() >= 2 and outs[0].shape[-1] > 1:
        acc["top1_agree"] = float((outs[0].argmax(-1) == refs[0].argmax(-1)).double().mean())
    return acc


def metric_change(value: float, ref: float) -> dict:
    return {"metric": value, "metric_fp32": ref, "metric_change": rel_change(value, ref)}


def rel_change(x: float, ref: float) -> float:
    if not math.isfinite(x):
        return math.inf
    return abs(x - ref) / max(abs(ref), 1e-12)


# --- training ---------------------------------------------------------------------------------------------------
def updates_before(skipped: list[bool]) -> list[int]:
    """For each step, the optimizer updates applied before it (a skipped step applied none)."""
    out, done = [], 0
    for s in skipped:
        out.append(done)
        done += not s
    return out


def loss_gap(losses: list[float], skipped: list[bool], ref: list[float]) -> float:
    """Mean |loss - fp32 loss| over the steps, each step against fp32 after as many updates."""
    pairs = [(loss, ref[u]) for loss, u in zip(losses, updates_before(skipped)) if u < len(ref)]
    if not pairs or not all(math.isfinite(a) for a, _ in pairs):
        return math.inf
    return sum(abs(a - b) for a, b in pairs) / len(pairs)


def noise_floor(ref: list[float], noise_runs: list[list[float]]) -> float:
    """fp32 against itself with perturbed weights: the largest mean gap over the perturbed runs."""
    gaps = [loss_gap(run, [False] * len(run), ref) for run in noise_runs]
    finite = [g for g in gaps if math.isfinite(g)]
    return max(finite) if finite else 0.0


def compare_training(losses: list[float], skipped: list[bool], reference: dict) -> dict:
    """The training check's figures against the fp32 reference ({"losses": [...], "noise": [[...], ...]})."""
    ref = reference["losses"]
    gap = loss_gap(losses, skipped, ref)
    noise = reference.get("noise_floor")
    if noise is None:
        noise = noise_floor(ref, reference.get("noise", []))
    scale = max(abs(ref[0]), 1e-12)
    return {"loss_first": losses[0], "loss_first_fp32": ref[0], "loss": losses[-1], "loss_fp32": ref[-1],
            "steps": len(losses), "skipped_steps": sum(skipped), "nonfinite": not all(map(math.isfinite, losses)),
            "gap": gap, "noise": noise, "scale": scale, "loss_change": gap / scale}


def allowed_gap(acc: dict, tolerance: float) -> tuple[float, str]:
    """(the largest gap allowed, what set it)."""
    by_noise, by_tol = NOISE_FACTOR * acc["noise"], tolerance * acc["scale"]
    if by_noise > by_tol:
        return by_noise, f"{NOISE_FACTOR:g} x fp32's own noise {acc['noise']:.3g}"
    return by_tol, f"tolerance {tolerance:g} x fp32's starting loss {acc['scale']:.3g}"


def train_criterion(acc: dict, tolerance: float) -> str:
    """The criterion and the noise floor, in words, for the verdict."""
    allowed, by = allowed_gap(acc, tolerance)
    skipped = f", GradScaler's {acc['skipped_steps']} skipped steps aligned" if acc.get("skipped_steps") else ""
    return (f"mean |loss - fp32 loss| over {acc['steps']} steps {acc['gap']:.3g}{skipped}; allowed {allowed:.3g} "
            f"({by}; fp32 noise floor {acc['noise']:.3g})")


# --- the verdict ------------------------------------------------------------------------------------------------
def judge(acc: dict, mode: str, tolerance: float) -> tuple[float, str, bool, str]:
    """(deciding error, what it is, passes, why not). Training's error is the gap over fp32's starting loss."""
    if mode == "train":
        err, what = acc["loss_change"], "loss gap / starting loss"
        if acc.get("nonfinite"):
            return err, what, False, "NaN/inf in the loss"
        if acc["skipped_steps"] > acc["steps"] // 2:
            return err, what, False, f"GradScaler skipped {acc['skipped_steps']} of {acc['steps']} steps (overflow)"
        allowed, by = allowed_gap(acc, tolerance)
        acc["allowed"], acc["criterion"] = allowed, train_criterion(acc, tolerance)
        if not acc["gap"] <= allowed:      # written this way round so that NaN fails too
            return err, what, False, f"loss gap {acc['gap']:.3g} > allowed {allowed:.3g} ({by})"
        return err, what, True, ""
    err, what = (acc["metric_change"], "metric change") if "metric_change" in acc else \
        (acc["rel_error"], "output rel. error")
    if acc.get("nonfinite"):
        return err, what, False, "NaN/inf in the outputs"
    if not err <= tolerance:
        return err, what, False, f"{what} {err:.3g} > tolerance {tolerance:g}"
    return err, what, True, ""
