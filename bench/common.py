"""What the benchmarks share: running a measurement in a process of its own, peak memory, writing results."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path


def peak_rss_mb() -> int:
    """Peak resident memory of this process so far, in MB."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def run_phase(script: str, *args: str) -> dict:
    """Run ``script --phase ARGS...`` in a fresh interpreter (so its peak RSS is its own); its last line is JSON."""
    out = subprocess.run([sys.executable, script, "--phase", *args], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def seeds(text: str) -> list[int]:
    """Seeds from "1001..1020", "1,2,3" or a mix ("1..5,9"); "" is none."""
    from lab.matrix import parse_seeds

    return parse_seeds(text)


def write_results(path: Path, results: dict) -> None:
    """Write ``results`` as JSON to ``path`` whole or not at all (:func:`lab.matrix.write_results`): a writer killed
    mid-write (a long run cut by the end of a session) leaves the previous file, never a truncated one."""
    from lab.matrix import write_results as write

    write(path, results)
    print(f"wrote {path}")
