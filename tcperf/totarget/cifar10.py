"""CIFAR-10 to 94% test accuracy with the airbench-lineage fast ResNet (tcperf.totarget.images): the whole data
set on the device, flip and translate there, channels_last under the recipes that set it, label smoothing 0.2,
SGD with nesterov momentum and a triangular schedule planned over `epochs` (10), batch 1024.

--data is the official archive, either format, packed or unpacked (nothing is downloaded):
    cifar-10-python.tar.gz  (cifar-10-batches-py/data_batch_1..5, test_batch: pickled dicts, b"data" (10000, 3072)
                             uint8 and b"labels")
    cifar-10-binary.tar.gz  (cifar-10-batches-bin/data_batch_1..5.bin, test_batch.bin: records of 1 label byte and
                             3072 pixel bytes, channel-major)

    tcperf train-to-target cifar10 --data ~/data/cifar-10-python.tar.gz --recipe fp32,compile --runs 5

Anchors: airbench94 reaches 94.01% in 2.59 s on an A100 (n=200); hlb-CIFAR10 about 6 s. tcperf's time to 94% is
not measured (no CIFAR-10 on our machines).
"""
from __future__ import annotations

import io
import pickle
import re
import tarfile
from pathlib import Path

import numpy as np
import torch

from ..errors import UserError
from . import images, need_data

TARGET = 0.94
BATCH = 1024
EPOCHS = 10
RECORD = 1 + 3 * 32 * 32
_TRAIN = re.compile(r"data_batch_[1-5](\.bin)?$")
_TEST = re.compile(r"test_batch(\.bin)?$")


def build(options: dict, device):
    path = need_data(options, "PATH (the official cifar-10-python.tar.gz or cifar-10-binary.tar.gz, or unpacked)")
    return images.task("cifar10", load(path), device, classes=10, batch=options.get("batch") or BATCH, target=TARGET,
                       sgd_epochs=options.get("epochs") or EPOCHS, info={"data": str(path)})


def load(path: Path) -> dict:
    """{train_x, train_y, test_x, test_y} as CPU tensors (uint8 images (N, 3, 32, 32), int64 labels)."""
    files = _files(path)
    train = [v for k, v in sorted(files.items()) if _TRAIN.search(k)]
    test = [v for k, v in files.items() if _TEST.search(k)]
    if not train or not test:
        raise UserError(f"--data {path}: not a CIFAR-10 archive (need data_batch_1..5 and test_batch, python or "
                        f"binary format); found {', '.join(sorted(files)) or 'nothing'}")
    (train_x, train_y), (test_x, test_y) = _join(train, path), _join(test, path)
    return {"train_x": train_x, "train_y": train_y, "test_x": test_x, "test_y": test_y}


def _files(path: Path) -> dict[str, bytes]:
    """Batch file name -> bytes, from a tar archive or a directory."""
    wanted = lambda name: _TRAIN.search(name) or _TEST.search(name)     # noqa: E731
    if path.is_dir():
        return {p.name: p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file() and wanted(p.name)}
    try:
        with tarfile.open(path) as tar:
            return {Path(m.name).name: tar.extractfile(m).read() for m in tar.getmembers()
                    if m.isfile() and wanted(Path(m.name).name)}
    except (tarfile.TarError, OSError) as e:
        raise UserError(f"--data {path}: cannot read it as a CIFAR-10 tar archive: {e}") from None


def _join(blobs: list[bytes], path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    parts = [_parse(b, path) for b in blobs]
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def _parse(blob: bytes, path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """One batch file in either format -> (uint8 (N, 3, 32, 32), int64 (N,))."""
    if blob[:1] == b"\x80":                                  # a pickle (protocol 2+): the python format
        return _from_pickle(blob, path)
    if len(blob) % RECORD:
        raise UserError(f"--data {path}: a binary batch of {len(blob)} bytes is not a whole number of "
                        f"{RECORD}-byte records")
    rows = np.frombuffer(blob, dtype=np.uint8).reshape(-1, RECORD)
    return torch.from_numpy(rows[:, 1:].reshape(-1, 3, 32, 32).copy()), torch.from_numpy(rows[:, 0].astype(np.int64))


def _from_pickle(blob: bytes, path: Path):
    try:
        batch = _SafeUnpickler(io.BytesIO(blob), encoding="bytes").load()
        data = np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32)
        labels = np.asarray(batch[b"labels"], dtype=np.int64)
    except (pickle.UnpicklingError, KeyError, ValueError, TypeError, EOFError) as e:
        raise UserError(f"--data {path}: a python-format batch that is not CIFAR-10's: {e}") from None
    if len(labels) != len(data):
        raise UserError(f"--data {path}: {len(data)} images but {len(labels)} labels in a batch")
    return torch.from_numpy(data.copy()), torch.from_numpy(labels)


class _SafeUnpickler(pickle.Unpickler):
    """Only what CIFAR-10's pickles hold (dicts, lists, bytes, numpy arrays): a pickle is code, the data is not."""
    ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
               ("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode")}

    def find_class(self, module, name):
        if (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a CIFAR-10 batch")
