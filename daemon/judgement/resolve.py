"""Resolve events to the entity they concern, and merge the same fact seen by two sources.

Kernel lines name hardware by PCI address or netdev; the collector's job (docs/architecture.md §4) is to
map that to an accelerator (through dcgm-exporter's ``pci_bus_id`` label or the topology) or a
fabric port (through the topology). An address that maps to nothing stays on the node, with the
address in the message, rather than inventing an entity.

dcgm-exporter's ``DCGM_FI_DEV_XID_ERRORS`` is a gauge holding the last Xid; a change to a non-zero
value is an Xid event. The first value seen is a baseline (it may be an old Xid), not an event. When
the kernel line and the gauge report the same Xid on the same GPU within ``window_s``, they are one
event.

npu-exporter's ``npu_chip_info_error_code`` (and ``_1`` to ``_9``) hold the fault codes active on an Ascend
NPU, one per series, 0 for none. A code that appears in a slot where it was not (and in no other slot of
the NPU) is an ``ascend`` event, the first sight included: an active fault is a fault now. A slot not
reported for ``slot_expiry_s`` is forgotten (newer exporters report only as many slots as there are codes).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from daemon.ingest.naming import SeriesMapper
from daemon.topology import normalize_pci
from detectors.schema import EVENT_COLUMNS, NamesWhere, event_rows, events_frame, name_codes, names_in


NPU_CODE_PREFIX = "npu_error_code_"
#: AMD device-metrics-exporter's gpu_afid_errors, one gauge per afid_index: the AMD Field IDs of the GPU's last RAS
#: event (ROCm/device-metrics-exporter, GPU_AFID_ERRORS)
AFID_CODE_PREFIX = "afid_code_"
# slot gauges -> the event they make of a code's arrival: (kind, message, source)
_SLOT_EVENTS = {NPU_CODE_PREFIX: ("ascend", "reported by npu-exporter npu_chip_info_error_code", "npu-exporter"),
                AFID_CODE_PREFIX: ("afid", "reported by AMD device-metrics-exporter gpu_afid_errors",
                                   "amd-device-metrics-exporter")}
#: dcgm-exporter's DCGM_EXP_XID_ERRORS_COUNT, one gauge per Xid code: how many of that Xid the GPU had in the
#: exporter's window (``window_size_in_ms``, 5 minutes by default; NVIDIA/dcgm-exporter pull request 239), and
#: DCGM_EXP_XID_ERRORS_TOTAL, how many since the exporter started
XID_COUNT_PREFIX = "xid_count_"
XID_TOTAL_PREFIX = "xid_total_"
_XID_GAUGE = ("xid_last",)
_XID_COUNTS = NamesWhere(lambda m: m.startswith((XID_COUNT_PREFIX, XID_TOTAL_PREFIX)))
_MAX_XIDS_A_SAMPLE = 100  # a window's count read as events: a storm is told, not replayed one by one


_MAX_CODE = 0xFFFFFFFF  # fault codes are 32 bits (Ascend's are 32-bit hex; Xids and AFIDs are small)


def fault_code(value: float) -> int | None:
    """A gauge's value as a fault code: a whole number from 1 to 2^32 - 1, else None (0 and NaN: no code)."""
    if not (1 <= value <= _MAX_CODE) or value != int(value):
        return None
    return int(value)


def is_code_gauge(metric: str) -> bool:
    """Whether a canonical gauge holds fault codes (events are made of its changes, not its level)."""
    return metric == "xid_last" or metric.startswith((NPU_CODE_PREFIX, AFID_CODE_PREFIX, XID_COUNT_PREFIX,
                                                      XID_TOTAL_PREFIX))


class EventResolver:
    """Maps kernel-log locators to entities and merges duplicate Xids."""

    def __init__(self, mapper: SeriesMapper, window_s: float = 120.0, slot_expiry_s: float = 600.0):
        self.mapper = mapper
        self.window_s = window_s
        self.slot_expiry_s = slot_expiry_s
        self._code_slots: dict[str, dict[str, tuple[float, float]]] = {}  # NPU or GPU -> slot -> (code, last seen)
        self.unresolved = 0
        self._xid_last: dict[str, float] = {}
        self._nonzero: set[str] = set()
        self._masks: tuple[np.ndarray, ...] | None = None  # see _gauge_masks
        self._recent_xid: dict[tuple[str, int], tuple[float, str]] = {}
        self._xid_counts: dict[tuple[str, str], float] = {}  # (GPU, xid_count_N) -> its last count
        self.merged = 0

    def _entity(self, node: str, kind: str, pci: str | None, device: str | None) -> str:
        topo = self.mapper.topology
        if kind == "link":
            if device and ":" in device:  # the RDMA core names the port itself: "mlx5_5:1"
                return f"{node}/{device}"
            port = (topo.port_at(node, pci) if pci else None) or (
                topo.netdev_port.get((node, device)) if device else None)
            return port or node
        if pci is None:
            return node
        acc = self.mapper.accelerator_at(node, normalize_pci(pci) or pci)
        if acc is not None:
            return acc
        port = topo.port_at(node, pci)
        return port or node

    def resolve(self, events: pd.DataFrame) -> pd.DataFrame:
        """Events with ``entity`` set to the accelerator/port where the locator says so."""
        if events.empty:
            return events
        rows = []
        for r in event_rows(events):
            rec = dict(zip(EVENT_COLUMNS, r))
            for col in ("pci", "device"):  # a column of None and strings may come back from a frame as NaN
                if not isinstance(rec[col], str):
                    rec[col] = None
            if "/" not in rec["entity"] and (rec["pci"] or rec["device"]):
                entity = self._entity(rec["entity"], rec["kind"], rec["pci"], rec["device"])
                if entity == rec["entity"]:
                    self.unresolved += 1
                    where = rec["pci"] or rec["device"]
                    rec["message"] = f"{rec['message']} (device {where} not mapped to an accelerator or port)"
                rec["entity"] = entity
            rows.append(tuple(rec[c] for c in EVENT_COLUMNS))
        return events_frame(rows)

    def _not_a_code(self, entity: str, metric: str, ts: float, value) -> None:
        """Say and count a fault-code gauge's reading that is no code (a value out of 32 bits, a fraction, a label
        that is no number): its reading is dropped, the rest goes on."""
        self.mapper.rejects.reject("fault_code_gauge", f"{metric} of {entity} at {ts:.0f}",
                                   f"not a fault code: {value!r} (a whole number from 1 to {_MAX_CODE})")

    def code_gauge_events(self, gauges: pd.DataFrame) -> list[tuple]:
        """Events from the fault-code gauges (rows: entity, metric, ts, value, in time order)."""
        if gauges.empty:
            return []
        is_xid = names_in(gauges["metric"], _XID_GAUGE)
        out = self.xid_gauge_events(gauges if is_xid.all() else gauges[is_xid]) if is_xid.any() else []
        if not is_xid.all():
            rest = gauges[~is_xid]
            counts = names_in(rest["metric"], _XID_COUNTS)
            if counts.any():
                out += self.xid_count_events(rest[counts])
            if not counts.all():
                out += self.slot_code_events(rest[~counts])
        return out

    def xid_count_events(self, gauges: pd.DataFrame) -> list[tuple]:
        """Xid events from dcgm-exporter's counts of each Xid (rows: entity, metric, ts, value, in time order): a
        count that rose by n is n new Xids of that code. A window's count (``xid_count_``) is news at first sight too
        (its series appears with the Xid); it falls as Xids age out of the window, a total (``xid_total_``) when the
        exporter restarts: no event. A total at first sight is a baseline (Xids since the exporter started)."""
        out = []
        for e, m, ts, v in zip(gauges["entity"], gauges["metric"], gauges["ts"].tolist(), gauges["value"].tolist()):
            v = float(v)
            if not np.isfinite(v) or v < 0:
                continue
            key = (e, m)
            window = m.startswith(XID_COUNT_PREFIX)
            prev = self._xid_counts.get(key, 0.0 if window else None)
            self._xid_counts[key] = v
            if prev is None:
                continue
            text = m[len(XID_COUNT_PREFIX if window else XID_TOTAL_PREFIX):]
            code = fault_code(float(text)) if text.isdigit() else None
            if code is None:
                self._not_a_code(e, m, float(ts), text)
                continue
            field_name = "DCGM_EXP_XID_ERRORS_COUNT" if window else "DCGM_EXP_XID_ERRORS_TOTAL"
            for _ in range(min(int(v - prev), _MAX_XIDS_A_SAMPLE)):
                out.append((float(ts), e, "xid", code, "error", f"reported by dcgm-exporter {field_name}",
                            "dcgm-exporter", None, None))
        return out

    def slot_code_events(self, gauges: pd.DataFrame) -> list[tuple]:
        """Events from fault-code slots: ``ascend`` of npu-exporter's error-code slots (see the module doc), ``afid``
        of AMD device-metrics-exporter's AFID slots. The slots of one part at one time are read together: a code
        moving to another slot as a second one arrives is not new, nor is a code a slot holds on (AMD's: the last
        event's AFIDs, until the next event; one with the same AFIDs is not told apart)."""
        entity, metric = np.asarray(gauges["entity"], dtype=object), np.asarray(gauges["metric"], dtype=object)
        value, ts = np.asarray(gauges["value"]), np.asarray(gauges["ts"])
        # Rows that can change something: a code, or a slot of an NPU that holds one.
        watch = value != 0
        if self._code_slots:
            watch |= np.fromiter((e in self._code_slots for e in entity), dtype=bool, count=len(entity))
        scrapes: dict[tuple[str, float], list[int]] = {}
        for i in np.flatnonzero(watch):
            scrapes.setdefault((entity[i], float(ts[i])), []).append(i)
        out = []
        for (e, t), members in scrapes.items():
            slots = self._code_slots.setdefault(e, {})
            for s in [s for s, (_, seen) in slots.items() if t - seen > self.slot_expiry_s]:
                del slots[s]
            before = {c for c, _ in slots.values()}
            for i in members:
                v = float(value[i])
                if v > 0 and np.isfinite(v) and fault_code(v) is None:
                    self._not_a_code(e, metric[i], t, v)
                    v = 0.0
                if v > 0 and np.isfinite(v):
                    slots[metric[i]] = (v, t)
                else:
                    slots.pop(metric[i], None)
            new = sorted({c for c, _ in slots.values()} - before)
            if new:  # (a part's slots are one exporter's: an NPU's or a GPU's AFIDs)
                kind, said, source = _SLOT_EVENTS[
                    AFID_CODE_PREFIX if metric[members[0]].startswith(AFID_CODE_PREFIX) else NPU_CODE_PREFIX]
                out += [(t, e, kind, int(code), "error", said, source, None, None) for code in new]
            if not slots:
                del self._code_slots[e]
        return out

    def xid_gauge_events(self, gauges: pd.DataFrame) -> list[tuple]:
        """Xid events from changes of the ``xid_last`` gauge (rows: entity, ts, value, in time order)."""
        if gauges.empty:
            return []
        codes, names = name_codes(gauges["entity"])
        value, stamp = np.asarray(gauges["value"]), np.asarray(gauges["ts"])
        known, nonzero, last = self._gauge_masks(names)
        # Only rows that can change something: a non-zero value, a first sight, or a GPU whose last was non-zero.
        watch = np.flatnonzero(((value != 0) | ~known[codes] | nonzero[codes]) & (codes >= 0))
        if len(watch) > 1:  # a gauge holding its value changes nothing: the first row of a run of a GPU's is enough
            by_gpu = watch[np.argsort(codes[watch], kind="stable")]
            v = value[by_gpu]
            held = np.zeros(len(by_gpu), dtype=bool)
            same = (v[1:] == v[:-1]) | (np.isnan(v[1:]) & np.isnan(v[:-1]))
            held[1:] = (codes[by_gpu[1:]] == codes[by_gpu[:-1]]) & same
            # ... and a GPU's first row that holds the value it last had (a GPU whose last Xid stays on the gauge:
            # read again every scrape, for the rest of its life)
            first = np.ones(len(by_gpu), dtype=bool)
            first[1:] = codes[by_gpu[1:]] != codes[by_gpu[:-1]]
            held |= first & known[codes[by_gpu]] & (v == last[codes[by_gpu]])
            watch = np.sort(by_gpu[~held])
        out = []
        for i in watch:
            c = codes[i]
            e, v, ts = names[c], float(value[i]), float(stamp[i])
            prev = self._xid_last.get(e)
            self._xid_last[e] = last[c] = v
            known[c] = True
            nonzero[c] = v != 0 and not np.isnan(v)
            if nonzero[c]:
                self._nonzero.add(e)
            else:
                self._nonzero.discard(e)
            if prev is None or v == prev or v <= 0 or np.isnan(v):
                continue
            if fault_code(v) is None:
                self._not_a_code(e, "xid_last", ts, v)
                continue
            out.append((ts, e, "xid", int(v), "error",
                        "reported by dcgm-exporter DCGM_FI_DEV_XID_ERRORS", "dcgm-exporter", None, None))
        return out

    def _gauge_masks(self, names: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Which of the names have an Xid gauge reading, which a non-zero one, and the last (NaN: none), kept while
        the names are the same array (see ``name_codes``) and updated with the readings."""
        cached = self._masks
        if cached is None or cached[0] is not names:
            known = np.fromiter((e in self._xid_last for e in names), dtype=bool, count=len(names))
            nonzero = np.fromiter((e in self._nonzero for e in names), dtype=bool, count=len(names))
            last = np.fromiter((self._xid_last.get(e, np.nan) for e in names), dtype=float, count=len(names))
            cached = self._masks = (names, known, nonzero, last)
        return cached[1], cached[2], cached[3]

    def merge_xids(self, events: pd.DataFrame, now: float) -> pd.DataFrame:
        """Drop an Xid already reported for the same GPU and code by the other source within the window.

        Events are put in time order with, at equal times, the kernel line first: it carries the Xid's
        text (Xid 154's recovery action, say), which the gauge lacks, so it is the one kept.
        """
        if events.empty:
            return events
        ts, entity = events["ts"].tolist(), events["entity"].tolist()
        rank = [s != "kernel" for s in events["source"].tolist()]
        # (ts, entity, the kernel line first), stable: a tick's few events sorted in Python, not by a frame's sort
        order = sorted(range(len(events)), key=lambda i: (ts[i], entity[i], rank[i]))
        if order != list(range(len(events))):
            events = events.take(order).reset_index(drop=True)
        keep = np.ones(len(events), dtype=bool)
        for i, (kind, entity, code, ts, source) in enumerate(zip(*(events[c].tolist() for c in (
                "kind", "entity", "code", "ts", "source")))):
            if kind != "xid" or pd.isna(code):
                continue
            key = (entity, int(code))
            seen = self._recent_xid.get(key)
            # Only the other source's report of the same Xid is the same fact: the kernel repeating an Xid (another
            # process, another channel) is another event, which the application-Xid rule counts.
            if seen is not None and seen[1] != source and abs(ts - seen[0]) <= self.window_s:
                if source == "kernel" and seen[1] != "kernel":
                    # the gauge was read first (a scrape stamped before the line, or clocks apart): the kernel line
                    # is kept too, for what only it says (Xid 154's recovery action, the process)
                    self._recent_xid[key] = (ts, source)
                    continue
                keep[i] = False
                self.merged += 1
                continue
            self._recent_xid[key] = (ts, source)
        if len(self._recent_xid) > 10_000:
            self._recent_xid = {k: v for k, v in self._recent_xid.items() if now - v[0] <= self.window_s}
        return events if keep.all() else events[keep].reset_index(drop=True)
