"""raswarden's own Prometheus metrics (served on /metrics by the service, summarised by replay)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

REGISTRY = CollectorRegistry(auto_describe=True)

SAMPLES_INGESTED = Counter(
    "raswarden_samples_ingested_total", "Samples read from a source.", ["source"], registry=REGISTRY
)
EVENTS_INGESTED = Counter(
    "raswarden_events_ingested_total", "RAS events read from a source.", ["source", "kind"], registry=REGISTRY
)
INPUT_REJECTED = Counter(
    "raswarden_input_rejected_total",
    "Input lines or records rejected, by source format and reason.",
    ["source", "reason"],
    registry=REGISTRY,
)
LATE_DROPPED = Counter(
    "raswarden_late_samples_dropped_total",
    "Samples that arrived later than the allowed lateness and were dropped.",
    registry=REGISTRY,
)

ALERT_NOTIFICATIONS = Counter(
    "raswarden_alert_notifications_total",
    "Notifications put in the alert outbox, by receiver.",
    ["receiver"],
    registry=REGISTRY,
)
ALERT_DELIVERIES = Counter(
    "raswarden_alert_delivery_attempts_total",
    "Attempts to deliver a notification, by receiver and outcome (delivered, retry, failed, gave_up).",
    ["receiver", "outcome"],
    registry=REGISTRY,
)
ALERT_OUTBOX_PENDING = Gauge(
    "raswarden_alert_outbox_pending", "Notifications waiting in the outbox, by receiver.", ["receiver"],
    registry=REGISTRY,
)
