"""Real counter values from fixtures/real (node_exporter's sysfs fixture) through reader and counters.

The mlx4_0 counters there look like a real capture, with port_xmit_wait saturated at 2^32 - 1 (a 32-bit
PMA counter that stopped counting). They are rendered as node_exporter would export them.
"""

from pathlib import Path

import numpy as np
import pandas as pd

from daemon.ingest.formats import OpenMetricsReader
from detectors.counters import CounterTracker
from tests.conftest import REAL
from tests.daemon.ingest.formats.conftest import read_all

# sysfs counter file -> node_exporter metric (collector/infiniband_linux.go)
NAMES = {
    "link_downed": "node_infiniband_link_downed_total",
    "link_error_recovery": "node_infiniband_link_error_recovery_total",
    "port_rcv_errors": "node_infiniband_port_errors_received_total",
    "port_xmit_discards": "node_infiniband_port_discards_transmitted_total",
    "port_xmit_wait": "node_infiniband_port_transmit_wait_total",
    "symbol_error": "node_infiniband_symbol_error_total",
}


def render(ports: Path, ts_ms: int, bump: dict[str, int] | None = None) -> str:
    lines = []
    for port in sorted(p.name for p in ports.iterdir()):
        counters = ports / port / "counters"
        for f, metric in NAMES.items():
            path = counters / f
            if not path.exists():
                continue
            raw = path.read_text().strip()
            if not raw.isdigit():
                continue  # "N/A (no PMA)": node_exporter skips it too
            value = int(raw) + (bump or {}).get(f, 0)
            lines.append(f'{metric}{{device="mlx4_0",instance="10.0.1.11:9100",port="{port}"}} {value} {ts_ms}')
    return "\n".join(lines) + "\n"


def test_real_mlx4_counters_and_the_saturated_one(tmp_path, ctx):
    ports = REAL / "node_exporter_sysfs" / "sys" / "class" / "infiniband" / "mlx4_0" / "ports"
    p = tmp_path / "scrapes.prom"
    p.write_text(render(ports, 1772409630000) + render(ports, 1772409660000, {"port_rcv_errors": 2})
                 + render(ports, 1772409690000, {"port_rcv_errors": 2, "port_xmit_wait": -4294967295 + 7}))
    samples = read_all(OpenMetricsReader(), p, ctx).samples
    assert ctx.rejects.total == 0 and len(samples) > 0
    assert samples["value"].max() == 4294967295.0
    tracker = CounterTracker()
    incs = []
    for ts in sorted(set(samples["ts"])):
        part = samples[samples["ts"] == ts]
        part = part.assign(entity=pd.Categorical(part["entity"]), metric=pd.Categorical(part["metric"]))
        incs.append(tracker.update(part).to_frame().set_index(["entity", "metric"])["increase"])
    assert (incs[0] == 0).all()
    second = incs[1]
    assert second[("sn01-b01/mlx4_0:1", "rcv_errors_total")] == 2
    assert second.drop(("sn01-b01/mlx4_0:1", "rcv_errors_total")).drop(
        ("sn01-b01/mlx4_0:2", "rcv_errors_total"), errors="ignore").eq(0).all()
    # A saturated 32-bit counter cleared to 7 reads as a wrap or reset: a small increase, never ~4e9.
    third = incs[2]
    assert 7 <= third[("sn01-b01/mlx4_0:1", "xmit_wait_total")] <= 8
    assert np.isfinite(third.to_numpy()).all() and third.max() < 10
