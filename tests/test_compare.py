"""`tcperf compare`: the test statistic against hand-worked values, its false-positive rate, the IQR-overlap
refusal, and ratios, geometric means and exit codes on stored runs with known differences."""
import json
import math

import numpy as np
import pytest
from report_fixtures import gemm, gpu_env, kernel_rows, model_rows, store_run

from tcperf import cli
from tcperf import compare as cmp
from tcperf.store import Store


@pytest.fixture
def store(db_path):
    return Store.open(db_path)


def test_mann_whitney_hand_worked():
    # [1..5] vs [6..10]: U = 0, mean 12.5, sigma = sqrt(5*5*11/12); z = (12.5 - 0.5) / sigma = 2.5067
    assert cmp.mann_whitney_p([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) == pytest.approx(0.012186, abs=1e-6)
    # ties: [1,2,2,3] vs [2,3,3,4]: average ranks give U = 3, mean 8; tie term 48/56;
    # sigma = sqrt(16/12 * (9 - 48/56)) = 3.2950; z = (5 - 0.5) / sigma = 1.3657
    assert cmp.mann_whitney_p([1, 2, 2, 3], [2, 3, 3, 4]) == pytest.approx(0.17202, abs=1e-4)
    assert cmp.mann_whitney_p([1, 2, 2, 3], [2, 3, 3, 4]) == cmp.mann_whitney_p([2, 3, 3, 4], [1, 2, 2, 3])
    assert cmp.mann_whitney_p([2.0] * 10, [2.0] * 10) == 1.0


def test_false_positive_rate_is_near_alpha():
    rng = np.random.default_rng(7)
    p = [cmp.mann_whitney_p(rng.normal(1, 0.02, 40), rng.normal(1, 0.02, 40)) for _ in range(400)]
    assert 0.01 < np.mean(np.array(p) < cmp.ALPHA) < 0.10


def test_significance_rules():
    rng = np.random.default_rng(3)
    a, b = rng.normal(1.0, 0.01, 40), rng.normal(1.1, 0.01, 40)
    assert cmp.significance(a, b)[0] is True
    # a small shift under a wide spread: tiny p with 1000 samples a side, but the IQRs overlap: refused
    wide_a, wide_b = rng.normal(1.0, 0.1, 1000), rng.normal(1.03, 0.1, 1000)
    significant, p, why = cmp.significance(wide_a, wide_b)
    assert p < cmp.ALPHA and not significant and "IQRs overlap" in why
    assert cmp.significance(a[:3], b[:3]) == (False, None, "too few samples (3 and 3; need 5)")


def test_known_slowdown_is_measured_and_significant(store):
    a = store_run(store, "run", kernel_rows(1.0, seed=0))
    b = store_run(store, "run", kernel_rows(1.10, seed=50))          # every case 10% slower in B
    result = cmp.compare(store.results(a), store.results(b))
    assert len(result.pairs) == 8 and not result.only_a and not result.only_b
    for p in result.pairs:
        assert p.speedup == pytest.approx(1 / 1.10, rel=0.02)
        assert cmp.describe(p).endswith("slower")
    assert all(p.significant for p in result.pairs if "unstable" not in " ".join(p.b["warnings"]))
    mean, n = result.geomeans()["quick"]
    assert mean == pytest.approx(1 / 1.10, rel=0.01) and n == 8
    assert len(result.regressions(0.05)) >= 7 and result.regressions(0.20) == []
    assert [(ra["status"], rb["status"]) for ra, rb in result.not_compared] == [("wrong", "wrong")]


def test_exit_codes(store, db_path, capsys):
    a = store_run(store, "run", kernel_rows(1.0, seed=0))
    b = store_run(store, "run", kernel_rows(1.10, seed=50))
    same = store_run(store, "run", kernel_rows(1.0, seed=99))
    run = lambda *args: cli.main(["compare", *map(str, args), "--db", db_path])   # noqa: E731
    assert run(a, b, "--fail-if-slower", "5%") == 1
    assert "FAIL" in capsys.readouterr().out
    assert run(b, a, "--fail-if-slower", "5%") == 0              # B faster
    assert run(a, b, "--fail-if-slower", "20%") == 0             # slower, but within the threshold
    assert run(a, b) == 0                                        # no gate asked for
    assert run(a, same, "--fail-if-slower", "1") == 0            # noise only: nothing significant
    capsys.readouterr()
    assert run(a, b, "--fail-if-slower", "abc") == 2
    assert run(a, b, "--fail-if-slower", "-5%") == 2
    assert run(a, 99) == 2
    assert "5%" in capsys.readouterr().err


def test_cases_in_one_run_and_broken_cases(store, db_path, capsys):
    rows_a = [gemm(4096, "bf16", 0.2), gemm(8192, "bf16", 1.5), gemm(1024, "bf16", 0.006)]
    broken = {**gemm(8192, "bf16", 1.5), "status": "wrong", "message": "relative error 0.3 > tolerance"}
    rows_b = [gemm(4096, "bf16", 0.2, seed=5), broken, gemm(2048, "bf16", 0.03)]
    a, b = store_run(store, "run", rows_a), store_run(store, "run", rows_b)
    result = cmp.compare(store.results(a), store.results(b))
    assert [r["shape"]["m"] for r in result.only_a] == [1024] and [r["shape"]["m"] for r in result.only_b] == [2048]
    assert len(result.broken) == 1 and len(result.pairs) == 1
    assert cli.main(["compare", str(a), str(b), "--fail-if-slower", "5%", "--db", db_path]) == 1   # broken fails
    out = capsys.readouterr().out
    assert f"only in run {a} (1)" in out and f"only in run {b} (1)" in out and "broken in run B" in out


def test_across_gpus_header_and_json(store, db_path, capsys):
    a = store_run(store, "run", kernel_rows(1.0), gpu_env("NVIDIA H100 80GB HBM3"))
    b = store_run(store, "run", kernel_rows(1 / 1.04, seed=9), gpu_env("NVIDIA H200"))
    assert cli.main(["compare", str(a), str(b), "--json", "--db", db_path]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["headline"].startswith(f"H200 (run {b}) vs H100 80GB HBM3 (run {a}): 1.04x on quick (")
    assert "copy 1.04x" in doc["headline"] and "gemm 1.04x" in doc["headline"]
    assert doc["geomean"]["quick"]["speedup"] == pytest.approx(1.04, rel=0.01)
    assert all(not p["fails_gate"] for p in doc["pairs"]) and len(doc["pairs"]) == 8


def test_rows_without_samples_compare_by_throughput_untested(store):
    def strip(rows):
        return [{**r, "samples": []} for r in rows if r.get("status") == "ok"]
    a = store_run(store, "models", strip(model_rows()))
    faster = strip(model_rows())
    for r in faster:
        r["metrics"] = {**r["metrics"], "throughput": r["metrics"]["throughput"] * 1.5}
    b = store_run(store, "models", faster)
    result = cmp.compare(store.results(a), store.results(b))
    assert all(p.speedup == pytest.approx(1.5) and not p.significant and "not tested" in p.why for p in result.pairs)
    assert math.isclose(result.geomeans()["models"][0], 1.5)
