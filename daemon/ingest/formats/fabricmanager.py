"""NVIDIA Fabric Manager logs (``/var/log/fabricmanager.log``): the NVSwitch errors it reports.

Fabric Manager runs on each NVSwitch-based node (HGX/DGX) and logs what the switches report, in its own
shape (seen in leptonai/gpud's testdata and log matcher), one line each, folded here::

    [Feb 27 2025 15:10:02] [ERROR] [tid 12727] detected NVSwitch non-fatal error 12028 on fid 0 on NVSwitch
        pci bus id 00000000:86:00.0 physical id 3 port 61
    [Jul 23 2024 07:53:55] [ERROR] [tid 841] detected NVSwitch fatal error 20034 on fid 0 on NVSwitch
        pci bus id 00000000:86:00.0 physical id 3 port 33

Each such line is an ``sxid`` event (the same SXid catalog the kernel's ``nvidia-nvswitch`` lines use), on the
node; every other line (inband messages, multicast teams, their continuation lines) is no event. The log names
no host: it is taken from the file name, ``<host>.fabricmanager.log``. Its times carry no zone and are read
in the context's zone (UTC unless the operator names the hosts' local zone), like dmesg's.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from pathlib import Path

from daemon.ingest.batch import Batch
from daemon.ingest.formats.reader import ReadContext, iter_lines, note_zoneless
from daemon.ingest.formats.kernel_events import KernelEvent
from daemon.ingest.formats.kernellog import EventRows
from daemon.topology import normalize_pci
from daemon.timetext import zoneless_epoch

FORMAT = "fabricmanager"
STAMP = re.compile(r"^\[([A-Z][a-z]{2} +\d{1,2} \d{4} \d{2}:\d{2}:\d{2})\] \[([A-Z]+)\] ")
_SWITCH_ERROR = re.compile(
    r"detected NVSwitch (fatal|non-fatal) error (\d+) on fid \d+ on NVSwitch pci bus id ([0-9A-Fa-f:.]+)"
    r"(?: physical id (\d+))?(?: port (\d+))?"
)


def host_of_log(path: Path) -> str | None:
    """The host of a Fabric Manager log from its file name (``<host>.fabricmanager.log``), or None."""
    host, sep, _ = path.name.partition(".fabricmanager")
    return host if sep and host else None


class FabricManagerReader:
    """NVSwitch fatal and non-fatal errors from a Fabric Manager log."""

    format = FORMAT

    def read(self, path: Path, ctx: ReadContext) -> Iterator[Batch]:
        src = str(path)
        host = host_of_log(path)
        if host is None:
            ctx.rejects.refuse(FORMAT, f"{src}:1", "a Fabric Manager log names no host: name the file "
                                                  "'<host>.fabricmanager.log'")
            return
        rows = EventRows(ctx, FORMAT, "fabricmanager")
        latest = None
        for first, lines in iter_lines(path, ctx.read_bytes, ctx.rejects, FORMAT):
            for offset, line in enumerate(lines):
                stamp = STAMP.match(line)
                if stamp is None:
                    continue  # blank lines and the continuation lines of a multi-line message
                m = _SWITCH_ERROR.search(line, stamp.end())
                if m is None:
                    continue
                position = f"{src}:{first + offset}"
                try:
                    ts = dt.datetime.strptime(" ".join(stamp.group(1).split()), "%b %d %Y %H:%M:%S")
                except ValueError:
                    ctx.rejects.reject(FORMAT, position, "bad time stamp", line)
                    continue
                fatal = m.group(1) == "fatal"
                where = f"NVSwitch physical id {m.group(4)}" if m.group(4) else "NVSwitch"
                if m.group(5):
                    where += f" port {m.group(5)}"
                message = f"{where}: Fabric Manager reports a {m.group(1)} error {m.group(2)}"
                event = KernelEvent("sxid", int(m.group(2)), "fatal" if fatal else "error", message,
                                    normalize_pci(m.group(3)))
                at = zoneless_epoch(ts, ctx.zone)
                latest = at if latest is None else max(latest, at)
                rows.append_event(at, host, event, position)
            if len(rows.rows) >= ctx.chunk_rows:
                yield rows.take()
        if rows.rows:
            yield rows.take()
        if latest is not None:
            note_zoneless(ctx, FORMAT, src, path, latest)
