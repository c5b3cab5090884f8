"""tcperf.compile_cache: torch.compile's products saved to a file beside the store after a compile, and loaded before
the next run's compile, so that a fresh machine (or a cleaned /tmp, where Inductor keeps its own caches) starts in
seconds. On a CPU: the tiny model's decode step compiled in a worker as `tcperf generate` compiles it on a GPU, run
twice, each time in an empty Inductor cache folder: the first misses and writes the file, the second hits."""
import json
import os
import subprocess
import sys

import pytest
import torch

from conftest import NICE, early_lane, lane_env
from tcperf import compile_cache

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER = """
import json, sys, torch
from tcperf.generate import sweep
from tcperf.records import Job, TimingConfig
from tcperf.runner import run_case
case = sweep.case({"kind": "builtin", "name": "tiny"}, "plain", "bf16", 1, 4, 3, max_batch=1, compile=True)
row = run_case(case, torch.device("cpu"), Job(TimingConfig(rep_ms=1.0), compile_cache=sys.argv[1]))
print(json.dumps({"status": row.status, "message": row.message, **{k: row.metrics.get(k) for k in
                  ("compile_cache", "compile_s")}}))
"""


def _worker(store_folder, inductor_folder) -> dict:
    """TORCHINDUCTOR_VEC_ISA_OK=1: Inductor takes the CPU's vector flags as they are, instead of building and
    loading a probe library for each one in the empty folder (15 of the hit's 24 s on 2 cores); the folder's
    compiled graphs, which the test is about, are still empty. Under NICE and lane_env: conftest's early lane."""
    env = lane_env(TORCHINDUCTOR_CACHE_DIR=str(inductor_folder), TORCHINDUCTOR_VEC_ISA_OK="1")
    done = subprocess.run([*NICE, sys.executable, "-c", WORKER, str(store_folder)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@early_lane
def two_compiles(folder) -> tuple[dict, list, dict]:
    """The two compiles, one after the other, each in an empty Inductor cache folder (a fresh /tmp, as on a new
    machine): (the first's answer, the cache files beside the store after it, the second's answer). About 40 s of
    one core on 2 (2026-11-28), in conftest's early lane: a core the tests before it leave idle."""
    first = _worker(folder, folder / "inductor-1")
    files = list((folder / "compile-cache").glob("generate-bf16-plain-b1-*.bin.xz"))
    return first, [(f.name, f.read_bytes()[:6]) for f in files], _worker(folder, folder / "inductor-2")


@pytest.mark.slow
@pytest.mark.early("two_compiles")
@pytest.mark.skipif(not compile_cache.available(), reason="torch < 2.7 has no save_cache_artifacts")
def test_second_run_in_a_clean_inductor_cache_hits_the_file_beside_the_store(early):
    first, files, second = early
    assert first["status"] == "ok" and first["compile_cache"] == "miss", first
    assert len(files) == 1 and files[0][1] == b"\xfd7zXZ\x00"                    # xz-compressed
    assert second["status"] == "ok" and second["compile_cache"] == "hit", second


def test_no_folder_or_no_compile_is_off(tmp_path):
    cache = compile_cache.CompileCache(None, compile_cache.key_of(model="m"))
    assert not cache.load() and cache.save() == "off"
    cache = compile_cache.CompileCache(tmp_path, compile_cache.key_of(model="m"))
    torch.nn.Linear(4, 4)(torch.ones(4))                             # eager: nothing compiled
    assert cache.save() == "off" and not (tmp_path / "compile-cache").exists()


def test_the_key_names_the_file_and_a_broken_file_is_a_miss_not_an_error(tmp_path):
    a = compile_cache.CompileCache(tmp_path, compile_cache.key_of(model="m", batch=1), "x")
    b = compile_cache.CompileCache(tmp_path, compile_cache.key_of(model="m", batch=2), "x")
    assert a.path != b.path and a.path.parent == b.path.parent == tmp_path / "compile-cache"
    assert compile_cache.key_of(model="m")["torch"] == torch.__version__
    a.path.parent.mkdir()
    a.path.write_bytes(b"not a cache")
    assert a.load() is False
    import lzma
    a.path.write_bytes(lzma.compress(b"not a cache either"))                # xz, but not torch's
    assert a.load() is False


def test_the_compile_column_says_hit_or_miss():
    from tcperf.commands.generate import compile_cell
    assert compile_cell({"compile_s": 95.24, "compile_cache": "miss"}) == "95.2 miss"
    assert compile_cell({"compile_s": 3.1, "compile_cache": "hit"}) == "3.1 hit"
    assert compile_cell({"compile_s": 0.04, "compile_cache": "off"}) == "0.0" and compile_cell({}) == ""


def test_the_command_gives_the_workers_the_stores_folder(tmp_path, monkeypatch):
    """The cache's files go beside the store `--db` names (tcperf.commands.common.beside_store)."""
    from tcperf import cli
    from tcperf.commands import generate as command
    seen = {}

    class Stop(BaseException):          # past the command's own handlers: nothing is measured
        pass

    def stop(kind, cases, args, job, **kw):
        seen["compile_cache"] = job.compile_cache
        raise Stop
    monkeypatch.setattr(command, "measure_into_store", stop)
    with pytest.raises(Stop):
        cli.main(["generate", "tiny", "--device", "cpu", "--db", str(tmp_path / "r.db")])
    assert seen["compile_cache"] == str(tmp_path)
