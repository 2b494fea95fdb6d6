"""What flagged each fault of a matrix run, and when: the lines ``bench/fault_trace.py`` prints."""

from __future__ import annotations

from detectors.schema import node_of


def fault_lines(record: dict, findings: list[dict], start: float, fault: str | None = None, every: bool = False,
                width: int = 300) -> list[str]:
    """For each failing fault of a matrix run's ``record`` (its ``fault_leads``; of class ``fault`` only, when
    given): a line of what and when (hours from ``start``), then the run's ``findings`` on its entity or its node
    from its onset to its failure, the first of each state (or ``every`` one), each finding's line cut to ``width``
    characters."""
    lines = []
    for f in record["raswarden"]["fault_leads"]:
        if fault and f["fault"] != fault:
            continue
        lead = "not flagged in time" if f["lead_s"] is None else f"lead {f['lead_s'] / 3600:.2f} h"
        lines.append(f"== {f['fault']} {f['template']} {f['entity']}: onset +{(f['onset'] - start) / 3600:.2f} h, "
                     f"failure +{(f['failure'] - start) / 3600:.2f} h ({f['window_s'] / 3600:.2f} h), {lead}")
        node = node_of(f["entity"])
        seen: set[str] = set()
        for x in findings:
            if x["entity"] not in (f["entity"], node) or not f["onset"] <= x["ts"] <= f["failure"]:
                continue
            if not every and x["state"] in seen:
                continue
            seen.add(x["state"])
            reason = (x.get("reasons") or [""])[0]
            text = (f"   +{(x['ts'] - start) / 3600:.2f} h (lead {(f['failure'] - x['ts']) / 3600:.2f} h) "
                    f"{x['entity']} {x['state']} [{x.get('detector', '')}]: {reason}")
            lines.append(text[:width])
    return lines
