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
SAMPLES_NOT_READ = Counter(
    "raswarden_samples_not_read_total",
    "Samples whose value is the exporter's own failure value (e.g. npu-exporter's -1 for a read that failed), "
    "dropped, by source.",
    ["source"],
    registry=REGISTRY,
)
SDNOTIFY_DROPPED = Counter(
    "raswarden_sdnotify_dropped_total",
    "systemd notifications dropped because the notify socket's reader was behind (never waited for).",
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

COLLECTOR_DURATION = Gauge(
    "raswarden_collector_duration_seconds", "How long the last collection took, by collector.", ["collector"],
    registry=REGISTRY,
)
COLLECTOR_SUCCESS = Gauge(
    "raswarden_collector_success", "1 when the last collection succeeded (some target answered), by collector.",
    ["collector"], registry=REGISTRY,
)
COLLECTOR_LAST_SUCCESS = Gauge(
    "raswarden_collector_last_success_timestamp_seconds", "When the collector last succeeded.", ["collector"],
    registry=REGISTRY,
)
SCRAPE_UP = Gauge(
    "raswarden_scrape_up", "1 when the last scrape of the target answered with a parsable exposition.",
    ["collector", "target"], registry=REGISTRY,
)
SCRAPE_DURATION = Gauge(
    "raswarden_scrape_duration_seconds", "How long the last scrape of the target took.", ["collector", "target"],
    registry=REGISTRY,
)

ACTIVE = Gauge("raswarden_active", "1 while this instance holds its shard's lease (0: standby).", registry=REGISTRY)
TICKS = Counter("raswarden_ticks_total", "Pipeline ticks run.", registry=REGISTRY)
TICK_DURATION = Gauge("raswarden_tick_duration_seconds", "How long the last cycle (collect and tick) took.",
                      registry=REGISTRY)
LAST_TICK = Gauge("raswarden_last_tick_timestamp_seconds", "When the last tick ran.", registry=REGISTRY)
HEALTH = Gauge("raswarden_entities", "Entities by health state (healthy ones are not counted).", ["state"],
               registry=REGISTRY)
INCIDENTS_OPEN = Gauge("raswarden_incidents_open", "Open incidents by category and severity.",
                       ["category", "severity"], registry=REGISTRY)
DETECTOR_MAX_SCORE = Gauge("raswarden_detector_max_score",
                           "The highest score a detector gives any entity that is not healthy.", ["detector"],
                           registry=REGISTRY)
ACTIONS = Gauge("raswarden_actions", "Playbook actions in the journal, by playbook and status.",
                ["playbook", "status"], registry=REGISTRY)
RELOADS = Counter("raswarden_config_reloads_total", "Config reloads (SIGHUP), applied or refused.", ["result"],
                  registry=REGISTRY)
JOB_FAILURES = Counter("raswarden_job_failures_total", "Scheduled jobs that raised, by job.", ["job"],
                       registry=REGISTRY)
