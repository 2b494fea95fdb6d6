"""Alerts to ops chat (docs/architecture.md §7).

An alert is an incident as humans see it. The pipeline reads incidents from the store and runs
group (rack + category; ``group_wait``, ``group_interval``, ``repeat_interval``) → inhibit (a rack
incident hides its nodes') → silences → routing → the **outbox** in the store → delivery with retries
and backoff → record. Every stage keeps its state in the store, so a daemon killed at any point loses
no alert and repeats none beyond the idempotency key. One receiver per module in ``receivers/``.

May import: itself, ``daemon.judgement`` (what an incident is), ``daemon.config``, the floor (``daemon.metrics``,
``daemon.timetext``, ``daemon.topology``), ``daemon.store``, ``playbooks``.
"""
