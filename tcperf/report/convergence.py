"""Time to accuracy in the report: the convergence chart (validation metric against wall-clock time on the run's
clock, one line per recipe, every seeded run drawn, the target as a dashed line) and a table of the recipes'
summary rows (`tcperf train-to-target`, ops totarget.run and totarget.recipe).

    png = chart(results, "bytes-gpt to bpb 1.8")          # None when the rows hold no trace
"""
from __future__ import annotations

from ..totarget.clock import CLOCKS, DEFAULT
from ..totarget.stats import SPLIT, with_split
from .charts import _figure, _png

RUN, RECIPE = "totarget.run", "totarget.recipe"


def _target(shape: dict) -> tuple[str, float | None]:
    name = next((k for k in shape if k not in ("workload", "clock", "seed")), "metric")
    return name, shape.get(name)


def chart(rows: list[dict], title: str) -> bytes | None:
    runs = [r for r in rows if r["op"] == RUN and (r.get("metrics") or {}).get("trace")]
    if not runs:
        return None
    fig, (ax,) = _figure(7.5, 4.2)
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
    return _png(fig)


def section(rd, page) -> str:
    """The report's time-to-accuracy section for one run ('' when it has none)."""
    from .html import _e, _num, table
    rows = [r for r in rd.results if r["op"] in (RUN, RECIPE)]
    if not rows:
        return ""
    name, value = _target(rows[0]["shape"])
    title = f"{rows[0]['shape'].get('workload')} to {name} {value}"
    with_split([r for r in rows if r["op"] == RECIPE], rows, value)
    figure = page.chart(f"convergence-run{rd.run['id']}", chart(rows, title), f"{rd.name}: {title}")
    body = [[r["precision"], r["status"], f"{(r['metrics'] or {}).get('reached', 0)}/{(r['metrics'] or {}).get('runs', 0)}",
             _num((r["metrics"] or {}).get("median_s"), suffix=" s"), _num((r["metrics"] or {}).get("iqr_s"), suffix=" s"),
             _num((r["metrics"] or {}).get("steps")), _num((r["metrics"] or {}).get("final_metric")),
             *(_num(((r["metrics"] or {}).get("split") or {}).get(k), suffix=" s") for k in SPLIT),
             r.get("message") or ""]
            for r in rows if r["op"] == RECIPE]
    heads = ["recipe", "status", "reached", "median time to target", "IQR", "steps", "final", "data prep",
             "warm-up", "of it compiling", "training", "evaluation", "note"]
    return f"<h3>{_e(rd.name)}: {_e(title)}</h3>{figure}{table(heads, body)}"
