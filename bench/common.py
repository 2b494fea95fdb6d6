"""What the benchmarks share: running a measurement in a process of its own, peak memory, watching another process
(CPU, resident memory, its /metrics), writing results."""

from __future__ import annotations

import json
import os
import re
import resource
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path


def cores() -> int:
    """The cores this process may run on (the default of every bench's ``--jobs``: seeds run side by side)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


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


TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def rss_mb(pid: int) -> float:
    """Resident memory of process ``pid`` now, in MB."""
    m = re.search(r"^VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), re.M)
    return int(m.group(1)) / 1024 if m else 0.0


def free_port() -> int:
    """A TCP port on loopback nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metrics(port: int) -> dict[str, float]:
    """A raswarden's /metrics on loopback ``port``, as {series: value}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            try:
                out[key] = float(value)
            except ValueError:
                pass
    return out
