"""raswarden's pages: the status page (heatmap, open incidents, repair queue, actions, silences), an incident's and a
repair order's page. Plain HTML and inline SVG: no script, no external asset."""

from __future__ import annotations

import html
import logging
import time

from daemon.store.journal import StoreJournal
from daemon.web.state import (actions_json, entities_json, idle_checks_json, incidents_json, repairs_json,
                              silences_json)

log = logging.getLogger("raswarden.web")

COLOURS = {"healthy": "#2e7d32", "suspect": "#f9a825", "subhealthy": "#ef6c00", "failed": "#c62828",
           "unknown": "#757575"}


# -- the status page ------------------------------------------------------------------------------
RANK = {"healthy": 0, "suspect": 1, "unknown": 2, "subhealthy": 3, "failed": 4}
COMPACT_ABOVE = 160
"""Above this many nodes the heatmap draws one square per node (16 scaleX640 supernodes are 1,280 blades)."""


def _idle_checks_section(service, esc) -> str:
    """The idle checks on the status page: how often, and each node's running or last one (when any is on)."""
    rp = service.cfg.repairs
    checks = idle_checks_json(service)
    if not rp.idle_check_every_s and not checks:
        return ""
    failed = sum(c["status"] == "failed" for c in checks)
    rows = "".join(
        f'<tr class="{"failed" if c["status"] == "failed" else ""}"><td>{esc(c["node"])}</td>'
        f'<td class="state">{esc(c["status"])}</td><td>{c["checks"]}</td><td>{esc(c["job"] or "-")}</td>'
        f'<td>{_when(c["started_at"])}</td><td>{_when(c["checked_at"])}</td><td>{esc(c["result"] or "-")}</td></tr>'
        for c in checks[:40])
    every = f"every {rp.idle_check_every_s / 3600:g} h, {rp.idle_checks_at_once} at once" if rp.idle_check_every_s \
        else "off"
    return f"""<h2>Idle checks ({len(checks)} nodes, {failed} failed)</h2>
<p class="muted">{esc(every)}, within the blast-radius budget; a failure drains the node and opens a repair order</p>
<table><tr><th>node</th><th>status</th><th>checks</th><th>job</th><th>started (UTC)</th><th>ended (UTC)</th>
<th>result</th></tr>
{rows}</table>"""


def _advice_section(service, esc) -> str:
    """The checkpoint advice on the status page (when any job has some): each job's interval, whether it is the safe
    one, and why; the foresight it stands on in one line."""
    advice, fs = service.advisor.last, service.advisor.foresight
    if not advice or fs is None:
        return ""
    rows = "".join(
        f'<tr class="{"failed" if a.safe else ""}"><td>{esc(job)}</td><td>{a.nodes}</td>'
        f'<td>{a.interval_s / 3600:.2f} h</td><td>{a.checkpoint_cost_s:.0f} s ({esc(a.cost_from)})</td>'
        f'<td>{esc(("safe: " if a.safe else "") + a.why)}</td></tr>'
        for job, a in sorted(advice.items(), key=lambda ja: ja[1].interval_s)[:40])
    return f"""<h2>Checkpoint advice ({len(advice)} jobs)</h2>
<p class="muted">{len(fs.failures)} hard failures in {fs.node_hours:,.0f} node-hours: {fs.foreseen} acted on ahead,
{fs.warned} warned of only, {fs.unwarned} unwarned (docs/playbooks.md, "Checkpoint advice")</p>
<table><tr><th>job</th><th>nodes</th><th>checkpoint every</th><th>checkpoint cost</th><th>why</th></tr>
{rows}</table>"""


def _worst(states) -> str:
    return max(states, key=lambda st: RANK.get(st, 0), default="healthy")


def heatmap_svg(entities: list[dict]) -> str:
    """One row per rack, one tile per node holding a cell per accelerator and a narrow one per fabric port; the
    tile's header has the worst state of the node and its parts (a failed port shows on its blade). Above
    :data:`COMPACT_ABOVE` nodes, one square per node in that worst state. Every tile and cell has a tooltip."""
    nodes: dict[str, dict] = {}
    parts: dict[str, dict[str, list[dict]]] = {}
    for e in entities:
        if e["kind"] == "node":
            nodes[e["id"]] = e
        elif e["kind"] in ("accelerator", "port"):
            parts.setdefault(e["node"], {}).setdefault(e["kind"], []).append(e)
    for node in parts:  # a node known only from its parts' telemetry
        nodes.setdefault(node, {"id": node, "kind": "node", "node": node, "rack": next(
            (x["rack"] for xs in parts[node].values() for x in xs if x.get("rack")), None), "state": "healthy"})
    racks: dict[str, list[str]] = {}
    for node, e in nodes.items():
        racks.setdefault(e["rack"] or "-", []).append(node)
    esc = html.escape

    def worst_of(node: str) -> tuple[str, str]:
        """The node's tile state and its tooltip (the parts not healthy)."""
        bad = [x for xs in parts.get(node, {}).values() for x in xs if x["state"] != "healthy"]
        state = _worst([nodes[node]["state"], *(x["state"] for x in bad)])
        tip = f"{node}: {nodes[node]['state']}" + "".join(f"\n{x['id']}: {x['state']}" for x in bad[:12])
        return state, tip

    out, y, width = [], 0, 0
    if len(nodes) > COMPACT_ABOVE:
        cell, gap, per_row = 9, 2, 64
        for rack in sorted(racks):
            members = sorted(racks[rack])
            out.append(f'<text x="0" y="{y + 11}" class="rack">{esc(rack)} ({len(members)} nodes)</text>')
            y += 14
            for k, node in enumerate(members):
                state, tip = worst_of(node)
                x = (k % per_row) * (cell + gap)
                out.append(f'<rect x="{x}" y="{y + (k // per_row) * (cell + gap)}" width="{cell}" height="{cell}" '
                           f'fill="{COLOURS.get(state, "#000")}"><title>{esc(tip)}</title></rect>')
                width = max(width, x + cell)
            y += (-(-len(members) // per_row)) * (cell + gap) + 8
    else:
        cell, gap, per_row, label_h, port_w = 11, 2, 4, 11, 5
        tile_w = per_row * (cell + gap) + gap
        for rack in sorted(racks):
            members = sorted(racks[rack])
            out.append(f'<text x="0" y="{y + 11}" class="rack">{esc(rack)}</text>')
            y += 16
            x = 0
            row_h = 0
            for node in members:
                gpus = sorted(parts.get(node, {}).get("accelerator", []), key=lambda a: (len(a["id"]), a["id"]))
                ports = sorted(parts.get(node, {}).get("port", []), key=lambda a: (len(a["id"]), a["id"]))
                rows = max(1, -(-len(gpus) // per_row))
                port_rows = -(-len(ports) // 8)
                tile_h = 6 + rows * (cell + gap) + port_rows * (cell // 2 + gap) + gap + label_h
                if x + tile_w > 1200:
                    x, y = 0, y + row_h + 4
                    row_h = 0
                state, tip = worst_of(node)
                out.append(f'<g><title>{esc(tip)}</title>'
                           f'<rect x="{x}" y="{y}" width="{tile_w}" height="{tile_h}" fill="#eceff1" '
                           'stroke="#90a4ae"/>'
                           f'<rect x="{x}" y="{y}" width="{tile_w}" height="5" '
                           f'fill="{COLOURS.get(state, "#000")}"/></g>')
                for i, g in enumerate(gpus):
                    cx = x + gap + (i % per_row) * (cell + gap)
                    cy = y + 6 + gap + (i // per_row) * (cell + gap)
                    out.append(f'<rect x="{cx}" y="{cy}" width="{cell}" height="{cell}" '
                               f'fill="{COLOURS.get(g["state"], "#000")}"><title>{esc(g["id"])}: '
                               f'{g["state"]}</title></rect>')
                top = y + 6 + gap + rows * (cell + gap)
                for i, pt in enumerate(ports):
                    cx = x + gap + (i % 8) * (port_w + 1)
                    cy = top + (i // 8) * (cell // 2 + gap)
                    out.append(f'<rect x="{cx}" y="{cy}" width="{port_w}" height="{cell // 2}" '
                               f'fill="{COLOURS.get(pt["state"], "#000")}"><title>{esc(pt["id"])}: '
                               f'{pt["state"]}</title></rect>')
                short = node.rsplit("-", 1)[-1] if len(node) > 8 else node
                out.append(f'<text x="{x + tile_w / 2}" y="{y + tile_h - 2}" class="node">{esc(short)}</text>')
                x += tile_w + 4
                row_h = max(row_h, tile_h)
                width = max(width, x)
            y += row_h + 10
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{max(width, 200)}" height="{max(y, 20)}" '
            f'role="img" aria-label="health heatmap">{"".join(out)}</svg>')


def telemetry_banner(service, entities: list[dict]) -> str:
    """A loud banner when telemetry is lost: collectors whose last collection failed, nodes that report nothing
    (state unknown). Empty when all is well."""
    esc = html.escape
    failing = [f"collector {name}: {'; '.join(o.errors[:2]) or 'failed'}"
               for name, o in getattr(service.last, "outcomes", {}).items() if not o.ok]
    nodes = [e for e in entities if e["kind"] == "node"]
    lost = [e["id"] for e in nodes if e["state"] == "unknown"]
    if not failing and not lost:
        return ""
    lines = failing + ([f"{len(lost)} of {len(nodes)} nodes report no telemetry: {', '.join(lost[:20])}"
                        + (" …" if len(lost) > 20 else "")] if lost else [])
    return ('<div class="loss" role="alert"><strong>TELEMETRY LOST</strong> — raswarden cannot judge what it '
            "does not see:<ul>" + "".join(f"<li>{esc(x)}</li>" for x in lines) + "</ul></div>")


_STYLE = """
body{font:14px system-ui,sans-serif;margin:1.2em;color:#263238} h1{font-size:1.3em;margin:0}
h2{font-size:1.1em;margin:1.2em 0 .4em} table{border-collapse:collapse;width:100%}
td,th{border-bottom:1px solid #cfd8dc;padding:3px 6px;text-align:left;vertical-align:top}
tr.failed td.state{color:#c62828;font-weight:bold} tr.subhealthy td.state{color:#ef6c00}
h1.failed{color:#c62828} h1.subhealthy{color:#ef6c00} table.kv{width:auto} table.kv th{padding-right:2em}
.chip{display:inline-block;width:10px;height:10px;margin:0 3px 0 10px} .rack{font-size:11px;fill:#37474f}
.node{font-size:9px;fill:#455a64;text-anchor:middle}
.muted{color:#607d8b}
.loss{background:#c62828;color:#fff;padding:.6em 1em;margin:.8em 0;font-size:1.1em}
.loss ul{margin:.3em 0 0 1.2em;padding:0}
"""


def _reliability_line(service) -> str:
    """The last 30 days of repair orders in one line (daemon/operations/reliability.py)."""
    from daemon.operations.reliability import figures

    t = figures(service.store, time.time() - 30 * 86400.0).total
    return (f"last 30 days: {t.orders} repair orders, {t.before_text} before failure, median time to repair "
            f"{t.mttr_text}, {t.validation_failures} caught by validation")


def _age(seconds: float) -> str:
    return f"{seconds / 86400:.1f} d" if seconds >= 86400 else f"{seconds / 3600:.1f} h" if seconds >= 3600 else \
        f"{seconds / 60:.0f} min"


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts)) if ts else "-"


def status_page(service) -> str:
    entities = entities_json(service)
    incidents = incidents_json(service, "open")
    actions = actions_json(service, 30)
    silences = silences_json(service)
    counts: dict[str, int] = {}
    for e in entities:
        if e["kind"] in ("node", "accelerator"):
            counts[f'{e["kind"]}:{e["state"]}'] = counts.get(f'{e["kind"]}:{e["state"]}', 0) + 1
    esc = html.escape
    legend = " ".join(f'<span class="chip" style="background:{c}"></span>{s}' for s, c in COLOURS.items())
    summary = ", ".join(f"{n} {k.replace(':', ' ')}" for k, n in sorted(counts.items())) or "no entities yet"
    inc_rows = "".join(
        f'<tr class="{esc(i["severity"])}"><td><a href="/incidents/{esc(i["id"])}">{esc(i["id"])}</a></td>'
        f'<td>{esc(i["rack"] or "-")}</td><td>{esc(i["entity"])}</td>'
        f'<td class="state">{esc(i["severity"])}</td><td>{esc(i["category"])}</td><td>{_when(i["opened_at"])}</td>'
        f'<td>{"<br>".join(esc(str(r)) for r in i["evidence"][:4])}</td></tr>' for i in incidents)
    act_rows = "".join(
        f'<tr><td>{_when(a["ts"])}</td><td>{esc(a["incident"])}</td><td>{esc(a["playbook"])}</td>'
        f'<td>{esc(a["step"])}</td><td>{esc(a["status"])}</td></tr>' for a in actions)
    repairs = repairs_json(service)
    now = time.time()
    rep_rows = "".join(
        f'<tr class="{esc(r["severity"])}"><td>{r["id"]}</td><td>{esc(r["state"])}</td>'
        f'<td>{esc(_age(now - r["opened_at"]))}</td><td>{esc(r["rack"] or "-")}</td><td>{esc(r["part"])}</td>'
        f'<td>{esc(r["expected"])}</td><td>{esc(" · ".join(f"{k} {v}" for k, v in r["where"][2:]))}</td>'
        f'<td><a href="/incidents/{esc(r["incident_id"])}">{esc(r["incident_id"])}</a></td></tr>' for r in repairs)
    sil_rows = "".join(
        f'<tr><td>{esc(s["id"])}</td><td>{esc(" ".join(s["matchers"]))}</td><td>{_when(s["ends_at"])}</td>'
        f'<td>{esc(s["by"])}</td><td>{esc(s["comment"])}</td></tr>' for s in silences)
    status = esc(service.status_line())
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>raswarden</title>
<meta http-equiv="refresh" content="30">
<style>{_STYLE}</style></head><body>
<h1>raswarden — shard {esc(service.cfg.service.shard)}</h1>
<p class="muted">{status} · {esc(summary)} · updated {_when(time.time())} UTC</p>
{telemetry_banner(service, entities)}
<h2>Health</h2><p>{legend}</p>
{heatmap_svg(entities)}
<h2>Open incidents ({len(incidents)})</h2>
<table><tr><th>incident</th><th>rack</th><th>entity</th><th>state</th><th>category</th><th>opened (UTC)</th>
<th>evidence</th></tr>
{inc_rows or '<tr><td colspan="7" class="muted">none</td></tr>'}</table>
<h2>Repair queue ({len(repairs)})</h2>
<p class="muted">{esc(_reliability_line(service))} · <code>raswarden report</code> for the charts</p>
<table><tr><th>order</th><th>state</th><th>age</th><th>rack</th><th>part</th><th>expected</th><th>identity</th>
<th>incident</th></tr>
{rep_rows or '<tr><td colspan="8" class="muted">none</td></tr>'}</table>
{_idle_checks_section(service, esc)}
{_advice_section(service, esc)}
<h2>Recent actions</h2>
<table><tr><th>when (UTC)</th><th>incident</th><th>playbook</th><th>step</th><th>status</th></tr>
{act_rows or '<tr><td colspan="5" class="muted">none</td></tr>'}</table>
<h2>Silences</h2>
<table><tr><th>id</th><th>matchers</th><th>until (UTC)</th><th>by</th><th>comment</th></tr>
{sil_rows or '<tr><td colspan="5" class="muted">none</td></tr>'}</table>
</body></html>
"""


def repair_page(service, order_id: str) -> str | None:
    """A repair order's page, the link in its chat message: where the part is, why, the evidence, its history."""
    from daemon.operations.repairs import RepairError

    try:
        r = service.remediation.repairs.order(int(order_id))
    except (ValueError, RepairError):
        return None
    esc = html.escape
    where = "".join(f"<tr><th>{esc(str(k))}</th><td>{esc(str(v))}</td></tr>" for k, v in r.where)
    evidence = "".join(f"<li>{esc(str(e))}</li>" for e in r.evidence)
    history = "".join(f"<tr><td>{_when(h['ts'])}</td><td>{esc(str(h.get('from') or '-'))} → {esc(str(h['to']))}"
                      f"</td><td>{esc(str(h['by']))}</td><td>{esc(str(h.get('note', '')))}</td></tr>"
                      for h in r.history)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>repair order {r.id}</title>
<style>{_STYLE}</style></head><body>
<p><a href="/">raswarden</a></p>
<h1>Repair order {r.id}: {esc(r.expected)} {esc(r.part)}</h1>
<p>{esc(r.state)} · {esc(r.severity)} {esc(r.category)} · incident <a href="/incidents/{esc(r.incident_id)}">
{esc(r.incident_id)}</a> · opened {_when(r.opened_at)} UTC{f" · new part serial {esc(r.new_serial)}" if r.new_serial
                                                          else ""}</p>
<h2>What to do</h2><p>{esc(r.expected_why)}</p>
<p><code>raswarden repairs start {r.id}</code> · <code>raswarden repairs done {r.id} --part-serial NEW</code></p>
<h2>Where</h2><table>{where or '<tr><td class="muted">no topology entry</td></tr>'}</table>
<h2>Evidence</h2><ul>{evidence}</ul>
<h2>History</h2><table><tr><th>when (UTC)</th><th>change</th><th>by</th><th>note</th></tr>{history}</table>
</body></html>
"""


def incident_page(service, incident_id: str) -> str | None:
    """One incident's own page (the link in every alert): where the part is, what is wrong, what raswarden did and
    what to do next, the findings from an hour before it opened to its close, the action journal and the commands.
    None when there is no such incident."""
    from daemon.alerting.alert import alert_from_incident
    from daemon.alerting.alert_pipeline import describe_action
    from daemon.alerting.render import commands
    from daemon.alerting.runbooks import runbook_for

    row = service.store.incident(incident_id)
    if row is None:
        return None
    esc = html.escape
    actions = StoreJournal(service.store).rows_of(row.id)
    alert = alert_from_incident(row, describe_action(actions), service.pipeline.mapper.topology.place(row.entity),
                                runbook_for(row.category, service.cfg.alerting.runbooks))
    node = row.entity.split("/", 1)[0]
    findings = service.store.findings_of(sorted({row.entity, node}), row.opened_at - 3600.0, row.closed_at)
    place = "".join(f"<tr><th>{esc(k)}</th><td>{esc(str(v))}</td></tr>" for k, v in alert.where) or \
        '<tr><td class="muted">no topology entry</td></tr>'
    evidence = "".join(f"<li>{esc(str(r))}</li>" for r in row.evidence)
    timeline = "".join(
        f'<tr class="{esc(f.state)}"><td>{_when(f.ts)}</td><td>{esc(f.entity)}</td>'
        f'<td class="state">{esc(f.state)}</td>'
        f'<td>{esc(f.detector)}</td><td>{"<br>".join(esc(str(r)) for r in f.reasons[:3])}</td></tr>'
        for f in findings)
    journal = "".join(
        f'<tr><td>{_when(a.ts)}</td><td>{esc(a.playbook)}</td><td>{esc(a.step)}</td><td>{esc(a.status)}</td>'
        f'<td>{esc(str(a.detail.get("would") or a.detail.get("error") or a.detail.get("note") or ""))}</td></tr>'
        for a in actions)
    cmds = "".join(f"<li><code>{esc(c)}</code></li>" for c in commands(alert))
    status = "open" if row.closed_at is None else f"closed {_when(row.closed_at)} UTC ({esc(row.close_reason or '')})"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{esc(row.id)} · raswarden</title>
<style>{_STYLE}</style></head><body>
<p><a href="/">← status page</a></p>
<h1 class="{esc(row.severity)}">{esc(alert.summary)}</h1>
<p class="muted">{esc(row.id)} · {esc(row.severity)} · {esc(row.category)} · opened {_when(row.opened_at)} UTC
· {status}{f" · under {esc(row.parent)}" if row.parent else ""}</p>
<h2>Where</h2><table class="kv">{place}</table>
<h2>Evidence</h2><ul>{evidence or '<li class="muted">none</li>'}</ul>
<h2>What raswarden did</h2><p>{esc(alert.action or "no action yet (watching)")}</p>
<h2>What to do next</h2><p>{esc(alert.runbook or "-")}</p><ul>{cmds}</ul>
<h2>Findings ({len(findings)}, from an hour before it opened)</h2>
<table><tr><th>when (UTC)</th><th>entity</th><th>state</th><th>detector</th><th>reasons</th></tr>
{timeline or '<tr><td colspan="5" class="muted">none recorded</td></tr>'}</table>
<h2>Action journal</h2>
<table><tr><th>when (UTC)</th><th>playbook</th><th>step</th><th>status</th><th>detail</th></tr>
{journal or '<tr><td colspan="5" class="muted">none</td></tr>'}</table>
</body></html>
"""


