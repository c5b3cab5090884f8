"""CPU figures that claim nothing noise can explain (issues 34 and 58): a host clock quantised by a shared CPU's
scheduler is detected and its rows marked; a ratio, a finding or a "faster" is stated only when it survives the
spread, and, where a case was timed twice (a CPU `tcperf run`), in both timings."""
import itertools

import pytest

from tcperf import timing
from tcperf.compare import claim
from tcperf.report.common import RunData
from tcperf.report.findings import findings, layout_lines, layout_pairs
from tcperf.rows import merge_repeats
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


# --- issue 58: a CPU `tcperf run` times its suite twice; a claim must hold in both timings ------------------------
def _timed_twice(op, precision, first, second, layout=None, **shape):
    """A case's two timings as a CPU `tcperf run` stores them, pooled into one row as the table and report read it."""
    return [_row(op, precision, first, layout, **shape), _row(op, precision, second, layout, **shape)]


def test_two_noisy_timings_give_no_ratio_and_no_finding():
    """bf16 attention 1.29x fp32 in one timing and 0.90x in the next, each significant alone (issue 58): n.s.; an
    NHWC convolution 2x faster in one timing and slower in the other: no layout finding. Where both timings agree,
    the ratio and the finding stand."""
    fp32 = [[10.0, 10.1, 9.9, 10.05, 10.02], [7.0, 7.1, 6.9, 7.05, 7.02]]
    bf16 = [[7.75, 7.8, 7.7, 7.76, 7.74], [7.78, 7.83, 7.73, 7.8, 7.76]]           # 1.29x, then 0.90x
    steady = [[5.0, 5.05, 4.95, 5.02, 5.01], [3.5, 3.55, 3.45, 3.52, 3.51]]        # 2.0x both times
    nhwc = [[4.0, 4.1, 4.05, 4.02, 4.08], [9.5, 9.6, 9.55, 9.52, 9.58]]
    nchw = [[8.0, 8.1, 8.05, 8.02, 8.08], [9.0, 9.1, 9.05, 9.02, 9.08]]            # NHWC 2x faster, then slower
    stored = [*_timed_twice("attention", "fp32", *fp32, seq=256), *_timed_twice("attention", "bf16", *bf16, seq=256),
              *_timed_twice("attention", "fp64", *steady, seq=128), *_timed_twice("attention", "fp32", *fp32, seq=128),
              *_timed_twice("conv", "fp32", *nhwc, "NHWC", n=8), *_timed_twice("conv", "fp32", *nchw, "NCHW", n=8)]
    for alone in (stored[0], stored[2]), (stored[1], stored[3]):                    # each timing alone: significant
        assert claim(*sorted(alone, key=lambda r: r["median_ms"]))[0]
    rows = merge_repeats(stored)
    assert len(rows) == 6 and len(rows[1]["samples"]) == 10
    ok, why = claim(rows[1], rows[0])
    assert not ok and why == "no significant difference (it ran the other way in timing 2 of 2)"
    assert set(speedups(rows)) == {0, 2, 3, 4, 5} and speedups(rows)[2] == pytest.approx(2.0, rel=0.03)
    assert unclaimed(rows) == {1: why}
    assert layout_pairs(rows) == {}
    run = RunData({"id": 1, "device": "cpu", "env": {}, "kind": "run"}, rows)
    assert layout_lines([run]) == []
    agreeing = merge_repeats([*stored[:8], *_timed_twice("conv", "fp32", nhwc[0], nhwc[0], "NHWC", n=8),
                              *_timed_twice("conv", "fp32", *nchw, "NCHW", n=8)])
    lines = [f.text for f in layout_lines([RunData(run.run, agreeing)])]
    assert lines == ["fp32 conv conv NHWC: layout=NHWC is 2.11x faster than layout=NCHW (run 1)"]


def test_other_processes_on_the_cpu_are_named_as_the_gpus_are(monkeypatch):
    """Issue 58: two runs sharing a 2-core CPU read fp32 attention at 8.0 ms where it takes 1.2-2.3 alone, unflagged.
    /proc's tick counts over a moment name each busy process outside our own tree (our workers are ours)."""
    import os
    import types

    import torch
    from tcperf import env
    from tcperf.commands.common import quiet_warning
    me, hz = os.getpid(), os.sysconf("SC_CLK_TCK")
    before = {me: ("python3", 100, 1), 4242: ("stress-ng", 1000, 1), 4343: ("sshd", 50, 1), 5000: ("python3", 0, me)}
    after = {me: ("python3", 100 + hz // 2, 1), 4242: ("stress-ng", 1000 + hz // 2, 1), 4343: ("sshd", 51, 1),
             5000: ("python3", hz // 2, me), 6000: ("cc1", hz // 4, 1)}          # 6000 started meanwhile
    ticks = iter([before, after])
    monkeypatch.setattr(env, "_cpu_ticks", lambda: next(ticks))
    clock = iter([0.0, 0.5])
    monkeypatch.setattr(env, "time", types.SimpleNamespace(sleep=lambda s: None, monotonic=lambda: next(clock)))
    warning, = quiet_warning(torch.device("cpu"))
    assert warning.startswith("other processes use the CPU (pid 4242 stress-ng 100%, pid 6000 cc1 50% of a core; "
                              "load ") and warning.endswith("cores): figures may be slow and noisy")
