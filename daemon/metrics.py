"""raswarden's own Prometheus metrics (served on /metrics by the service, summarised by replay).

Besides raswarden's own: the process (CPU, memory, open files), platform (Python) and garbage collector metrics
client_python exports by default, and ``raswarden_build_info``. No label is named ``job`` or ``instance``: those
are the labels Prometheus gives every scraped series, and a metric of ours with one would be renamed
``exported_job`` on the way in.
"""

from __future__ import annotations

import platform

from prometheus_client import (GC_COLLECTOR, PLATFORM_COLLECTOR, PROCESS_COLLECTOR, CollectorRegistry, Counter,
                               Gauge, Histogram, Info)

REGISTRY = CollectorRegistry(auto_describe=True)
for _default in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
    REGISTRY.register(_default)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("raswarden")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


BUILD_INFO = Info("raswarden_build", "raswarden's version and the Python it runs on.", registry=REGISTRY)
BUILD_INFO.info({"version": _version(), "python_version": platform.python_version(),
                 "python_implementation": platform.python_implementation()})
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0, 60.0)

SAMPLES_INGESTED = Counter(
    "raswarden_samples_ingested_total", "Samples read from a source.", ["source"], registry=REGISTRY
)
EVENTS_INGESTED = Counter(
    "raswarden_events_ingested_total", "RAS events read from a source.", ["source", "kind"], registry=REGISTRY
)
INPUT_REJECTED = Counter(
    "raswarden_input_rejected_total",
    "Input lines or records rejected, by source format and kind of reason (its particulars are in the log).",
    ["source", "reason"],
    registry=REGISTRY,
)
FAULT_CODES_UNJUDGED = Counter(
    "raswarden_fault_codes_unjudged_total",
    "Fault codes read that no catalog judges (an Xid or SXid not in NVIDIA's lists, an NVLink 5 line no row of the "
    "decode sheet matches, an Ascend code not in MindCluster's table), by catalog and code: judged by their line "
    "alone.",
    ["catalog", "code"],
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

SHARDS_UNWATCHED = Gauge("raswarden_shards_unwatched", "Shards no live instance holds, as the instance running the "
                         "cluster's alerts last found (daemon/shards.py; 0 elsewhere).", registry=REGISTRY)
SHARD_HANDOVERS = Counter("raswarden_shard_handovers_total", "Shards this pool member (service.shard = \"*\") "
                          "handed over to their own instance when it came back.", registry=REGISTRY)
ACTIVE = Gauge("raswarden_active", "1 while this instance holds its shard's lease (0: standby).", registry=REGISTRY)
TICKS = Counter("raswarden_ticks_total", "Pipeline ticks run.", registry=REGISTRY)
CYCLE_DURATION = Histogram("raswarden_cycle_duration_seconds", "How long cycles (collect and tick) take.",
                           buckets=DURATION_BUCKETS, registry=REGISTRY)
TICK_DURATION = Histogram("raswarden_tick_duration_seconds", "How long the pipeline's ticks (detect, judge, act) take.",
                          buckets=DURATION_BUCKETS, registry=REGISTRY)
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
PARTS_REPLACED = Counter("raswarden_parts_replaced_total", "Accelerators seen with a new identity (UUID, serial) "
                         "in their slot: replaced parts, whose history starts afresh.", registry=REGISTRY)
REPAIRS_BEFORE_FAILURE = Gauge("raswarden_repairs_before_failure_ratio", "Share of the last 30 days' repair orders "
                               "opened for a part before it failed (daemon/operations/reliability.py).",
                               registry=REGISTRY)
REPAIR_TIME = Gauge("raswarden_repair_time_median_seconds", "Median time from a repair order (the drain) to its node "
                    "back in service after validation, over the last 30 days.", registry=REGISTRY)
REPAIR_ORDERS = Gauge("raswarden_repair_orders", "Repair orders by state (daemon/operations/repairs.py).", ["state"],
                      registry=REGISTRY)
GPU_RESETS = Counter("raswarden_gpu_resets_total", "Automatic GPU resets ended, by outcome (passed: exit 0, "
                     "validation next; failed: the order expects a reboot; daemon/operations/resets.py).",
                     ["outcome"], registry=REGISTRY)
NODE_REBOOTS = Counter("raswarden_node_reboots_total", "Automatic node reboots ended, by outcome (passed: the node "
                       "booted again, validation next; failed: it did not come back, or did not reboot: the order "
                       "goes to a technician; daemon/operations/reboots.py).", ["outcome"], registry=REGISTRY)
CHECKPOINT_ADVICE = Gauge("raswarden_checkpoint_advice_seconds", "The periodic checkpoint interval advised to each "
                          "running opted-in job (daemon/operations/advice.py; label task: the job's id).", ["task"],
                          registry=REGISTRY)
CHECKPOINT_ADVICE_SAFE = Gauge("raswarden_checkpoint_advice_safe", "1 while the safe interval is advised to every job "
                               "(detection degraded: a collector failing, the playbooks' breaker open).",
                               registry=REGISTRY)
ADVICE_FILE_ERRORS = Counter("raswarden_checkpoint_advice_file_errors_total", "Times the advice files could not be "
                             "written to [advice] directory (the API and /metrics still give the advice).",
                             registry=REGISTRY)
FORESIGHT = Gauge("raswarden_hard_failures", "Hard failures over the advice window "
                  "(daemon/operations/foresight.py): acted on ahead (averted ones included), warned of by an open "
                  "incident but not acted on, unwarned.",
                  ["before"], registry=REGISTRY)
UNWARNED_RATE = Gauge("raswarden_unwarned_failures_per_node_year", "Rate of hard failures no open incident warned "
                      "of, a node-year: the posterior mean and the upper bound advice is built on.", ["bound"],
                      registry=REGISTRY)
RELOADS = Counter("raswarden_config_reloads_total", "Config reloads (SIGHUP), applied or refused.", ["result"],
                  registry=REGISTRY)
JOB_FAILURES = Counter("raswarden_job_failures_total", "Scheduled jobs that raised, by job (label task: not job, "
                       "which Prometheus gives every series).", ["task"], registry=REGISTRY)
HTTP_REFUSED = Counter("raswarden_http_connections_refused_total",
                       "HTTP connections answered 503 at once: at a connection cap, every open one was being "
                       "answered.", registry=REGISTRY)
HTTP_DROPPED = Counter("raswarden_http_requests_dropped_total",
                       "HTTP requests answered by the server itself, by why: deadline (408: not whole within "
                       "http.request_timeout_s), evicted (503: the slowest sender, closed to make room at a cap), "
                       "malformed (400/411), too_large (413/431).", ["why"], registry=REGISTRY)
WARM_STATE = Counter("raswarden_warm_state_total", "The pipeline's warm state "
                     "(daemon/judgement/warmstate.py): saves (saved, failed) and take-ups at start, failover or "
                     "reload (taken; refused: other code or config, too old, unreadable).", ["op", "outcome"],
                     registry=REGISTRY)
WARM_STATE_BYTES = Gauge("raswarden_warm_state_bytes", "Size of the last warm state saved (compressed).",
                         registry=REGISTRY)
WARM_STATE_SAVE_SECONDS = Gauge("raswarden_warm_state_save_seconds", "Time the last warm state took to save.",
                                registry=REGISTRY)
