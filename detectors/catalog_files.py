"""The packaged fault catalogs (``detectors/catalogs/*.csv``) as rows: each file's comment lines (its provenance)
skipped, the rest read as CSV with its header."""

from __future__ import annotations

import csv
from importlib import resources


def catalog_rows(name: str) -> list[dict[str, str]]:
    """The rows of packaged catalog ``name`` (``"xid.csv"``), in file order."""
    text = resources.files("detectors.catalogs").joinpath(name).read_text(encoding="utf-8")
    return list(csv.DictReader(line for line in text.splitlines() if not line.startswith("#")))
