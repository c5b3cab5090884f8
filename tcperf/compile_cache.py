"""torch.compile's products kept in a file beside the results store, so that a second run compiles less.

torch.compile writes what it compiles (Inductor's FX graph cache, AOTAutograd's cache, Triton's kernels and their
autotuning) under /tmp/torchinductor_$USER, which a fresh machine, a new container or a cleaned /tmp lacks.
PyTorch's portable "mega-cache" (torch.compiler.save_cache_artifacts / load_cache_artifacts, torch >= 2.7)
serialises what this process compiled into one blob and hot-loads it in another process; this module keeps the
blob in a file beside the store (which the user keeps), named by a hash of everything that invalidates it.

    cache = CompileCache(folder, {"torch": ..., "gpu": ..., "model": ..., "precision": ..., "batch": ...})
    cache.load()                 # before the first compile
    ...                          # compile and run
    status = cache.save()        # "hit": every compile was served from a cache; "miss": something compiled from
                                 # scratch (the file is written); "off": nothing compiled, or no folder given

On an H100 (torch 2.11, 2026-11-25), `tcperf generate llama-1b --precision int8wo` with empty Inductor and Triton
caches took 70.9 s from scratch, 36.4 s with the file (5.2 MB): Dynamo's tracing and the CUDA graph capture remain.
"""
from __future__ import annotations

import hashlib
import json
import lzma
import os
from pathlib import Path

import torch

STATUSES = ("hit", "miss", "off")
# The blob is mostly Triton's source and cubins: xz at preset 1 shrank 2026-11-27's eight files (an H100's
# generate_gpu) from 50.9 MB to 3.6 MB in 3.8 s on 2 CPU cores; preset 6 reaches 22x at 20 times the time.
PRESET = 1


def available() -> bool:
    return hasattr(torch.compiler, "save_cache_artifacts") and hasattr(torch.compiler, "load_cache_artifacts")


def key_of(**parts) -> dict:
    """What invalidates compiled code, besides the caller's parts: torch's version and the device's name."""
    device = torch.device(parts.pop("device", "cpu"))
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return {"torch": torch.__version__, "device": name, **parts}


def _counts() -> dict[str, int]:
    """Inductor's cache counters of this process (torch._dynamo.utils.counters): hits, misses, bypasses."""
    from torch._dynamo.utils import counters
    c = counters["inductor"]
    return {"hit": c["fxgraph_cache_hit"], "miss": c["fxgraph_cache_miss"] + c["fxgraph_cache_bypass"]}


class CompileCache:
    """One file of compiled code for one key, in `folder` (None: off)."""

    def __init__(self, folder: str | os.PathLike | None, key: dict, label: str = "compile"):
        self.on = folder is not None and available()
        digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]
        slug = "".join(ch if ch.isalnum() or ch in "-+." else "_" for ch in label)[:60]
        self.path = Path(folder or ".") / "compile-cache" / f"{slug}-{digest}.bin.xz"
        self.loaded = False
        self.start = _counts() if self.on else {}

    def load(self) -> bool:
        """Hot-load the file into torch's caches, if there is one; a file torch refuses (another torch, a torn
        write) is left for save() to replace."""
        if not self.on or not self.path.exists():
            return False
        try:
            blob = lzma.decompress(self.path.read_bytes())
            self.loaded = torch.compiler.load_cache_artifacts(blob) is not None
        except Exception:               # noqa: BLE001 - a stale or broken file means compiling from scratch
            self.loaded = False
        return self.loaded

    def status(self) -> str:
        """hit / miss / off for the compiles since this object was made."""
        if not self.on:
            return "off"
        now = _counts()
        hits, misses = now["hit"] - self.start["hit"], now["miss"] - self.start["miss"]
        return "miss" if misses else "hit" if hits else "off"

    def save(self) -> str:
        """The status; after a miss, what this process compiled written to the file (atomically: a reader never
        sees half a file)."""
        status = self.status()
        if status != "miss":
            return status
        saved = torch.compiler.save_cache_artifacts()
        if saved:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            part = self.path.with_suffix(f".{os.getpid()}.part")
            part.write_bytes(lzma.compress(saved[0], preset=PRESET))
            os.replace(part, self.path)
        return status
