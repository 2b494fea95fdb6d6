"""Alerting as the daemon and the CLI run it: the configured pipeline, receivers and outbox together."""

from __future__ import annotations

import time
from dataclasses import dataclass

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


@dataclass
class Alerting:
    pipeline: AlertPipeline
    outbox: Outbox
    receivers: dict[str, Receiver]

    @classmethod
    def from_config(cls, cfg: Config, store: Store) -> Alerting:
        install_log_redaction()
        renderer = Renderer(cfg.templates_dir, cfg.alerting.status_url)
        receivers = {rc.name: build(rc, renderer) for rc in cfg.receivers}
        pipeline = AlertPipeline(store, cfg.alerting, list(receivers),
                                 Topology.configured(cfg.service.topology))
        return cls(pipeline, Outbox(store, receivers, cfg.backoff), receivers)

    def step(self, now: float | None = None) -> dict[str, int]:
        """Read incidents, queue what is due, deliver what can go now."""
        now = time.time() if now is None else now
        queued = self.pipeline.step(now)
        counts = self.outbox.deliver(now)
        return {"queued": len(queued), **counts}

    def test(self, name: str, now: float | None = None) -> Outcome:
        """Send a test message to receiver ``name`` directly (not through the outbox)."""
        receiver = self.receivers.get(name)
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
