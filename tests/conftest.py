"""Shared test set-up: GPU tests are marked `gpu` and skip without CUDA; every test gets its own results store."""
import os

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


@pytest.fixture
def db_path(tmp_path):
    return str(tmp_path / "results.db")


@pytest.fixture
def cuda():
    if not HAS_CUDA:
        pytest.skip("needs a CUDA GPU")
    return torch.device("cuda")
