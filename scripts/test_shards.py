"""The test files split into N shards of about equal time, for running the whole CPU suite side by side on a machine
with many cores (scripts/gpu_session.sh's cpusuite stage: the GPU machine's CPU with its GPU hidden). Times by file
come from a pytest run with --durations=0 (DURATIONS, recorded with the commit it ran at); a file missing there
counts as the median file. Longest file first onto the shard with the least time so far.

    python3 scripts/test_shards.py 8            # eight lines, each the test files of one shard
    python3 scripts/test_shards.py 8 --times    # each line led by its shard's seconds
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import statistics

HERE = os.path.dirname(os.path.abspath(__file__))
DURATIONS = os.path.join(HERE, "test_durations.json")


def shards(count: int, files: list[str], seconds: dict[str, float]) -> list[tuple[float, list[str]]]:
    """(seconds, files) for each of `count` shards, every file in exactly one."""
    typical = statistics.median(seconds.values()) if seconds else 1.0
    out = [(0.0, []) for _ in range(max(1, count))]
    for f in sorted(files, key=lambda f: -seconds.get(f, typical)):
        i = min(range(len(out)), key=lambda i: out[i][0])
        out[i] = (out[i][0] + seconds.get(f, typical), out[i][1] + [f])
    return [s for s in out if s[1]]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("count", type=int, help="how many shards")
    ap.add_argument("--times", action="store_true", help="lead each line with its shard's expected seconds")
    a = ap.parse_args()
    root = os.path.dirname(HERE)
    files = sorted(os.path.relpath(f, root) for f in glob.glob(os.path.join(root, "tests", "test_*.py")))
    with open(DURATIONS) as fh:
        seconds = json.load(fh)["seconds_by_file"]
    for total, names in shards(a.count, files, seconds):
        print((f"{total:.0f} " if a.times else "") + " ".join(names))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
