"""raswarden's HTTP endpoint (loopback by default): metrics, health, the status page and the JSON API.

| method | path | what |
|---|---|---|
| GET | ``/metrics`` | raswarden's own Prometheus metrics |
| GET | ``/healthz`` | 200 when the store is writable and the collectors answer, else 503 (JSON says why) |
| GET | ``/``, ``/incidents`` | the status page: heatmap, open incidents, the repair queue, actions, silences |
| GET | ``/incidents/{id}``, ``/repairs/{id}`` | an incident's page, a repair order's page (the links in alerts) |
| GET | ``/api/v1/entities``, ``/api/v1/incidents[?status=open]``, ``/api/v1/actions``, ``/api/v1/silences`` | JSON |
| POST | ``/api/v1/incidents/{id}/approve`` ``{"by"}`` | approve an action waiting for an operator |
| POST | ``/api/v1/silences`` ``{"matchers", "duration", "comment", "by"}`` | add a silence |
| POST | ``/api/v1/nodes/{node}/resume`` ``{"reason", "by", "force", "repaired"}`` (``/drain``) | by hand |
| GET | ``/api/v1/repairs[?state=all]`` | repair orders: the queue (open to validating), or all |
| GET | ``/api/v1/idle-checks`` | the active checks of idle nodes: each node's running or last one |
| GET | ``/api/v1/advice``, ``/api/v1/advice/{job}`` | checkpoint advice: the foresight and every job's, or one |
| POST | ``/api/v1/repairs/{id}/start`` ``{"by", "note"}`` (``/done`` + ``"part_serial"``, ``/give-back``) | by hand |

Writes need ``Authorization: Bearer <token>`` (``[http] token_file``/``token_credential``); without a
configured token they are refused. The page is plain HTML and inline SVG: no script, no external asset.

A long-running service cannot let one client hold it: requests are read whole by ``daemon/httpserver.py`` under a
deadline (``request_timeout_s``) before a thread sees them, with caps on connections in all and per peer, and threads
of their own for ``/healthz`` and ``/metrics``, so a slow or stuck client never starves Prometheus' scrape or the API.
"""

from __future__ import annotations

import hmac
import html
import io
import json
import logging
import time
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlmodel import select

from daemon import metrics
from daemon.alerting.silences import DEFAULT_SILENCE, SilenceBook
from daemon.httpserver import MAX_BODY, BoundedHTTPServer
from daemon.operator import OperatorError, add_silence, approve, node_action
from daemon.store import ActionRow, EntityRow

log = logging.getLogger("raswarden.web")

COLOURS = {"healthy": "#2e7d32", "suspect": "#f9a825", "subhealthy": "#ef6c00", "failed": "#c62828",
           "unknown": "#757575"}


def _states(service) -> dict[str, str]:
    """Current visible state per entity: the pipeline's, else the store's last record."""
    out = {h.entity: h.state for h in service.store.health()}
    pipeline = service.pipeline
    for entity, h in pipeline.health.entities.items():
        out[entity] = h.state.label
    for entity, state in pipeline.reported.items():
        if "/" not in entity:
            out[entity] = state.label
    return out


def entities_json(service) -> list[dict]:
    states = _states(service)
    with service.store.session() as s:
        rows = s.exec(select(EntityRow).order_by(EntityRow.id)).all()
    return [{"id": r.id, "kind": r.kind, "node": r.node, "rack": r.rack,
             "state": states.get(r.id, "healthy")} for r in rows]


def incidents_json(service, status: str | None) -> list[dict]:
    return [{"id": r.id, "entity": r.entity, "kind": r.kind, "category": r.category, "severity": r.severity,
             "status": r.status, "opened_at": r.opened_at, "updated_at": r.updated_at, "closed_at": r.closed_at,
             "rack": r.rack, "parent": r.parent, "evidence": r.evidence}
            for r in service.store.incidents(status)]


def actions_json(service, limit: int = 200) -> list[dict]:
    with service.store.session() as s:
        rows = s.exec(select(ActionRow).order_by(ActionRow.ts.desc()).limit(limit)).all()
    return [{"key": r.idempotency_key, "incident": r.incident_id, "playbook": r.playbook, "step": r.step,
             "status": r.status, "ts": r.ts, "detail": r.detail} for r in rows]


def silences_json(service) -> list[dict]:
    now = time.time()
    return [{"id": s.id, "matchers": [str(m) for m in s.matchers], "starts_at": s.starts_at, "ends_at": s.ends_at,
             "by": s.created_by, "comment": s.comment} for s in SilenceBook(service.store).active(now)]


# -- the status page ------------------------------------------------------------------------------
RANK = {"healthy": 0, "suspect": 1, "unknown": 2, "subhealthy": 3, "failed": 4}
COMPACT_ABOVE = 160
"""Above this many nodes the heatmap draws one square per node (16 scaleX640 supernodes are 1,280 blades)."""


def repairs_json(service, everything: bool = False) -> list[dict]:
    """Repair orders, the queue's order (daemon/repairs.py): open to validating, or all."""
    from daemon.repairs import ACTIVE

    return [r.model_dump() for r in service.remediation.repairs.orders(None if everything else ACTIVE)]


def advice_json(service, job: str | None = None) -> dict | None:
    """The checkpoint advice as last made (daemon/advice.py): the foresight it stands on and every job's, or one
    job's (None: no advice for it)."""
    advice = service.advisor.last
    if job is not None:
        return advice[job].as_dict() if job in advice else None
    fs = service.advisor.foresight
    return {"foresight": fs.summary(service.cfg.advice.quantile) if fs is not None else None,
            "jobs": {j: a.as_dict() for j, a in sorted(advice.items())}}


def idle_checks_json(service) -> list[dict]:
    """The active checks of idle nodes (daemon/validation.py): each node's running or last one."""
    return [r.model_dump() for r in service.remediation.validator.checks()]


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
    """The last 30 days of repair orders in one line (daemon/reliability.py)."""
    from daemon.reliability import figures

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
    from daemon.repairs import RepairError

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
    actions = service.store.actions_of(row.id)
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


# -- the server -----------------------------------------------------------------------------------
PAGES = {"incidents": (incident_page, "incident"), "repairs": (repair_page, "repair order")}
"""``/<what>/<id>`` pages: the renderer (None: no such one) and what a 404 says is missing."""


def _handler(service, token: str | None):
    class Handler(BaseHTTPRequestHandler):
        """One whole request (read by the server) in ``raw``; the response collects in ``wfile``."""

        server_version = "raswarden"

        def __init__(self, raw: bytes, client_address: tuple):
            self.raw = raw
            super().__init__(None, client_address, None)  # runs setup, handle and finish

        def setup(self) -> None:
            self.rfile, self.wfile = io.BytesIO(self.raw), io.BytesIO()

        def finish(self) -> None:
            pass  # the response stays in wfile for the server to send

        def _send(self, status: int, body: bytes | str, ctype: str = "application/json") -> None:
            data = body.encode() if isinstance(body, str) else body
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(data)

        def _json(self, status: int, obj) -> None:
            self._send(status, json.dumps(obj, default=str, indent=1) + "\n")

        def do_GET(self):  # noqa: N802 (http.server's name)
            url = urlsplit(self.path)
            path = url.path.rstrip("/") or "/"
            try:
                if path == "/metrics":
                    self._send(200, generate_latest(metrics.REGISTRY), CONTENT_TYPE_LATEST)
                elif path == "/healthz":
                    ok, detail = service.healthz()
                    self._json(200 if ok else 503, detail)
                elif path in ("/", "/incidents"):
                    self._send(200, status_page(service), "text/html; charset=utf-8")
                elif path.count("/") == 2 and path.split("/")[1] in PAGES:
                    render, what = PAGES[path.split("/")[1]]
                    page = render(service, path.rsplit("/", 1)[1])
                    if page is None:
                        self._send(404, f"no {what} {html.escape(path.rsplit('/', 1)[1])}\n", "text/plain")
                    else:
                        self._send(200, page, "text/html; charset=utf-8")
                elif path == "/api/v1/entities":
                    self._json(200, entities_json(service))
                elif path == "/api/v1/incidents":
                    status = parse_qs(url.query).get("status", [None])[0]
                    self._json(200, incidents_json(service, status))
                elif path == "/api/v1/actions":
                    self._json(200, actions_json(service))
                elif path == "/api/v1/silences":
                    self._json(200, silences_json(service))
                elif path == "/api/v1/repairs":
                    self._json(200, repairs_json(service, parse_qs(url.query).get("state", [""])[0] == "all"))
                elif path == "/api/v1/idle-checks":
                    self._json(200, idle_checks_json(service))
                elif path == "/api/v1/advice":
                    self._json(200, advice_json(service))
                elif path.startswith("/api/v1/advice/") and path.count("/") == 4:
                    one = advice_json(service, path.rsplit("/", 1)[1])
                    self._json(200 if one is not None else 404,
                               one if one is not None else {"error": "no advice for that job (not running, not "
                                                                     "opted in, or not advised yet)"})
                else:
                    self._json(404, {"error": f"no such path {url.path}"})
            except Exception as exc:
                log.exception("GET %s failed", url.path)
                self._json(500, {"error": type(exc).__name__})

        def do_POST(self):  # noqa: N802
            url = urlsplit(self.path)
            if token is None:
                why = getattr(getattr(getattr(service, "cfg", None), "http", None), "token_error", None)
                self._json(403, {"error": "the API's write calls are off: " + (
                    why or "set [http] token_file or token_credential")})
                return
            given = self.headers.get("Authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
                self._json(401, {"error": "missing or wrong bearer token"})
                return
            try:  # the server read the body whole, its length checked: the rest of rfile is the body
                body = json.loads(self.rfile.read(MAX_BODY) or b"{}")
                if not isinstance(body, dict):
                    raise ValueError("expected a JSON object")
            except ValueError as exc:
                self._json(400, {"error": f"bad JSON body: {exc}"})
                return
            parts = [p for p in url.path.split("/") if p]
            who = str(body.get("by") or "api")
            try:
                if parts[:3] == ["api", "v1", "incidents"] and len(parts) == 5 and parts[4] == "approve":
                    self._json(200, {"approved": approve(service.remediation, parts[3], who)})
                elif parts == ["api", "v1", "silences"]:
                    matchers = body.get("matchers")
                    if not isinstance(matchers, list) or not matchers:
                        raise OperatorError("matchers: a non-empty list such as [\"rack=r07\"]", 400)
                    duration = str(body.get("duration", DEFAULT_SILENCE))
                    sil = add_silence(service.store, [str(m) for m in matchers], duration, who,
                                      str(body.get("comment", "")))
                    self._json(201, {"id": sil.id, "ends_at": sil.ends_at})
                elif parts[:3] == ["api", "v1", "repairs"] and len(parts) == 5 and \
                        parts[4] in ("start", "done", "give-back"):
                    from daemon.repairs import RepairError

                    book, note = service.remediation.repairs, str(body.get("note", ""))
                    try:
                        order_id = int(parts[3])
                        row = book.start(order_id, who, note) if parts[4] == "start" else \
                            book.give_back(order_id, who, note) if parts[4] == "give-back" else \
                            book.done(order_id, who, str(body.get("part_serial", "")), note)
                    except ValueError as exc:  # RepairError is one; so is a non-numeric id
                        raise OperatorError(str(exc) if isinstance(exc, RepairError) else
                                            f"no repair order {parts[3]}",
                                            409 if "can go to" in str(exc) else 404) from None
                    self._json(200, row.model_dump())
                elif parts[:3] == ["api", "v1", "nodes"] and len(parts) == 5 and parts[4] in ("drain", "resume"):
                    from daemon.remediation import scheduler_from_config

                    text = node_action(scheduler_from_config(service.cfg), service.store, parts[4], parts[3],
                                       str(body.get("reason", "")), who, bool(body.get("force", False)),
                                       repaired=parts[4] == "resume" and bool(body.get("repaired", False)))
                    self._json(200, {"done": text})
                else:
                    self._json(404, {"error": f"no such path {url.path}"})
            except OperatorError as exc:
                self._json(exc.status, {"error": str(exc)})
            except Exception as exc:
                log.exception("POST %s failed", url.path)
                self._json(500, {"error": type(exc).__name__})

        def log_message(self, fmt, *args):
            log.debug("%s %s", self.address_string(), fmt % args)

    return Handler


def answer_with(handler) -> callable:
    """The server's application: one whole request's bytes in, the handler's whole response out."""

    def answer(raw: bytes, peer: tuple) -> bytes:
        return handler(raw, peer).wfile.getvalue()

    return answer


class WebServer:
    """The HTTP endpoint: :class:`BoundedHTTPServer` answering with raswarden's pages and API."""

    def __init__(self, service, http_cfg):
        host, _, port = http_cfg.listen.rpartition(":")
        address = (host.strip("[]") or "127.0.0.1", int(port))
        self.server = BoundedHTTPServer(address, answer_with(_handler(service, http_cfg.token)),
                                        max_connections=http_cfg.max_connections,
                                        max_per_peer=http_cfg.max_connections_per_peer,
                                        deadline_s=http_cfg.request_timeout_s)

    @property
    def address(self) -> str:
        host, port = self.server.server_address[:2]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def start(self) -> None:
        self.server.start()

    def stop(self) -> None:
        self.server.stop()
