"""`tcperf export --format mlperf|flat-csv`: both parse, carry one entry a result, and say what a reader needs
(the system, the metric and its spread; plain spreadsheet columns with no JSON inside)."""
import csv
import io
import json

import pytest
from report_fixtures import ceiling_rows, full_run, store_run

from tcperf import cli
from tcperf.commands.export import FORMATS
from tcperf.store import Store


@pytest.fixture
def stored(db_path):
    store = Store.open(db_path)
    run_id = full_run(store)
    return store, store.run(run_id), store.results(run_id)


def by_label(entries, key, text, precision):
    return next(e for e in entries if e[key] == text and e["precision"] == precision)


def test_mlperf_json(stored):
    _, run, results = stored
    doc = json.loads(FORMATS["mlperf"](run, results))
    system = doc["system"]
    assert system["accelerator_model_name"] == "NVIDIA H200" and system["accelerators_per_node"] == 1
    assert system["framework"] == "PyTorch 2.11.0+cu130" and system["host_processor_model_name"] == "AMD EPYC 9654"
    assert len(doc["results"]) == len(results)
    gemm = by_label(doc["results"], "case", "gemm 8192x8192x8192 NN", "bf16")
    stored_row = next(r for r in results if r["case_key"] == gemm["case_key"])
    assert gemm["metric"] == "tflops" and gemm["value"] == stored_row["tflops"]
    assert gemm["spread"]["iqr_ms"] == stored_row["iqr_ms"] and gemm["spread"]["samples"] == 40
    model = by_label(doc["results"], "benchmark", "resnet50", "amp_bf16")
    assert model["unit"] == "img/s" and model["scenario"] == "train" and model["higher_is_better"]
    wrong = by_label(doc["results"], "case", "gemm 8192x8192x8192 NN", "fp8")
    assert wrong["valid"] is False and wrong["status"] == "wrong"


def test_flat_csv_is_plain(stored):
    _, run, results = stored
    rows = list(csv.DictReader(io.StringIO(FORMATS["flat-csv"](run, results))))
    assert len(rows) == len(results)
    for column in ("label", "application", "throughput", "tc", "padded_gain", "shape_m", "accuracy_top1_agree"):
        assert column in rows[0]
    for row in rows:
        assert not any(v.startswith(("{", "[")) or "\n" in v for v in row.values())
    cliff = by_label(rows, "label", "gemm 8191x8191x8191 NN", "bf16")
    assert float(cliff["padded_gain"]) == pytest.approx(7.6 / 1.49) and cliff["aligned"] == "no"
    assert by_label(rows, "label", "gemm 8192x8192x8192 NN", "bf16")["tc"] == "yes"
    assert by_label(rows, "label", "resnet50 train batch 256", "fp32")["throughput_unit"] == "img/s"
    advice = next(r for r in rows if r["op"] == "advise.verdict")
    assert advice["verdict"].startswith("Use amp_bf16: 2.37x faster than fp32 strict")


def test_export_command(tmp_path, db_path, capsys):
    run_id = store_run(Store.open(db_path), "ceilings", ceiling_rows())
    out = tmp_path / "flat.csv"
    assert cli.main(["export", str(run_id), "--format", "flat-csv", "--out", str(out), "--db", db_path]) == 0
    assert len(list(csv.DictReader(out.open(newline="")))) == len(ceiling_rows())
    assert cli.main(["export", str(run_id), "--format", "mlperf", "--db", db_path]) == 0
    assert json.loads(capsys.readouterr().out)["results"][0]["metric"] == "tflops"
    assert cli.main(["export", str(run_id), "--format", "xls", "--db", db_path]) == 2
    assert "mlperf, flat-csv" in capsys.readouterr().err
