"""Live collectors, one source per module, and the registry the config names them by.

| type | module | reads |
|---|---|---|
| ``exposition`` | exposition.py | dcgm-exporter, node_exporter (any exporter in the name tables), scraped |
| ``prometheus`` | prometheus.py | the same series through a Prometheus server's instant queries |
| ``infiniband`` | infiniband.py | the switch side of fabric links from infiniband_exporter |
| ``journald`` | journald.py | kernel RAS lines (Xid, AER, EDAC, MCE, mlx5 link) from the journal, with a cursor |
| ``rasdaemon`` | rasdaemon.py | rasdaemon databases, tailed by row id |
| ``sysfs`` | sysfs.py | this host's InfiniBand/RoCE counters, EDAC, hwmon, AER |
| ``slurm`` | scheduler.py | Slurm's boot time of every node and the nodes it reboots (reboot evidence) |
"""

from __future__ import annotations

from daemon.ingest.collectors.collector import Collector, Outcome, merge_batches
from daemon.ingest.collectors.exposition import ExpositionCollector
from daemon.ingest.collectors.infiniband import InfinibandExporterCollector
from daemon.ingest.collectors.journald import JournaldCollector
from daemon.ingest.collectors.prometheus import PrometheusCollector
from daemon.ingest.collectors.rasdaemon import RasdaemonCollector
from daemon.ingest.collectors.scheduler import SlurmNodesCollector
from daemon.ingest.collectors.sysfs import SysfsCollector
from daemon.ingest.formats.reader import ReadContext

REGISTRY: dict[str, type[Collector]] = {
    cls.kind: cls for cls in (ExpositionCollector, PrometheusCollector, InfinibandExporterCollector,
                              JournaldCollector, RasdaemonCollector, SysfsCollector, SlurmNodesCollector)
}

__all__ = ["REGISTRY", "Collector", "Outcome", "build", "merge_batches"]


def build(specs: list[dict], ctx: ReadContext) -> list[Collector]:
    """Collectors from config entries (``{"name", "type", "enabled", ...options}``); disabled ones are left out.

    Raises ValueError naming the entry for an unknown type or option.
    """
    out = []
    for i, spec in enumerate(specs):
        spec = dict(spec)
        name = str(spec.pop("name", "") or spec.get("type", f"collector{i}"))
        kind = spec.pop("type", None)
        enabled = spec.pop("enabled", True)
        cls = REGISTRY.get(kind)
        if cls is None:
            raise ValueError(f"collectors[{i}].type: unknown collector type {kind!r} (one of {', '.join(REGISTRY)})")
        try:
            collector = cls(name, ctx, **spec)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"collectors[{i}] ({name}): {exc}") from None
        if enabled:
            out.append(collector)
        else:
            collector.close()
    return out
