"""The floors import one way: lab -> daemon -> detectors and playbooks, never back; and no module imports itself
back.

Module-level imports only (an import inside a function runs when it is called, and ``if TYPE_CHECKING:`` blocks
never run): those are what make a cycle a problem at import time and a tangle to read.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("lab", "daemon", "detectors", "playbooks")
# package -> the project's packages it may import
MAY_IMPORT = {"lab": {"lab", "daemon", "detectors", "playbooks"}, "daemon": {"daemon", "detectors", "playbooks"},
              "detectors": {"detectors"}, "playbooks": {"playbooks"}}


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _top_level_imports(path: Path) -> set[str]:
    """The project modules a file imports when it is imported (not in functions, not under TYPE_CHECKING)."""
    tree = ast.parse(path.read_text(), str(path))
    out: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.If):
                test = node.test
                if isinstance(test, ast.Name) and test.id == "TYPE_CHECKING":
                    visit(node.orelse)
                    continue
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for h in node.handlers:
                    visit(h.body)
            elif isinstance(node, ast.Import):
                out.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                out.add(node.module)
                out.update(f"{node.module}.{a.name}" for a in node.names)

    visit(tree.body)
    return {m for m in out if m.split(".")[0] in PACKAGES}


def _graph() -> dict[str, set[str]]:
    files = {_module(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    return {mod: {m for m in _top_level_imports(path) if m in files and m != mod} for mod, path in files.items()}


def test_imports_go_one_way():
    wrong = sorted(f"{mod} imports {m}" for mod, deps in _graph().items() for m in deps
                   if m.split(".")[0] not in MAY_IMPORT[mod.split(".")[0]])
    assert not wrong, wrong


def test_no_module_imports_itself_back():
    graph = _graph()
    state: dict[str, int] = {}  # 1: on the path being walked, 2: done
    cycles: list[list[str]] = []

    def walk(mod: str, path: list[str]) -> None:
        state[mod] = 1
        for dep in sorted(graph[mod]):
            if state.get(dep) == 1:
                cycles.append(path[path.index(dep):] + [dep])
            elif dep not in state:
                walk(dep, path + [dep])
        state[mod] = 2

    for mod in sorted(graph):
        if mod not in state:
            walk(mod, [mod])
    assert not cycles, cycles


def test_the_daemon_runs_without_the_lab():
    """Not even inside a function does the daemon import the lab: only its command line does, in the commands
    that simulate, evaluate and train (the service retrains through ``raswarden train`` in a child process)."""
    wrong = []
    for path in sorted((ROOT / "daemon").rglob("*.py")):
        if path.parent.name == "cli":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            wrong += [f"{path.relative_to(ROOT)}:{node.lineno} imports {n}" for n in names if n.split(".")[0] == "lab"]
    assert not wrong, wrong


DATABASE_LIBRARIES = ("sqlmodel", "sqlalchemy", "alembic")


def _every_import(path: Path) -> set[str]:
    """Every module a file imports anywhere (in functions too): the persistence boundary is about who talks SQL."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
    return out


def test_only_the_store_talks_to_the_database():
    """daemon/store/ is the persistence boundary (architecture.md §4): the rest of the code calls its records and
    gets rows back; a schema change stays in that package."""
    store = ROOT / "daemon" / "store"
    wrong = sorted(f"{path.relative_to(ROOT)} imports {m}" for pkg in PACKAGES for path in (ROOT / pkg).rglob("*.py")
                   if store not in path.parents for m in _every_import(path)
                   if m.split(".")[0] in DATABASE_LIBRARIES)
    assert not wrong, wrong


def test_the_store_imports_nothing_of_raswardens_but_the_playbook_model():
    """The store knows tables, not the daemon's logic (its __init__ says so): it may import playbooks (the action
    model it journals, the stop flag) and itself."""
    wrong = sorted(f"{path.relative_to(ROOT)} imports {m}" for path in (ROOT / "daemon" / "store").rglob("*.py")
                   for m in _every_import(path) if m.split(".")[0] in PACKAGES
                   and not (m.startswith("daemon.store") or m.split(".")[0] == "playbooks"))
    assert not wrong, wrong


# The daemon's wings (docs/architecture.md §2, each __init__ says it): what each may import beyond itself. The
# floor is the top-level modules every wing stands on; a wing not listed (the CLI, the service) may import any.
FLOOR = {"daemon.metrics", "daemon.timetext", "daemon.topology"}
WING_MAY_IMPORT = {
    "daemon.store": {"playbooks"},
    "daemon.ingest": FLOOR | {"daemon.store", "detectors", "playbooks", "daemon.alerting.secrets"},
    "daemon.judgement": FLOOR | {"daemon.ingest", "daemon.store", "detectors"},
    "daemon.alerting": FLOOR | {"daemon.judgement", "daemon.store", "daemon.config", "playbooks"},
    "daemon.operations": FLOOR | {"daemon.judgement", "daemon.alerting", "daemon.config", "daemon.shards",
                                  "daemon.store", "detectors", "playbooks"},
    "daemon.web": FLOOR | {"daemon.alerting", "daemon.operations", "daemon.store"},
}
TOP_LEVEL_AT_MOST = 12


def _wing(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "daemon" and len(parts) > 1 and (ROOT / "daemon" / parts[1]).is_dir() \
        else module


def test_each_wing_imports_only_what_its_docstring_allows():
    wrong = []
    for wing, allowed in WING_MAY_IMPORT.items():
        for path in (ROOT / wing.replace(".", "/")).rglob("*.py"):
            for m in _every_import(path):
                if m.split(".")[0] not in PACKAGES or _wing(m) == wing:
                    continue
                if m == "daemon" or any(m == a or m.startswith(f"{a}.") for a in allowed):
                    continue  # ``from daemon import metrics`` is the floor
                wrong.append(f"{path.relative_to(ROOT)} imports {m}")
    assert not wrong, sorted(wrong)


def test_daemons_top_floor_stays_small():
    """Beside its wings (sub-packages), daemon/ keeps a few modules every wing stands on (issue 57: at most 12)."""
    top = sorted(p.name for p in (ROOT / "daemon").glob("*.py"))
    assert len(top) <= TOP_LEVEL_AT_MOST, top
    for wing in (p for p in (ROOT / "daemon").iterdir() if (p / "__init__.py").exists()):
        doc = ast.get_docstring(ast.parse((wing / "__init__.py").read_text()))
        assert doc and "May import" in doc, f"{wing.name}/__init__.py does not say what the wing may import"
