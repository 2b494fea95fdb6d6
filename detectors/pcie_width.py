"""PCIe link width: a GPU whose link runs on fewer lanes than it did, or than its node's other GPUs.

A GPU's link trains to its width at boot or reset; a lane lost (a riser, a slot or a connector gone bad, a link that
retrained after errors) leaves it at x8 or x4 where it ran x16: half or a quarter of its host bandwidth, and errors
often follow. Peers check the width against what each system is built for (Oracle's OCI HPC health checks, "PCIe
width missing lanes", per shape; AMD's GPU health checks expect x16 on MI300X). raswarden knows no shape, so it
compares a GPU with itself and with its node: the widest it has run while watched, and the width most of its node's
other GPUs run at. Either way a **watch** (``suspect``, ``gpu_bus``) with the repair it would take: a slot wired x8
(a workstation board) narrows a healthy link too, PCIe 6's L0p lets an idle link drop lanes, and no vendor action
names it. The link's generation is not judged: GPUs lower it when idle.

Readings: ``pcie_link_width`` and ``pcie_link_width_max`` (DCGM_FI_DEV_PCIE_LINK_WIDTH and _MAX_LINK_WIDTH,
nvidia-smi's pcie.link.width.current and .max, the ``-q`` report's link widths). A width of 0 or none (a GPU off the
bus) is no reading.
"""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np

from detectors.contract import Evidence
from detectors.schema import State, name_code, name_codes, node_of, within

WIDTH, MAX_WIDTH = "pcie_link_width", "pcie_link_width_max"


class LinkWidths:
    """Each GPU's link width, the widest it has run while watched, and its node's; see the module docstring. Widths
    do not change from scrape to scrape: they are judged every ``every_s`` (a watch held until the next judgement),
    so that a fleet of 100,000 GPUs exporting them pays for it once in five minutes, not every tick."""

    def __init__(self, every_s: float = 300.0) -> None:
        self.every_s = every_s
        self.width: dict[str, float] = {}  # the last reading of each GPU
        self.widest: dict[str, float] = {}
        self.max_width: dict[str, float] = {}
        self._judged_at = -np.inf

    def update(self, now: float, gauges) -> list[Evidence] | None:
        """The watches of the GPUs' widths (the tick's gauges: ``entity``, ``metric``, ``last``) when a judgement is
        due and the tick has widths; else None (the last judgement's watches stand until they lapse)."""
        if now < self._judged_at + self.every_s or gauges is None or len(gauges) == 0:
            return None
        self._judged_at = now  # (a fleet that exports no widths looks once in five minutes, not every tick)
        codes, names = name_codes(gauges["metric"])
        width_code, max_code = name_code(names, WIDTH), name_code(names, MAX_WIDTH)
        if width_code < 0:
            return None
        ecodes, enames = name_codes(gauges["entity"])
        last = np.asarray(gauges["last"], dtype=float)
        if max_code >= 0:
            rows = np.flatnonzero((codes == max_code) & (last > 0))
            self.max_width.update(zip(enames[ecodes[rows]].tolist(), last[rows].tolist()))
        rows = np.flatnonzero((codes == width_code) & (last > 0))
        seen = list(zip(enames[ecodes[rows]].tolist(), last[rows].tolist()))
        self.width.update(seen)
        widest = self.widest
        for entity, width in seen:
            if width > widest.get(entity, 0.0):
                widest[entity] = width
        narrow = [(e, w) for e, w in seen if w < widest[e] or w < self.max_width.get(e, np.inf)]
        if not narrow:
            return []
        by_node: dict[str, list[float]] = defaultdict(list)
        nodes = {node_of(e) for e, _ in narrow}
        for entity, width in self.width.items():
            if node_of(entity) in nodes:
                by_node[node_of(entity)].append(width)
        out = []
        for entity, width in sorted(narrow):
            reason = None
            if width < widest[entity]:
                reason = f"its PCIe link runs x{width:.0f} where it ran x{widest[entity]:.0f} while watched"
            else:
                peers = by_node[node_of(entity)]
                usual, count = Counter(peers).most_common(1)[0]
                if width < usual and count > len(peers) / 2 and len(peers) >= 3:
                    reason = (f"its PCIe link runs x{width:.0f} of its x{self.max_width[entity]:.0f} where "
                              f"{count} of its node's {len(peers)} GPUs run x{usual:.0f}")
            if reason:
                out.append(Evidence(entity, State.SUSPECT, "gpu_bus", [
                    f"{reason}: a lane lost (reseat the GPU or its riser), unless its slot is wired so; a watch"]))
        return out

    def forget(self, scope: str) -> None:
        """Forget the GPUs in ``scope`` (a repaired node or part: its link may be another now)."""
        for table in (self.width, self.widest, self.max_width):
            for entity in [e for e in table if within(e, scope)]:
                del table[entity]
