"""The switch side of the fabric: infiniband_exporter's per-switch-port counters (perfquery-based).

infiniband_exporter (treydock/infiniband_exporter) publishes switch port counters by ``guid`` and ``port``
(``infiniband_switch_port_symbol_error_total{guid="0x7cfe9003009ce5b0",port="1"}``) and names each switch
once (``infiniband_switch_info{guid=...,switch="ib-i1l1s01"}``). This collector scrapes it like any
exporter and joins the two, so a counter becomes the entity ``{switch}/{port}``; a switch port the
topology links to a node port (``switchport:``) is then judged as that link's far end.
"""

from __future__ import annotations

import re
from typing import ClassVar

from daemon.ingest.collectors.exposition import ExpositionCollector

_INFO = re.compile(rb'^infiniband_switch_info\{([^}]*)\}', re.M)
_LABEL = re.compile(rb'(\w+)="((?:[^"\\]|\\.)*)"')
_PORT_SERIES = re.compile(rb'^(infiniband_switch_port_\w+\{)(?=[^}]*guid="([^"]+)")', re.M)


def switch_names(body: bytes) -> dict[bytes, bytes]:
    """guid -> switch name from the ``infiniband_switch_info`` series of one scrape."""
    names = {}
    for m in _INFO.finditer(body):
        labels = dict(_LABEL.findall(m.group(1)))
        if b"guid" in labels and b"switch" in labels:
            names[labels[b"guid"]] = labels[b"switch"]
    return names


def with_switch_label(body: bytes) -> bytes:
    """The scrape with ``switch="<name>"`` added to every switch-port series (the guid when unnamed)."""
    names = switch_names(body)

    def add(m: re.Match) -> bytes:
        name = names.get(m.group(2), m.group(2)).replace(b"\\", b"\\\\").replace(b'"', b'\\"')
        return m.group(1) + b'switch="' + name + b'",'

    return _PORT_SERIES.sub(add, body)


class InfinibandExporterCollector(ExpositionCollector):
    """Scrapes infiniband_exporter endpoints; see the module docstring."""

    kind: ClassVar[str] = "infiniband"

    def _parse(self, body: bytes, target: str, url: str, now: float):
        return super()._parse(with_switch_label(body), target, url, now)
