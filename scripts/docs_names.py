#!/usr/bin/env python3
"""Regenerate docs/names.md from the name tables in daemon/names/ (run after editing a table)."""

import csv
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
doc = ROOT / "docs" / "names.md"
text = doc.read_text()
head = text.split("\n## dcgm-exporter", 1)[0]
parts = [head.rstrip("\n"), ""]
for table, title in (("dcgm_exporter.csv", "dcgm-exporter"), ("node_exporter.csv", "node_exporter"),
                     ("infiniband_exporter.csv", "infiniband_exporter (switch side)")):
    parts += [f"## {title}", "", "| source metric | canonical | type | entity | transform |", "|---|---|---|---|---|"]
    with open(ROOT / "daemon" / "names" / table) as fh:
        for r in csv.DictReader(fh):
            parts.append(f"| `{r['source_metric']}` | `{r['canonical']}` | {r['type']} | `{r['entity']}` | "
                         f"{r['transform']} |")
    parts.append("")
doc.write_text(re.sub(r"\n{3,}", "\n\n", "\n".join(parts)))
