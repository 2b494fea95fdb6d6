"""Fleet operations: what raswarden does about incidents, and what it learns from doing it.

``remediation`` (incidents to playbook actions through the scheduler), ``repairs`` (repair orders for drained
hardware) and ``validation`` (a repaired node's validation and the active checks of idle nodes), ``operator``
(operators' drains, resumes, approvals and silences), ``foresight`` (how often failures were seen coming) and
``advice`` (the checkpoint interval it advises jobs), ``reliability`` (MTBF and MTTR, the fleet report).

May import: itself, ``daemon.judgement``, ``daemon.alerting`` (silences), ``daemon.config`` (each part's own
section), the floor (``daemon.metrics``, ``daemon.timetext``, ``daemon.topology``, ``daemon.shards``),
``daemon.store``, ``detectors``, ``playbooks``.
"""
