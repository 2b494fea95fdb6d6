"""Ingest: telemetry from where it is to named, time-ordered samples and events the judgement can take.

- ``formats/``: one reader per recorded format (OpenMetrics, journald, syslog/dmesg, rasdaemon, Parquet/CSV, ...);
  ``collectors/``: one live collector per source (exporters, Prometheus, journald, rasdaemon, sysfs, InfiniBand);
- ``naming`` (source names to raswarden's entities and metrics, with ``names/``, one table per exporter),
  ``timeorder`` (late and out-of-order data), ``batch`` (the columnar unit they hand on), ``rejects`` (bad input,
  counted and said once with its place), ``trace`` (a trace directory's files), ``inventory`` (what a scrape shows
  of a fleet, for ``raswarden init``).

May import: itself, the floor (``daemon.metrics``, ``daemon.timetext``, ``daemon.topology``), ``daemon.store``,
``detectors``. Nothing here judges or acts.
"""
