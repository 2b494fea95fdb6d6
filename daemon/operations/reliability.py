"""Fleet reliability figures from the repair orders: what failed, what was replaced before it failed, how long
repairs take, what validation caught, which parts and slots come back; and the HTML report that shows them.

Every figure is computed from the store (``repair_order``, ``entity``) over a period: per part class (accelerator,
port, node), vendor and model (from the order's place in the topology), slot and rack. "Before failure" is an order
opened for a sub-healthy part, "after" one for a part that had failed; MTTR is the time from the order (the drain)
to the node back in service after validation; MTBF is the class's part-hours over the period divided by its orders.
"""

from __future__ import annotations

import datetime as dt
import html
import statistics
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from daemon.operations.repairs import ACTIVE
from daemon.store import RepairOrderRow, Store
from daemon.store.repairs import RepairRecords
from daemon.topology import vendor_of


@dataclass
class Group:
    """Figures of one group of parts (a class, a model, a slot, a rack)."""

    name: str
    orders: int = 0
    before_failure: int = 0
    after_failure: int = 0
    closed: int = 0
    validation_failures: int = 0
    repair_hours: list[float] = field(default_factory=list)

    @property
    def mttr_h(self) -> float | None:
        return statistics.median(self.repair_hours) if self.repair_hours else None

    @property
    def before_share(self) -> float | None:
        known = self.before_failure + self.after_failure
        return self.before_failure / known if known else None

    @property
    def before_text(self) -> str:
        """The share before failure as people read it (``75 %``, ``-`` without orders)."""
        return _fmt(None if self.before_share is None else 100 * self.before_share, " %", 0)

    @property
    def mttr_text(self) -> str:
        """The median time to repair as people read it (``6.0 h``, ``-`` without a closed order)."""
        return _fmt(self.mttr_h, " h")


@dataclass
class Reliability:
    since: float
    until: float
    total: Group
    by_class: dict[str, Group]
    by_model: dict[str, Group]
    by_slot: dict[str, Group]
    by_rack: dict[str, Group]
    parts: dict[str, int]  # part class -> parts known (the entity table)
    repeat_offenders: list[tuple[str, int]]  # part -> orders in the period (2 or more)
    daily: list[tuple[str, int, int]]  # day, orders before failure, after
    queue: list[RepairOrderRow]

    def mtbf_h(self, kind: str) -> float | None:
        """Part-hours of the class over the period per order (None without orders or parts)."""
        g, n = self.by_class.get(kind), self.parts.get(kind, 0)
        if g is None or not g.orders or not n:
            return None
        return n * (self.until - self.since) / 3600.0 / g.orders


def figures(store: Store, since: float, until: float | None = None) -> Reliability:
    """The figures of the orders opened in ``[since, until]`` (the queue: every order under way now)."""
    until = time.time() if until is None else until
    records = RepairRecords(store)
    rows = records.orders_opened(since, until)
    active = records.orders(ACTIVE)
    parts = store.entity_counts()
    total = Group("all")
    groups: dict[str, dict[str, Group]] = {"class": {}, "model": {}, "slot": {}, "rack": {}}
    per_part: Counter = Counter()
    days: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in rows:
        where = dict((str(k), str(v)) for k, v in r.where)
        local = r.part.split("/", 1)[1] if "/" in r.part else "blade"
        model = where.get("model", "")
        vendor = vendor_of(local.rstrip("0123456789").split("_")[0], model) or "unknown"
        keys = {"class": r.kind, "model": f"{vendor} {model}".strip() if model else vendor, "slot": local,
                "rack": r.rack or "-"}
        per_part[r.part] += 1
        day = dt.datetime.fromtimestamp(r.opened_at, dt.UTC).strftime("%Y-%m-%d")
        days[day][0 if r.severity == "subhealthy" else 1] += 1
        for g in [total] + [groups[k].setdefault(v, Group(v)) for k, v in keys.items()]:
            _count(g, r)
    return Reliability(
        since, until, total, groups["class"], groups["model"], groups["slot"], groups["rack"], parts,
        sorted(((p, n) for p, n in per_part.items() if n >= 2), key=lambda x: (-x[1], x[0])),
        sorted((d, b, a) for d, (b, a) in days.items()),
        sorted(active, key=lambda r: (r.priority, r.opened_at)))


def _count(g: Group, r: RepairOrderRow) -> None:
    g.orders += 1
    if r.severity == "subhealthy":
        g.before_failure += 1
    elif r.severity == "failed":
        g.after_failure += 1
    g.validation_failures += sum(1 for h in r.history if h.get("from") == "validating" and h.get("to") == "open")
    if r.state == "closed" and r.closed_at is not None:
        g.closed += 1
        g.repair_hours.append((r.closed_at - r.opened_at) / 3600.0)


# -- the HTML report -----------------------------------------------------------------------------------------------
_STYLE = """body{font-family:sans-serif;margin:1.5em;color:#222;max-width:1100px}h1{font-size:1.4em}
h2{font-size:1.1em;margin-top:1.6em}table{border-collapse:collapse;font-size:.9em}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}.big{font-size:1.6em;font-weight:bold}
.cards{display:flex;gap:1.5em}.card{border:1px solid #ccc;padding:.6em 1em}.muted{color:#777}"""
BEFORE, AFTER = "#2e7d32", "#c62828"


def _fmt(x: float | None, unit: str = "", digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}{unit}"


def bars_svg(items: list[tuple[str, float]], title: str, colour: str = "#1565c0", width: int = 520) -> str:
    """A horizontal bar chart (inline SVG), largest first."""
    if not items:
        return f'<p class="muted">{html.escape(title)}: none</p>'
    top = max(v for _, v in items) or 1.0
    h = 20 * len(items) + 24
    rows = []
    for i, (label, v) in enumerate(items):
        w = int((width - 190) * v / top)
        y = 20 + 20 * i
        rows.append(f'<text x="0" y="{y + 12}" font-size="12">{html.escape(label[:26])}</text>'
                    f'<rect x="180" y="{y}" width="{max(w, 1)}" height="14" fill="{colour}"><title>'
                    f'{html.escape(label)}: {v:g}</title></rect><text x="{184 + w}" y="{y + 12}" font-size="11">'
                    f'{v:g}</text>')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h}" role="img" '
            f'aria-label="{html.escape(title)}"><text x="0" y="12" font-size="13" font-weight="bold">'
            f'{html.escape(title)}</text>{"".join(rows)}</svg>')


def daily_svg(daily: list[tuple[str, int, int]], width: int = 720, height: int = 180) -> str:
    """Orders per day, stacked: before failure (green) under after failure (red)."""
    if not daily:
        return '<p class="muted">no repair orders in the period</p>'
    top = max(b + a for _, b, a in daily) or 1
    step = max(4, min(40, (width - 40) // len(daily)))
    bars = []
    for i, (day, b, a) in enumerate(daily):
        x = 30 + i * step
        hb, ha = (height - 40) * b / top, (height - 40) * a / top
        bars.append(f'<g><title>{day}: {b} before failure, {a} after</title>'
                    f'<rect x="{x}" y="{height - 20 - hb:.1f}" width="{step - 2}" height="{hb:.1f}" fill="{BEFORE}"/>'
                    f'<rect x="{x}" y="{height - 20 - hb - ha:.1f}" width="{step - 2}" height="{ha:.1f}" '
                    f'fill="{AFTER}"/></g>')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
            f'aria-label="repair orders per day"><text x="0" y="12" font-size="13" font-weight="bold">Repair orders '
            f'per day: before failure (green), after (red)</text>{"".join(bars)}<text x="30" y="{height - 4}" '
            f'font-size="11">{daily[0][0]}</text><text x="{width - 80}" y="{height - 4}" font-size="11">'
            f'{daily[-1][0]}</text></svg>')


def report_html(rel: Reliability) -> str:
    """The report: headline figures, orders over time, MTTR by class, worst slots and racks, repeat offenders,
    the repair queue. Plain HTML with inline SVG (no script, no external asset: it opens from a file)."""
    esc = html.escape
    t = rel.total
    day = dt.datetime.fromtimestamp
    period = f"{day(rel.since, dt.UTC):%Y-%m-%d} to {day(rel.until, dt.UTC):%Y-%m-%d} (UTC)"
    cards = "".join(f'<div class="card"><div class="big">{v}</div>{esc(k)}</div>' for k, v in (
        ("repair orders", t.orders), ("replaced before failure", t.before_text),
        ("median time to repair", t.mttr_text), ("caught by validation", t.validation_failures),
        ("repeat offenders", len(rel.repeat_offenders))))
    classes = "".join(
        f"<tr><td>{esc(k)}</td><td>{g.orders}</td><td>{g.before_failure}</td><td>{g.after_failure}</td>"
        f"<td>{g.mttr_text}</td><td>{rel.parts.get(k, 0)}</td><td>{_fmt(rel.mtbf_h(k), ' h', 0)}</td>"
        f"<td>{g.validation_failures}</td></tr>" for k, g in sorted(rel.by_class.items()))
    models = "".join(
        f"<tr><td>{esc(k)}</td><td>{g.orders}</td><td>{g.before_text}</td><td>{g.mttr_text}</td></tr>"
        for k, g in sorted(rel.by_model.items(), key=lambda kv: -kv[1].orders))
    now = time.time()
    queue = "".join(
        f"<tr><td>{r.id}</td><td>{esc(r.state)}</td><td>{_fmt((now - r.opened_at) / 3600, ' h')}</td>"
        f"<td>{esc(r.rack or '-')}</td><td>{esc(r.part)}</td><td>{esc(r.expected)}</td></tr>" for r in rel.queue)
    repeat = "".join(f"<tr><td>{esc(p)}</td><td>{n}</td></tr>" for p, n in rel.repeat_offenders[:20])
    worst_slots = [(k, float(g.orders)) for k, g in sorted(rel.by_slot.items(), key=lambda kv: -kv[1].orders)][:10]
    worst_racks = [(k, float(g.orders)) for k, g in sorted(rel.by_rack.items(), key=lambda kv: -kv[1].orders)][:10]
    mttr = [(k, round(g.mttr_h, 1)) for k, g in sorted(rel.by_class.items()) if g.mttr_h is not None]
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>raswarden reliability report</title>
<style>{_STYLE}</style></head><body>
<h1>Fleet reliability, {esc(period)}</h1>
<div class="cards">{cards}</div>
<h2>Over time</h2>{daily_svg(rel.daily)}
<h2>By part class</h2>
<table><tr><th>class</th><th>orders</th><th>before failure</th><th>after failure</th><th>median repair</th>
<th>parts</th><th>MTBF</th><th>caught by validation</th></tr>{classes or '<tr><td colspan="8">none</td></tr>'}</table>
{bars_svg(mttr, "Median time to repair (h) by class", "#6a1b9a")}
<h2>By vendor and model</h2>
<table><tr><th>model</th><th>orders</th><th>before failure</th><th>median repair</th></tr>
{models or '<tr><td colspan="4">none</td></tr>'}</table>
<h2>Worst slots and racks</h2>{bars_svg(worst_slots, "Orders by slot")}
{bars_svg(worst_racks, "Orders by rack", "#ef6c00")}
<h2>Repeat offenders (two or more orders)</h2>
<table><tr><th>part</th><th>orders</th></tr>{repeat or '<tr><td colspan="2">none</td></tr>'}</table>
<h2>The repair queue now ({len(rel.queue)})</h2>
<table><tr><th>order</th><th>state</th><th>age</th><th>rack</th><th>part</th><th>expected</th></tr>
{queue or '<tr><td colspan="6">none</td></tr>'}</table>
<p class="muted">Before failure: an order opened for a sub-healthy part; after: for a failed one. Repair time: from
the order (the drain) to the node back in service after its validation passed. MTBF: the class's part-hours in the
period per order. Generated by raswarden {day(time.time(), dt.UTC):%Y-%m-%d %H:%M} UTC.</p>
</body></html>
"""
