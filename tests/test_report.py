"""The HTML report from stored runs: findings first (each linking to its section), the roofline, warnings counted
and folded, every section for the data present and none for data absent, the environment shared once,
self-contained (no network references, images inline and decodable), and the `tcperf report` command."""
import base64
import io
import re

import pytest
from PIL import Image
from report_fixtures import (advise_rows, ceiling_rows, full_run, gemm, gpu_env, kernel_rows, lab_rows, model_rows,
                             store_run)

from tcperf import cli, report
from tcperf.report import charts
from tcperf.report.common import crossovers
from tcperf.store import Store

ALL_SECTIONS = ["summary", "roofline", "warnings", "models", "alignment", "advisor", "suites", "lab", "environment"]
CHARTS = 7     # roofline, ladder, batch sweep, alignment, suite speed-ups, suite rates, lab


@pytest.fixture
def store(db_path):
    return Store.open(db_path)


@pytest.fixture(scope="module")
def full(tmp_path_factory) -> report.Report:
    """The report of a run holding every kind of row, its device's ceilings measured (built once: charts cost)."""
    store = Store.open(tmp_path_factory.mktemp("full") / "results.db")
    store_run(store, "ceilings", ceiling_rows())
    return report.build(store, [full_run(store)])


def images(html: str) -> list[Image.Image]:
    found = re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    return [Image.open(io.BytesIO(base64.b64decode(b))) for b in found]


def test_every_section_for_a_full_run(full):
    built = full
    assert built.sections == ALL_SECTIONS
    for sid in ALL_SECTIONS:
        assert f'<section id="{sid}"' in built.html
    assert len(images(built.html)) == len(built.charts) == CHARTS
    assert all(im.size[0] > 100 and im.size[1] > 100 for im in images(built.html))
    advisor = built.html[built.html.index('id="advisor"'):built.html.index('id="lab"')]
    assert "Use amp_bf16: 2.37x faster than fp32 strict" in advisor
    assert "<pre>model = model.to(memory_format=torch.channels_last)" in advisor and "pad n 1001-&gt;1008" in advisor


def test_no_section_without_its_data(store):
    clean = [gemm(4096, "bf16", 0.2), gemm(8192, "bf16", 1.5)]        # aligned, stable, nothing failed
    built = report.build(store, [store_run(store, "bench", clean)])
    assert built.sections == ["summary", "roofline", "suites", "environment"]
    for sid in ("warnings", "alignment", "models", "advisor", "lab", "ceilings"):
        assert f'id="{sid}"' not in built.html


@pytest.mark.parametrize("rows, section", [(model_rows(), "models"), (advise_rows(), "advisor"),
                                           (lab_rows(), "lab"), (ceiling_rows(), "ceilings")])
def test_each_kind_alone_gives_its_section(store, rows, section):
    ok = [r for r in rows if r.get("status") == "ok"]
    built = report.build(store, [store_run(store, "x", ok)])
    assert section in built.sections and "suites" not in built.sections


def test_self_contained_and_printable(full):
    html = full.html
    assert not re.search(r'(src|href)="(https?:)?//', html)          # nothing fetched from the network
    assert "<link" not in html and "@import" not in html
    assert "@media print" in html and "<script>" in html


def test_warnings_after_the_findings_counted_by_kind_and_folded(store):
    rows = kernel_rows()
    for r in rows[:3]:
        r["warnings"] = ["clocks throttled: hw_thermal"]
    run_id = store_run(store, "run", rows + model_rows(), status="interrupted")
    html = report.build(store, [run_id]).html
    assert html.index('id="summary"') < html.index('id="roofline"') < html.index('id="warnings"')
    warnings = html[html.index('id="warnings"'):html.index('id="models"')]
    assert "<b>throttled</b> (3): NVML reported the clocks held below their maximum (max SM clock 1980 MHz) " \
           "by hw_thermal" in warnings and "Touched: gemm 3 cases in run" in warnings
    assert "<b>unstable</b> (1)" in warnings and "(here 23% to 23%)" in warnings
    assert warnings.count("<details>") == warnings.count("<b>") == 5   # runs, wrong, failed, throttled, unstable
    for text in ("relative error 0.4", "oom", "interrupted"):
        assert text in warnings
    assert '<a href="#warnings">1 runs, 1 wrong results, 1 failed cases, 3 throttled, 1 unstable</a>' in html


def test_findings_first_each_linking_to_its_section(full):
    html = full.html
    summary = html[html.index('id="summary"'):html.index('id="roofline"')]
    for text in ("NVIDIA H200 (132 SMs, 700 W): measured ceilings: fp64 62 of 67 TFLOPS (93%)",
                 "copy 4250 of 4800 GB/s (89%)", "resnet50 train: amp_bf16_cl, 4.43x (",
                 "bf16 gemm 8191x8191x8191 NN: pad m 8191-&gt;8192, n 8191-&gt;8192, k 8191-&gt;8192 is 5.10x faster",
                 "resnet50 train, fp16: relative error 0.3 &gt; 0.05", "resnet50 train: Use amp_bf16: 2.37x faster"):
        assert text in summary
    links = re.findall(r'href="#([^"]+)"', summary)
    assert len(links) >= 6 and all(f'id="{target}"' in html for target in links)


def test_title_environment_shared_once_and_long_tables_folded(store):
    a = store_run(store, "run", kernel_rows())
    b = store_run(store, "bench", [gemm((n, n, 64), "bf16", 0.01, seed=n) for n in range(64, 64 + 8 * 25, 8)])
    html = report.build(store, [a, b]).html
    assert re.search(r"<h1>tcperf report: NVIDIA H200, 2 runs, \d{4}-\d\d-\d\d</h1>", html)
    env = html[html.index('id="environment"'):]
    assert env.count("AMD EPYC 9654") == 1 and "<th>kind</th>" in env and "<th>driver</th>" not in env
    assert html.count('<details class="fold"><summary>25 rows') == 1 and 'class="filter"' in html


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
    assert html.count("<h3 id=\"suite-") == 2 and html.count("<h3 id=\"roofline-") == 2


@pytest.mark.parametrize("chart, rows", [
    (lambda rows: charts.suite_chart(rows, {"bf16": 744}, {}, "t"), kernel_rows()),
    (lambda rows: charts.alignment_chart(rows, "t"), kernel_rows()),
    (lambda rows: charts.ladder_chart(rows, "t"), model_rows()),
    (lambda rows: charts.batch_chart(rows, "t"), model_rows()),
    (lambda rows: charts.lab_chart(rows, "t"), lab_rows()),
    (lambda rows: charts.roofline_chart(rows, {"bf16": 744, "bandwidth": 4250}, {"fp32": 67}, "t"), kernel_rows()),
    (lambda rows: charts.speedup_chart(rows, "t"), kernel_rows()),
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
    latest = store_run(store, "run", kernel_rows(scale=1.1) + lab_rows())
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
