"""torch.compile's products kept in a file beside the results store, so that a second run compiles less.

torch.compile writes what it compiles (Inductor's FX graph cache, AOTAutograd's cache, Triton's kernels and their
autotuning) under /tmp/torchinductor_$USER by default. A fresh machine, a new container or a cleaned /tmp compiles
everything again: minutes for a large model decoded with coordinate-descent tuning. PyTorch's portable "mega-cache"
(torch.compiler.save_cache_artifacts / load_cache_artifacts, torch >= 2.7) serialises what this process compiled
into one blob and hot-loads it into those caches in another process; this module keeps the blob in a file beside
the store (which the user keeps, unlike /tmp), named by a hash of everything that invalidates it.

    cache = CompileCache(folder, {"torch": ..., "gpu": ..., "model": ..., "precision": ..., "batch": ...})
    cache.load()                 # before the first compile
    ...                          # compile and run
    status = cache.save()        # "hit": every compile was served from a cache; "miss": something compiled from
                                 # scratch (the file is written); "off": nothing compiled, or no folder given

Measured on 2 CPU cores (torch 2.13, 2026-11-25), the tiny model's decode step in a fresh Inductor cache folder:
16 s to compile from scratch, 13.5 s with the file (the CPU's C++ kernels are rebuilt). On an H100 (torch 2.11,
2026-11-25), `tcperf generate llama-1b --precision int8wo`, each run with empty Inductor and Triton caches: 70.9 s
from scratch, 36.4 s with the file (5.2 MB), "hit". Half, not seconds: what the file does not spare (Dynamo's
tracing, the CUDA graph capture, whatever of the tuning it does not hold) is not yet measured apart.
"""
from __future__ import annotations

import hashlib
import json
import lzma
import os
from pathlib import Path

import torch

STATUSES = ("hit", "miss", "off")
# The blob is mostly Triton's source and cubins: xz at preset 1 shrinks the eight files of 2026-11-27's
# generate_gpu on an H100 (Llama-3.1-8B and 3.2-1B, three precisions, the hand loops) from 50.9 MB to 3.6 MB (14x)
# in 3.8 s on 2 CPU cores; preset 6 reaches 22x at 20 times the time. Small enough to keep beside the store, or
# to carry to a fresh machine.
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
