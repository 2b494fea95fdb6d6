"""Scrape exporter endpoints (dcgm-exporter, node_exporter, ...) directly, as Prometheus would.

Targets are ``host:port`` (``/metrics`` over HTTP unless a scheme or path is given) listed in the config
and in Prometheus ``file_sd`` JSON files (``[{"targets": [...], "labels": {...}}]``, re-read when they
change). Every series gets the target's ``instance`` (and the file_sd labels) unless it carries its own,
so node_exporter series, which name no host, are named through the topology's alias table exactly as
they would be after a Prometheus scrape. Scrapes run concurrently with a timeout each; every target's
``up`` and duration are metrics, and a target that does not answer is an error of that target, not of
the collection.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from daemon import metrics
from daemon.ingest.batch import Batch
from daemon.ingest.collectors.collector import Collector, Outcome
from daemon.ingest.formats.reader import ReadContext
from daemon.ingest.formats.openmetrics import parse_scrape_arrays, samples_frame
from daemon.ingest.naming import host_of_instance

ACCEPT = "text/plain;version=0.0.4;q=1,*/*;q=0.1"
Arrays = tuple[np.ndarray, np.ndarray, np.ndarray]  # series id, timestamp, value
MAX_BODY = 64 * 1024 * 1024


def target_url(target: str) -> str:
    """``host:port`` → ``http://host:port/metrics``; a full URL is kept."""
    if "://" in target:
        return target
    return f"http://{target}/metrics" if "/" not in target else f"http://{target}"


def instance_of(target: str) -> str:
    """The ``instance`` label Prometheus would give a target: its ``host:port``."""
    rest = target.split("://", 1)[-1]
    return rest.split("/", 1)[0]


def read_file_sd(path: str) -> list[tuple[str, dict[str, str]]]:
    """Targets and their labels from a Prometheus file_sd JSON file; raises ValueError when malformed."""
    doc = json.loads(Path(path).read_text())
    if not isinstance(doc, list):
        raise ValueError("expected a list of target groups")
    out = []
    for i, group in enumerate(doc):
        if not isinstance(group, dict) or not isinstance(group.get("targets"), list):
            raise ValueError(f"group {i}: expected an object with a 'targets' list")
        labels = {str(k): str(v) for k, v in (group.get("labels") or {}).items()}
        out += [(str(t), labels) for t in group["targets"]]
    return out


class ExpositionCollector(Collector):
    """Concurrent scrapes of exporter endpoints; see the module docstring."""

    kind: ClassVar[str] = "exposition"
    options: ClassVar[dict[str, Any]] = {
        "targets": [], "file_sd": [], "timeout_s": 5.0, "concurrency": 32, "job": "",
    }

    def __init__(self, name: str, ctx: ReadContext, **options: Any):
        super().__init__(name, ctx, **options)
        self._caches: dict[str, dict[str, int]] = {}
        self._contexts: dict[str, ReadContext] = {}
        self._sd_mtimes: dict[str, float] = {}
        self._sd_targets: dict[str, list[tuple[str, dict[str, str]]]] = {}
        self.last_up: dict[str, bool] = {}
        self._pool = ThreadPoolExecutor(max_workers=max(1, int(self.concurrency)),
                                        thread_name_prefix=f"scrape-{name}")

    # ------------------------------------------------------------------------------------------
    def all_targets(self, errors: list[str] | None = None) -> list[tuple[str, dict[str, str]]]:
        """Static targets, then those of the file_sd files (a file that cannot be read keeps its last list)."""
        base = {"job": self.job} if self.job else {}
        out = [(str(t), dict(base)) for t in self.targets]
        for path in self.file_sd:
            try:
                mtime = Path(path).stat().st_mtime
                if self._sd_mtimes.get(path) != mtime:
                    self._sd_targets[path] = read_file_sd(path)
                    self._sd_mtimes[path] = mtime
            except (OSError, ValueError) as exc:
                if errors is not None:
                    errors.append(f"{path}: {exc}")
            out += [(t, {**base, **labels}) for t, labels in self._sd_targets.get(path, [])]
        return out

    def check(self) -> list[str]:
        """file_sd files that cannot be read (Prometheus too only warns of them: the file may be written later), and
        no target at all."""
        errors: list[str] = []
        targets = self.all_targets(errors)
        out = [f"file_sd {e}" for e in errors]
        if not targets and not errors:
            out.append("no targets (neither targets nor any file_sd file lists one)")
        return out

    def _context(self, target: str, labels: dict[str, str]) -> ReadContext:
        ctx = self._contexts.get(target)
        if ctx is None:
            ctx = self._contexts[target] = ReadContext(mapper=self.ctx.mapper,
                                                       target_labels={"instance": instance_of(target), **labels})
        return ctx

    def fetch(self, url: str) -> bytes:
        """GET one endpoint; raises OSError (URLError, timeouts) or ValueError (HTTP status, size)."""
        request = urllib.request.Request(url, headers={"Accept": ACCEPT, "User-Agent": "raswarden"})
        with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
            if response.status != 200:
                raise ValueError(f"HTTP {response.status}")
            body = response.read(MAX_BODY + 1)
        if len(body) > MAX_BODY:
            raise ValueError(f"answer larger than {MAX_BODY} bytes")
        return body

    def _scrape(self, target: str, labels: dict[str, str], now: float) -> tuple[Arrays | None, str | None, float]:
        started = time.perf_counter()
        url = target_url(target)
        try:
            body = self.fetch(url)
        except urllib.error.HTTPError as exc:
            return None, f"{target}: HTTP {exc.code}", time.perf_counter() - started
        except (OSError, ValueError) as exc:
            reason = getattr(exc, "reason", None) or exc
            return None, f"{target}: {reason}", time.perf_counter() - started
        self._context(target, labels)
        return self._parse(body, target, url, now), None, time.perf_counter() - started

    def _parse(self, body: bytes, target: str, url: str, now: float) -> Arrays:
        """One answer as (series id, ts, value) arrays (a subclass may rewrite the body first)."""
        return parse_scrape_arrays(body, self._contexts[target], self._caches.setdefault(target, {}), url, now)

    def mine(self, target: str) -> bool:
        """Whether ``target`` is this shard's to scrape: its address names a node the shard owns (a target whose
        node the topology cannot tell is scraped, and what it serves is kept or dropped by its series' nodes)."""
        if self.ctx.owns_node is None:
            return True
        node = self.ctx.mapper.topology.resolve_host(host_of_instance(instance_of(target)))
        return node is None or self.ctx.owns_node(node)

    def collect(self, now: float) -> tuple[Batch, Outcome]:
        outcome = Outcome()
        targets = [t for t in self.all_targets(outcome.errors) if self.mine(t[0])]
        outcome.targets_total = len(targets)
        results = list(self._pool.map(lambda tl: (tl[0], *self._scrape(tl[0], tl[1], now)), targets))
        parts = []
        for target, arrays, error, took in results:
            metrics.SCRAPE_UP.labels(self.name, target).set(0 if error else 1)
            metrics.SCRAPE_DURATION.labels(self.name, target).set(took)
            self.last_up[target] = error is None
            if error:
                outcome.errors.append(error)
            else:
                outcome.targets_up += 1
                if len(arrays[0]):
                    parts.append(arrays)
        if not parts:
            return Batch(), outcome
        sid, ts, value = (np.concatenate([p[i] for p in parts]) for i in range(3))
        batch = Batch(samples=samples_frame(self.ctx.mapper, sid, ts, value, self.kind))
        outcome.samples = len(batch.samples)
        return batch, outcome

    def probe(self) -> str | None:
        if not self.last_up or any(self.last_up.values()):
            return None
        return f"none of {len(self.last_up)} targets answered the last scrape"

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
