"""Telemetry copied out of a fleet's long-term storage replays as the exporters' own files do.

The bundled trace's dcgm-exporter and node_exporter samples are put into a real Prometheus TSDB (promtool tsdb
create-blocks-from openmetrics) and dumped with ``promtool tsdb dump``, and into a real VictoriaMetrics
(``/api/v1/import/prometheus``) and exported with ``/api/v1/export``; each copy, with the trace's kernel log,
rasdaemon database and topology, gives the trace's findings exactly. Both tools come from Debian (prometheus,
victoria-metrics; scripts/test.sh installs them)."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from daemon.ingest.formats import OpenMetricsReader, VmExportReader, sniff
from tests.conftest import BUNDLED_TRACE, replay_findings, require
from tests.daemon.service.conftest import free_port

EXPORTER_FILES = ("dcgm-exporter.om.gz", "node-exporter.prom.gz")


def others(tmp_path: Path) -> list[Path]:
    """The trace's files that are not the exporters' (kernel log, rasdaemon, topology, labels), copied beside."""
    keep = tmp_path / "rest"
    shutil.copytree(BUNDLED_TRACE, keep, ignore=shutil.ignore_patterns(*EXPORTER_FILES))
    return [keep]


def samples_ms() -> list[str]:
    """Both exporters' sample lines as Prometheus text with millisecond timestamps (the OpenMetrics file's are
    seconds), comments and ``# EOF`` left out."""
    lines = []
    for name in EXPORTER_FILES:
        with gzip.open(BUNDLED_TRACE / name, "rt") as fh:
            for line in fh:
                if not line.strip() or line.startswith("#"):
                    continue
                head, value, stamp = line.rsplit(" ", 2)
                ms = round(float(stamp) * 1000) if name.endswith(".om.gz") else int(stamp)
                lines.append(f"{head} {value} {ms}\n")
    return lines


def test_a_promtool_tsdb_dump_replays_like_the_exporters_files(tmp_path, bundled_findings):
    promtool = shutil.which("promtool")
    require(promtool is not None, "promtool is not installed (Debian package prometheus; scripts/test.sh installs it)")
    om = tmp_path / "in.om"
    with open(om, "w") as fh:  # promtool backfills OpenMetrics: seconds, and '# EOF'
        fh.writelines(f"{h} {v} {int(t) / 1000:.3f}\n" for h, v, t in (x.rsplit(" ", 2) for x in samples_ms()))
        fh.write("# EOF\n")
    db = tmp_path / "tsdb"
    made = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(om), str(db)],
                          capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr[-2000:]
    (db / "wal").mkdir(exist_ok=True)  # promtool 2.42's dump reads the WAL too
    dump = tmp_path / "prometheus.dump"
    with open(dump, "w") as out:
        dumped = subprocess.run([promtool, "tsdb", "dump", str(db)], stdout=out, stderr=subprocess.PIPE, text=True,
                                timeout=300)
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    first = dump.open().readline()
    assert first.startswith("{") and "__name__=" in first  # '{Hostname="sn01-b01", ..., __name__="DCGM_...", ...}'
    assert isinstance(sniff(dump), OpenMetricsReader)
    assert replay_findings([dump, *others(tmp_path)]) == bundled_findings


@pytest.fixture
def victoria_metrics(tmp_path):
    """A real VictoriaMetrics on loopback (Debian's victoria-metrics), keeping samples of any age."""
    binary = shutil.which("victoria-metrics")
    require(binary is not None, "VictoriaMetrics is not installed (Debian package victoria-metrics; scripts/test.sh "
                                "installs it)")
    port = free_port()
    proc = subprocess.Popen([binary, f"-storageDataPath={tmp_path / 'vm'}", f"-httpListenAddr=127.0.0.1:{port}",
                             "-retentionPeriod=100y", "-loggerLevel=ERROR"],
                            stdout=open(tmp_path / "vm.log", "wb"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    try:
        while True:
            try:
                urllib.request.urlopen(url + "/health", timeout=2).close()
                break
            except OSError as exc:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError("VictoriaMetrics did not start: "
                                         f"{(tmp_path / 'vm.log').read_text()[-2000:]}") from exc
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_victoriametrics_export_replays_like_the_exporters_files(tmp_path, bundled_findings, victoria_metrics):
    lines = samples_ms()
    body = "".join(lines).encode()
    urllib.request.urlopen(urllib.request.Request(victoria_metrics + "/api/v1/import/prometheus", data=body),
                           timeout=120).close()
    urllib.request.urlopen(victoria_metrics + "/internal/force_flush", timeout=30).close()
    export = tmp_path / "vm-export.jsonl"
    query = urllib.parse.urlencode({"match[]": '{__name__!=""}', "start": "0"}).encode()
    deadline = time.monotonic() + 30
    while True:  # imported rows become searchable within a second or so
        with urllib.request.urlopen(urllib.request.Request(victoria_metrics + "/api/v1/export", data=query),
                                    timeout=120) as r:
            export.write_bytes(r.read())
        points = sum(len(json.loads(line)["values"]) for line in export.read_text().splitlines() if line)
        if points >= len(lines) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert points == len(lines)
    assert isinstance(sniff(export), VmExportReader)
    assert replay_findings([export, *others(tmp_path)]) == bundled_findings
