"""The house's sizes (issue 57): no class in the daemon, the detectors or the playbooks over 300 lines, no page of
docs/ over 600. A class that outgrows them does several things; a page that does is a lab notebook (history goes to
bench/records/)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLASS_LINES = 300
DOC_LINES = 600


def test_no_class_over_its_size():
    big = sorted(f"{path.relative_to(ROOT)}: {node.name} {node.end_lineno - node.lineno + 1} lines"
                 for pkg in ("daemon", "detectors", "playbooks") for path in (ROOT / pkg).rglob("*.py")
                 for node in ast.walk(ast.parse(path.read_text(), str(path)))
                 if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > CLASS_LINES)
    assert not big, big


def test_no_page_of_docs_over_its_size():
    long = sorted(f"{p.relative_to(ROOT)}: {n} lines" for p in (ROOT / "docs").glob("*.md")
                  if (n := len(p.read_text().splitlines())) > DOC_LINES)
    assert not long, long
