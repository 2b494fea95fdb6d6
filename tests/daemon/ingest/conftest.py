"""The BMC lab for the tests that read a BMC (scripts/bmc-lab.sh): ipmi_sim, FreeIPMI, ipmitool, ipmi_exporter."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT, ports, require

LAB = ROOT / "scripts" / "bmc-lab.sh"


@pytest.fixture(scope="module")
def bmc_lab():
    """The lab's ports (this worker's own) and directory; stopped after the module."""
    require(shutil.which("ipmi_sim") is not None, "no ipmi_sim (Debian package openipmi): scripts/test.sh installs it")
    require(shutil.which("ipmimonitoring", path=os.environ.get("PATH", "") + ":/usr/sbin") is not None,
            "no FreeIPMI (Debian package freeipmi-tools): scripts/test.sh installs it")
    require(shutil.which("go") is not None or (ROOT / "build" / "bmc" / "ipmi_exporter").exists(),
            "no Go to build ipmi_exporter with: scripts/bmc-lab.sh build needs it")
    env = {**os.environ, "BMC_LAB_PORT": str(ports(29623)), "BMC_LAB_CONSOLE": str(ports(29624)),
           "BMC_LAB_EXPORTER": str(ports(29290)), "BMC_LAB_DIR": f"/tmp/raswarden-bmclab-{ports(0)}"}
    built = subprocess.run([str(LAB), "build"], capture_output=True, text=True, timeout=1800, env=env)
    assert built.returncode == 0, built.stderr[-3000:]
    up = subprocess.run([str(LAB), "up"], capture_output=True, text=True, timeout=300, env=env)
    assert up.returncode == 0, up.stderr[-3000:]
    yield env, Path(up.stdout.strip().splitlines()[-1])
    subprocess.run([str(LAB), "down"], capture_output=True, timeout=120, env=env)
