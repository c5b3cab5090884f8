"""The report in a real browser: headless Chromium (Debian package `chromium`) opens the file with the network
off; the findings come before the warnings, the roofline is drawn, every chart decodes to an image of non-zero
natural size, no request leaves the page, the sortable tables sort, and a screenshot of the page is saved in
tests/artifacts/ (or $TCPERF_TEST_ARTIFACTS).

Skipped when Chromium is absent, unless TCPERF_REQUIRE_BROWSER=1 (set in CI, which installs it with
`apt-get install -y chromium`): then a missing browser fails the test.
"""
import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from PIL import Image
from report_fixtures import ceiling_rows, full_run, store_run

from tcperf import report
from tcperf.store import Store

CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
if not CHROMIUM and os.environ.get("TCPERF_REQUIRE_BROWSER") != "1":
    pytest.skip("no chromium on PATH (apt-get install -y chromium)", allow_module_level=True)

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--virtual-time-budget=10000"]
SHOT_SIZE = (1280, 8000)     # tall enough for the whole test report

# Appended to a copy of the report: once the page has loaded, click a header of two sortable tables and write
# what the browser sees (images, the sorted columns) into the DOM.
PROBE = """<script>
function sortBy(section, header) {
  var table = document.querySelector("#" + section + " table.sortable");
  var th = Array.prototype.find.call(table.tHead.rows[0].cells,
    function (c) { return c.textContent.indexOf(header) === 0; });
  th.click();
  return Array.prototype.map.call(table.tBodies[0].rows, function (r) { return r.cells[th.cellIndex].dataset.v; })
    .filter(function (v) { return v !== undefined; }).map(parseFloat);
}
window.addEventListener("load", function () {
  var images = Array.prototype.map.call(document.images, function (i) {
    return [i.complete, i.naturalWidth, i.naturalHeight, i.getBoundingClientRect().width]; });
  var out = document.createElement("pre");
  out.id = "probe";
  var order = Array.prototype.map.call(document.querySelectorAll("section"), function (s) { return s.id; });
  var requests = performance.getEntriesByType("resource").map(function (e) { return e.name; })
    .filter(function (name) { return name.indexOf("data:") !== 0; });
  out.textContent = JSON.stringify({images: images, height: document.body.scrollHeight, order: order,
    requests: requests, roofline: document.querySelectorAll("#roofline img").length,
    sorted: [sortBy("suites", "ms (median"), sortBy("models", "throughput")]});
  document.body.appendChild(out);
});
</script>"""


def artifacts() -> Path:
    folder = Path(os.environ.get("TCPERF_TEST_ARTIFACTS") or Path(__file__).parent / "artifacts")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ".gitignore").write_text("*\n")      # test output, never committed
    return folder


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    assert CHROMIUM, "TCPERF_REQUIRE_BROWSER=1 but chromium is not installed (apt-get install -y chromium)"
    cmd = [CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180)


@pytest.fixture
def report_file(tmp_path, db_path) -> Path:
    store = Store.open(db_path)
    store_run(store, "ceilings", ceiling_rows())
    page = artifacts() / "report.html"
    page.write_text(report.build(store, [full_run(store)]).html)
    return page


def test_report_renders_in_chromium(report_file, tmp_path):
    probed = tmp_path / "probed.html"
    probed.write_text(report_file.read_text().replace("</body>", PROBE + "</body>"))
    done = chromium(tmp_path, "--window-size=1280,4000", "--dump-dom", probed.as_uri())
    found = re.search(r'<pre id="probe">(.*?)</pre>', done.stdout, re.S)
    assert found, f"no probe output; chromium said: {done.stderr[-2000:]}"
    seen = json.loads(html.unescape(found.group(1)))
    assert seen["order"].index("summary") == 0 and seen["order"].index("warnings") > 0
    assert seen["roofline"] == 1 and seen["requests"] == []
    assert len(seen["images"]) == 7
    for complete, width, height, shown in seen["images"]:
        assert complete and width > 100 and height > 100 and shown > 100
    for column in seen["sorted"]:
        assert len(column) >= 8 and column == sorted(column)
    assert seen["height"] > 3000
    print(f"page height {seen['height']} px")


def test_screenshot_saved(report_file, tmp_path):
    shot = artifacts() / "report.png"
    shot.unlink(missing_ok=True)
    done = chromium(tmp_path, "--window-size={},{}".format(*SHOT_SIZE), f"--screenshot={shot}", report_file.as_uri())
    assert shot.exists(), done.stderr[-2000:]
    image = Image.open(shot).convert("RGB")
    assert image.size == SHOT_SIZE
    colours = image.resize((320, 1600)).getcolors(maxcolors=1 << 16) or []
    assert len(colours) > 50              # text, tables and charts, not a blank page
    print(f"report screenshot: {shot}")
