"""Time to accuracy in the report: the convergence chart (validation metric against wall-clock time on the run's
clock, one line per recipe, every seeded run drawn, the target as a dashed line) and a table of the recipes'
summary rows (`tcperf train-to-target`, ops totarget.run and totarget.recipe).

    png = chart(results, "bytes-gpt to bpb 1.8")          # None when the rows hold no trace
"""
from __future__ import annotations

from ..totarget.clock import CLOCKS, DEFAULT
from ..totarget.stats import SPLIT, with_split
from .charts import figure, png
from .common import escape, number, table

RUN, RECIPE = "totarget.run", "totarget.recipe"


def _target(shape: dict) -> tuple[str, float | None]:
    name = next((k for k in shape if k not in ("workload", "clock", "seed")), "metric")
    return name, shape.get(name)


def chart(rows: list[dict], title: str) -> bytes | None:
    runs = [r for r in rows if r["op"] == RUN and (r.get("metrics") or {}).get("trace")]
    if not runs:
        return None
    fig, (ax,) = figure(7.5, 4.2)
    colors = {}
    for r in runs:
        m = r["metrics"]
        clock = CLOCKS.get(m.get("clock"), CLOCKS[DEFAULT])
        xs = [clock.elapsed(p, m.get("prep_s", 0.0)) for p in m["trace"]]
        color = colors.setdefault(r["precision"], f"C{len(colors) % 10}")
        ax.plot(xs, [p["metric"] for p in m["trace"]], color=color, alpha=0.8, lw=1.4,
                label=r["precision"] if r["precision"] not in ax.get_legend_handles_labels()[1] else None)
    name, value = _target(runs[0]["shape"])
    if value is not None:
        ax.axhline(value, color="black", ls="--", lw=1, label=f"target {name} {value:g}")
    ax.set_xlabel(f"seconds on the {runs[0]['metrics'].get('clock', DEFAULT)} clock")
    ax.set_ylabel(name)
    ax.legend(fontsize=8)
    ax.set_title(title)
    return png(fig)


HEADS = ["recipe", "status", "reached", "median time to target", "IQR", "steps", "final", "data prep", "warm-up",
         "of it compiling", "training", "evaluation", "note"]


def section(rd, page) -> str:
    """The report's time-to-accuracy section for one run ('' when it has none)."""
    rows = [r for r in rd.results if r["op"] in (RUN, RECIPE)]
    if not rows:
        return ""
    name, value = _target(rows[0]["shape"])
    title = f"{rows[0]['shape'].get('workload')} to {name} {value}"
    summary = with_split([r for r in rows if r["op"] == RECIPE], rows, value)    # copies: the run's rows stay as read
    shown = page.chart(f"convergence-run{rd.run['id']}", chart(rows, title), f"{rd.name}: {title}")
    return f"<h3>{escape(rd.name)}: {escape(title)}</h3>{shown}{table(HEADS, [_cells(r) for r in summary])}"


def _cells(row: dict) -> list:
    m = row.get("metrics") or {}
    split = m.get("split") or {}
    return [row["precision"], row["status"], f"{m.get('reached', 0)}/{m.get('runs', 0)}",
            number(m.get("median_s"), suffix=" s"), number(m.get("iqr_s"), suffix=" s"), number(m.get("steps")),
            number(m.get("final_metric")), *(number(split.get(k), suffix=" s") for k in SPLIT),
            row.get("message") or ""]
