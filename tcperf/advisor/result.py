"""What `tcperf advise` / `tcperf.advise()` returns: the advice as data, printed as a short rich report,
converted to JSON, and stored as a run of kind "advise" (one `advise.recipe` row per recipe, one `advise.verdict`).

    advice = tcperf.advise(model, x)
    print(advice)                 # the report as plain text; rich.print(advice) in colour
    advice.to_json()              # for machines (NaN/inf become null)
    advice.save()                 # -> run id in the results store
"""
from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass, field

from rich.console import Console, Group
from rich.markup import escape
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from .. import accuracy
from ..records import Result
from .lint import Layer, TOP_LEVEL
from .trials import RecipeResult
from .verdict import headline

STATUS = {"ok": "ok", "fails": "wrong", "skipped": "skipped", "error": "error", "oom": "oom",
          "timeout": "timeout"}   # -> store status
STYLE = {"ok": "green", "fails": "bold red", "skipped": "dim", "error": "red", "oom": "red", "timeout": "red"}
MAX_LINT_ROWS = 12


@dataclass
class Advice:
    model: str
    mode: str
    device: str
    gpu: str | None
    tolerance: float
    recipes: list[RecipeResult]
    layers: list[Layer]                      # every GEMM-like op recorded (flagged ones have .issues)
    lint_summary: dict
    sensitive: dict                          # autocast dtype -> {modules, errors, tests, base, mixed}
    share: dict
    verdict: dict
    notes: list[str] = field(default_factory=list)
    env: dict = field(default_factory=dict)
    phases: dict = field(default_factory=dict)   # seconds each phase took: probe_s, grid_s, runoff_s, total_s ...
    stream: list[RecipeResult] = field(default_factory=list)   # the recipes timed on the workload's stream
    workload: dict | None = None             # the stream: length, distinct shapes, varying dimensions, FLOPs a step
    steps: int | None = None                 # the job's length (None: long enough that one-time costs vanish)

    # --- data ---------------------------------------------------------------------------------------------------
    @property
    def recommended(self) -> str | None:
        return self.verdict.get("recommended")

    @property
    def snippets(self) -> dict:
        return self.verdict.get("snippets", {})

    @property
    def flagged(self) -> list[Layer]:
        return [l for l in self.layers if l.issues]

    def to_dict(self) -> dict:
        d = {"model": self.model, "mode": self.mode, "device": self.device, "gpu": self.gpu,
             "tolerance": self.tolerance, "verdict": self.verdict,
             "recipes": [r.to_dict() for r in self.recipes], "lint": [l.to_dict() for l in self.flagged],
             "lint_summary": self.lint_summary, "sensitive": self.sensitive, "share": self.share,
             "notes": self.notes, "phases": self.phases, "stream": [r.to_dict() for r in self.stream],
             "workload": self.workload, "steps": self.steps}
        return finite(d)

    def to_json(self, indent: int = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, default=str, allow_nan=False)

    # --- the results store --------------------------------------------------------------------------------------
    def rows(self) -> list[dict]:
        shape = {"model": self.model, "mode": self.mode}
        return [*(recipe_row(r, shape, self.tolerance) for r in [*self.recipes, *self.stream]), self.verdict_row()]

    def verdict_row(self) -> Result:
        return Result("advise.verdict", {"model": self.model, "mode": self.mode}, self.recommended or "none",
                      tolerance=self.tolerance, message=self.verdict.get("note", ""),
                      metrics=finite({"label": self.model, "verdict": self.verdict,
                                      "lint": [l.to_dict() for l in self.flagged], "lint_summary": self.lint_summary,
                                      "snippets": self.snippets, "sensitive": self.sensitive,
                                      "share": self.share, "notes": self.notes, "phases": self.phases}))

    def save(self, db=None, command: str = "tcperf.advise()") -> int:
        """Store the whole advice as one run of kind "advise" (written only once it is complete)."""
        from ..store import Store
        store = Store.open(db)
        run_id = store.start_run("advise", command, self.env or {"device": self.device})
        for row in self.rows():
            store.add_result(run_id, row)
        store.finish_run(run_id, "done", self.notes)
        return run_id

    # --- printing -----------------------------------------------------------------------------------------------
    def __rich__(self):
        return render(self)

    def __str__(self) -> str:
        console = Console(width=120, no_color=True, record=True, file=io.StringIO())
        console.print(render(self))
        return console.export_text()

    def __repr__(self) -> str:
        return f"<Advice {self.model} {self.mode} on {self.gpu or self.device}: {self.recommended or 'no speed verdict'}>"


def finite(x):
    """NaN and inf -> None, recursively, so the JSON is standard."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [finite(v) for v in x]
    return x


def recipe_row(r: RecipeResult, shape: dict, tolerance: float) -> Result:
    """A recipe's row in the store: op advise.recipe (on the example input) or advise.stream (on the workload)."""
    t = r.timing or {}
    return Result(r.op, shape, r.recipe, STATUS[r.status], error=finite(r.error), tolerance=tolerance,
                  message=r.message, median_ms=t.get("median_ms"), iqr_ms=t.get("iqr_ms"), min_ms=t.get("min_ms"),
                  mean_ms=t.get("mean_ms"), n=t.get("n"), samples=t.get("samples", []), warnings=list(r.warnings),
                  metrics=finite({"label": shape["model"], "criterion": r.criterion, "accuracy": r.accuracy,
                                  "speedup_fp32": r.speedup, "tc_share": r.tc_share, "gpu_busy": r.gpu_busy,
                                  "kernels": r.kernels, "first_call_s": r.first_call_s, "keep_fp32": r.keep_fp32,
                                  "base": r.base, "stream": r.stream, "kernel_ms": r.kernel_ms,
                                  "matmul_ms": r.matmul_ms}))


# --- the report -------------------------------------------------------------------------------------------------
def _ms(r: RecipeResult) -> str:
    """The step time: the mean of back-to-back steps."""
    return f"{r.timing['mean_ms']:.3g}" if r.timing else ""


def _spread(r: RecipeResult) -> str:
    """The samples' IQR over their median."""
    return f"{r.timing['spread']:.0%}" if r.timing and r.timing.get("spread") is not None else ""


def _pct(x) -> str:
    return f"{x:.0%}" if x is not None else ""


def recipes_table(a: Advice) -> Table:
    timed = any(r.timing for r in a.recipes)
    criterion = next((r.criterion for r in a.recipes if r.criterion), "error")
    t = Table(title=f"Recipes on {escape(a.model)} ({a.mode}) against fp32 strict: error = {criterion}, "
                    f"tolerance {a.tolerance:g}", title_justify="left")
    cols = ["recipe", "status", *(("ms / step", "spread", "vs fp32") if timed else ()), "error", "max abs err",
            *(("TC share", "GPU busy") if timed else ()), "note"]
    for col in cols:
        t.add_column(col, justify="left" if col in ("recipe", "status", "note") else "right", overflow="fold")
    for r in a.recipes:
        if r.status != "skipped":
            t.add_row(*_recipe_cells(r, timed))
    captions = [_train_caption(a)] if a.mode == "train" else []
    if timed:
        captions.append("ms / step: the mean of 2 s of back-to-back steps; spread: their IQR / median; GPU busy: "
                        "kernel time / step time")
    t.caption = "\n".join(c for c in captions if c) or None
    t.caption_justify = "left"
    return t


def _train_caption(a: Advice) -> str | None:
    """The training criterion and fp32's noise floor, from any recipe that was compared."""
    acc = next((r.accuracy for r in a.recipes if r.accuracy.get("criterion")), None)
    if not acc:
        return None
    rerun = f"(fp32 rerun with weights x (1 + {accuracy.PERTURBATION:g} noise))"
    if acc.get("rule") == "fall":
        return (f"error: the share of fp32's loss fall over {acc['steps']} steps ({acc['fall_fp32']:.3g}: first loss "
                f"- mean of the last {accuracy.END_STEPS}) a recipe loses; it passes when that share is within "
                f"max(tolerance, {accuracy.NOISE_FACTOR:g} x fp32's run-to-run spread {acc['fall_spread']:.2g} / "
                f"its fall) {rerun}")
    return (f"error: mean |loss - fp32 loss| over {acc['steps']} steps / fp32's starting loss {acc['scale']:.3g} "
            f"(fp32's loss fall {acc.get('fall_fp32', float('nan')):.3g} is within its noise, so the gap judges); "
            f"a recipe passes within max({accuracy.NOISE_FACTOR:g} x fp32's noise floor {acc['noise']:.3g}, "
            f"{accuracy.GAP_PER_TOLERANCE:g} x tolerance x starting loss) {rerun}")


def skipped_text(a: Advice) -> Text | None:
    skipped = [r for r in a.recipes if r.status == "skipped"]
    if not skipped:
        return None
    return Text("not run: " + "; ".join(f"{r.recipe} ({r.message})" for r in skipped), style="dim")


def _recipe_cells(r: RecipeResult, timed: bool) -> list:
    acc = r.accuracy
    err = f"{r.error:.2g}" if r.error is not None and math.isfinite(r.error) else ("inf" if r.error else "")
    max_err = f"{acc['max_abs_error']:.2g}" if math.isfinite(acc.get("max_abs_error", math.nan)) else ""
    speed = [_ms(r), _spread(r), f"{r.speedup:.2f}x" if r.speedup else ""] if timed else []
    return [Text(r.recipe), f"[{STYLE[r.status]}]{r.status}[/]", *speed, err, max_err,
            *([_pct(r.tc_share), _pct(r.gpu_busy)] if timed else []), Text(r.message)]


def stream_table(a: Advice) -> Table | None:
    """The workload's recipes: first pass (compiles, captures), one-time cost, steady step and the job."""
    if not a.stream:
        return None
    w = a.workload or {}
    timed = any(r.step_ms for r in a.stream)
    job = a.steps
    t = Table(title=f"On the workload: a stream of {w.get('length', '?')} steps, {w.get('distinct', '?')} distinct "
                    f"shapes (varying: {_varying(w)}); caches cold", title_justify="left")
    cols = ["recipe", "status", "first pass s", "compiles", "captures", *(("one-time s", "ms / step") if timed else ()),
            *((f"job of {job:,} s",) if timed and job else ()), "error", "note"]
    for col in cols:
        t.add_column(col, justify="left" if col in ("recipe", "status", "note") else "right", overflow="fold")
    for r in a.stream:
        t.add_row(*_stream_cells(r, timed, job))
    t.caption = ("first pass: every step once from cold (compiles, recompiles, CUDA graph captures); one-time: the "
                 "first and second passes less two steady ones (CUDA graph trees record a shape at its second call); ms / step: the median of 5 steady passes over the stream's steps")
    t.caption_justify = "left"
    return t


def _varying(w: dict) -> str:
    return ", ".join(f"{k} dim {d} (up to {n})" for k, dims in (w.get("varying") or {}).items()
                     for d, n in dims.items()) or "none"


def _stream_cells(r: RecipeResult, timed: bool, job) -> list:
    from .job import job_s, one_time_s
    st = r.stream or {}
    err = f"{r.error:.2g}" if r.error is not None and math.isfinite(r.error) else ("inf" if r.error else "")
    first = f"{st['seconds']:.1f}" if st.get("seconds") is not None else ""
    cells = [Text(r.recipe), f"[{STYLE[r.status]}]{r.status}[/]", first, str(st.get("compiles", "")),
             str(st.get("captures", ""))]
    if timed:
        ok = r.passes and r.step_ms
        cells += [f"{one_time_s(r):.1f}" if ok else "", _ms(r) if ok else ""]
        if job:
            cells.append(f"{job_s(r, job):.3g}" if ok else "")
    return cells + [err, Text(r.message)]


def lint_table(a: Advice) -> Table | Text:
    flagged = a.flagged
    s = a.lint_summary
    title = (f"Shape lint: {s['layers']} matmul/conv/attention shapes, {s['forward_gflops']:.3g} GFLOP a forward; "
             f"{len(flagged)} miss Tensor Core alignment")
    if not flagged:
        return Text(title + ": none", style="green")
    measured = any(l.cost for l in flagged)
    t = Table(title=title, title_justify="left")
    for col in ("module", "op", "shape", "misses", "fix", *(("measured",) if measured else ())):
        t.add_column(col, overflow="fold")
    for l in flagged[:MAX_LINT_ROWS]:
        name = l.module if l.module != TOP_LEVEL else f"{TOP_LEVEL} {l.module_type}"
        t.add_row(Text(name), f"{l.kind} x{l.count}" if l.count > 1 else l.kind, l.label, Text(misses(l)),
                  Text(widest_fix(l)), *((_cost(l),) if measured else ()))
    if len(flagged) > MAX_LINT_ROWS:
        t.caption = f"... and {len(flagged) - MAX_LINT_ROWS} more (see --json)"
    return t


def _cost(l: Layer) -> str:
    """What padding to the measured precision's alignment gained: 'bf16, n 50257->50264: padded 4.63x, ...' (the fix
    column pads for the strictest precision flagged, which may ask more)."""
    c = l.cost
    if not c:
        return ""
    fix = (l.issues.get(c["precision"]) or {}).get("fix") or ""
    text = f"{c['precision']}{', ' + fix.removeprefix('pad ') if fix else ''}: padded {c['gain']:.2f}x"
    if c.get("share") is not None:
        text += f", {c['share']:.0%} of the step, saves {max(c['saved_share'], 0):.1%}"
    return text


def misses(l: Layer) -> str:
    """'n=50257: tf32 bf16 fp8' per dimension, then the hard limits: which precisions each miss touches."""
    by_dim: dict[str, list[str]] = {}
    for prec, issue in l.issues.items():
        for m in issue["misaligned"]:
            by_dim.setdefault(m.split(" (")[0], []).append(prec)
    lines = [f"{d}: {' '.join(p)}" for d, p in by_dim.items()]
    limits = sorted(p for p, i in l.issues.items() if i["hard_limit"])
    return "\n".join(lines + ([f"hard limit: {' '.join(limits)}"] if limits else []))


def widest_fix(l: Layer) -> str:
    """The fix for the strictest precision flagged (fp8's 16 covers bf16's 8 and tf32's 4)."""
    from ..precision import get
    return l.issues[max(l.issues, key=lambda p: get(p).align)]["fix"] or ""


def sensitive_text(a: Advice) -> Text | None:
    if not a.sensitive:
        return None
    lines = Text()
    for dtype, s in a.sensitive.items():
        mods = s["modules"]
        if s.get("failed"):
            lines.append(f"{s['base']} misses the tolerance; the search for the modules behind it ended: "
                         f"{s['failed']}\n")
            continue
        if not mods:
            lines.append(f"{s['base']} misses the tolerance, but no single module does alone in {dtype}: "
                         f"the error builds up across the model ({s['tests']} modules tested)\n")
            continue
        lines.append(f"{s['base']} misses the tolerance; alone in {dtype}, these break it: ", style="bold")
        lines.append(", ".join(f"{m} ({_err(s['errors'].get(m))})" for m in mods) + "\n")
        if s.get("mixed"):
            lines.append(f"  keeping them in fp32: {s['mixed']}\n")
    return lines


def _err(x) -> str:
    return f"{x:.2g}" if x is not None and math.isfinite(x) else "inf/NaN"


def share_text(a: Advice) -> Text | None:
    s = a.share
    if s.get("baseline") is None and s.get("recommended") is None:
        return None
    return Text(f"Tensor Core share of GPU time: fp32 strict {_pct(s.get('baseline')) or 'n/a'}"
                f" -> {s.get('recommended_recipe')} {_pct(s.get('recommended')) or 'n/a'}")


def verdict_text(a: Advice) -> Group:
    v = a.verdict
    parts = [Text(headline(v, a.tolerance), style="bold green" if v.get("recommended") else "bold yellow")]
    if v.get("margin"):
        parts.append(Text(f"  runoff: {v['margin']}"))
    if v.get("limit_sentence"):
        parts.append(Text(f"  how far from the limit: {v['limit_sentence']}"))
    if v.get("note"):
        parts.append(Text(v["note"], style="yellow"))
    for key in ("host_bound", "unstable"):
        if v.get(key):
            parts.append(Text(f"  {v[key]}", style="yellow"))
    for g in v.get("gave_up", []):
        parts.append(Text(f"  faster but outside tolerance: {g['recipe']} ({g['speedup']:.2f}x): {g['why']}"))
    for f in v.get("fixes", []):
        parts.append(Text(f"  shape fix worth making: {f['module']} {f['shape']}: {f['fix']} "
                          f"(padded GEMM {f['gain']:.2f}x, saves ~{f['saved_share']:.0%} of a step)"))
    return Group(*parts)


def snippet_panels(a: Advice) -> list:
    out = []
    helper_shown = False
    for name, code in a.snippets.items():
        if "def keep_fp32" in code:
            if helper_shown:
                code = _without_helper(code)
            helper_shown = True
        out += [Text(f"{name}:", style="bold"), Syntax(code.rstrip(), "python", theme="ansi_dark", word_wrap=True)]
    return out


def _without_helper(code: str) -> str:
    start = code.index("class Fp32Island")
    end = code.index("    return model\n", code.index("def keep_fp32")) + len("    return model\n")
    return code[:start] + "# Fp32Island, keep_fp32: as in the pytorch snippet above\n" + code[end:].lstrip("\n")


def render(a: Advice) -> Group:
    where = a.gpu or f"CPU ({a.device})"
    parts = [Text(f"tcperf advise · {a.model} · {a.mode} · {where}", style="bold"), recipes_table(a)]
    parts += [p for p in (skipped_text(a), stream_table(a), lint_table(a)) if p is not None]
    parts += [p for p in (sensitive_text(a), share_text(a)) if p is not None]
    parts.append(verdict_text(a))
    parts += [Text(f"note: {n}", style="yellow") for n in a.notes if n != a.verdict.get("note")]
    if a.phases:
        parts.append(Text("time: " + ", ".join(f"{k.removesuffix('_s')} {v:.1f} s" for k, v in a.phases.items()),
                          style="dim"))
    parts += snippet_panels(a)
    return Group(*parts)
