"""The configuration file (TOML, ``/etc/raswarden/raswarden.toml``): read, validated, typed.

Errors name the key (``alerting.receivers[2].url_file``) and never echo a secret. Sections: ``[store]``,
``[service]``, ``[http]``, ``[[collectors]]``, ``[alerting]`` (with ``[[alerting.receivers]]`` and
``[[alerting.routes]]``), ``[playbooks]``, ``[scheduler]``; every key is documented in
systemd/raswarden.toml.example.
"""

from __future__ import annotations

import math

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from daemon.alerting.outbox import Backoff
from daemon.alerting.alert_pipeline import AlertingConfig
from daemon.alerting.receivers import RECEIVERS
from daemon.alerting.receivers.receiver import ReceiverConfig
from daemon.alerting.routing import Route
from daemon.shards import POOL, ShardSpec
from daemon.alerting.runbooks import RUNBOOKS
from daemon.alerting.secrets import SecretError, read_secret
from daemon.store import DEFAULT_URL
from detectors.contract import TICK_S
from playbooks.guards import Guards
from playbooks.model import MODES
from playbooks.params import PLACEHOLDER

DEFAULT_PATH = Path("/etc/raswarden/raswarden.toml")


class ConfigError(ValueError):
    """A configuration problem; the message names the file and the key."""


@dataclass
class ServiceConfig:
    """``[service]``: the live daemon's clock, shard and housekeeping."""

    interval_s: float = TICK_S
    lateness_s: float | None = None  # default: one interval
    shard: str = "default"
    lease_ttl_s: float | None = None  # default: three intervals
    topology: str = ""
    model: str = ""
    playbook_interval_s: float = 10.0
    alert_interval_s: float = 5.0
    retention_days: float = 30.0
    housekeeping_interval_s: float = 3600.0
    retrain_interval_s: float = 0.0  # 0: never
    retrain_traces: list[str] = field(default_factory=list)
    # the pipeline's warm state (daemon/judgement/warmstate.py): saved this often (0: never) and taken up at start,
    # failover
    # or reload when no older than warm_state_max_age_s
    warm_state_interval_s: float = 300.0
    warm_state_max_age_s: float = 86400.0

    @property
    def lateness(self) -> float:
        return self.interval_s if self.lateness_s is None else self.lateness_s

    @property
    def lease_ttl(self) -> float:
        return 3 * self.interval_s if self.lease_ttl_s is None else self.lease_ttl_s


@dataclass
class HttpConfig:
    """``[http]``: /metrics, /healthz, the status page and the JSON API."""

    listen: str = "127.0.0.1:9470"
    token: str | None = None  # bearer token for the API's write calls; None: they are refused
    max_connections: int = 256  # open at once; at the cap the slowest sender is closed to make room (web/server.py)
    max_connections_per_peer: int = 64  # the same, per client address
    request_timeout_s: float = 10.0  # the whole request (head and body) must arrive within this, else 408
    token_error: str | None = None  # why a configured token could not be read (the API's writes are off)


# What repairs.reset_command may name: the node as the scheduler knows it and the GPUs to reset, each a
# comma-separated list (daemon/operations/resets.py).
RESET_PLACEHOLDERS = ("node", "gpus", "uuids", "pci_bus_ids")


@dataclass
class RepairsConfig:
    """``[repairs]``: how a repaired node is validated before it returns (daemon/operations/validation.py)."""

    # A shell line run as a batch job on exactly the repaired node, inside raswarden's maintenance reservation;
    # exit status 0 passes. "" returns repaired nodes without a validation job (the order closes at once).
    validation_command: str = "dcgmi diag -r 2"
    validation_timeout_s: float = 3600.0  # the job's time limit; a job that runs longer fails
    hold_s: float = 4 * 3600.0  # how long the reservation holds the node (renewed if a validation is retried)
    # where each job writes its output, as the node sees it (read here as evidence when the filesystem is shared)
    output_dir: str = "/tmp"
    # Active checks: the validation command also runs on idle nodes, each at most this often (0: never), at most
    # idle_checks_at_once at a time and within the blast-radius budget ([playbooks]); a failure drains the node and
    # opens a repair order for it.
    idle_check_every_s: float = 0.0
    idle_checks_at_once: int = 1
    # Automatic GPU resets (daemon/operations/resets.py): where the vendor asks for a reset (NVIDIA's RESET_GPU), this
    # shell line runs as a batch job on the drained node, in the same reservation, before any technician is called;
    # {node}, {gpus}, {uuids}, {pci_bus_ids} name what to reset. "" leaves resets to technicians.
    reset_command: str = ""
    reset_timeout_s: float = 600.0
    # Automatic reboots (daemon/operations/reboots.py): where the vendor asks for a reboot (NVIDIA's RESTART_BM, or a
    # reset that did not clear the fault), the scheduler reboots the drained node (Slurm: scontrol reboot, which
    # needs slurm.conf's RebootProgram) in the same reservation, then it is validated. Off leaves reboots to
    # technicians; a node not back within reboot_timeout_s goes to them.
    reboot: bool = False
    reboot_timeout_s: float = 1800.0


@dataclass
class AdviceConfig:
    """``[advice]``: checkpoint-interval advice per job from raswarden's measured foresight
    (daemon/operations/advice.py)."""

    enabled: bool = True
    # where each running opted-in job's advice is written as <job id>.json: a filesystem the jobs' nodes see
    # ("": no files; the API and /metrics still give it)
    directory: str = ""
    quantile: float = 0.9  # the upper bound of the unforeseen failure rate the interval is built on
    window_days: float = 180.0  # the journal read
    cost_s: float = 60.0  # a job's checkpoint cost when neither measured nor declared
    restart_s: float = 600.0  # a job's restart cost when not declared
    min_interval_s: float = 600.0
    max_interval_s: float = 24 * 3600.0  # never advise longer, whatever the evidence
    every_s: float = 300.0  # how often advice is made; a file older than three times this is stale
    prior_per_node_year: float = 1.4  # the fleet's hard failures a node-year before raswarden has seen any
    prior_failures: float = 1.0  # what that prior weighs, in failures
    prior_incident_hours: float = 24.0  # one failure in this many hours of an open sub-healthy incident, before data


@dataclass
class Config:
    path: Path | None = None
    store_url: str = DEFAULT_URL
    alerting: AlertingConfig = field(default_factory=AlertingConfig)
    receivers: list[ReceiverConfig] = field(default_factory=list)
    templates_dir: str | None = None
    backoff: Backoff = field(default_factory=Backoff)
    playbook_dirs: list[str] = field(default_factory=list)
    guards: Guards = field(default_factory=Guards)
    scheduler: dict[str, Any] = field(default_factory=lambda: {"type": "none"})
    service: ServiceConfig = field(default_factory=ServiceConfig)
    http: HttpConfig = field(default_factory=HttpConfig)
    collectors: list[dict[str, Any]] = field(default_factory=list)
    repairs: RepairsConfig = field(default_factory=RepairsConfig)
    advice: AdviceConfig = field(default_factory=AdviceConfig)
    shards: dict[str, ShardSpec] = field(default_factory=dict)  # [shards.NAME]: empty, one shard owns everything


#: what a periodic job's interval may be: the daemon's cycle, the playbooks', the alerts', housekeeping
INTERVAL_RANGE_S = (0.1, 86400.0)


def _take(table: dict[str, Any], key: str, kind: type | tuple, where: str, default: Any = None) -> Any:
    if key not in table:
        return default
    value = table.pop(key)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise ConfigError(f"{where}.{key}: expected {names}, got {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):  # TOML has nan and inf: no setting means either
        raise ConfigError(f"{where}.{key}: must be a finite number, got {value}")
    return value


def _no_more(table: dict[str, Any], where: str) -> None:
    if table:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(table))}")


def parse(raw: dict[str, Any], path: Path | None = None) -> Config:
    """A validated Config from the parsed TOML ``raw``."""
    raw = {k: (dict(v) if isinstance(v, dict) else v) for k, v in raw.items()}
    cfg = Config(path=path)
    store = raw.pop("store", {})
    cfg.store_url = _take(store, "url", str, "store", DEFAULT_URL)
    _no_more(store, "store")

    al = raw.pop("alerting", {})
    a = AlertingConfig()
    for key in ("group_wait_s", "group_interval_s", "repeat_interval_s"):
        value = _take(al, key, float, "alerting", getattr(a, key))
        if value < 0:
            raise ConfigError(f"alerting.{key}: must not be negative")
        setattr(a, key, value)
    a.status_url = _take(al, "status_url", str, "alerting", "")
    a.default_receivers = [str(x) for x in _take(al, "default_receivers", list, "alerting", [])]
    cfg.templates_dir = _take(al, "templates_dir", str, "alerting")
    for category, line in _take(al, "runbooks", dict, "alerting", {}).items():
        if category not in RUNBOOKS:
            raise ConfigError(f"alerting.runbooks.{category}: not a category (one of {', '.join(RUNBOOKS)})")
        if not isinstance(line, str):
            raise ConfigError(f"alerting.runbooks.{category}: expected a string")
        a.runbooks[category] = line
    delivery = dict(_take(al, "delivery", dict, "alerting", {}))
    for key in ("base_s", "max_s", "max_age_s"):
        setattr(cfg.backoff, key, _take(delivery, key, float, "alerting.delivery", getattr(cfg.backoff, key)))
    _no_more(delivery, "alerting.delivery")

    names: list[str] = []
    for i, entry in enumerate(_take(al, "receivers", list, "alerting", [])):
        where = f"alerting.receivers[{i}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: expected a table")
        try:
            rc = ReceiverConfig.from_mapping(entry, where)
        except (SecretError, ValueError) as exc:
            raise ConfigError(str(exc)) from None
        cls = RECEIVERS.get(rc.type)
        if cls is None:
            raise ConfigError(f"{where}.type: unknown receiver type {rc.type!r} "
                              f"(one of {', '.join(sorted(RECEIVERS))})")
        unknown = set(rc.options) - set(cls.options)
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
        if cls.needs_secret and not rc.secret and not rc.unavailable:
            raise ConfigError(f"{where}.secret: required for {rc.type} (the signing secret)")
        if rc.name in names:
            raise ConfigError(f"{where}.name: {rc.name!r} is used twice")
        names.append(rc.name)
        cfg.receivers.append(rc)
    for i, entry in enumerate(_take(al, "routes", list, "alerting", [])):
        where = f"alerting.routes[{i}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: expected a table")
        try:
            a.routes.append(Route.from_mapping(entry, where))
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    if not a.default_receivers:
        a.default_receivers = list(names)
    for where, targets in [("alerting.default_receivers", a.default_receivers)] + [
            (f"alerting.routes[{i}].receivers", r.receivers) for i, r in enumerate(a.routes)]:
        for t in targets:
            if t not in names:
                raise ConfigError(f"{where}: no receiver named {t!r}")
    _no_more(al, "alerting")
    cfg.alerting = a
    _playbooks(cfg, raw.pop("playbooks", {}))
    _scheduler(cfg, raw.pop("scheduler", {}))
    _service(cfg, raw.pop("service", {}))
    _http(cfg, raw.pop("http", {}))
    _collectors(cfg, raw.pop("collectors", []))
    _repairs(cfg, raw.pop("repairs", {}))
    _advice(cfg, raw.pop("advice", {}))
    _shards(cfg, raw.pop("shards", {}))
    _no_more(raw, "top level")
    return cfg


def _service(cfg: Config, sv: dict[str, Any]) -> None:
    sv = dict(sv)
    out = cfg.service
    for key in ("interval_s", "playbook_interval_s", "alert_interval_s", "housekeeping_interval_s"):
        value = _take(sv, key, float, "service", getattr(out, key))
        low, high = INTERVAL_RANGE_S
        if not low <= value <= high:  # shorter only spins a core; longer, and nothing is watched for a day
            raise ConfigError(f"service.{key}: must be from {low:g} s to {high:g} s (a day), got {value:g}")
        setattr(out, key, value)
    for key in ("lateness_s", "lease_ttl_s"):
        value = _take(sv, key, float, "service")
        if value is not None and value < 0:
            raise ConfigError(f"service.{key}: must not be negative")
        setattr(out, key, value)
    if out.lease_ttl_s is not None and out.lease_ttl_s <= out.interval_s:
        raise ConfigError("service.lease_ttl_s: must be longer than service.interval_s (the lease is renewed "
                          "every interval)")
    for key in ("retention_days", "retrain_interval_s", "warm_state_interval_s", "warm_state_max_age_s"):
        value = _take(sv, key, float, "service", getattr(out, key))
        if value < 0:
            raise ConfigError(f"service.{key}: must not be negative")
        setattr(out, key, value)
    for key in ("shard", "topology", "model"):
        setattr(out, key, _take(sv, key, str, "service", getattr(out, key)))
    if out.shard != POOL and (not out.shard or not all(c.isalnum() or c in "-_." for c in out.shard)):
        raise ConfigError("service.shard: letters, digits, '-', '_' and '.' only (or \"*\": any free shard)")
    out.retrain_traces = [str(t) for t in _take(sv, "retrain_traces", list, "service", [])]
    if out.retrain_interval_s and not out.retrain_traces:
        raise ConfigError("service.retrain_traces: required when service.retrain_interval_s is set")
    _no_more(sv, "service")


def _shards(cfg: Config, sh: dict[str, Any]) -> None:
    """``[shards.NAME]`` tables: each shard's supernodes, racks and nodes (daemon/shards.py); none may be in two."""
    if not isinstance(sh, dict):
        raise ConfigError("shards: expected a table of [shards.NAME] tables")
    seen: dict[tuple[str, str], str] = {}
    for name, table in sh.items():
        if not isinstance(table, dict):
            raise ConfigError(f"shards.{name}: expected a table")
        if not name or not all(c.isalnum() or c in "-_." for c in name):
            raise ConfigError(f"shards.{name}: letters, digits, '-', '_' and '.' only")
        table = dict(table)
        parts = {}
        for key in ("supernodes", "racks", "nodes"):
            values = _take(table, key, list, f"shards.{name}", [])
            for v in values:
                if (key, str(v)) in seen:
                    raise ConfigError(f"shards.{name}.{key}: {v!r} is in shards.{seen[key, str(v)]} too")
                seen[key, str(v)] = name
            parts[key] = frozenset(str(v) for v in values)
        matchers = _take(table, "matchers", str, f"shards.{name}", "")
        _no_more(table, f"shards.{name}")
        if not any(parts.values()):
            raise ConfigError(f"shards.{name}: names no supernode, rack or node")
        cfg.shards[name] = ShardSpec(name, **parts, matchers=matchers.strip())
    if cfg.service.shard == POOL and not cfg.shards:
        raise ConfigError('service.shard: "*" (any free shard) needs [shards.NAME] tables')
    if cfg.shards and cfg.service.shard not in cfg.shards and cfg.service.shard != POOL:
        raise ConfigError(f"service.shard: {cfg.service.shard!r} is not one of the [shards] "
                          f"({', '.join(sorted(cfg.shards))})")


def _repairs(cfg: Config, rp: dict[str, Any]) -> None:
    rp = dict(rp)
    out = cfg.repairs
    out.validation_command = _take(rp, "validation_command", str, "repairs", out.validation_command)
    if "\n" in out.validation_command:
        raise ConfigError("repairs.validation_command: one line")
    for key in ("validation_timeout_s", "hold_s", "reset_timeout_s", "reboot_timeout_s"):
        value = _take(rp, key, float, "repairs", getattr(out, key))
        if value <= 0:
            raise ConfigError(f"repairs.{key}: must be positive")
        setattr(out, key, value)
    if out.hold_s < max(out.validation_timeout_s, out.reset_timeout_s, out.reboot_timeout_s):
        raise ConfigError("repairs.hold_s: must be at least repairs.validation_timeout_s, reset_timeout_s and "
                          "reboot_timeout_s (the jobs and the reboot happen in the hold)")
    out.reboot = _take(rp, "reboot", bool, "repairs", out.reboot)
    out.output_dir = _take(rp, "output_dir", str, "repairs", out.output_dir)
    out.reset_command = _take(rp, "reset_command", str, "repairs", out.reset_command)
    if "\n" in out.reset_command:
        raise ConfigError("repairs.reset_command: one line")
    unknown = set(PLACEHOLDER.findall(out.reset_command)) - set(RESET_PLACEHOLDERS)
    if unknown:
        raise ConfigError(f"repairs.reset_command: unknown {', '.join(sorted(unknown))} (it may name "
                          f"{', '.join('{' + p + '}' for p in RESET_PLACEHOLDERS)})")
    out.idle_check_every_s = _take(rp, "idle_check_every_s", float, "repairs", out.idle_check_every_s)
    out.idle_checks_at_once = _take(rp, "idle_checks_at_once", int, "repairs", out.idle_checks_at_once)
    if out.idle_check_every_s < 0 or out.idle_checks_at_once < 1:
        raise ConfigError("repairs.idle_check_every_s: not negative; repairs.idle_checks_at_once: at least 1")
    if out.idle_check_every_s and not out.validation_command:
        raise ConfigError("repairs.idle_check_every_s: needs repairs.validation_command (the check to run)")
    _no_more(rp, "repairs")


def _advice(cfg: Config, ad: dict[str, Any]) -> None:
    ad = dict(ad)
    out = cfg.advice
    out.enabled = _take(ad, "enabled", bool, "advice", out.enabled)
    out.directory = _take(ad, "directory", str, "advice", out.directory)
    for key in ("window_days", "cost_s", "restart_s", "min_interval_s", "max_interval_s", "every_s",
                "prior_per_node_year", "prior_failures", "prior_incident_hours"):
        value = _take(ad, key, float, "advice", getattr(out, key))
        if value <= 0:
            raise ConfigError(f"advice.{key}: must be positive")
        setattr(out, key, value)
    out.quantile = _take(ad, "quantile", float, "advice", out.quantile)
    if not 0.5 <= out.quantile < 1.0:
        raise ConfigError("advice.quantile: from 0.5 (the rate's median) up to, not including, 1")
    if out.max_interval_s < out.min_interval_s:
        raise ConfigError("advice.max_interval_s: must be at least advice.min_interval_s")
    _no_more(ad, "advice")


def _http(cfg: Config, ht: dict[str, Any]) -> None:
    ht = dict(ht)
    listen = _take(ht, "listen", str, "http", cfg.http.listen)
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ConfigError(f"http.listen: expected HOST:PORT, got {listen!r}")
    cfg.http.listen = listen
    cfg.http.max_connections = _take(ht, "max_connections", int, "http", cfg.http.max_connections)
    cfg.http.max_connections_per_peer = _take(ht, "max_connections_per_peer", int, "http",
                                              cfg.http.max_connections_per_peer)
    cfg.http.request_timeout_s = _take(ht, "request_timeout_s", float, "http", cfg.http.request_timeout_s)
    if min(cfg.http.max_connections, cfg.http.max_connections_per_peer) < 1 or cfg.http.request_timeout_s <= 0:
        raise ConfigError("http.max_connections, http.max_connections_per_peer and http.request_timeout_s: "
                          "must be positive")
    try:  # a token that is not there (yet) turns the API's writes off, never the daemon
        cfg.http.token = read_secret("http.token", _take(ht, "token", str, "http"),
                                     _take(ht, "token_file", str, "http"), _take(ht, "token_credential", str, "http"),
                                     required=False)
    except SecretError as exc:
        cfg.http.token, cfg.http.token_error = None, str(exc)
    _no_more(ht, "http")


def _collectors(cfg: Config, entries: Any) -> None:
    from daemon.ingest.collectors import REGISTRY

    if not isinstance(entries, list):
        raise ConfigError("collectors: expected an array of tables ([[collectors]])")
    names: set[str] = set()
    for i, entry in enumerate(entries):
        where = f"collectors[{i}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: expected a table")
        entry = dict(entry)
        kind = entry.get("type")
        cls = REGISTRY.get(kind)
        if cls is None:
            raise ConfigError(f"{where}.type: one of {', '.join(REGISTRY)}")
        name = str(entry.setdefault("name", kind))
        if name in names:
            raise ConfigError(f"{where}.name: {name!r} is used twice")
        names.add(name)
        if not isinstance(entry.get("enabled", True), bool):
            raise ConfigError(f"{where}.enabled: expected true or false")
        for key, value in entry.items():
            if key in ("type", "name", "enabled"):
                continue
            if key not in cls.options:
                raise ConfigError(f"{where}: unknown key {key!r} for a {kind} collector "
                                  f"(one of {', '.join(sorted(cls.options))})")
            default = cls.options[key]
            want = (int, float) if isinstance(default, float) else type(default)
            if not isinstance(value, want) or isinstance(value, bool) != isinstance(default, bool):
                raise ConfigError(f"{where}.{key}: expected {type(default).__name__}, got {type(value).__name__}")
        cfg.collectors.append(entry)


def _playbooks(cfg: Config, pb: dict[str, Any]) -> None:
    pb = dict(pb)
    cfg.playbook_dirs = [str(d) for d in _take(pb, "dirs", list, "playbooks", [])]
    g = cfg.guards
    g.mode = _take(pb, "mode", str, "playbooks", g.mode)
    if g.mode not in MODES:
        raise ConfigError(f"playbooks.mode: one of {', '.join(MODES)}")
    for key in ("max_drained_nodes", "breaker_incidents", "repeat_offender"):
        value = _take(pb, key, int, "playbooks", getattr(g, key))
        if value < 1:
            raise ConfigError(f"playbooks.{key}: at least 1")
        setattr(g, key, value)
    for key in ("max_rack_fraction", "max_cluster_fraction", "breaker_stale_fraction"):
        value = _take(pb, key, float, "playbooks", getattr(g, key))
        if not 0 < value <= 1:
            raise ConfigError(f"playbooks.{key}: a fraction in (0, 1]")
        setattr(g, key, value)
    for key in ("breaker_window_s", "repeat_window_s"):
        setattr(g, key, _take(pb, key, float, "playbooks", getattr(g, key)))
    _no_more(pb, "playbooks")


def _scheduler(cfg: Config, sc: dict[str, Any]) -> None:
    sc = dict(sc)
    kind = _take(sc, "type", str, "scheduler", "none")
    if kind not in ("none", "slurm", "kubernetes", "mixed"):
        raise ConfigError("scheduler.type: one of none, slurm, kubernetes, mixed")
    out: dict[str, Any] = {"type": kind}
    if kind == "mixed":  # a cluster of both: [scheduler.slurm] and [scheduler.kubernetes], the topology says whose
        for part in ("slurm", "kubernetes"):
            table = _take(sc, part, dict, "scheduler", None)
            if table is None:
                raise ConfigError(f"scheduler.{part}: a mixed cluster needs both [scheduler.slurm] and "
                                  "[scheduler.kubernetes]")
            out[part] = _scheduler_part(part, dict(table), f"scheduler.{part}")
    elif kind != "none":
        out.update(_scheduler_part(kind, sc, "scheduler"))
    _no_more(sc, "scheduler")
    cfg.scheduler = out


def _scheduler_part(kind: str, sc: dict[str, Any], where: str) -> dict[str, Any]:
    """One scheduler's keys (``sc``'s are taken; a sub-table's leftovers are refused here)."""
    out: dict[str, Any] = {"type": kind}
    if kind == "slurm":
        out["slurm_conf"] = _take(sc, "slurm_conf", str, where)
        out["timeout_s"] = _take(sc, "timeout_s", float, where, 30.0)
        out["checkpoint_comment"] = _take(sc, "checkpoint_comment", str, where, "raswarden:checkpoint")
        out["checkpoint_name"] = _take(sc, "checkpoint_name", str, where, "") or None
        out["checkpoint_partitions"] = [str(p) for p in _take(sc, "checkpoint_partitions", list, where, [])]
    if kind == "kubernetes":
        from playbooks.kubernetes import NamespacePolicy

        out["kubeconfig"] = _take(sc, "kubeconfig", str, where, "")  # "": the pod's own service account
        out["timeout_s"] = _take(sc, "timeout_s", float, where, 30.0)
        out["eviction_deadline_s"] = _take(sc, "eviction_deadline_s", float, where, 600.0)
        out["validation_namespace"] = _take(sc, "validation_namespace", str, where, "raswarden")
        out["validation_image"] = _take(sc, "validation_image", str, where, "")
        out["reboot_command"] = _take(sc, "reboot_command", str, where, "")  # "": no automatic reboot there
        policies = {"*": _take(sc, "default_policy", str, where, "evict"),
                    **{str(k): str(v) for k, v in _take(sc, "namespace_policies", dict, where, {}).items()}}
        try:
            out["namespace_policies"] = {ns: NamespacePolicy.parse(text) for ns, text in policies.items()}
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    if where != "scheduler":
        _no_more(sc, where)
    return out


def load(path: str | Path = DEFAULT_PATH) -> Config:
    """Read and validate the config file at ``path``."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror or exc}") from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    try:
        return parse(raw, path)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
