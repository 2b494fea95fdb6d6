"""Remediation: playbook model and engine, guards, the Scheduler protocol. Never imports ``daemon``."""
