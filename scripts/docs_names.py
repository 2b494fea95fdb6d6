#!/usr/bin/env python3
"""Regenerate docs/names.md from the name tables in daemon/ingest/names/ (run after editing a table)."""

import csv
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
doc = ROOT / "docs" / "names.md"
text = doc.read_text()
head = text.split("\n## dcgm-exporter", 1)[0]
parts = [head.rstrip("\n"), ""]
TITLES = {"dcgm_exporter.csv": "dcgm-exporter", "dcgm_exporter_1x.csv": "dcgm-exporter, 1.x names",
          "node_exporter.csv": "node_exporter",
          "infiniband_exporter.csv": "infiniband_exporter (switch side)",
          "amd_device_metrics_exporter.csv": "AMD device-metrics-exporter (AMD Instinct, Hygon DCU)",
          "npu_exporter.csv": "Ascend npu-exporter",
          "nvidia_gpu_exporter.csv": "nvidia_gpu_exporter (nvidia-smi / NVML)",
          "ipmi_exporter.csv": "ipmi_exporter (a node's BMC)"}
for table, title in TITLES.items():
    parts += [f"## {title}", "", "| source metric | canonical | type | entity | match | transform |",
              "|---|---|---|---|---|---|"]
    with open(ROOT / "daemon" / "ingest" / "names" / table) as fh:
        for r in csv.DictReader(line for line in fh if not line.startswith("#")):
            parts.append(f"| `{r['source_metric']}` | `{r['canonical']}` | {r['type']} | `{r['entity']}` | "
                         f"{r['match']} | {r['transform']} |")
    parts.append("")
doc.write_text(re.sub(r"\n{3,}", "\n\n", "\n".join(parts)))
