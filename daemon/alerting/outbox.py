"""The outbox: notifications persisted per receiver, delivered in order per group with retries.

A notification enters the outbox in the same transaction that advances its group, so it is neither lost
nor made twice. Delivery takes, per receiver and group, only the oldest pending notification (order is
kept per group), honours the receiver's rate limit, and records the outcome: 2xx done; 429, 5xx and no
answer retried with exponential backoff (or the platform's Retry-After); other errors failed with the
platform's message; a notification still undelivered after ``max_age_s`` is given up, loudly. Delivery
is at least once: a process killed between the platform's answer and the record sends again, with the
same ``Idempotency-Key`` header.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from dataclasses import dataclass

from daemon.alerting.alert import Notification
from daemon.alerting.http import Outcome, Response, post
from daemon.alerting.receivers.receiver import Receiver
from daemon.alerting.secrets import scrub
from daemon.metrics import ALERT_DELIVERIES, ALERT_NOTIFICATIONS, ALERT_OUTBOX_PENDING
from daemon.store import OutboxRow, Store
from daemon.store.alerting import AlertRecords, AlertTransaction

log = logging.getLogger("raswarden.alerting")


@dataclass
class Backoff:
    """Exponential backoff with jitter: ``base_s`` doubling up to ``max_s``; give up after ``max_age_s``."""

    base_s: float = 2.0
    max_s: float = 300.0
    max_age_s: float = 86400.0
    jitter: float = 0.2

    def delay(self, attempts: int, retry_after: float | None = None) -> float:
        if retry_after is not None:
            return min(max(retry_after, 0.0), 3600.0)
        d = min(self.max_s, self.base_s * 2 ** max(0, attempts - 1))
        return d * (1.0 + random.uniform(-self.jitter, self.jitter))


class RateLimiter:
    """A token bucket per receiver: ``per_minute`` messages a minute, bursts of up to a tenth of that."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.buckets: dict[str, tuple[float, float]] = {}

    def take(self, name: str, per_minute: float) -> bool:
        now = self.clock()
        cap = max(1.0, per_minute / 10.0)
        tokens, last = self.buckets.get(name, (cap, now))
        tokens = min(cap, tokens + (now - last) * per_minute / 60.0)
        if tokens < 1.0:
            self.buckets[name] = (tokens, now)
            return False
        self.buckets[name] = (tokens - 1.0, now)
        return True


def enqueue(tx: AlertTransaction, n: Notification, receivers: Iterable[str], now: float) -> int:
    """Add ``n`` for each receiver inside the caller's transaction; an existing key is not added twice."""
    added = 0
    for name in receivers:
        if tx.has_notification(n.key, name):
            continue
        tx.save(OutboxRow(idempotency_key=n.key, receiver=name, group_key=n.group_key, status="pending",
                          attempts=0, next_attempt_at=now, created_at=now, payload=n.as_dict()))
        ALERT_NOTIFICATIONS.labels(name).inc()
        added += 1
    return added


class Outbox:
    """Delivery of the store's pending notifications to configured receivers."""

    def __init__(self, store: Store, receivers: dict[str, Receiver], backoff: Backoff | None = None,
                 limiter: RateLimiter | None = None, send: Callable[..., Response] = post,
                 waiting_for: set[str] | None = None):
        self.store = store
        self.records = AlertRecords(store)
        self.receivers = receivers
        self.waiting_for = waiting_for or set()  # configured receivers without their secret: their rows wait
        self.backoff = backoff or Backoff()
        self.limiter = limiter or RateLimiter()
        self.send = send
        self._workers: ThreadPoolExecutor | None = None
        self._inflight: dict[str, Future] = {}  # receiver -> its pass, until a deliver() finds it done

    def pending(self) -> list[OutboxRow]:
        return self.records.pending()

    def listing(self, delivered: bool = False) -> list[OutboxRow]:
        """Every notification not yet delivered (with ``delivered``, those too), oldest first."""
        return self.records.notifications(delivered)

    def heads(self, now: float) -> list[OutboxRow]:
        """The oldest pending notification of each (receiver, group) whose next attempt is due."""
        seen: set[tuple[str, str]] = set()
        due = []
        for row in self.pending():
            key = (row.receiver, row.group_key)
            if key in seen:
                continue
            seen.add(key)
            if row.next_attempt_at <= now:
                due.append(row)
        return due

    def deliver(self, now: float | None = None, wait_s: float | None = None) -> dict[str, int]:
        """One pass: attempt every due head once. Returns counts by outcome.

        Each receiver's heads are sent in a worker of its own, all receivers at once, so a receiver that hangs
        delays only its own notifications (issue 54: one stuck receiver held every healthy one back by its timeout
        for each stuck group). The pass waits for them all (``wait_s`` None), or at most ``wait_s``: a receiver
        still sending then goes on in the background, is left alone by later passes until it is done (``busy``),
        and its counts come with the pass that finds it done."""
        counts = {"delivered": 0, "retry": 0, "failed": 0, "gave_up": 0, "limited": 0}
        self._harvest(counts)
        by_receiver: dict[str, list[OutboxRow]] = {}
        for row in self.heads(time.time() if now is None else now):
            receiver = self.receivers.get(row.receiver)
            if receiver is None and row.receiver in self.waiting_for:
                counts["waiting"] = counts.get("waiting", 0) + 1  # kept pending until its secret is there
                continue
            if receiver is None:
                when = time.time() if now is None else now
                self._finish(row.id, when, Outcome(False, error=f"receiver {row.receiver!r} is not configured"))
                counts["failed"] += 1
                continue
            by_receiver.setdefault(row.receiver, []).append(row)
        started = []
        for name, rows in by_receiver.items():
            if name in self._inflight:  # its earlier pass is still sending
                counts["busy"] = counts.get("busy", 0) + len(rows)
                continue
            if self._workers is None:
                self._workers = ThreadPoolExecutor(max_workers=max(1, len(self.receivers)),
                                                   thread_name_prefix="raswarden-deliver")
            self._inflight[name] = self._workers.submit(self._deliver_rows, self.receivers[name], rows, now)
            started.append(self._inflight[name])
        if started:
            wait_for(started, timeout=wait_s)
        self._harvest(counts)
        self._gauge()
        return counts

    def _harvest(self, counts: dict[str, int]) -> None:
        """Add the counts of the receivers' passes that are done, and forget them."""
        for name, future in list(self._inflight.items()):
            if not future.done():
                continue
            del self._inflight[name]
            try:
                result = future.result()
            except Exception:  # noqa: BLE001 - a receiver's bug is logged and counted, the others go on
                log.exception("alert delivery to %s raised", name)
                result = {"failed": 1}
            for k, v in result.items():
                counts[k] = counts.get(k, 0) + v

    def _deliver_rows(self, receiver: Receiver, rows: list[OutboxRow], now: float | None) -> dict[str, int]:
        """One receiver's due heads, in order (its worker)."""
        counts: dict[str, int] = {}
        for row in rows:
            when = time.time() if now is None else now
            if not self.limiter.take(receiver.name, receiver.per_minute):
                result = "limited"
            else:
                n = Notification.from_dict(row.payload)
                if n.status == "resolved" and not receiver.config.send_resolved:
                    self._finish(row.id, when, Outcome(True), skipped=True)
                    continue
                result = self._finish(row.id, when, self._send_all(receiver, n, row.idempotency_key, when))
            counts[result] = counts.get(result, 0) + 1
        return counts

    def close(self) -> None:
        """Let the workers finish what they are sending (each within its receiver's timeout)."""
        if self._workers is not None:
            self._workers.shutdown(wait=True)
            self._workers = None

    def _send_all(self, receiver: Receiver, n: Notification, key: str, now: float) -> Outcome:
        """Every request delivering ``n`` (one message; a tracker's one per alert, a create where it has no ticket
        for the alert yet, whose key is kept from the answer, else an update); the first that fails stops the rest
        (the notification is retried, and the tickets made so far are updated then, not made again)."""
        known: dict[str, str | None] = {}

        def ticket_of(ref: str) -> str | None:
            row = self.records.ticket(receiver.name, ref)
            known[ref] = row.key if row is not None else None
            return known[ref]

        for ref, request in receiver.requests(n, now, ticket_of):
            request.headers.setdefault("Idempotency-Key", key if ref is None else f"{key}/{ref}")
            response = self.send(request, timeout=receiver.config.timeout_s)
            outcome = receiver.outcome(response)
            if not outcome.ok:
                return outcome
            made = receiver.key_of(response) if ref is not None and known.get(ref) is None else None
            if made:
                self.records.save_ticket(receiver.name, ref, made, now)
        return Outcome(True)

    def drain(self, until: float, poll_s: float = 0.5, clock: Callable[[], float] = time.time) -> dict[str, int]:
        """Deliver until nothing is pending or the wall clock passes ``until``."""
        total = {"delivered": 0, "retry": 0, "failed": 0, "gave_up": 0, "limited": 0}
        while clock() < until:
            for k, v in self.deliver(clock()).items():
                total[k] += v
            if not self.pending():
                break
            time.sleep(poll_s)
        return total

    def _finish(self, row_id: int, now: float, outcome: Outcome, skipped: bool = False) -> str:
        with self.records.changing_notification(row_id) as row:
            row.attempts += 0 if skipped else 1
            error = scrub(outcome.error)
            if outcome.ok:
                row.status, row.delivered_at, result = "delivered", now, "delivered"
                row.last_error = "not sent: send_resolved is off" if skipped else ""
            elif outcome.retry and now - row.created_at < self.backoff.max_age_s:
                row.next_attempt_at = now + self.backoff.delay(row.attempts, outcome.retry_after)
                row.last_error, result = error, "retry"
                log.warning("alert %s to %s: %s; retry in %.0f s (attempt %d)", row.idempotency_key, row.receiver,
                            error, row.next_attempt_at - now, row.attempts)
            elif outcome.retry:
                row.status, row.last_error, result = "failed", f"gave up after {row.attempts} attempts: {error}", \
                    "gave_up"
                log.error("alert %s to %s: %s", row.idempotency_key, row.receiver, row.last_error)
            else:
                row.status, row.last_error, result = "failed", error, "failed"
                log.error("alert %s to %s failed: %s", row.idempotency_key, row.receiver, error)
            receiver = row.receiver
        ALERT_DELIVERIES.labels(receiver, result).inc()
        return result

    def _gauge(self) -> None:
        counts: dict[str, int] = {name: 0 for name in self.receivers}
        for row in self.pending():
            counts[row.receiver] = counts.get(row.receiver, 0) + 1
        for name, c in counts.items():
            ALERT_OUTBOX_PENDING.labels(name).set(c)
