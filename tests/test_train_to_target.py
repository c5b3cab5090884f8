"""tcperf train-to-target: workloads (bytes-gpt, CIFAR-10 archives the tests write in both official formats,
ImageFolder, .npz, a user's factory), the clock policies, the statistics, bad input, the store, show and report."""
import io
import pickle
import tarfile
import textwrap

import numpy as np
import pytest
import torch

from tcperf.records import Result
from tcperf import cli, totarget
from tcperf.errors import UserError
from tcperf.store import Store
from tcperf.totarget import cifar10, clock, loop, stats


def run_cli(argv, capsys):
    code = cli.main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


# --- data the tests write -------------------------------------------------------------------------------------------
def cifar_arrays(n: int, seed: int):
    """n images of two easy classes (bright vs dark) among CIFAR's ten labels, uint8 (n, 3072)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, n)
    data = (rng.integers(0, 60, (n, 3072)) + 190 * labels[:, None]).astype(np.uint8)
    return data, labels


def write_cifar(path, fmt: str, n: int = 8):
    """An archive in the official layout: cifar-10-batches-py (pickles) or cifar-10-batches-bin (records)."""
    folder = "cifar-10-batches-py" if fmt == "python" else "cifar-10-batches-bin"
    with tarfile.open(path, "w:gz") as tar:
        for i, name in enumerate([f"data_batch_{k}" for k in range(1, 6)] + ["test_batch"]):
            data, labels = cifar_arrays(n, i)
            if fmt == "python":
                blob = pickle.dumps({b"data": data, b"labels": labels.tolist(), b"batch_label": b"x"}, protocol=2)
            else:
                blob, name = np.concatenate([labels[:, None].astype(np.uint8), data], axis=1).tobytes(), name + ".bin"
            info = tarfile.TarInfo(f"{folder}/{name}")
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    return path


def write_npz(path, n=200, features=8, label_offset=0):
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, n)
    x = rng.normal(size=(n, features)).astype(np.float32) + 3.0 * y[:, None]
    np.savez(path, x=x, y=y + label_offset)
    return path


def write_folder(root, per_class=10):
    from PIL import Image
    for name, color in (("blue", (20, 20, 230)), ("red", (230, 20, 20))):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            Image.new("RGB", (12, 10), tuple(c - 2 * i for c in color)).save(root / name / f"{i}.png")
    return root


# --- the clock and the statistics -----------------------------------------------------------------------------------
POINT = {"step": 100, "epoch": 0.5, "metric": 2.0, "loss": 2.0, "train_s": 10.0, "warmup_s": 3.0, "eval_s": 1.5}


@pytest.mark.parametrize("name, expected", [("train", 10.0), ("dawnbench", 10.0 + 3.0 + 2.0),
                                            ("mlperf", 10.0 + 3.0 + 1.5)])
def test_clock_policies_count_their_parts(name, expected):
    assert clock.get(name).elapsed(POINT, prep_s=2.0) == pytest.approx(expected)


def test_every_clock_is_documented_in_the_help():
    text = clock.help_text()
    assert all(name in text for name in clock.CLOCKS)
    with pytest.raises(UserError, match="choose from: train, dawnbench, mlperf"):
        clock.get("wall")


def _run(seconds_to_reach, status="ok", reach_at=2):
    """A stored seeded run whose trace reaches metric 1.0 at its `reach_at`-th evaluation."""
    trace = [{"step": 10 * (i + 1), "epoch": i + 1.0, "metric": 3.0 - i, "loss": 1.0, "train_s": seconds_to_reach
              * (i + 1) / (reach_at + 1), "warmup_s": 0.5, "eval_s": 0.1 * (i + 1)} for i in range(reach_at + 1)]
    if status != "ok":
        trace = trace[:1]
    return {"status": status, "message": "" if status == "ok" else "not reached", "precision": "x",
            "metrics": {"trace": trace, "prep_s": 1.0, "final_metric": trace[-1]["metric"], "throughput": 100.0}}


def test_summary_takes_the_first_evaluation_at_the_target_and_counts_misses():
    rows = [_run(10.0), _run(20.0), _run(30.0, status="not_reached")]
    s = stats.summarize(rows, clock.get("train"), target=1.0, higher=False, usd_per_hour=3.6)
    assert s["runs"] == 3 and s["reached"] == 2 and s["share"] == pytest.approx(2 / 3)
    assert s["median_s"] == pytest.approx(15.0) and s["min_s"] == pytest.approx(10.0)
    assert s["steps"] == 30 and s["usd"] == pytest.approx(15.0 / 3600 * 3.6)
    looser = stats.summarize(rows, clock.get("train"), target=2.0, higher=False, usd_per_hour=None)
    assert looser["median_s"] < s["median_s"]            # any target the traces passed, after the fact
    row = stats.summary_row("fp32", rows, {"workload": "w", "bpb": 1.0, "clock": "train"}, clock.get("train"),
                            1.0, False, None)
    assert row.status == "ok" and row.n == 2 and "2 of 3 runs reached" in row.message
    assert len(row.samples) == 2


def test_the_split_is_taken_at_the_target_and_adds_up_to_each_clock():
    rows = [_run(10.0), _run(20.0), _run(30.0)]
    for r in rows:
        r["metrics"]["compile_s"] = 0.3
    s = stats.summarize(rows, clock.get("dawnbench"), target=1.0, higher=False, usd_per_hour=None)
    assert s["split_at"] == "target"
    assert s["split"] == pytest.approx({"prep_s": 1.0, "warmup_s": 0.5, "compile_s": 0.3, "train_s": 20.0,
                                        "eval_s": 0.3})
    parts = s["split"]
    for name, counted in (("train", parts["train_s"]), ("dawnbench", parts["prep_s"] + parts["warmup_s"]
                          + parts["train_s"]), ("mlperf", parts["warmup_s"] + parts["train_s"] + parts["eval_s"])):
        times = [stats.time_to_target(r["metrics"], 1.0, False, clock.get(name)) for r in rows]
        assert sorted(times)[1] == pytest.approx(counted)       # one run each side: the medians add up
    missed = stats.summarize([_run(5.0, status="not_reached")], clock.get("train"), 1.0, False, None)
    assert missed["split_at"] == "end" and missed["split"]["train_s"] == pytest.approx(5.0 / 3)


def test_a_summary_stored_before_the_split_gets_it_from_its_runs():
    runs = [{**_run(10.0), "op": "totarget.run", "precision": "fp32"}, {**_run(20.0), "op": "totarget.run",
                                                                          "precision": "fp32"}]
    old = {"op": "totarget.recipe", "precision": "fp32", "metrics": {"median_s": 15.0}}
    [done] = stats.with_split([old], runs, 1.0)
    assert done["metrics"]["split_at"] == "target" and done["metrics"]["split"]["train_s"] == pytest.approx(15.0)


def test_a_recipe_that_never_reaches_is_reported_not_dropped():
    rows = [_run(5.0, status="not_reached"), _run(5.0, status="diverged")]
    row = stats.summary_row("fp8", rows, {"workload": "w", "bpb": 1.0, "clock": "train"}, clock.get("train"),
                            1.0, False, None)
    assert row.status == "not_reached" and row.median_ms is None and row.metrics["reached"] == 0


def test_small_n_is_said_to_be_too_small():
    assert stats.tell_apart([1.0, 1.1, 1.2], [2.0, 2.1, 2.2]).startswith("N too small")
    assert stats.tell_apart([1.0, 1.1, 1.2, 1.3, 1.4], [2.0, 2.1, 2.2, 2.3, 2.4]).startswith("significant")


# --- targets and bad input ------------------------------------------------------------------------------------------
def test_parse_target():
    fake = totarget.Task("w", "accuracy", True, 0.9, (0.0, 1.0), *([None] * 5), 1.0, 1, "img/s", 1)
    assert totarget.parse_target("accuracy=0.94", fake) == 0.94
    assert totarget.parse_target("accuracy=94%", fake) == pytest.approx(0.94)
    assert totarget.parse_target(None, fake) == 0.9
    for bad, why in (("accuracy", "METRIC=VALUE"), ("bpb=1.5", "measures accuracy"), ("accuracy=1.5", "never")):
        with pytest.raises(UserError, match=why):
            totarget.parse_target(bad, fake)


@pytest.mark.parametrize("argv, says", [
    (["train-to-target", "mnist"], "unknown workload 'mnist'"),
    (["train-to-target", "--target", "bpb:2", "--device", "cpu"], "bad --target"),
    (["train-to-target", "--target", "bpb=0", "--device", "cpu"], "never reach"),
    (["train-to-target", "cifar10", "--device", "cpu"], "needs --data"),
    (["train-to-target", "cifar10", "--data", "/nonexistent/x.tar.gz"], "no such file"),
    (["train-to-target", "--clock", "wall"], "invalid choice"),
    (["train-to-target", "--runs", "0"], "bad --runs"),
    (["train-to-target", "--recipe", "fp7", "--device", "cpu"], "unknown recipe"),
    (["train-to-target", "nofile.py:factory", "--device", "cpu"], "no such file"),
])
def test_bad_input_is_one_line_and_exit_2(argv, says, capsys):
    code, out, err = run_cli(argv, capsys)
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_bad_data_is_one_line_and_stores_nothing(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    not_cifar = tmp_path / "x.tar.gz"
    with tarfile.open(not_cifar, "w:gz") as tar:
        tar.addfile(tarfile.TarInfo("readme.txt"), io.BytesIO(b""))
    bad_labels = write_npz(tmp_path / "bad.npz", label_offset=-1)
    for argv, says in ((["cifar10", "--data", str(not_cifar)], "not a CIFAR-10 archive"),
                       (["cifar10", "--data", str(tmp_path / "empty")], "not a CIFAR-10 archive"),
                       (["imagefolder", "--data", str(tmp_path / "empty")], "--data"),
                       (["npz", "--data", str(bad_labels)], "labels out of range"),
                       (["npz", "--data", str(not_cifar)], "not a readable .npz")):
        code, _, err = run_cli(["train-to-target", *argv, "--device", "cpu"], capsys)
        assert code == 2 and says in err and "Traceback" not in err, err
    with pytest.raises(UserError):
        Store.open().run(None)          # nothing was stored


# --- workloads ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["python", "binary"])
def test_cifar_loader_reads_both_official_formats(fmt, tmp_path):
    path = write_cifar(tmp_path / f"cifar-10-{fmt}.tar.gz", fmt)
    data = cifar10.load(path)
    assert data["train_x"].shape == (40, 3, 32, 32) and data["train_x"].dtype == torch.uint8
    assert data["test_x"].shape == (8, 3, 32, 32)
    expected, labels = cifar_arrays(8, 0)
    assert torch.equal(data["train_x"][:8].reshape(8, -1), torch.from_numpy(expected))
    assert data["train_y"][:8].tolist() == labels.tolist()


def test_cifar_loader_refuses_code_in_a_pickle(tmp_path):
    path = tmp_path / "evil"
    path.mkdir()
    (path / "data_batch_1").write_bytes(pickle.dumps({b"data": print}, protocol=2))
    (path / "test_batch").write_bytes(pickle.dumps({b"data": print}, protocol=2))
    with pytest.raises(UserError, match="not allowed"):
        cifar10.load(path)


def test_cifar_workload_trains_on_the_device(tmp_path):
    path = write_cifar(tmp_path / "c.tar.gz", "python", n=16)
    task = totarget.build({"workload": "cifar10", "data": str(path), "batch": 16, "epochs": 2}, "cpu")
    x, y = task.batch(torch.Generator().manual_seed(0))
    assert x.shape == (16, 3, 32, 32) and task.eval_every == 5
    out = loop.train_to_target(task, "fp32", "cpu", seed=0, target=0.99, budget=loop.Budget(max_steps=5))
    assert out["status"] in ("ok", "not_reached") and 0.0 <= out["trace"][-1]["metric"] <= 1.0


def test_npz_features_reach_their_target(tmp_path):
    task = totarget.build({"workload": "npz", "data": str(write_npz(tmp_path / "d.npz"))}, "cpu")
    assert task.unit == "samples/s" and task.info["classes"] == 2
    out = loop.train_to_target(task, "fp32", "cpu", seed=0, target=0.9, budget=loop.Budget(max_steps=200))
    assert out["status"] == "ok", out["trace"][-3:]


def test_imagefolder_holds_out_every_fifth_image(tmp_path):
    task = totarget.build({"workload": "imagefolder", "data": str(write_folder(tmp_path / "f")),
                           "image_size": 16, "batch": 8}, "cpu")
    assert task.info["class_names"] == ["blue", "red"] and task.info["train"] == 16 and task.info["test"] == 4
    out = loop.train_to_target(task, "fp32", "cpu", seed=1, target=1.0, budget=loop.Budget(max_steps=8))
    assert out["trace"] and out["status"] in ("ok", "not_reached")


FACTORY = """
import torch.nn as nn

def factory():
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, {classes})), None

def example_inputs():
    import torch
    return torch.randn(2, 8)
"""


def test_a_users_factory_trains_on_their_data(tmp_path):
    data = write_npz(tmp_path / "d.npz")
    (tmp_path / "net.py").write_text(textwrap.dedent(FACTORY.format(classes=2)).replace(", None", ""))
    task = totarget.build({"workload": f"{tmp_path / 'net.py'}:factory", "data": str(data)}, "cpu")
    out = loop.train_to_target(task, "fp32", "cpu", seed=0, target=0.9, budget=loop.Budget(max_steps=200))
    assert out["status"] == "ok"
    (tmp_path / "bad.py").write_text(textwrap.dedent(FACTORY.format(classes=5)).replace(", None", ""))
    with pytest.raises(UserError, match=r"returns \(2, 5\)"):
        totarget.build({"workload": f"{tmp_path / 'bad.py'}:factory", "data": str(data)}, "cpu")


def test_a_timm_model_alone_trains_on_image_arrays(tmp_path):
    """A factory may return the model alone, as a timm or torchvision user would write it: the data brings the
    inputs."""
    pytest.importorskip("timm")
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 64)
    np.savez(tmp_path / "img.npz", x=(rng.normal(size=(64, 3, 16, 16)) + 2.0 * y[:, None, None, None]).astype(np.float32),
             y=y)
    (tmp_path / "net.py").write_text("import timm\n\ndef factory():\n"
                                     "    return timm.create_model('resnet10t', num_classes=2)\n")
    task = totarget.build({"workload": f"{tmp_path / 'net.py'}:factory", "data": str(tmp_path / "img.npz")}, "cpu")
    out = loop.train_to_target(task, "fp32", "cpu", seed=0, target=0.99, budget=loop.Budget(max_steps=4))
    assert out["trace"] and out["status"] in ("ok", "not_reached") and 0.0 <= out["trace"][-1]["metric"] <= 1.0


def test_nan_loss_is_recorded_as_diverged(tmp_path):
    task = totarget.build({"workload": "npz", "data": str(write_npz(tmp_path / "d.npz"))}, "cpu")
    base = task.loss_fn
    task.loss_fn = lambda out, y: base(out, y) * float("nan")
    out = loop.train_to_target(task, "fp32", "cpu", seed=0, target=0.99, budget=loop.Budget(max_steps=50))
    assert out["status"] == "diverged" and "non-finite" in out["message"]


def test_bytes_gpt_records_its_files_and_checksum():
    task = totarget.build({"workload": "bytes-gpt", "size": "small"}, "cpu")
    assert task.metric == "bpb" and task.info["files"] and len(task.info["sha256"]) == 64
    assert task.info["files"] == sorted(task.info["files"]) and task.info["bytes"] >= 500_000


# --- the command end to end: the CPU default reaches its target; store, show, compare, report ----------------------
def test_cpu_default_reaches_its_target_and_show_compare_report_read_it(capsys, tmp_path):
    code, out, err = run_cli(["train-to-target", "--device", "cpu", "--runs", "1", "--recipe", "fp32,fp16",
                              "--usd-per-hour", "1"], capsys)
    assert code == 0, err
    store = Store.open()
    rows = store.results(store.run(None)["id"])
    summary = {r["precision"]: r for r in rows if r["op"] == "totarget.recipe"}
    assert summary["fp32"]["status"] == "ok" and summary["fp32"]["metrics"]["reached"] == 1
    assert summary["fp16"]["status"] == "skipped"                # inference only: reported, not dropped
    run = [r for r in rows if r["op"] == "totarget.run"][0]
    assert run["metrics"]["time_to_target"]["mlperf"] >= run["metrics"]["time_to_target"]["train"]
    assert "bpb 3.4" in out and "1/1" in out
    assert "where the time went" in out and "training steps*" in out and "data prep*" in out
    assert "evaluations*" not in out                               # the dawnbench clock leaves them off
    assert run_cli(["show"], capsys)[1].count("fp32") >= 1
    assert run_cli(["compare", "1", "1"], capsys)[0] == 0
    code, out, _ = run_cli(["report", "--out", str(tmp_path / "r.html"), "--png", str(tmp_path / "png")], capsys)
    assert code == 0 and "totarget" in out and (tmp_path / "png" / "convergence-run1.png").exists()
    assert "of it compiling" in (tmp_path / "r.html").read_text()


# --- GPU ------------------------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("recipe", ["amp_bf16", "compile"])
def test_bytes_gpt_gpu_size_trains_under_recipe(recipe, cuda):
    task = totarget.build({"workload": "bytes-gpt", "size": "gpu"}, cuda)
    out = loop.train_to_target(task, recipe, cuda, seed=0, target=0.5, budget=loop.Budget(max_steps=120))
    assert out["status"] == "not_reached" and out["trace"][-1]["metric"] < 5.0
    assert out["trace"][-1]["step"] == 120


@pytest.mark.gpu
def test_cifar_shaped_data_on_the_gpu(tmp_path, cuda):
    path = write_cifar(tmp_path / "c.tar.gz", "binary", n=1024)
    task = totarget.build({"workload": "cifar10", "data": str(path), "batch": 512}, cuda)
    out = loop.train_to_target(task, "channels_last", cuda, seed=0, target=0.999, budget=loop.Budget(max_steps=20))
    assert out["trace"] and out["status"] in ("ok", "not_reached")


# --- issue 35: every run compiles; a whole-step graph is refused under a schedule; the benchmark merges calls ---------
def test_every_seeded_run_compiles_afresh(monkeypatch):
    resets = []
    monkeypatch.setattr(torch._dynamo, "reset", lambda: resets.append(1))
    task = totarget.build({"workload": "bytes-gpt", "size": "small"}, "cpu")
    for seed in (0, 1):
        made = loop.prepare(task, loop.recipes.get("compile"), torch.device("cpu"), seed)
        assert not isinstance(made, str)
    assert len(resets) == 2                  # a later seed would otherwise reuse the first one's compiled code


def test_a_whole_step_graph_is_refused_under_a_learning_rate_schedule():
    task = totarget.build({"workload": "bytes-gpt", "size": "small"}, "cpu")
    why = loop.prepare(task, loop.recipes.get("step_graph"), torch.device("cpu"), 0)
    assert isinstance(why, str) and "learning rate it captured" in why


def test_the_gpu_sizes_are_data_and_the_default_is_the_wide_one():
    from tcperf.totarget import bytes_gpt
    assert bytes_gpt.SIZES["gpu"]["dim"] == 768 and bytes_gpt.SIZES["gpu-narrow"]["dim"] == 384
    assert all(cfg["dim"] % cfg["heads"] == 0 for cfg in bytes_gpt.SIZES.values())


def _stored_run(store, device: str, recipe: str, seconds: float, steps: int = 1200) -> int:
    run_id = store.start_run("train-to-target", "test", {"gpu": {"name": device}})
    for seed in range(3):
        row = {**_run(seconds + seed), "op": "totarget.run", "suite": "runs", "precision": recipe,
               "shape": {"workload": "bytes-gpt", "bpb": 1.0, "seed": seed, "clock": "train"}}
        row["metrics"].update(info={"size": "gpu"}, higher_is_better=False)
        for point in row["metrics"]["trace"]:
            point["step"] = point["step"] * steps // 30
        store.add_result(run_id, Result.from_row(row))
    store.finish_run(run_id)
    return run_id


def test_the_benchmark_merges_another_calls_recipe_and_states_the_3x_check(tmp_path):
    from test_benchmarks import load
    bench = load("train_to_target_gpu")
    store = Store.open(tmp_path / "t.db")
    _stored_run(store, "H100", "fp32", 100.0)
    _stored_run(store, "H200", "fp32", 10.0)           # another GPU: never merged
    now = _stored_run(store, "H100", "compile", 30.0)
    rows = store.results(now)
    merged = bench.earlier_rows(store, store.run(now), rows)
    assert {r["precision"] for r in merged} == {"fp32"} and len(merged) == 3
    assert all(r["metrics"]["trace"][-1]["train_s"] > 50 for r in merged)
    [check] = [c for c in bench.checks(bench.table(rows + merged, "train")) if c["target_bpb"] == 1.4]
    assert check["best"] == "compile" and check["speedup_ok"] and check["runs"] == (3, 3)
    assert check["speedup_vs_fp32"] == pytest.approx(101.0 / 31.0)
