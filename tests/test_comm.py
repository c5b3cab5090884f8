"""`tcperf comm`: nccl-tests' bandwidth arithmetic, the correctness checks on real gloo ranks (2 and 4), a broken
collective caught before timing, the store rows, the link parsed from nvidia-smi, and the GPU run."""
import json
import os
import subprocess
import sys
import time

import pytest
import torch

from tcperf import cli
from tcperf.distributed import collectives, launch, link
from tcperf.distributed.collectives import COLLECTIVES, Collective, Prepared
from tcperf.errors import UserError
from tcperf.records import Job, TimingConfig
from tcperf.store import Store
from tcperf.timing import time_loop

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --- arithmetic ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, n, factor", [
    ("all_reduce", 2, 1.0), ("all_reduce", 4, 1.5), ("all_reduce", 8, 1.75), ("all_gather", 4, 0.75),
    ("reduce_scatter", 8, 0.875), ("broadcast", 8, 1.0), ("all_to_all", 2, 0.5)])
def test_bus_bandwidth_follows_nccl_tests(name, n, factor):
    alg, bus = COLLECTIVES[name].bandwidth(2**30, 0.01, n)      # 1 GiB in 10 ms
    assert alg == pytest.approx(2**30 / 0.01 / 1e9)              # 107.37 GB/s
    assert bus == pytest.approx(alg * factor)


def test_sizes_and_labels():
    assert collectives.sizes(1024, 2**30, 2)[::10] == [1024, 2**20, 2**30]
    assert len(collectives.sizes(1024, 2**30, 2)) == 21
    assert collectives.sizes(2**20, 2**30, 16) == [2**20, 2**24, 2**28]
    assert [collectives.parse_size(t) for t in ("1K", "16M", "1G", "4096", "1GiB")] == [1024, 2**24, 2**30, 4096,
                                                                                          2**30]
    assert collectives.label(1024) == "1 KiB" and collectives.label(67108868) == "64.0 MiB"
    for bad in ("1X", "", "0"):
        with pytest.raises(UserError):
            collectives.parse_size(bad)
    with pytest.raises(UserError):
        collectives.sizes(2048, 1024)


def test_deepbench_suite_is_the_allreduce_table():
    cases = collectives.deepbench(["all_reduce"], ["fp32", "bf16"], 2)
    floats = [c.tags["floats"] for c in cases[:7]]
    assert floats[0] == 100000 and floats[4] == 16777217 and len(cases) == 14
    assert cases[0].shape["bytes"] == 400000 and cases[7].shape["bytes"] == 200000   # bf16: 2 bytes a float


@pytest.mark.parametrize("text, want", [
    ("        GPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV18\t0-47\nGPU1\tNV18\t X \t0-47\n", "NVLink"),
    ("        GPU0\tGPU1\tGPU2\nGPU0\t X \tPXB\tSYS\nGPU1\tPXB\t X \tSYS\nGPU2\tSYS\tSYS\t X\n", "PCIe"),
    ("        GPU0\tGPU1\tGPU2\nGPU0\t X \tNV4\tSYS\nGPU1\tNV4\t X \tSYS\nGPU2\tSYS\tSYS\t X\n", "mixed (NVLink, PCIe)"),
])
def test_link_from_nvidia_smi_topo(text, want):
    cells = link.parse_topo(text, [0, 1, 2] if "GPU2" in text else [0, 1])
    assert link.summary(cells.values()) == want


# --- correctness on real ranks ------------------------------------------------------------------------------------
def broken_task(case, device, job):
    """Registered in the rank: 'stale' leaves its output untouched, 'max' reduces with MAX instead of SUM."""
    import torch.distributed as dist

    def stale(base, n, r):
        return Prepared(lambda: None, torch.full_like(base, float("nan")), base)

    def maxed(base, n, r):
        x = base * (r + 1)
        return Prepared(lambda: dist.all_reduce(x, op=dist.ReduceOp.MAX), x, base * (n * (n + 1) // 2))
    COLLECTIVES["stale"] = Collective("stale", stale, lambda n: 1.0, chunked=False)
    COLLECTIVES["max"] = Collective("max", maxed, lambda n: 1.0, chunked=False)
    return collectives.task(case, device, job)


def test_every_collective_checks_out_on_4_ranks_and_a_broken_one_is_not_timed():
    cases = collectives.cases(list(COLLECTIVES), ["fp32", "bf16"], [12345], 4)
    cases += [collectives.case(name, "fp32", 4096, 4).replace(task=broken_task) for name in ("stale", "max")]
    rows = launch.run_cases(cases, torch.device("cpu"), Job(TimingConfig(rep_ms=1.0), timeout=60), nproc=4)
    good, broken = rows[:-2], rows[-2:]
    assert all(r.status == "ok" and r.error == 0 for r in good), [(r.op, r.message) for r in good]
    assert [r.status for r in broken] == ["wrong", "wrong"]
    assert broken[0].error == float("inf") and broken[1].error == pytest.approx(1 - 4 / 10)
    assert all(r.median_ms is None for r in broken)      # correctness gates timing
    sized = {(r.op, r.precision, r.shape["bytes"]): r.bytes for r in good}
    assert sized[("comm.all_gather", "fp32", 12345)] == 3084 * 4    # 3086 floats rounded down to 4 chunks
    assert sized[("comm.all_reduce", "bf16", 12345)] == 6172 * 2


# --- timing as nccl-tests times -------------------------------------------------------------------------------------
def test_time_loop_is_one_interval_over_the_calls():
    calls = []

    def call():
        calls.append(time.perf_counter())
        time.sleep(0.002)
    ms = time_loop(call, "cpu", iters=10, warmup=3)
    assert len(calls) == 13
    assert ms == pytest.approx((calls[-1] - calls[3]) * 1e3 / 9, rel=0.3)      # the loop's time over its calls
    assert 2.0 <= ms < 10


def slow_rank_task(case, device, job):
    """'slow': no communication, 3 ms a call on rank 1 and nothing on rank 0: the time must be rank 1's."""
    def slow(base, n, r):
        return Prepared((lambda: time.sleep(0.003)) if r == 1 else (lambda: None), base, base)
    COLLECTIVES["slow"] = Collective("slow", slow, lambda n: 1.0, chunked=False)
    return collectives.task(case, device, job)


def test_the_time_is_the_slowest_ranks_loop_mean_repeated():
    case = collectives.case("slow", "fp32", 4096, 2).replace(task=slow_rank_task)
    row = launch.run_cases([case], torch.device("cpu"), Job(TimingConfig(rep_ms=1), timeout=60), nproc=2)[0]
    m = row.metrics
    assert row.status == "ok", row.message
    assert len(row.samples) == collectives.REPEATS and m["iters"] == collectives.MIN_REPS   # the probe said 3 ms
    assert all(3.0 <= t < 9 for t in row.samples)          # rank 1's loops
    assert all(t < 0.5 for t in m["rank0_ms"])                 # rank 0 alone would have looked free
    assert row.median_ms == pytest.approx(sorted(row.samples)[collectives.REPEATS // 2])
    assert m["busbw_gbps"] == pytest.approx(4096 / (row.median_ms * 1e-3) / 1e9)


@pytest.mark.parametrize("n", [2, 4])     # 8 ranks take the same path
def test_comm_command_on_n_cpu_ranks_stores_what_it_prints(n, db_path, capsys):
    argv = ["comm", "--device", "cpu", "--nproc", str(n), "--ops", "all_reduce,all_to_all", "--dtypes", "fp32",
            "-b", "1K", "-e", "64K", "-f", "64", "--rep-ms", "5", "--db", db_path, "--json"]
    assert cli.main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    store = Store.open(db_path)
    run = store.run()
    assert run["kind"] == "comm" and run["status"] == "done" and out["run"]["id"] == run["id"]
    rows = store.results(run["id"])
    assert [(r["op"], r["shape"]["bytes"]) for r in rows] == [
        ("comm.all_reduce", 1024), ("comm.all_reduce", 65536), ("comm.all_to_all", 1024), ("comm.all_to_all", 65536)]
    for r in rows:
        m = r["metrics"]
        assert r["status"] == "ok" and m["world"] == n and m["backend"] == "gloo"
        assert m["algbw_gbps"] == pytest.approx(r["bytes"] / (r["median_ms"] * 1e-3) / 1e9)
        assert m["time_us"] == pytest.approx(r["median_ms"] * 1e3)
        factor = (2 if r["op"] == "comm.all_reduce" else 1) * (n - 1) / n      # nccl-tests' bus factors
        assert r["gbps"] == pytest.approx(m["busbw_gbps"]) == pytest.approx(factor * m["algbw_gbps"])
        assert r["n"] == len(r["samples"]) == m["repeats"] == collectives.REPEATS
        assert m["iters"] >= collectives.MIN_REPS and m["warmup"] == collectives.WARMUP
    assert out["link"]["link"].startswith("one host")
    from rich.console import Console
    from tcperf.commands.comm import print_comm
    shown = Console(record=True, width=160)
    print_comm(rows, out["link"], shown)
    assert shown.export_text().count("  fp32: ") == 2                        # one line under each collective
    from tcperf.commands.comm import regimes_line
    stable = [{**r, "metrics": {**r["metrics"], "unstable": False}} for r in rows if r["op"] == "comm.all_reduce"]
    assert regimes_line(stable).startswith("latency floor")
    # gloo on a CPU: issuing a call is all of it, so every size is host-bound and the floor says it is the host's
    assert all(r["metrics"]["host_bound"] and r["metrics"]["host_us"] > 0 for r in rows)
    assert "set by the host: issuing a call takes it" in regimes_line(stable)
    device_bound = [{**r, "metrics": {**r["metrics"], "host_bound": i > 0}} for i, r in enumerate(stable)]
    assert "set by the host" not in regimes_line(device_bound)     # one size of the floor waited on the device
    noisy = [stable[0], {**stable[1], "metrics": {**stable[1]["metrics"], "unstable": True}}]
    assert regimes_line(noisy) == "no latency floor read: fewer than 2 sizes timed stably (1 unstable size left out)"


def test_the_latency_floor_and_half_bandwidth_point_are_read_from_the_sizes():
    """Times of 2 H200s' plain all-reduce loop (fp32; the small sizes flat at the launch latency): the floor is the
    smallest size's time, latency-bound while the time stays within 2x of it, half the peak bus bandwidth from the
    first size that reaches it."""
    kib, mib = 2**10, 2**20
    points = [(size, size / bus / 1e3, bus) for size, bus in
              ((kib, 0.06), (64 * kib, 3.8), (mib, 39.0), (16 * mib, 223.0), (256 * mib, 300.0), (1024 * mib, 328.0))]
    found = collectives.regimes(points)
    assert found["floor_us"] == pytest.approx(1024 / 0.06 / 1e3)
    assert found["latency_bound_to"] == mib and found["half_peak_from"] == 16 * mib     # 1 MiB: 27 µs against 17
    assert found["peak_busbw_gbps"] == 328.0 and found["peak_at"] == 1024 * mib
    assert "from 16 MiB" in collectives.regimes_sentence(found)
    assert collectives.regimes(points[:1]) is None


def test_bad_comm_options_are_one_line(capsys):
    for argv in (["comm", "--device", "cpu", "--ops", "all_sum"], ["comm", "--device", "cpu", "--dtypes", "fp7"],
                 ["comm", "--device", "cpu", "-e", "1Q"], ["comm", "--device", "cpu", "-f", "1"]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err


# --- the benchmark against a plain loop, end to end on a CPU ---------------------------------------------------------
@pytest.mark.slow
def test_comm_benchmark_runs_end_to_end_on_a_cpu(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "benchmarks/comm_gpu.py", "--check", "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]
    report = json.loads((out / "comm_gpu.json").read_text())
    assert all(p["ok"] for p in report["parts"].values()), report["parts"]
    assert set(report["compare"]) == {"4096", "65536"}
    assert all(r["plain_busbw_gbps"] > 0 and r["tcperf_busbw_gbps"] > 0 for r in report["compare"].values())
    assert all(len(r["plain_runs_gbps"]) == 2 and len(r["tcperf_runs_gbps"]) == 1 and r["plain_host_us"] > 0
               and r["tcperf_host_us"] > 0 and r["verdict"] for r in report["compare"].values())
    # plain before and after tcperf (--check: one round), the host's time to issue a call beside each
    assert "ratio of medians tcperf/plain" in done.stdout


# --- GPUs ---------------------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_comm_on_the_gpus(db_path):
    nproc = min(2, torch.cuda.device_count())
    argv = ["comm", "--nproc", str(nproc), "-b", "1M", "-e", "64M", "-f", "64", "--rep-ms", "20", "--db", db_path]
    assert cli.main(argv) == 0
    rows = Store.open(db_path).results(Store.open(db_path).run()["id"])
    assert len(rows) == 5 * 2 * 2
    assert all(r["status"] == "ok" and r["metrics"]["backend"] == "nccl" for r in rows), \
        [(r["op"], r["message"]) for r in rows if r["status"] != "ok"]
    if nproc == 2:
        assert rows[0]["metrics"]["link"]["link"] in ("NVLink", "PCIe")


@pytest.mark.gpu
def test_models_nproc_2_on_gpus(db_path):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    argv = ["models", "gpt2", "--small", "--recipes", "amp_bf16", "--nproc", "2", "--batch", "8", "--steps", "4",
            "--db", db_path]
    assert cli.main(argv) == 0
    rows = Store.open(db_path).results(Store.open(db_path).run()["id"])
    assert [r["shape"].get("parallel") for r in rows] == [None, "ddp", "fsdp2"]
    for r in rows[1:]:
        assert r["status"] == "ok", r["message"]
        m = r["metrics"]       # both wrappers communicate every step: the profile must show it (2 H200s read 0.0)
        assert m["scaling_efficiency"] > 0 and m["profiled_comm_kernels"] > 0, m
        assert m["comm_ms"] > 0 and m["exposed_comm_share"] is not None, m
        assert 0 < m["gpu_busy"] <= 1 and m["compute_ms"] > 0, m
