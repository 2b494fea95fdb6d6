"""The service: ``raswarden run`` as a daemon (``service``: holding a shard, the cycle, the side jobs, reload),
its job runner (``jobs``), systemd's notify protocol (``sdnotify``) and ``raswarden reload``'s answer
(``reloadanswer``).

May import: every wing of the daemon but the CLI (``daemon.cli``), which stands on it; the HTTP endpoint
(``daemon.web``) is one of its parts and never imports it back.
"""
