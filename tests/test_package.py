"""The top-level names are ours: ``daemon`` is this project, not python-daemon (docs/architecture.md §2)."""

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import daemon
import detectors
import lab
import playbooks

ROOT = Path(__file__).resolve().parent.parent


def test_daemon_is_this_project():
    assert Path(daemon.__file__).resolve() == ROOT / "daemon" / "__init__.py"
    assert Path(detectors.__file__).resolve().parent == ROOT / "detectors"
    assert Path(playbooks.__file__).resolve().parent == ROOT / "playbooks"
    assert Path(lab.__file__).resolve().parent == ROOT / "lab"


def test_only_raswarden_provides_the_top_level_packages():
    owners = importlib.metadata.packages_distributions()
    for name in ("daemon", "detectors", "playbooks", "lab"):
        assert set(owners.get(name, [])) == {"raswarden"}, (name, owners.get(name))


def test_detectors_and_playbooks_never_import_daemon():
    for package in ("detectors", "playbooks"):
        for source in (ROOT / package).rglob("*.py"):
            text = source.read_text()
            assert "import daemon" not in text and "from daemon" not in text, source


def test_python_m_daemon_runs_the_cli():
    out = subprocess.run([sys.executable, "-m", "daemon", "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("raswarden ")


def test_names_doc_lists_every_mapped_metric():
    from daemon.ingest.naming import load_rules

    doc = (ROOT / "docs" / "names.md").read_text()
    for rules in load_rules().values():
        for rule in rules:
            stale = f"docs/names.md is stale: run scripts/docs_names.py ({rule.source})"
            assert f"`{rule.source}` | `{rule.canonical}`" in doc, stale


def test_code_passes_the_linter():
    """ruff (pyproject's [tool.ruff]) over all Python in the repository."""
    import shutil

    from tests.conftest import require

    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    require(ruff is not None, "ruff is not installed (it comes with the dev extra)")
    r = subprocess.run([ruff, "check", "--output-format", "concise", str(ROOT)], capture_output=True, text=True,
                       check=False)
    assert r.returncode == 0, r.stdout


def test_nothing_cites_the_teams_folder_and_every_docs_link_resolves():
    """A clone anywhere is whole: no file points at the team's shared folder (the design is docs/architecture.md, the
    fleet figures docs/fleet-stats.md, the samples fixtures/real/), and every relative link of README.md and docs/
    names a file."""
    import re

    shared = "../" + "shared"
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=False).stdout.split()
    files = [ROOT / f for f in tracked] or [p for p in ROOT.rglob("*") if ".venv" not in p.parts]
    citing = [str(p.relative_to(ROOT)) for p in files
              if p.is_file() and p.suffix in (".py", ".md", ".sh", ".yaml", ".toml") and shared in p.read_text("utf-8")]
    assert not citing, citing
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target:
                continue
            assert (page.parent / target).exists(), f"{page.relative_to(ROOT)} links to {target}, which is not there"
