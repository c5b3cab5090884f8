"""Is a recipe's result as good as fp32 strict's? One answer for the model ladder and the advisor.

Inference: the relative error of every floating-point output together, ||out - ref|| / ||ref||, against fp32
strict on the same weights and inputs; the largest absolute error; top-1 agreement for logits; NaN/inf; and the
user's metric. A reference that says nothing (all zero or constant, as torchvision's ViT gives with its
zero-initialised head) is named as such, and the input of the last layer is compared instead.

Training: a recipe must learn as fp32 strict does. A bound on the loss difference alone, max(3 x noise, 0.02 x the
starting loss), let a recipe end 1.1 nats above fp32 on GPT-2 small, three quarters of what fp32 learns over its
first 16 steps (11.0 to 9.49). So a recipe is held to the loss decrease fp32 achieves:

    fall   = first loss - mean loss of the last END_STEPS (3) steps, for the recipe (d) and for fp32 (D); fp32's at
             the recipe's optimizer-update counts (a step GradScaler skipped applied no update); the recipe's from
             the lower of its own and fp32's first loss (same weights: a recipe that starts higher earns no fall)
    spread = max |D_i - D| over NOISE_RUNS (2) fp32 runs with weights x (1 + 1e-6 N(0,1)) and other dropout masks
    passes when d >= D - max(tolerance x D, NOISE_FACTOR x spread)

The tolerance is the share of fp32's decrease a recipe may lose (0.10 by default: KEEP); the deciding error is the
share lost, max(0, 1 - d/D). Two noise runs are enough: the spread decides only where 3 x spread > 10% of D (a
chaotic start), and a third run would add half again to the reference's cost.

When fp32's loss does not fall beyond its own spread (D <= max(NOISE_FACTOR x spread, MIN_FALL x starting loss):
converged already, chaotic, or not learning), the decrease cannot judge and the gap criterion does, as the
criterion text says. A few steps from random initialisation can be chaotic (on an H200, BERT-base at AdamW lr 1e-3:
fp32 with its weights scaled by 1 + 1e-6 noise moved the step-5 loss from 0.709 to 1.803):

    gap     = mean over the steps of |loss - fp32 loss|, each step against fp32 after as many optimizer updates
    noise   = the same gap for fp32's perturbed runs, the largest
    allowed = max(NOISE_FACTOR x noise, GAP_PER_TOLERANCE x tolerance x fp32's starting loss)   (0.02 x it by default)

Either way it fails on NaN/inf and on GradScaler skipping more than half the steps.

    acc = compare_outputs(check_outputs(out), ref_outputs)       # {"rel_error": 0.0031, ...}
    acc = compare_training(losses, skipped, reference)           # {"fall": ..., "fall_fp32": ..., "gap": ...}
    err, what, passes, why = judge(acc, "train", 0.10)
"""
from __future__ import annotations

import math

import torch

from .spec import tensors

KEEP = 0.90               # training: the share of fp32's loss decrease a recipe must keep (the default)
DEFAULT_TOLERANCE = {"infer": 0.05, "train": round(1 - KEEP, 6)}   # output rel. error / share of fp32's fall lost
DEFAULT_STEPS = 16        # training steps compared
END_STEPS = 3             # a window's end: the mean loss of its last 3 steps (one step's loss is noisy)
MIN_FALL = 1e-3           # fp32's fall judges only above this share of its starting loss
GAP_PER_TOLERANCE = 0.2   # the gap fallback's allowance, as a share of the starting loss, per unit of tolerance
NOISE_RUNS = 2            # perturbed fp32 runs that measure fp32's own run-to-run noise
PERTURBATION = 1e-6       # relative size of the weight perturbation in those runs
NOISE_FACTOR = 3.0        # a recipe may stray this many times fp32's own noise (gap) or spread (fall)
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


def window_end(skipped: list[bool]) -> tuple[list[int], list[int]]:
    """The window's end: (the positions of the last END_STEPS steps, never the first; the optimizer updates each
    came after, where fp32's losses are read)."""
    n = len(skipped)
    positions = list(range(max(1, n - END_STEPS), n))
    updates = updates_before(skipped)
    return positions, [updates[i] for i in positions]


def fall(losses: list[float], at: list[int], start: float | None = None) -> float:
    """`start` (default: the first loss) - mean loss at the positions `at` (NaN when there are none or they lie past
    the run's end)."""
    if not at or max(at) >= len(losses):
        return math.nan
    return (losses[0] if start is None else start) - sum(losses[i] for i in at) / len(at)


def fall_spread(noise_runs: list[list[float]], at: list[int], ref_fall: float) -> float:
    """fp32's run-to-run spread of the fall: the largest |D_i - D| over the perturbed runs."""
    diffs = [abs(fall(run, at) - ref_fall) for run in noise_runs]
    finite = [d for d in diffs if math.isfinite(d)]
    return max(finite) if finite else 0.0


def decrease(losses: list[float], skipped: list[bool], reference: dict) -> dict:
    """The recipe's fall (d) against fp32's (D) at as many updates, fp32's spread, and which rule judges: "fall"
    when fp32's fall stands out of its spread, else "gap" (the decrease cannot tell)."""
    ref = reference["losses"]
    positions, updates = window_end(skipped)
    start = losses[0] if losses[0] < ref[0] else ref[0]     # the lower: starting higher earns no fall
    mine, theirs = fall(losses, positions, start), fall(ref, updates)
    spread = fall_spread(reference.get("noise", []), updates, theirs)
    judges = theirs > max(NOISE_FACTOR * spread, MIN_FALL * abs(ref[0]))     # False for NaN
    kept = mine / theirs if judges and math.isfinite(mine) else math.nan
    return {"fall": mine, "fall_fp32": theirs, "fall_spread": spread, "kept": kept,
            "rule": "fall" if judges else "gap", "shortfall": max(0.0, 1 - kept) if math.isfinite(kept) else math.inf}


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
            "gap": gap, "noise": noise, "scale": scale, "loss_change": gap / scale,
            **decrease(losses, skipped, reference)}


def allowed_gap(acc: dict, tolerance: float) -> tuple[float, str]:
    """The gap rule: (the largest gap allowed, what set it)."""
    share = GAP_PER_TOLERANCE * tolerance
    by_noise, by_tol = NOISE_FACTOR * acc["noise"], share * acc["scale"]
    if by_noise > by_tol:
        return by_noise, f"{NOISE_FACTOR:g} x fp32's own noise {acc['noise']:.3g}"
    return by_tol, f"{share:.3g} x fp32's starting loss {acc['scale']:.3g}"


def allowed_loss(acc: dict, tolerance: float) -> tuple[float, str]:
    """The fall rule: (the largest share of fp32's fall a recipe may lose, what set it)."""
    by_spread = NOISE_FACTOR * acc["fall_spread"] / acc["fall_fp32"]
    if by_spread > tolerance:
        return by_spread, f"{NOISE_FACTOR:g} x fp32's run-to-run spread {acc['fall_spread']:.2g}"
    return tolerance, f"tolerance {tolerance:g}; fp32's run-to-run spread {acc['fall_spread']:.2g}"


def _pct(x: float) -> str:
    return f"{100 * x:.3g}%"


def _over(acc: dict) -> str:
    """'16 steps', or '16 steps (13 updates)' when GradScaler skipped some."""
    skipped = acc.get("skipped_steps", 0)
    return f"{acc['steps']} steps" + (f" ({acc['steps'] - skipped} updates)" if skipped else "")


def train_criterion(acc: dict, tolerance: float) -> str:
    """The criterion and fp32's noise, in words, for the verdict."""
    if acc.get("rule") == "fall":
        lose, by = allowed_loss(acc, tolerance)
        return (f"loss fall over {_over(acc)} (the lower first loss - mean of the last {END_STEPS}) {acc['fall']:.3g}, "
                f"fp32's {acc['fall_fp32']:.3g}: needs {_pct(1 - lose)} of it ({by})")
    allowed, by = allowed_gap(acc, tolerance)
    skipped = f", GradScaler's {acc['skipped_steps']} skipped steps aligned" if acc.get("skipped_steps") else ""
    return (f"gap rule (fp32's loss fall {acc.get('fall_fp32', math.nan):.3g} is within its noise): mean |loss - "
            f"fp32 loss| over {acc['steps']} steps {acc['gap']:.3g}{skipped}; allowed {allowed:.3g} ({by}; fp32 "
            f"noise floor {acc['noise']:.3g})")


# --- the verdict ------------------------------------------------------------------------------------------------
def judge(acc: dict, mode: str, tolerance: float) -> tuple[float, str, bool, str]:
    """(deciding error, what it is, passes, why not). Training's error is the share of fp32's loss fall lost, or
    the gap over fp32's starting loss where the fall cannot judge."""
    if mode == "train":
        return judge_training(acc, tolerance)
    err, what = (acc["metric_change"], "metric change") if "metric_change" in acc else \
        (acc["rel_error"], "output rel. error")
    if acc.get("nonfinite"):
        return err, what, False, "NaN/inf in the outputs"
    if not err <= tolerance:
        return err, what, False, f"{what} {err:.3g} > tolerance {tolerance:g}"
    return err, what, True, ""


def judge_training(acc: dict, tolerance: float) -> tuple[float, str, bool, str]:
    """judge() for training; sets acc["criterion"] (in words) and acc["allowed"] (the rule's bound)."""
    by_fall = acc.get("rule") == "fall"
    err, what = (acc["shortfall"], "share of fp32's loss fall lost") if by_fall else \
        (acc["loss_change"], "loss gap / starting loss")
    acc["criterion"] = train_criterion(acc, tolerance)
    if acc.get("nonfinite"):
        return err, what, False, "NaN/inf in the loss"
    if acc["skipped_steps"] > acc["steps"] // 2:
        return err, what, False, f"GradScaler skipped {acc['skipped_steps']} of {acc['steps']} steps (overflow)"
    why = _fall_short(acc, tolerance) if by_fall else _gap_too_wide(acc, tolerance)
    return err, what, not why, why


def _fall_short(acc: dict, tolerance: float) -> str:
    """Why the recipe's loss fell too little, or ''."""
    lose, by = allowed_loss(acc, tolerance)
    acc["allowed"] = lose
    if acc["kept"] >= 1 - lose:
        return ""
    return (f"loss fell {acc['fall']:.3g} over {_over(acc)}, fp32's {acc['fall_fp32']:.3g}: {acc['kept']:.1%} of it "
            f"(needs {_pct(1 - lose)}; {by})")


def _gap_too_wide(acc: dict, tolerance: float) -> str:
    allowed, by = allowed_gap(acc, tolerance)
    acc["allowed"] = allowed
    if acc["gap"] <= allowed:         # written this way round so that NaN fails
        return ""
    return f"loss gap {acc['gap']:.3g} > allowed {allowed:.3g} ({by}; fp32's loss fall within its noise)"
