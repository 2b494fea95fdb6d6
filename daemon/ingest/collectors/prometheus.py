"""Instant queries against a Prometheus server's HTTP API: the scalable path for big clusters.

One management node cannot scrape 100,000 accelerators' exporters every 15 s by itself; the Prometheus
(or Thanos, VictoriaMetrics) that already does is asked instead: ``GET /api/v1/query`` with one selector
per name table (``{__name__=~"DCGM_FI_DEV_GPU_TEMP|..."}``), so every metric raswarden reads comes in a
few requests. Each result keeps its own sample timestamp; a series whose timestamp did not move since the
last query (Prometheus has not scraped it again) is not read twice. Answers are streamed with ijson, so a
large fleet's answer is never held as one Python object tree. ``matchers`` adds label matchers to every default
selector: a shard's instance asks only for its own part of the cluster (``supernode="sn01"``, or an ``instance``
regular expression), so no shard reads the whole cluster's answer.
"""

from __future__ import annotations

import json
import math
import re
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, ClassVar

import ijson
import numpy as np

from daemon.ingest.batch import Batch
from daemon.ingest.collectors.collector import Collector, Outcome
from daemon.ingest.formats.reader import ReadContext
from daemon.ingest.formats.openmetrics import samples_frame
from daemon.ingest.naming import reads_nan

FORMAT = "promql"


def default_queries(rules, matchers: str = "") -> list[str]:
    """One selector per family of source metrics the name tables know (dcgm-exporter, node_exporter, ...), each
    with ``matchers`` (label matchers, e.g. a shard's ``supernode="sn01"``) when given."""
    groups: dict[str, list[str]] = {}
    for name in sorted(rules):
        prefix = name.split("_", 1)[0]
        groups.setdefault(prefix, []).append(name)
    extra = f", {matchers}" if matchers else ""
    return ['{__name__=~"' + "|".join(names) + '"' + extra + "}" for _, names in sorted(groups.items())]


class _Head:
    """A response read through, keeping its first bytes: where the answer's status and result type are."""

    KEEP = 4096

    def __init__(self, raw):
        self.raw, self.head = raw, b""

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        if len(self.head) < self.KEEP:
            self.head += data[:self.KEEP - len(self.head)]
        return data

    def check(self) -> None:
        """Raise ValueError for an answer whose status is not success or whose result is not a vector."""
        status = re.search(rb'"status"\s*:\s*"([^"]*)"', self.head)
        if status and status.group(1) != b"success":
            raise ValueError(f"status {status.group(1).decode(errors='replace')!r}")
        kind = re.search(rb'"resultType"\s*:\s*"([^"]*)"', self.head)
        if kind and kind.group(1) != b"vector":
            raise ValueError(f"expected a vector result, got {kind.group(1).decode(errors='replace')}")
        if not status and not kind and not self.head.lstrip().startswith(b"{"):
            raise ValueError("not a Prometheus API answer")


class PrometheusCollector(Collector):
    """PromQL instant queries; see the module docstring."""

    kind: ClassVar[str] = "prometheus"
    options: ClassVar[dict[str, Any]] = {"url": "", "queries": [], "matchers": "", "timeout_s": 20.0,
                                         "bearer_token_file": "", "bearer_token_credential": ""}

    def __init__(self, name: str, ctx: ReadContext, **options: Any):
        super().__init__(name, ctx, **options)
        if not self.url:
            raise ValueError("url: required (the Prometheus server, e.g. http://prometheus:9090)")
        if self.matchers and self.queries:
            raise ValueError("matchers: only for the default queries (put them in your own queries instead)")
        # a shard asks only for its own nodes' series: matchers such as supernode="sn01", the collector's own or its
        # shard's (daemon/shards.py); a collector with queries of its own has what it reads of other shards dropped
        self.queries = list(self.queries) or default_queries(ctx.mapper.rules,
                                                             str(self.matchers) or ctx.shard_matchers)
        self._sid: dict[tuple, int] = {}
        self._last_ts: dict[int, float] = {}
        self._token: str | None = None
        self._token_error: str | None = None  # a token that is not there (yet): every query fails naming it
        if self.bearer_token_file or self.bearer_token_credential:
            from daemon.alerting.secrets import SecretError, read_secret

            try:
                self._token = read_secret("bearer_token", file=self.bearer_token_file or None,
                                          credential=self.bearer_token_credential or None)
            except SecretError as exc:
                self._token_error = str(exc)

    def check(self) -> list[str]:
        """A bearer token that cannot be read."""
        return [self._token_error] if self._token_error else []

    def _get(self, query: str):
        if self._token_error:
            raise OSError(self._token_error)
        url = self.url.rstrip("/") + "/api/v1/query?" + urllib.parse.urlencode({"query": query})
        headers = {"Accept": "application/json", "User-Agent": "raswarden"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        return urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=self.timeout_s)

    def _series(self, key: tuple, position: str) -> int:
        """The series id of a result's labels (``key``: its label pairs in the answer's order, which Prometheus keeps
        sorted, so one series is one key from one answer to the next)."""
        sid = self._sid.get(key)
        if sid is None:
            labels = {str(k): str(v) for k, v in key}
            name = labels.pop("__name__", "")
            sid = self._sid[key] = self.ctx.mapper.series_id(name, labels, position, FORMAT)
        return sid

    def _query(self, query: str, sids: list[int], tss: list[float], vals: list[float]) -> None:
        """Read one query's vector result into the lists; raises OSError/ValueError for a failed query.

        The result's items are built by ijson's C backend one at a time (a Python step per JSON event cost twice as
        much at 50,000 series); the answer's status and result type come first in what Prometheus, Thanos and
        VictoriaMetrics write, and are checked there. An error status comes with an HTTP error code as well, and an
        item that is not a sample is rejected, so an answer that puts them elsewhere is still read right."""
        position = f"{self.url} query {query[:60]}"
        last, isfinite = self._last_ts, math.isfinite
        with self._get(query) as response:
            head = _Head(response)
            for item in ijson.items(head, "data.result.item", use_float=True):
                try:
                    stamp, value = item["value"]
                    ts, value = float(stamp), float(value)
                    sid = self._series(tuple(item["metric"].items()), position)  # TypeError: a label not a string
                except (TypeError, KeyError, ValueError, AttributeError):
                    self.ctx.rejects.reject(FORMAT, position, "result without labels and [time, value]",
                                            json.dumps(item, default=str)[:120])
                    continue
                if not (isfinite(ts) and isfinite(value)) and not (
                        value != value and isfinite(ts) and reads_nan(self.ctx.mapper, np.array([sid]))[0]):
                    self.ctx.rejects.reject(FORMAT, position, "value is NaN or infinite",
                                            json.dumps(item["metric"], default=str)[:120])
                    continue
                if sid < 0 or last.get(sid) == ts:
                    continue  # not a series raswarden reads, or not scraped again since the last query
                last[sid] = ts
                sids.append(sid)
                tss.append(ts)
                vals.append(value)
            head.check()

    def collect(self, now: float) -> tuple[Batch, Outcome]:
        outcome = Outcome(targets_total=len(self.queries))
        sids: list[int] = []
        tss: list[float] = []
        vals: list[float] = []
        for query in self.queries:
            try:
                self._query(query, sids, tss, vals)
                outcome.targets_up += 1
            except urllib.error.HTTPError as exc:
                outcome.errors.append(f"{self.url}: HTTP {exc.code} for {query[:60]}")
            except (OSError, ValueError, ijson.JSONError) as exc:
                outcome.errors.append(f"{self.url}: {getattr(exc, 'reason', None) or exc}")
        if not sids:
            return Batch(), outcome
        frame = samples_frame(self.ctx.mapper, np.asarray(sids, dtype=np.int64), np.asarray(tss), np.asarray(vals),
                              FORMAT)
        order = np.argsort(frame["ts"].to_numpy(), kind="stable")
        batch = Batch(samples=frame.iloc[order].reset_index(drop=True))
        outcome.samples = len(batch.samples)
        return batch, outcome

    def probe(self) -> str | None:
        try:
            with self._get("vector(1)") as response:
                response.read()
            return None
        except (OSError, ValueError) as exc:
            return f"{self.url}: {getattr(exc, 'reason', None) or exc}"


