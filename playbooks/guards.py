"""Guards: what keeps a playbook from doing harm, always on (docs/architecture.md §6).

* **Others' nodes.** A node drained, in maintenance or rebooting for a reason that is not raswarden's is never
  touched; raswarden's own drains carry :data:`REASON_PREFIX` and the incident they were for.
* **Blast radius.** A drain waits while it would leave more nodes unavailable (for any reason) than the budget:
  a count and a share of the cluster, and a share of the node's rack.
* **Circuit breaker.** Many new incidents at once, or telemetry gone from a share of the nodes, trips it; every
  step that touches the scheduler is held until an operator resets it.
* **Rate limits** per playbook, on the start of an action.
* **Modes**: act, dry-run (decide, journal, do nothing), shadow (record only); the strictest of the global and
  the playbook's own wins. Approval per playbook.
* **Repeat offenders**: a node drained too often within a window stays drained for a human.

The engine (:mod:`playbooks.engine`) asks these at each step; they read the cluster state and the counts the
engine gives them and never act themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from playbooks.scheduler import DRAIN, MAINT, REBOOT, ClusterState

if TYPE_CHECKING:  # the model reads the steps, which ask the guards
    from playbooks.model import Playbook

REASON_PREFIX = "raswarden:"
STRICTER = {"act": 0, "dry-run": 1, "shadow": 2}


@dataclass
class Guards:
    """Global guards (config ``[playbooks]``)."""

    mode: str = "act"  # act | dry-run | shadow: overrides every playbook toward caution
    max_drained_nodes: int = 10  # unavailable nodes (any reason) raswarden lets the cluster reach by draining
    max_rack_fraction: float = 0.25
    max_cluster_fraction: float = 0.05
    breaker_incidents: int = 20  # new incidents within breaker_window_s trip the breaker...
    breaker_window_s: float = 600.0
    breaker_stale_fraction: float = 0.2  # ...as does telemetry gone from this share of nodes
    repeat_offender: int = 3  # drains of one node within repeat_window_s: stays drained for a human
    repeat_window_s: float = 7 * 86400.0


def incident_in_reason(reason: str) -> str | None:
    """The incident id a raswarden drain reason names (``raswarden: <incident> ...``), or None for another's."""
    if not reason.startswith(REASON_PREFIX):
        return None
    words = reason.removeprefix(REASON_PREFIX).split()
    return words[0] if words else None


def strictest(*modes: str) -> str:
    """The most cautious of the modes (shadow over dry-run over act)."""
    return max(modes, key=STRICTER.__getitem__)


def owned_by_others(node: str, state: ClusterState) -> str | None:
    """Why ``node`` is someone else's to handle: drained or in maintenance (or rebooting) with a reason that is not
    raswarden's. A node that is only *down* (the scheduler lost it: the failure itself) is not: raswarden may
    drain it so it does not return to service by itself."""
    info = state.nodes.get(node)
    if info is None or info.available:
        return None
    if info.reason.startswith(REASON_PREFIX):
        return None
    if not (info.states & {DRAIN, MAINT, REBOOT}):
        return None
    return f"{node} is unavailable ({', '.join(sorted(info.states))}, reason {info.reason!r} by " \
           f"{info.reason_set_by or '?'}): left alone"


def over_budget(guards: Guards, node: str, state: ClusterState,
                rack_of: Callable[[str], str | None]) -> str | None:
    """Why draining ``node`` now would exceed a blast-radius budget (every unavailable node counts)."""
    g = guards
    down = {n for n, i in state.nodes.items() if not i.available}
    total = len(state.nodes) or 1
    after = len(down | {node})
    if after > g.max_drained_nodes:
        return f"{after} nodes would be unavailable (budget {g.max_drained_nodes})"
    if after / total > g.max_cluster_fraction and after > 1:
        return f"{after} of {total} nodes would be unavailable (budget {g.max_cluster_fraction:.0%})"
    rack = rack_of(node)
    if rack is not None:
        members = [n for n in state.nodes if rack_of(n) == rack]
        in_rack = len((down | {node}) & set(members))
        if members and in_rack / len(members) > g.max_rack_fraction and in_rack > 1:
            return f"{in_rack} of {len(members)} nodes of rack {rack} would be unavailable " \
                   f"(budget {g.max_rack_fraction:.0%})"
    return None


def breaker_trip(guards: Guards, new_incidents: int, nodes: int, stale_nodes: int) -> str | None:
    """Why the circuit breaker trips on this tick's counts (None: it does not)."""
    if new_incidents >= guards.breaker_incidents:
        return (f"{new_incidents} new incidents within {guards.breaker_window_s:.0f} s "
                f"(limit {guards.breaker_incidents})")
    if nodes and stale_nodes / nodes >= guards.breaker_stale_fraction:
        return f"telemetry gone from {stale_nodes} of {nodes} nodes"
    return None


def rate_limit(playbook: Playbook, started: int) -> str | None:
    """Why one more action of ``playbook`` may not start, ``started`` of them having started within its window."""
    if started >= playbook.guards.rate_max:
        return f"rate limit: {started} actions of {playbook.name} within {playbook.guards.rate_per_s:.0f} s"
    return None


def repeat_offender(guards: Guards, drains: int) -> str | None:
    """Why a node drained ``drains`` times within the window stays drained for a human (None: it may return)."""
    if drains >= guards.repeat_offender:
        return f"repeat offender: drained {drains} times within {guards.repeat_window_s / 86400:.0f} days; " \
               "left drained for a human"
    return None
