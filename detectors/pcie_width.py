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
    """Each GPU's link width, the widest it has run while watched, and its node's; see the module docstring."""

    def __init__(self) -> None:
        self.width: dict[str, float] = {}  # the last reading of each GPU
        self.widest: dict[str, float] = {}
        self.max_width: dict[str, float] = {}

    def update(self, gauges) -> list[Evidence]:
        """The watches of this tick's readings (the tick's gauges: ``entity``, ``metric``, ``last``)."""
        if gauges is None or len(gauges) == 0:
            return []
        codes, names = name_codes(gauges["metric"])
        width_code, max_code = name_code(names, WIDTH), name_code(names, MAX_WIDTH)
        if width_code < 0 and max_code < 0:
            return []
        ecodes, enames = name_codes(gauges["entity"])
        last = np.asarray(gauges["last"], dtype=float)
        for code, into in ((max_code, self.max_width), (width_code, self.width)):
            for i in np.flatnonzero((codes == code) & (last > 0)) if code >= 0 else ():
                into[str(enames[ecodes[i]])] = float(last[i])
        if width_code < 0:
            return []
        seen = {str(enames[ecodes[i]]) for i in np.flatnonzero((codes == width_code) & (last > 0))}
        for entity in seen:
            self.widest[entity] = max(self.widest.get(entity, 0.0), self.width[entity])
        by_node: dict[str, list[float]] = defaultdict(list)
        for entity, width in self.width.items():
            by_node[node_of(entity)].append(width)
        out = []
        for entity in sorted(seen):
            width = self.width[entity]
            reason = None
            if width < self.widest[entity]:
                reason = f"its PCIe link runs x{width:.0f} where it ran x{self.widest[entity]:.0f} while watched"
            elif width < self.max_width.get(entity, np.inf):
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
