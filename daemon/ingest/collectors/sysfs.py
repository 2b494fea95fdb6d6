"""The local host's own hardware counters, read from sysfs (``root`` is configurable, for tests and containers).

What it reads, with the canonical names it gives (the same as node_exporter's through docs/names.md, so
detectors cannot tell the sources apart), for the node ``node`` (default: this host's name):

* InfiniBand / RoCE ports, ``class/infiniband/<dev>/ports/<port>/``: ``counters/*`` (symbol errors, link
  error recovery, link downed, receive errors, ...; data counters are in 4-byte words, as the IBA
  specification says, and are turned into bytes), ``state`` and ``phys_state`` (the number before the
  colon), ``rate`` (bytes per second); and ``hw_counters/*``, the RoCE counters node_exporter does not
  export (out-of-sequence, local ACK timeouts, CNPs, ...) as ``roce_*_total``. ``N/A (no PMA)`` is no data.
* EDAC memory controllers, ``devices/system/edac/mc/mc<N>/{ce,ue}_count`` → ``edac_ce_total``/``edac_ue_total``.
* hwmon temperatures (``class/hwmon/hwmon*/temp*_input``, millidegrees) and thermal zones.
* PCIe AER counters, ``devices/pci*/**/aer_dev_{correctable,nonfatal,fatal}`` (``TOTAL_ERR_*`` lines) →
  ``aer_{correctable,nonfatal,fatal}_total`` on the accelerator at that PCI address when one is known,
  else on ``{node}/pci-<address>``.

A file that cannot be read or parsed is rejected with its path; the rest of the tree is read.
"""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from daemon.ingest.batch import Batch
from daemon.ingest.collectors.collector import Collector, Outcome
from daemon.ingest.formats.openmetrics import samples_frame
from daemon.topology import normalize_pci

FORMAT = "sysfs"

#: counters/<file> -> (canonical metric, multiplier)
IB_COUNTERS = {
    "symbol_error": ("symbol_error_total", 1),
    "link_error_recovery": ("link_error_recovery_total", 1),
    "link_downed": ("link_downed_total", 1),
    "port_rcv_errors": ("rcv_errors_total", 1),
    "port_rcv_remote_physical_errors": ("rcv_remote_physical_errors_total", 1),
    "port_xmit_discards": ("xmit_discards_total", 1),
    "excessive_buffer_overrun_errors": ("excessive_buffer_overrun_total", 1),
    "local_link_integrity_errors": ("local_link_integrity_errors_total", 1),
    "port_xmit_wait": ("xmit_wait_total", 1),
    "port_rcv_data": ("rcv_bytes_total", 4),
    "port_xmit_data": ("xmit_bytes_total", 4),
}
#: hw_counters/<file> (mlx5 RoCE) -> canonical metric
ROCE_COUNTERS = {
    "out_of_sequence": "roce_out_of_sequence_total",
    "packet_seq_err": "roce_packet_seq_err_total",
    "local_ack_timeout_err": "roce_local_ack_timeout_err_total",
    "rnr_nak_retry_err": "roce_rnr_nak_retry_err_total",
    "implied_nak_seq_err": "roce_implied_nak_seq_err_total",
    "duplicate_request": "roce_duplicate_request_total",
    "req_cqe_error": "roce_req_cqe_error_total",
    "resp_cqe_error": "roce_resp_cqe_error_total",
    "np_cnp_sent": "roce_cnp_sent_total",
    "rp_cnp_handled": "roce_cnp_handled_total",
    "np_ecn_marked_roce_packets": "roce_ecn_marked_total",
    "roce_adp_retrans": "roce_adp_retrans_total",
    "roce_slow_restart": "roce_slow_restart_total",
}
AER_FILES = {"aer_dev_correctable": ("aer_correctable_total", "TOTAL_ERR_COR"),
             "aer_dev_nonfatal": ("aer_nonfatal_total", "TOTAL_ERR_NONFATAL"),
             "aer_dev_fatal": ("aer_fatal_total", "TOTAL_ERR_FATAL")}
_RATE = re.compile(r"^\s*([\d.]+)\s*Gb/sec")
_PCI_DIR = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
AER_RESCAN_S = 600.0


class SysfsCollector(Collector):
    """Reads this host's sysfs; see the module docstring."""

    kind: ClassVar[str] = "sysfs"
    options: ClassVar[dict[str, Any]] = {"root": "/sys", "node": ""}

    def __init__(self, name, ctx, **options):
        super().__init__(name, ctx, **options)
        host = self.node or socket.gethostname().split(".")[0]
        self.node_id = ctx.mapper.topology.resolve_host(host) or host
        self._sids: dict[tuple[str, str], int] = {}
        self._aer_files: list[Path] = []
        self._aer_scanned = float("-inf")

    def _sid(self, entity: str, metric: str) -> int:
        key = (entity, metric)
        sid = self._sids.get(key)
        if sid is None:
            sid = self._sids[key] = self.ctx.mapper.canonical_series(entity, metric)
        return sid

    def _read(self, path: Path) -> str | None:
        try:
            return path.read_text().strip()
        except OSError as exc:
            self.ctx.rejects.reject(FORMAT, str(path), f"cannot read: {exc.strerror or exc}")
            return None

    def _number(self, path: Path, out: list, entity: str, metric: str, scale: float = 1.0) -> None:
        text = self._read(path)
        if text is None or text.startswith("N/A"):
            return  # e.g. "N/A (no PMA)": this port has no counters, not an error
        head = text.split(":", 1)[0].split()[0] if text else ""
        try:
            value = float(head) * scale
        except ValueError:
            self.ctx.rejects.reject(FORMAT, str(path), "not a number", text)
            return
        out.append((self._sid(entity, metric), value))

    def _infiniband(self, root: Path, out: list) -> None:
        base = root / "class" / "infiniband"
        for dev in sorted(base.iterdir()) if base.is_dir() else []:
            ports = dev / "ports"
            for port in sorted(ports.iterdir()) if ports.is_dir() else []:
                entity = f"{self.node_id}/{dev.name}:{port.name}"
                for fname, (metric, mult) in IB_COUNTERS.items():
                    f = port / "counters" / fname
                    if f.exists():
                        self._number(f, out, entity, metric, mult)
                hw = port / "hw_counters"
                for fname, metric in ROCE_COUNTERS.items():
                    if (hw / fname).exists():
                        self._number(hw / fname, out, entity, metric)
                for fname, metric in (("state", "port_state"), ("phys_state", "port_phys_state")):
                    if (port / fname).exists():
                        self._number(port / fname, out, entity, metric)
                rate = self._read(port / "rate") if (port / "rate").exists() else None
                m = _RATE.match(rate or "")
                if m:
                    out.append((self._sid(entity, "port_rate_bytes"), float(m.group(1)) * 1e9 / 8))

    def _edac(self, root: Path, out: list) -> None:
        base = root / "devices" / "system" / "edac" / "mc"
        for mc in sorted(base.glob("mc[0-9]*")) if base.is_dir() else []:
            entity = f"{self.node_id}/{mc.name}"
            for fname, metric in (("ce_count", "edac_ce_total"), ("ue_count", "edac_ue_total")):
                if (mc / fname).exists():
                    self._number(mc / fname, out, entity, metric)

    def _thermal(self, root: Path, out: list) -> None:
        for hw in sorted((root / "class" / "hwmon").glob("hwmon*")):
            if not hw.is_dir():
                continue
            chip = (self._read(hw / "name") if (hw / "name").exists() else None) or hw.name
            for f in sorted(hw.glob("temp*_input")):
                self._number(f, out, f"{self.node_id}/hwmon-{chip}-{f.name[:-6]}", "hwmon_temp_c", 0.001)
        for tz in sorted((root / "class" / "thermal").glob("thermal_zone*")):
            if (tz / "temp").exists():
                self._number(tz / "temp", out, f"{self.node_id}/tz{tz.name[12:]}", "thermal_zone_temp_c", 0.001)

    def _aer(self, root: Path, out: list, now: float) -> None:
        if now - self._aer_scanned > AER_RESCAN_S:
            found = []
            for top in sorted((root / "devices").glob("pci*")):
                for dirpath, _dirs, files in os.walk(top):
                    if "aer_dev_correctable" in files:
                        found.append(Path(dirpath))
            self._aer_files, self._aer_scanned = found, now
        for dev in self._aer_files:
            pci = normalize_pci(dev.name) if _PCI_DIR.match(dev.name) else None
            if not pci:
                continue
            entity = self.ctx.mapper.accelerator_at(self.node_id, pci) or f"{self.node_id}/pci-{pci}"
            for fname, (metric, total_key) in AER_FILES.items():
                text = self._read(dev / fname)
                if text is None:
                    continue
                total = next((ln.split()[-1] for ln in text.splitlines() if ln.startswith(total_key)), None)
                try:
                    out.append((self._sid(entity, metric), float(total)))
                except (TypeError, ValueError):
                    self.ctx.rejects.reject(FORMAT, str(dev / fname), f"no {total_key} line")

    def collect(self, now: float) -> tuple[Batch, Outcome]:
        outcome = Outcome(targets_total=1)
        root = Path(self.root)
        if not root.is_dir():
            outcome.errors.append(f"{root}: not a directory")
            return Batch(), outcome
        out: list[tuple[int, float]] = []
        self._infiniband(root, out)
        self._edac(root, out)
        self._thermal(root, out)
        self._aer(root, out, now)
        outcome.targets_up = 1
        if not out:
            return Batch(), outcome
        sid = np.fromiter((s for s, _ in out), dtype=np.int64, count=len(out))
        value = np.fromiter((v for _, v in out), dtype=np.float64, count=len(out))
        batch = Batch(samples=samples_frame(self.ctx.mapper, sid, np.full(len(out), now), value, FORMAT))
        outcome.samples = len(batch.samples)
        return batch, outcome
