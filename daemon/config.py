"""The configuration file (TOML, ``/etc/raswarden/raswarden.toml``): read, validated, typed.

Errors name the key (``alerting.receivers[2].url_file``) and never echo a secret. Sections so far:
``[store]`` and ``[alerting]`` (with ``[[alerting.receivers]]`` and ``[[alerting.routes]]``); every key is
documented in systemd/raswarden.toml.example.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from daemon.alerting.outbox import Backoff
from daemon.alerting.pipeline import AlertingConfig
from daemon.alerting.receivers import RECEIVERS
from daemon.alerting.receivers.base import ReceiverConfig
from daemon.alerting.routing import Route
from daemon.alerting.secrets import SecretError
from daemon.store import DEFAULT_URL
from playbooks.engine import Guards
from playbooks.model import MODES

DEFAULT_PATH = Path("/etc/raswarden/raswarden.toml")


class ConfigError(ValueError):
    """A configuration problem; the message names the file and the key."""


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


def _take(table: dict[str, Any], key: str, kind: type | tuple, where: str, default: Any = None) -> Any:
    if key not in table:
        return default
    value = table.pop(key)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise ConfigError(f"{where}.{key}: expected {names}, got {type(value).__name__}")
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
        if cls.needs_secret and not rc.secret:
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
    _no_more(raw, "top level")
    return cfg


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
    if kind not in ("none", "slurm"):
        raise ConfigError("scheduler.type: one of none, slurm")
    out: dict[str, Any] = {"type": kind}
    if kind == "slurm":
        out["slurm_conf"] = _take(sc, "slurm_conf", str, "scheduler")
        out["timeout_s"] = _take(sc, "timeout_s", float, "scheduler", 30.0)
        out["checkpoint_comment"] = _take(sc, "checkpoint_comment", str, "scheduler", "raswarden:checkpoint")
        out["checkpoint_name"] = _take(sc, "checkpoint_name", str, "scheduler", "") or None
        out["checkpoint_partitions"] = [str(p) for p in _take(sc, "checkpoint_partitions", list, "scheduler", [])]
    _no_more(sc, "scheduler")
    cfg.scheduler = out


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
