"""Alerting as the daemon and the CLI run it: the configured pipeline, receivers and outbox together."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from daemon.alerting.alert import Alert, Notification
from daemon.alerting.http import Outcome, post
from daemon.alerting.outbox import Outbox
from daemon.alerting.alert_pipeline import AlertPipeline
from daemon.alerting.receivers import build
from daemon.alerting.receivers.receiver import Receiver
from daemon.alerting.render import Renderer
from daemon.alerting.secrets import install_log_redaction
from daemon.config import Config
from daemon.store import Store
from daemon.topology import Topology
from playbooks.scheduler import Scheduler

log = logging.getLogger("raswarden.alerting")


#: how long a running daemon's alerts pass waits for its receivers: a healthy one answers in far less; one that hangs
#: goes on in the background and the next passes leave it alone until it is done (Outbox.deliver)
ALERT_PASS_WAIT_S = 2.0


@dataclass
class Alerting:
    pipeline: AlertPipeline
    outbox: Outbox
    receivers: dict[str, Receiver]
    unavailable: dict[str, str] = field(default_factory=dict)  # receiver -> why its secret could not be read

    @classmethod
    def from_config(cls, cfg: Config, store: Store, scheduler: Scheduler | None = None,
                    topology: Topology | None = None) -> Alerting:
        """The alert pipeline, outbox and receivers of a config. A receiver whose secret cannot be read (a
        credential not there yet) is not built: it is logged, its alerts are queued and wait for it (a restart or
        reload once the secret is there), and the others go on. With a ``scheduler``, a message names the jobs
        running on the node and their users; ``topology`` is the config's (read from its file when not given)."""
        install_log_redaction()
        renderer = Renderer(cfg.templates_dir, cfg.alerting.status_url)
        receivers = {rc.name: build(rc, renderer) for rc in cfg.receivers if not rc.unavailable}
        unavailable = {rc.name: rc.unavailable for rc in cfg.receivers if rc.unavailable}
        for name, why in unavailable.items():
            log.error("receiver %s is off until its secret is there: %s", name, why)
        pipeline = AlertPipeline(store, cfg.alerting, [rc.name for rc in cfg.receivers],
                                 topology or Topology.configured(cfg.service.topology), scheduler)
        outbox = Outbox(store, receivers, cfg.backoff, waiting_for=set(unavailable))
        return cls(pipeline, outbox, receivers, unavailable)

    def step(self, now: float | None = None, wait_s: float | None = None) -> dict[str, int]:
        """Read incidents, queue what is due, deliver what can go now (each receiver in a worker of its own; with
        ``wait_s`` the step waits at most that long for them: one that hangs goes on in the background)."""
        now = time.time() if now is None else now
        queued = self.pipeline.step(now)
        counts = self.outbox.deliver(now, wait_s)
        return {"queued": len(queued), **counts}

    def test(self, name: str, now: float | None = None) -> Outcome:
        """Send a test message to receiver ``name`` directly (not through the outbox)."""
        receiver = self.receivers.get(name)
        if receiver is None and name in self.unavailable:
            return Outcome(False, error=f"receiver {name!r} is off: {self.unavailable[name]}")
        if receiver is None:
            return Outcome(False, error=f"no receiver named {name!r} (configured: {', '.join(self.receivers)})")
        now = time.time() if now is None else now
        alert = Alert(incident_id="test", status="firing", severity="info", state="suspect", entity="raswarden",
                      kind="service", category="telemetry", rack=None,
                      summary="a test message from raswarden: this receiver works", evidence=["sent by "
                      "'raswarden alerts test'"], started_at=now, action="none (test)")
        n = Notification("test", int(now), now, [alert], self.pipeline.config.status_url)
        request = receiver.request(n, now)
        request.headers.setdefault("Idempotency-Key", f"test#{int(now)}")
        return receiver.outcome(post(request, timeout=receiver.config.timeout_s))
