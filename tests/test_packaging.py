"""The release artifacts, built as a release builds them (PyPA's ``build``, in an isolated environment): the wheel
carries the licence and every data file the service reads; the sdist carries what installing on a management node
needs (the unit, sysusers.d, tmpfiles.d, the example configs, the docs); the installed wheel runs from
site-packages, not from this checkout."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile

import pytest

from tests.conftest import ROOT, tree_build_lock


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    with tree_build_lock():  # (the Debian package's build writes into the same build/ on another worker)
        r = subprocess.run([sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(out), str(ROOT)],
                           capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return out


def test_the_wheel_carries_the_licence_and_the_data_the_service_reads(dist):
    (wheel,) = dist.glob("raswarden-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    for needed in ("daemon/alerting/templates/body.j2", "daemon/store/migrations/env.py", "playbooks/builtin/",
                   "detectors/catalogs/", "daemon/ingest/names/", "lab/library/faults/gpu_off_bus-a.yaml",
                   "lab/library/scenarios/mini.yaml"):
        assert any(n.startswith(needed) for n in names), needed


def test_the_sdist_carries_the_unit_the_configs_and_the_docs(dist):
    (sdist,) = dist.glob("raswarden-*.tar.gz")
    names = {n.split("/", 1)[1] for n in tarfile.open(sdist).getnames() if "/" in n}
    assert {"LICENSE", "systemd/raswarden.service", "systemd/instance-unit.sh", "systemd/raswarden.sysusers",
            "systemd/raswarden.tmpfiles", "systemd/raswarden.toml", "systemd/raswarden.toml.example",
            "docs/install.md", "packaging/kubernetes/rbac.yaml", "packaging/kubernetes/deployment.yaml"} <= names


def test_the_installed_wheel_runs_from_site_packages(dist, tmp_path):
    (wheel,) = dist.glob("raswarden-*.whl")
    target = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                        str(wheel)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    env = {**os.environ, "PYTHONPATH": str(target)}
    r = subprocess.run([sys.executable, "-c", "import daemon; print(daemon.__file__)"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith(str(target)), r.stdout + r.stderr
    db = tmp_path / "state.db"
    config = tmp_path / "raswarden.toml"
    config.write_text(f'[store]\nurl = "sqlite:///{db}"\n')
    for argv in (["--version"], ["check-config", "--config", str(config)],
                 ["playbook", "validate", "--config", str(config)],
                 ["simulate", "mini", "--out", str(tmp_path / "mini")]):  # a bundled scenario and fault library
        r = subprocess.run([sys.executable, "-m", "daemon", *argv], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, (argv, r.stdout[-2000:], r.stderr[-2000:])
    assert (tmp_path / "mini" / "labels.jsonl").exists() and (tmp_path / "mini" / "dcgm-exporter.om").exists()
