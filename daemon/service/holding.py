"""Holding a shard: the lease a service renews every cycle, standing by without it, taking a shard over (its warm
state, incidents and cursors), and a pool member's taking of a shard nobody holds and handing it back to the shard's
own instance (docs/service.md, "Shards and failover").

A part of :class:`daemon.service.service.Service`: it reads and sets the service's ``cfg``, ``store``, ``lease``,
``claim``, ``pool``, ``pipeline``, ``collectors``, ``active`` and locks.
"""

from __future__ import annotations

import dataclasses
import logging

from daemon import metrics
from daemon.judgement import warmstate
from daemon.operations.operator import repaired_nodes
from daemon.shards import POOL
from daemon.store.leases import Lease, claim_lease, shard_lease

log = logging.getLogger("raswarden.service")


class ShardHolding:
    """Which shard the service acts for, and whether it may act."""

    def activate(self) -> None:
        """Become the shard's active daemon: take up the shard's warm state, the store's incidents, states and
        cursors."""
        sv = self.cfg.service
        warmstate.load(self.store, sv.shard, self.pipeline, self.clock(), sv.warm_state_max_age_s)
        self.warm_saved_at = self.clock()
        incidents, states = self.pipeline.restore(self.store, self.ownership.owns_entity)
        _, self.repairs_seen = repaired_nodes(self.store, 0)  # earlier repairs: the features start afresh anyway
        for c in self.collectors:
            c.restore(self.store.collector_state(c.name))
        self.active = True
        log.info("active for shard %s (%s); restored %d open incidents and %d entity states",
                 self.cfg.service.shard, self.lease.holder, incidents, states)

    def _hold_lease(self) -> bool:
        if self.pool and not self.active:
            return self._take_a_shard()
        try:
            got = self.lease.acquire()
        except Exception as exc:  # the store is unreachable: not the holder until it answers again
            log.error("cannot renew the shard lease: %s", exc)
            got = False
        if got and self.pool and self._asked_back(self.cfg.service.shard):
            return self._hand_over()
        if not got and self.active:
            log.warning("lost the shard lease to %s: standing by", getattr(self.lease.current(), "holder", "?"))
            self.active = False
        elif got and not self.active:
            self.activate()
        if self.claim is not None:
            self._ask_back(standing_by=not got)
        return got

    def _ask_back(self, standing_by: bool) -> None:
        """An instance of one shard: while it stands by, it keeps a claim on its shard (a pool member serving the
        shard hands it over); once it holds the shard, the claim goes."""
        try:
            if standing_by:
                self.claim.acquire()
            elif self.claim.held():
                self.claim.release()
        except Exception as exc:  # the store again: the claim runs out by itself, the next cycle tries anew
            log.error("cannot write the claim on shard %s: %s", self.cfg.service.shard, exc)

    def _asked_back(self, shard: str) -> bool:
        """Whether the shard's own instance (not a pool member) is up and asks for it (:meth:`_ask_back`)."""
        try:
            return Lease(self.store, claim_lease(shard), ttl_s=self.cfg.service.lease_ttl,
                         holder=self.lease.holder, clock=self.clock).held_by_another()
        except Exception as exc:
            log.error("cannot read the claim on shard %s: %s", shard, exc)
            return False

    def _hand_over(self) -> bool:
        """A pool member whose shard's own instance is back: it lets go of the shard as a stop does
        (:meth:`_let_go`), waits in the pool again and takes a shard nobody holds, if there is one. The shard's
        instance takes it at its next cycle, with the cursors saved with the last tick, the warm state and the open
        incidents: nothing is read twice, repeated or lost."""
        shard = self.cfg.service.shard
        with self.playbook_lock, self.alert_lock:  # after the cycle lock, as a reload takes them
            self._let_go()
            self._serve(POOL, Lease(self.store, shard_lease(POOL), ttl_s=self.cfg.service.lease_ttl))
            self.active, self.previous_tick = False, None
        metrics.SHARD_HANDOVERS.inc()
        log.info("pool member: shard %s's own instance asked for it back; handed over", shard)
        return self._take_a_shard()

    def _let_go(self) -> None:
        """Leave the shard to another instance (a stop, a pool member's handover): the warm state saved, what the
        outbox can deliver delivered where this instance runs the alerts, the shard's and the alerts' leases
        released (unreleased, they run out within their TTL)."""
        if self.previous_tick is not None and self.cfg.service.warm_state_interval_s:
            warmstate.save(self.store, self.cfg.service.shard, self.pipeline, self.previous_tick)
        try:
            if not self.ownership.sharded or self.alert_lease.held():
                self.alerting.step(self.clock())
        except Exception:
            log.exception("final alert delivery failed")
        try:
            self.lease.release()
            if self.ownership.sharded and self.alert_lease.held():
                self.alert_lease.release()
        except Exception:
            log.exception("could not release the lease")

    def _take_a_shard(self) -> bool:
        """A pool member: hold the first shard whose lease no live instance holds, and whose own instance does not
        ask for it, and become its instance (its part of the cluster, its warm state, incidents and cursors); False
        while every shard is held, or the member is stopping (it would take a shard only to let it go again: the
        instances of one node stopped together release theirs as it stops, and a shard taken then held its stop for
        a whole activation and cycle, past systemd's stop timeout)."""
        if self.stop_event.is_set() or self.jobs.stopping.is_set():
            return False
        for name in self.pool:
            if self._asked_back(name):
                continue
            lease = Lease(self.store, shard_lease(name), ttl_s=self.cfg.service.lease_ttl)
            try:
                got = lease.acquire()
            except Exception as exc:
                log.error("cannot try the lease of shard %s: %s", name, exc)
                return False
            if not got:
                continue
            self._serve(name, lease)
            log.info("pool member: shard %s had no live holder, taking it", name)
            self.activate()
            return True
        return False

    def _serve(self, shard: str, lease: Lease) -> None:
        """A pool member's parts rebuilt for ``shard`` (or for none, :data:`POOL`) under ``lease``."""
        cfg = dataclasses.replace(self.cfg, service=dataclasses.replace(self.cfg.service, shard=shard))
        old = self.collectors
        self._build(cfg)
        for c in old:
            c.close()
        self.cfg, self.lease = cfg, lease
        self.jobs.replace(self._cycle_job(first_now=False))  # the shard's phase from now on
