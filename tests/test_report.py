"""The HTML report from stored runs: every section for the data present and none for data absent, self-contained
(no network references, images inline and decodable), warnings at the top, and the `tcperf report` command."""
import base64
import io
import re

import pytest
from PIL import Image
from report_fixtures import (advise_rows, ceiling_rows, full_run, gemm, gpu_env, kernel_rows, lab_rows, model_rows,
                             store_run)

from tcperf import cli, report
from tcperf.report import charts, crossovers
from tcperf.store import Store

ALL_SECTIONS = ["warnings", "environment", "suites", "alignment", "models", "advisor", "lab"]


@pytest.fixture
def store(db_path):
    return Store.open(db_path)


def images(html: str) -> list[Image.Image]:
    found = re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    return [Image.open(io.BytesIO(base64.b64decode(b))) for b in found]


def test_every_section_for_a_full_run(store):
    store_run(store, "ceilings", ceiling_rows())
    built = report.build(store, [full_run(store)])
    assert built.sections == ALL_SECTIONS
    for sid in ALL_SECTIONS:
        assert f'<section id="{sid}"' in built.html
    assert len(images(built.html)) == len(built.charts) == 5   # suite, alignment, ladder, batch sweep, lab
    assert all(im.size[0] > 100 and im.size[1] > 100 for im in images(built.html))
    advisor = built.html[built.html.index('id="advisor"'):built.html.index('id="lab"')]
    assert "Use amp_bf16: 2.37x faster than fp32 strict" in advisor
    assert "<pre>model = model.to(memory_format=torch.channels_last)" in advisor and "pad n 1001-&gt;1008" in advisor


def test_no_section_without_its_data(store):
    clean = [gemm(4096, "bf16", 0.2), gemm(8192, "bf16", 1.5)]        # aligned, stable, nothing failed
    built = report.build(store, [store_run(store, "bench", clean)])
    assert built.sections == ["environment", "suites"]
    for sid in ("warnings", "alignment", "models", "advisor", "lab", "ceilings"):
        assert f'id="{sid}"' not in built.html


@pytest.mark.parametrize("rows, section", [(model_rows(), "models"), (advise_rows(), "advisor"),
                                           (lab_rows(), "lab"), (ceiling_rows(), "ceilings")])
def test_each_kind_alone_gives_its_section(store, rows, section):
    ok = [r for r in rows if r.get("status") == "ok"]
    built = report.build(store, [store_run(store, "x", ok)])
    assert section in built.sections and "suites" not in built.sections


def test_self_contained_and_printable(store):
    html = report.build(store, [full_run(store)]).html
    assert not re.search(r'(src|href)="(https?:)?//', html)          # nothing fetched from the network
    assert "<link" not in html and "@import" not in html
    assert "@media print" in html and "<script>" in html


def test_warnings_come_first_and_name_the_problems(store):
    rows = kernel_rows()
    rows[0]["warnings"] = ["clocks throttled: hw_thermal"]
    run_id = store_run(store, "run", rows + model_rows(), status="interrupted")
    html = report.build(store, [run_id]).html
    warnings = html[html.index('id="warnings"'):html.index('id="environment"')]
    assert html.index('id="warnings"') < html.index('id="environment"')
    for text in ("unstable: IQR/median = 23%", "clocks throttled", "wrong results", "relative error 0.4",
                 "oom", "interrupted"):
        assert text in warnings


def test_ceilings_reach_the_suite_table(store):
    store_run(store, "ceilings", ceiling_rows())
    run_id = store_run(store, "run", [gemm(8192, "bf16", 1.48)])
    data = report.load(store, [run_id])[0]
    assert data.ceilings["bf16"] == 744 and data.ceilings["bandwidth"] == 4250
    percent = 100.0 * data.results[0]["tflops"] / 744
    assert f'data-v="{percent}">{percent:.0f}%' in report.build(store, [run_id]).html


def test_several_runs_side_by_side(store):
    a = store_run(store, "run", kernel_rows(), gpu_env("NVIDIA H100 80GB HBM3"))
    b = store_run(store, "run", kernel_rows(), gpu_env("NVIDIA H200"))
    html = report.build(store, [a, b]).html
    assert f"run {a} · NVIDIA H100 80GB HBM3" in html and f"run {b} · NVIDIA H200" in html
    assert html.count("<h3 id=\"suite-") == 2


@pytest.mark.parametrize("chart, rows", [
    (lambda rows: charts.suite_chart(rows, {"bf16": 744}, {}, "t"), kernel_rows()),
    (lambda rows: charts.alignment_chart(rows, "t"), kernel_rows()),
    (lambda rows: charts.ladder_chart(rows, "t"), model_rows()),
    (lambda rows: charts.batch_chart(rows, "t"), model_rows()),
    (lambda rows: charts.lab_chart(rows, "t"), lab_rows()),
])
def test_charts_are_pngs_and_none_without_data(chart, rows):
    png = chart(rows)
    assert png.startswith(b"\x89PNG") and Image.open(io.BytesIO(png)).size[0] > 300
    assert chart([]) is None


def test_lab_crossover_from_the_lab_or_measured():
    rows = lab_rows()
    assert crossovers(rows) == {"GPU incl. copies beats numpy": 2 ** 20}    # the fixture's GPU wins from 2^20
    rows[0]["metrics"]["crossover"] = 300000
    assert crossovers(rows) == {"crossover": 300000}
    flagged = lab_rows()
    for r in flagged:
        r["metrics"]["crossover"] = r["shape"]["size"] >= 2 ** 22
    assert crossovers(flagged) == {"GPU wins": 2 ** 22}


def test_report_command_writes_html_and_pngs(tmp_path, db_path, store):
    first = store_run(store, "run", kernel_rows())
    latest = full_run(store)
    out, pngs = tmp_path / "r" / "report.html", tmp_path / "png"
    assert cli.main(["report", "--out", str(out), "--png", str(pngs), "--db", db_path]) == 0
    html = out.read_text()
    assert f"run {latest} · " in html and f"run {first} · " not in html       # default: the latest run
    written = sorted(p.name for p in pngs.iterdir())
    assert len(written) == len(images(html)) == 5 and all(n.endswith(".png") for n in written)
    assert cli.main(["report", str(first), str(latest), "--out", str(out), "--db", db_path]) == 0
    assert f"run {first} · " in out.read_text()


def test_report_bad_input_exits_2(tmp_path, db_path, capsys):
    out = str(tmp_path / "r.html")
    assert cli.main(["report", "--out", out, "--db", db_path]) == 2          # empty store
    assert "no runs yet" in capsys.readouterr().err
    store_run(Store.open(db_path), "run", kernel_rows())
    assert cli.main(["report", "99", "--out", out, "--db", db_path]) == 2
    assert cli.main(["report", "x", "--out", out, "--db", db_path]) == 2
