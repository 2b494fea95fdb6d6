"""raswarden's /metrics as client_python users expect it: the default collectors, build info, histograms, and no
label that Prometheus would rename on the way in."""

from __future__ import annotations

import shutil
import subprocess

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from daemon import metrics
from tests.conftest import require


def _families() -> dict:
    return {f.name: f for f in text_string_to_metric_families(generate_latest(metrics.REGISTRY).decode())}


def test_process_platform_and_build_info_are_exported():
    families = _families()
    assert {"process_cpu_seconds", "process_resident_memory_bytes", "python_info", "python_gc_objects_collected",
            "raswarden_build_info"} <= set(families), sorted(families)
    (info,) = families["raswarden_build_info"].samples
    assert info.name == "raswarden_build_info" and info.value == 1.0
    assert info.labels["version"] and info.labels["python_version"].count(".") == 2


def test_cycle_and_tick_durations_are_histograms():
    metrics.CYCLE_DURATION.observe(0.3)
    metrics.TICK_DURATION.observe(0.07)
    families = _families()
    for name in ("raswarden_cycle_duration_seconds", "raswarden_tick_duration_seconds"):
        assert families[name].type == "histogram"
        buckets = {s.labels["le"]: s.value for s in families[name].samples if s.name.endswith("_bucket")}
        assert buckets["+Inf"] >= 1 and buckets["0.005"] <= buckets["0.5"] <= buckets["+Inf"]


def test_no_label_is_one_prometheus_gives_every_series():
    metrics.JOB_FAILURES.labels("collect").inc()
    labels = {k for f in _families().values() for s in f.samples for k in s.labels}
    assert "task" in labels
    assert not labels & {"job", "instance"}, labels & {"job", "instance"}


def test_promtool_accepts_the_exposition(tmp_path):
    promtool = shutil.which("promtool")
    require(promtool is not None, "promtool is not installed (Debian package prometheus; scripts/test.sh installs it)")
    r = subprocess.run([promtool, "check", "metrics"], input=generate_latest(metrics.REGISTRY), capture_output=True,
                       check=False)
    assert r.returncode == 0, (r.stdout + r.stderr).decode()[-2000:]
