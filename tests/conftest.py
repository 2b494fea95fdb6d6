"""Shared test helpers: the bundled trace, components that must exist in CI, a clock the test sets, HTTP servers on
loopback."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUNDLED_TRACE = ROOT / "fixtures" / "traces" / "sn01-mini"
REAL = ROOT / "fixtures" / "real"
"""Real public samples, vendored with their source and licence (fixtures/README.md)."""


# Tests that share one machine-wide resource run one after another in one pytest-xdist worker (scripts/test.sh runs
# the suite with --dist loadgroup): the Slurm lab (fixed ports, one slurmctld), the PostgreSQL database (tests drop
# its schema), and the Debian package (installed into this machine's root, which the systemd boot test overlays).
# The Kubernetes lab goes with the Slurm lab: a mixed cluster's tests use both, and a third group's worker would start
# a second of either on the same ports.
SHARED = {"slurm": "slurm", "slurm_lab": "slurm", "slurm_accounting": "slurm", "pg_url": "postgres",
          "debian_package": "debian", "kube_lab": "slurm"}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which reads the groups
def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        groups = sorted({SHARED[f] for f in getattr(item, "fixturenames", ()) if f in SHARED})
        if groups:
            item.add_marker(pytest.mark.xdist_group("+".join(groups)))
        elif _uses_a_module_fixture(item):
            # A module's tests sharing a module-scoped fixture (a closed loop run, a model trained) stay in one
            # worker: split over two, each worker builds it (about 40 s each for the closed loop and the model).
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))


def _uses_a_module_fixture(item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    return info is not None and any(d.scope == "module" for defs in info.name2fixturedefs.values() for d in defs)


def pytest_collection_finish(session) -> None:
    """Stop at once if pytest-xdist did not take the groups (it marks a grouped test's id with ``@group``): tests of
    one server in two workers fail in ways that say nothing about the code (pyproject.toml pins pytest for it)."""
    if not getattr(session.config.option, "loadgroup", False):
        return
    lost = [i.nodeid for i in session.items if any(i.iter_markers("xdist_group")) and "@" not in i.nodeid]
    if lost:
        raise pytest.UsageError(f"pytest-xdist's --dist loadgroup did not group {len(lost)} tests (e.g. {lost[0]}): "
                                "this pytest and pytest-xdist do not work together (see pyproject.toml)")


def ports(offset: int = 0) -> int:
    """A simulator's ``--port-offset`` for this test process: ``offset`` moved by 1,000 per pytest-xdist worker, so
    the simulated exporters of two workers (on the same loopback addresses) never meet."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return offset + 1000 * int(worker.removeprefix("gw") or 0)


def spawn(args: list[str], log: Path, **kwargs) -> subprocess.Popen:
    """A process whose stdout and stderr are appended to the file ``log`` (read it for what it said).

    Not a pipe: a pipe nobody reads while the process runs holds 64 KB, and a process that logs more (a warning a
    pass, at a pass every 0.3 s, on a loaded machine) blocks at its next write, holding whatever it holds (another
    process's lock wait then times out, its stop takes as long)."""
    with open(log, "ab") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, **kwargs)


def wait_stopped(proc: subprocess.Popen, log: Path, timeout: float, what: str) -> None:
    """Wait ``timeout`` seconds for ``proc``, sent SIGTERM, to exit. If it does not, the test fails with the end of
    its ``log``, there with every thread's stack (SIGQUIT: the command line's stack dump), and it is killed."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGQUIT)
        time.sleep(1.0)
        proc.kill()
        proc.wait(10)
        pytest.fail(f"{what} still running {timeout:.0f} s after SIGTERM: {log.read_text()[-6000:]}")


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


def replay_findings(paths: list[Path]) -> str:
    """What ``raswarden replay PATHS --findings`` writes (one JSON object a line)."""
    import io

    from daemon.replay import replay

    out = io.StringIO()
    replay(paths, findings_out=out)
    return out.getvalue()


@pytest.fixture(scope="session")
def bundled_findings() -> str:
    """The bundled trace's findings, for the tests that replay it in another form (once a worker)."""
    return replay_findings([BUNDLED_TRACE])


@pytest.fixture
def pg_url() -> str:
    """The test PostgreSQL's URL, its database emptied (schema dropped and made again): no table yet."""
    url = os.environ.get("RASWARDEN_TEST_PG_URL", "")
    require(bool(url), "no PostgreSQL server: run the suite through scripts/test.sh (as root)")
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
    engine.dispose()
    return url


@contextmanager
def tree_build_lock() -> Iterator[None]:
    """Held while a build from this checkout runs: setuptools writes into its build/ and raswarden.egg-info/, so two
    builds at once on two workers (the Debian package's wheel, the release artifacts) took each other's files away
    (a wheel's METADATA gone mid-build)."""
    (ROOT / "build").mkdir(exist_ok=True)
    with open(ROOT / "build" / ".tree-build.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def debian_package(tmp_path_factory) -> Path:
    """The Debian package of this checkout, built once per session by packaging/build-deb.sh (uncompressed: the
    tests install it, nobody downloads it)."""
    require(os.geteuid() == 0 and bool(shutil.which("dpkg-deb")),
            "building and installing the Debian package needs root and dpkg-deb (scripts/test.sh runs as root)")
    out = tmp_path_factory.mktemp("deb")
    with tree_build_lock():
        built = subprocess.run([str(ROOT / "packaging" / "build-deb.sh"), "--out", str(out), "--uncompressed"],
                               capture_output=True, text=True, timeout=900, cwd=ROOT,
                               env={**os.environ, "BUILD_PYTHON": sys.executable})
    assert built.returncode == 0, built.stderr[-3000:]
    return Path(built.stdout.strip().splitlines()[-1])


@pytest.fixture
def journal_file(tmp_path):
    """A real journal file written by systemd-journal-remote from export-format records."""
    remote = shutil.which("systemd-journal-remote") or "/lib/systemd/systemd-journal-remote"
    require(os.path.exists(remote), "systemd-journal-remote is not installed (scripts/test.sh installs it)")
    out = tmp_path / "remote.journal"

    def write(*messages: tuple[float, str]):
        export = b""
        for ts, msg in messages:
            export += (f"__REALTIME_TIMESTAMP={int(ts * 1e6)}\n__MONOTONIC_TIMESTAMP=1\n"
                       "_BOOT_ID=0123456789abcdef0123456789abcdef\n"
                       f"_HOSTNAME=sn01-b01\n_TRANSPORT=kernel\nSYSLOG_IDENTIFIER=kernel\nMESSAGE={msg}\n\n").encode()
        subprocess.run([remote, f"--output={out}", "--split-mode=none", "-"], input=export, check=True,
                       capture_output=True)
    return out, write


# Real HTTP servers on loopback (the collector tests, the service's exporters): each serves what a test puts in
# ``pages``.
class Pages:
    """path -> (status, body, delay seconds); what the server answers."""

    def __init__(self):
        self.routes: dict[str, tuple[int, bytes, float]] = {}
        self.hits: list[str] = []

    def set(self, path: str, body: bytes | str, status: int = 200, delay: float = 0.0) -> None:
        self.routes[path] = (status, body.encode() if isinstance(body, str) else body, delay)


@pytest.fixture
def http_server():
    """Start servers on demand: ``url, pages = http_server()`` (``http_server("127.0.0.2")``: another loopback
    address, another node to whoever groups targets by address)."""
    servers = []

    def start(host: str = "127.0.0.1"):
        pages = Pages()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                path = self.path.split("?")[0]
                pages.hits.append(self.path)
                status, body, delay = pages.routes.get(path, (404, b"not found", 0.0))
                if delay:
                    time.sleep(delay)
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        srv = ThreadingHTTPServer((host, 0), Handler)
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"{host}:{srv.server_address[1]}", pages

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()
