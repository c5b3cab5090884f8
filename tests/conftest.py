"""Shared test set-up: GPU tests are marked `gpu` and skip without CUDA; every test gets its own results store;
Triton kernels run in the interpreter in a child process (`in_interpreter`)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def child_env(**more: str) -> dict:
    """The environment of a child Python a test starts: this checkout and tests/ (for shared helpers) first on its
    PYTHONPATH, the caller's after them (the GPU machine's carried wheels, torchao among them, live there)."""
    here = Path(__file__).resolve().parent
    path = [str(here.parent), str(here), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path), **more}


def in_interpreter(code: str, argument, timeout: float) -> dict:
    """Run `code` in a child Python with TRITON_INTERPRET=1 (read when Triton kernels are imported, so not in this
    process) and `argument` as JSON in argv[1]; its last line of output, as JSON."""
    env = child_env(TRITON_INTERPRET="1")
    done = subprocess.run([sys.executable, "-c", code, json.dumps(argument)], env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(autouse=True)
def _own_store(tmp_path, monkeypatch):
    """No test writes to the user's real store."""
    monkeypatch.setenv("TCPERF_DB", str(tmp_path / "results.db"))
    yield


@pytest.fixture
def db_path(tmp_path):
    return str(tmp_path / "results.db")


@pytest.fixture
def cuda():
    if not HAS_CUDA:
        pytest.skip("needs a CUDA GPU")
    return torch.device("cuda")
