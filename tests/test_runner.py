"""The runner against real worker processes: correctness gates timing, and a case that crashes, hangs or runs
out of memory is recorded while the run goes on."""
import pytest
import torch

from tcperf.runner import TimingConfig, run_cases

CPU = torch.device("cpu")
FAST = TimingConfig(warmup_ms=1, rep_ms=5)


def case(op, precision="fp32", n=1000):
    return {"op": f"fake_ops:{op}", "shape": {"n": n}, "precision": precision, "suite": "test"}


def run(*cases, timeout=60.0):
    seen = []
    results = run_cases(list(cases), CPU, timeout=timeout, timing=FAST, on_result=seen.append)
    assert seen == results
    return {r["op"].split(":")[-1].lower(): r for r in results}


def test_good_case_is_checked_then_timed():
    r = run(case("GOOD"))["good"]
    assert r["status"] == "ok" and r["error"] < 1e-12
    assert r["n"] >= 5 and len(r["samples"]) == r["n"] and r["median_ms"] > 0
    assert r["gbps"] > 0


@pytest.mark.parametrize("bug", ["WRONG", "UNWRITTEN", "NAN"])
def test_wrong_kernel_is_caught_and_not_timed(bug):
    r = run(case(bug), case("GOOD"))
    bad = r[bug.lower()]
    assert bad["status"] == "wrong" and bad.get("median_ms") is None
    assert "tolerance" in bad["message"]
    assert r["good"]["status"] == "ok"


def test_crash_is_recorded_and_the_group_goes_on():
    r = run(case("GOOD"), case("CRASH"), case("GOOD", n=2000))
    assert r["crash"]["status"] == "error" and "worker died (exit 3)" in r["crash"]["message"]
    oks = [x for x in run_cases([case("GOOD"), case("CRASH"), case("GOOD", n=2000)], CPU, timing=FAST)
           if x["status"] == "ok"]
    assert {x["shape"]["n"] for x in oks} == {1000, 2000}


def test_hang_past_timeout_is_recorded():
    r = run(case("HANG"), case("GOOD"), timeout=3.0)
    assert r["hang"]["status"] == "timeout" and "3 s" in r["hang"]["message"]
    assert r["good"]["status"] == "ok"


def test_out_of_memory_is_recorded():
    r = run(case("OOM"), case("GOOD"))
    assert r["oom"]["status"] == "oom" and "out of memory" in r["oom"]["message"]
    assert r["good"]["status"] == "ok"


def test_unsupported_precision_is_skipped_with_reason():
    r = run(case("GOOD", precision="tf32"))["good"]
    assert r["status"] == "skipped" and "CUDA GPU" in r["message"]


def test_precisions_run_in_separate_workers_without_leaking():
    """Each precision group gets a fresh process: tf32 flags set by one cannot reach the next."""
    cases = [case("GOOD", "fp32"), case("GOOD", "bf16"), case("GOOD", "fp64")]
    results = run_cases(cases, CPU, timing=FAST)
    assert sorted(r["precision"] for r in results) == ["bf16", "fp32", "fp64"]
    assert all(r["status"] == "ok" for r in results)


def test_worker_that_cannot_start_fails_every_case_clearly():
    r = run_cases([{"op": "no_such_module:X", "shape": {"n": 1}, "precision": "fp32"}], CPU, timing=FAST)
    assert r[0]["status"] == "error" and "No module named" in r[0]["message"]
