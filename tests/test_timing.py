import numpy as np
import pytest
import torch

from tcperf import timing
from tcperf.timing import Measurement, time_fn, time_until_stable


def test_statistics_match_numpy():
    samples = [5.0, 1.0, 3.0, 2.0, 4.0, 10.0]
    m = Measurement(samples)
    assert m.median_ms == np.median(samples)
    assert m.iqr_ms == pytest.approx(np.percentile(samples, 75) - np.percentile(samples, 25))
    assert m.min_ms == 1.0 and m.n == 6
    assert m.spread == pytest.approx(m.iqr_ms / m.median_ms)


def test_unstable_flag():
    assert Measurement([1.0, 1.01, 0.99, 1.0]).unstable is False
    assert Measurement([1.0, 2.0, 1.0, 2.0, 1.5]).unstable is True


def test_cpu_timing_takes_enough_samples():
    a = torch.randn(64, 64)
    m = time_fn(lambda: a @ a, "cpu", warmup_ms=2, rep_ms=10, min_reps=7)
    assert m.n >= 7 and all(s > 0 for s in m.samples_ms)
    assert m.warmup >= 1


def test_repeat_count_follows_the_time_budget():
    a = torch.randn(16, 16)
    short = time_fn(lambda: a @ a, "cpu", rep_ms=2, max_reps=10_000)
    long = time_fn(lambda: a @ a, "cpu", rep_ms=40, max_reps=10_000)
    assert long.n > short.n


@pytest.mark.parametrize("medians, repeats, best", [
    ([3.0, 2.0, 1.995, 2.5, 1.0], 4, 1.995),      # 1.995 is within 0.5% of 2.0: two repeats without a gain stop it
    ([3.0, 2.0, 2.5, 1.5, 1.6, 1.495, 1.0], 6, 1.495),
    ([9.0, 8.0, 7.0, 6.0, 5.0], 5, 5.0),          # still improving at max_repeats
])
def test_time_until_stable_repeats_until_the_best_stops_improving(monkeypatch, medians, repeats, best):
    given = iter(medians)
    monkeypatch.setattr(timing, "time_fn", lambda fn, device, **kw: Measurement([next(given)]))
    m, seen = time_until_stable(None, "cpu", max_repeats=5 if medians[0] == 9.0 else 10)
    assert seen == medians[:repeats] and m.median_ms == best


@pytest.mark.gpu
def test_cuda_events_time_a_gemm(cuda):
    a = torch.randn(2048, 2048, device=cuda, dtype=torch.bfloat16)
    m = time_fn(lambda: a @ a, cuda)
    tflops = 2 * 2048**3 / (m.median_ms * 1e-3) / 1e12
    assert m.n >= 5 and 1 < tflops < 5000
    g = time_fn(lambda: a @ a, cuda, graph=True)
    assert g.graph and g.n >= 5


def test_back_to_back_needs_the_l2_flush_off():
    with pytest.raises(ValueError, match="flush_l2=False"):
        time_fn(lambda: None, "cpu", back_to_back=True)
    m = time_fn(lambda: sum(range(1000)), "cpu", rep_ms=2, flush_l2=False, back_to_back=True)
    assert m.n >= 5


@pytest.mark.gpu
def test_back_to_back_samples_count_the_host_and_agree_on_a_gemm(cuda):
    """A step that spends 2 ms on the host before a small kernel takes >= 2 ms a sample back to back (the GPU
    waits for the host); a GPU-bound GEMM times about the same both ways. About: at its power cap an H200 drifts
    by ~10% between two 100 ms windows, so back to back is held against per call timed before and after it."""
    import time
    a = torch.randn(256, 256, device=cuda)

    def host_bound():
        time.sleep(0.002)      # the host's share: Python, guard checks, launches
        return a @ a

    b2b = time_fn(host_bound, cuda, flush_l2=False, rep_ms=40, back_to_back=True)
    assert b2b.back_to_back and b2b.n >= 5 and b2b.median_ms >= 2.0
    big = torch.randn(4096, 4096, device=cuda, dtype=torch.bfloat16)
    before = time_fn(lambda: big @ big, cuda, flush_l2=False, rep_ms=100)
    b2b = time_fn(lambda: big @ big, cuda, flush_l2=False, rep_ms=100, back_to_back=True)
    after = time_fn(lambda: big @ big, cuda, flush_l2=False, rep_ms=100)
    low, high = sorted((before.median_ms, after.median_ms))
    assert 0.85 * low <= b2b.median_ms <= 1.15 * high
