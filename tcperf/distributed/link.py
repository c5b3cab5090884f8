"""Which link joins the GPUs a collective runs on: NVLink or PCIe, from `nvidia-smi topo -m` (NVML's topology
where nvidia-ml-py is installed and nvidia-smi is not).

    describe(2)   # {'link': 'NVLink', 'detail': 'GPU0-GPU1: NV18', 'source': 'nvidia-smi topo -m'}

nvidia-smi's matrix cells: NV# = that many NVLinks; PIX, PXB = PCIe switches; PHB = a PCIe host bridge; NODE, SYS =
across host bridges or CPU sockets (PCIe plus the CPU interconnect).
"""
from __future__ import annotations

import re
import shutil
import subprocess

from .. import env

PCIE = {"PIX", "PXB", "PHB", "NODE", "SYS"}


def describe(nproc: int) -> dict:
    """The link among CUDA devices 0..nproc-1 (the slowest pair names it); 'unknown' when neither source answers."""
    if nproc < 2:
        return {"link": "none (one GPU)", "detail": "", "source": ""}
    cells = _smi_cells(nproc) or _nvml_cells(nproc)
    if not cells:
        return {"link": "unknown", "detail": "", "source": "neither nvidia-smi nor NVML answered"}
    cells, source = cells
    return {"link": summary(cells.values()), "detail": ", ".join(f"GPU{a}-GPU{b}: {c}" for (a, b), c in cells.items()),
            "source": source}


def summary(cells) -> str:
    """'NVLink' when every pair has NVLinks, 'PCIe' when none has, 'mixed' otherwise."""
    kinds = {"NVLink" if c.startswith("NV") else "PCIe" if c in PCIE else c for c in cells}
    return kinds.pop() if len(kinds) == 1 else "mixed (" + ", ".join(sorted(kinds)) + ")"


def parse_topo(text: str, indices: list[int]) -> dict:
    """{(i, j): cell} for CUDA devices i < j from `nvidia-smi topo -m`'s matrix, CUDA device i being nvidia-smi's
    GPU indices[i] (its rows number the host's GPUs, not CUDA_VISIBLE_DEVICES')."""
    rows = {}
    for line in text.splitlines():
        m = re.match(r"GPU(\d+)\s+(.*)", line)      # a row; the header line starts with blanks
        if m:
            rows[int(m.group(1))] = m.group(2).split()
    pairs = [(i, j) for i in range(len(indices)) for j in range(i + 1, len(indices))]
    return {(i, j): rows[indices[i]][indices[j]] for i, j in pairs
            if indices[i] in rows and indices[j] < len(rows[indices[i]])}


def _smi_cells(nproc: int):
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    indices = [env.smi_row("index", i) for i in range(nproc)]
    if out.returncode != 0 or not all(indices):
        return None
    cells = parse_topo(out.stdout, [int(row[0]) for row in indices])
    return (cells, "nvidia-smi topo -m") if cells else None


def _nvml_cells(nproc: int):
    found = [env.nvml_handle(i) for i in range(nproc)]
    if any(nv is None for nv, _ in found):      # no package, no driver: nothing to say
        return None
    links = [_nvlinks(nv, h) for nv, h in found]
    cells = {(i, j): f"NV{min(links[i], links[j])}" if links[i] and links[j] else "PCIe"
             for i in range(nproc) for j in range(i + 1, nproc)}
    return cells, "NVML (active NVLinks per GPU)"


def _nvlinks(nv, handle) -> int:
    active = 0
    for link in range(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            active += nv.nvmlDeviceGetNvLinkState(handle, link) == nv.NVML_FEATURE_ENABLED
        except Exception:       # a link index this GPU does not have
            break
    return active
