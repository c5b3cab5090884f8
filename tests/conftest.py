"""Shared test set-up: GPU tests are marked `gpu` and skip without CUDA; every test gets its own results store."""
import os
import sys

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


@pytest.fixture(autouse=True)
def _own_store(tmp_path, monkeypatch):
    """No test writes to the user's real store."""
    monkeypatch.setenv("TCPERF_DB", str(tmp_path / "results.db"))
    yield


@pytest.fixture(autouse=True)
def _own_user_files():
    """The users' files a test imports (tcperf.source.import_file) go with it, as they would with its process: a
    worker of a pickled model imports every such file its parent holds (source._user_files), and the suite's
    transformers, timm and diffusers factories made the fp32-island test's workers take 37 s instead of 14."""
    before = {name for name in sys.modules if name.startswith("tcperf_user_")}
    yield
    for name in [n for n in sys.modules if n.startswith("tcperf_user_") and n not in before]:
        del sys.modules[name]


@pytest.fixture
def db_path(tmp_path):
    return str(tmp_path / "results.db")


@pytest.fixture
def cuda():
    if not HAS_CUDA:
        pytest.skip("needs a CUDA GPU")
    return torch.device("cuda")
