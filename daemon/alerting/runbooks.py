"""What an on-call person does next, per incident category: one runbook line each, shipped here and replaced by
the operator's own (``[alerting.runbooks]``, e.g. a link to the site's runbook page).

The shipped lines follow what vendors and fleet teams document for each symptom: NVIDIA's GPU memory error
management (a reset applies pending row remaps; a failed remap is an RMA), its Xid catalogue (a GPU off the bus is
reseated, then replaced), the InfiniBand link checks of NVIDIA's fabric guides (reseat, clean or replace the cable
or transceiver, read the switch side's counters).
"""

from __future__ import annotations

RUNBOOKS: dict[str, str] = {
    "gpu_memory": "drain, then reset the GPU (nvidia-smi -r) to apply pending row remaps; if remapping failed or the "
                  "errors come back, RMA the GPU by the serial above",
    "gpu_bus": "drain; reseat the GPU and check its PCIe riser and slot (AER lines name the link); if it falls off "
               "the bus again, replace the GPU or the riser",
    "gpu_thermal": "check the cold plate contact and coolant flow of this slot against the blade's other GPUs; "
                   "re-seat or replace the cold plate (thermal interface)",
    "gpu_compute": "run dcgmi diag -r 3 on the drained node; a GPU that stays slow at equal load is replaced",
    "scaleup_link": "drain; read nvidia-smi nvlink -e and the Fabric Manager log; reseat the baseboard or replace "
                    "the GPU or NVSwitch tray if the errors persist",
    "fabric_link": "reseat, clean or replace the cable and transceiver between this port and its far end; compare "
                   "the switch port's counters (perfquery, ibdiagnet)",
    "cooling": "check the rack's coolant loop (CDU flow, inlet temperature, pumps); raswarden does not drain for "
               "cooling alone",
    "host": "read the node's kernel log and BMC event log (MCE, EDAC); replace the DIMM or CPU part the evidence "
            "names",
    "telemetry": "check the node's exporters (dcgm-exporter, node_exporter) and the network path to it; its parts "
                 "are not judged while their telemetry is gone",
    "application": "no hardware action: the job's own error (application Xid); tell the job's owner",
    # not a category: the incident of a shard no raswarden instance holds (daemon/shards.py)
    "shard": "start raswarden on a management node for this shard (service.shard = its name) or a pool member "
             "(service.shard = \"*\"); until one holds it, its nodes are not watched",
}


def runbook_for(category: str, overrides: dict[str, str] | None = None) -> str:
    """The runbook line of ``category``: the operator's if given, else the shipped one ("" for none)."""
    if overrides and category in overrides:
        return overrides[category]
    return RUNBOOKS.get(category, "")
