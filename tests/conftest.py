"""Shared test helpers: the bundled trace, components that must exist in CI, a clock the test sets."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUNDLED_TRACE = ROOT / "fixtures" / "traces" / "sn01-mini"
REAL = ROOT / "fixtures" / "real"
"""Real public samples, vendored with their source and licence (fixtures/README.md)."""


def require(condition: bool, reason: str) -> None:
    """Skip locally when a real component is missing, but fail under CI (CI=true)."""
    if condition:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"required in CI: {reason}")
    pytest.skip(reason)


class Clock:
    """A clock the test sets: ``clock.t += 3600`` moves an hour on (for code that takes ``clock=``)."""

    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def trace_dir() -> Path:
    return BUNDLED_TRACE


@pytest.fixture
def pg_url() -> str:
    url = os.environ.get("RASWARDEN_TEST_PG_URL", "")
    require(bool(url), "no PostgreSQL server: run the suite through scripts/test.sh (as root)")
    return url


@pytest.fixture(scope="session")
def debian_package(tmp_path_factory) -> Path:
    """The Debian package of this checkout, built once per session by packaging/build-deb.sh (uncompressed: the
    tests install it, nobody downloads it)."""
    require(os.geteuid() == 0 and bool(shutil.which("dpkg-deb")),
            "building and installing the Debian package needs root and dpkg-deb (scripts/test.sh runs as root)")
    out = tmp_path_factory.mktemp("deb")
    built = subprocess.run([str(ROOT / "packaging" / "build-deb.sh"), "--out", str(out), "--uncompressed"],
                           capture_output=True, text=True, timeout=900, cwd=ROOT,
                           env={**os.environ, "BUILD_PYTHON": sys.executable})
    assert built.returncode == 0, built.stderr[-3000:]
    return Path(built.stdout.strip().splitlines()[-1])
