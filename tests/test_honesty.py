"""CPU figures that claim nothing noise can explain (issue 34): a host clock quantised by a shared CPU's scheduler
is detected and its rows marked; a ratio, a finding or a "faster" is stated only when it survives the spread."""
import itertools

import pytest

from tcperf import timing
from tcperf.compare import claim
from tcperf.report.common import RunData
from tcperf.report.findings import findings, layout_lines
from tcperf.table import results_table, speedups, unclaimed


def test_samples_on_scheduler_steps_are_quantised_and_real_ones_are_not():
    assert timing.quantum([8.003, 7.998, 8.001, 16.002, 8.0, 7.996, 8.004, 31.99]) == 4.0
    assert timing.quantum([20.01, 30.02, 19.99, 40.0, 20.0]) == 10.0
    assert timing.quantum([3.1, 3.3, 2.9, 3.2, 3.05, 3.4]) is None
    assert timing.quantum([4.0, 4.01, 3.99]) is None          # one step: a 4 ms op may well take 4 ms
    assert timing.quantum([]) is None


def test_a_fake_host_clock_on_slices_marks_the_measurement(monkeypatch):
    """time_fn on the CPU read through a clock that only moves in 8 ms slices, as a process sharing its core sees
    one: the Measurement says it is quantised."""
    ticks = itertools.count()
    monkeypatch.setattr(timing.time, "perf_counter", lambda: 0.008 * next(ticks))   # every reading 8 ms on
    m = timing.time_fn(lambda: None, "cpu", warmup_ms=0, rep_ms=50, min_reps=6, max_reps=6)
    assert m.host_clock and m.quantised_ms == 4.0 and m.median_ms == pytest.approx(8.0)


def _row(op, precision, samples, layout=None, quantised=None, **shape):
    shape = {**shape, **({"layout": layout} if layout else {})}
    med = sorted(samples)[len(samples) // 2]
    metrics = {"label": f"{op} {layout or ''}", **({"quantised_ms": quantised} if quantised else {})}
    return {"op": op, "shape": shape, "precision": precision, "status": "ok", "median_ms": med, "iqr_ms": 0.0,
            "samples": samples, "metrics": metrics, "suite": "quick", "case_key": f"{op}|{shape}|{precision}",
            "warnings": []}


def test_a_quantised_pair_and_a_noisy_pair_give_no_finding_and_no_ratio():
    quantised = [_row("conv", "bf16", [8.0, 8.0, 8.0, 16.0, 8.0], "NHWC", 4.0, n=8),
                 _row("conv", "bf16", [64.0, 64.0, 56.0, 64.0, 64.0], "NCHW", 4.0, n=8)]   # "8x faster"
    noisy = [_row("conv", "fp16", [5.0, 9.0, 4.0, 8.0, 6.5, 7.0], "NHWC", n=8),
             _row("conv", "fp16", [6.0, 10.0, 5.0, 9.5, 7.5, 6.8], "NCHW", n=8)]          # overlapping spreads
    clean = [_row("conv", "fp32", [4.0, 4.1, 4.05, 4.02, 4.08, 4.03], "NHWC", n=8),
             _row("conv", "fp32", [9.0, 9.1, 9.05, 9.02, 9.08, 9.03], "NCHW", n=8)]
    run = RunData({"id": 1, "device": "cpu", "env": {}, "kind": "bench"}, quantised + noisy + clean)
    lines = [f.text for f in layout_lines([run])]
    assert len(lines) == 1 and lines[0].startswith("fp32") and "2.2" in lines[0]       # the clean pair alone
    assert not any("bf16" in text or "fp16" in text for group in findings([run]).values() for f in group
                   for text in [f.text])
    ok, why = claim(quantised[0], quantised[1])
    assert not ok and "scheduler steps" in why
    ok, why = claim(noisy[0], noisy[1])
    assert not ok and why.startswith("no significant difference")


def test_the_table_states_vs_fp32_only_where_it_survives_the_spread():
    rows = [_row("gemm", "fp32", [10.0, 10.2, 9.9, 10.1, 10.05], m=64),
            _row("gemm", "bf16", [2.0, 2.1, 1.9, 2.05, 2.02], m=64),          # 5x, tight: stated
            _row("gemm", "fp16", [9.0, 11.0, 8.5, 10.5, 12.0], m=64),         # inside fp32's spread: n.s.
            _row("gemm", "tf32", [8.0, 8.0, 8.0, 8.0, 8.0], m=64, quantised=4.0)]
    assert set(speedups(rows)) == {0, 1} and speedups(rows)[1] == pytest.approx(10.05 / 2.02)
    assert set(unclaimed(rows)) == {2, 3}
    from rich.console import Console
    console = Console(width=200, record=True, file=open("/dev/null", "w"))
    console.print(results_table(rows))
    text = console.export_text()
    assert text.count("n.s.") == 2 and "4.98x" in text
