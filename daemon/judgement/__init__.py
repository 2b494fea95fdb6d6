"""Judgement: from samples to health and incidents, tick by tick.

``pipeline`` runs the detectors (``detectors/``) over each tick's batch; ``health`` turns findings into each
entity's visible state with hysteresis; ``incidents`` opens and closes incidents on those states; ``resolve``
places an entity in its blade, rack and cooling loop; ``repeats``, ``splitracks`` and ``cooling`` are the
fleet-wide judgements (a part that keeps coming back, a rack split by a switch, a cooling loop's trouble);
``warmstate`` saves and restores what the detectors learned.

May import: itself, ``daemon.ingest``, the floor (``daemon.metrics``, ``daemon.timetext``, ``daemon.topology``),
``daemon.store``, ``detectors``. Nothing here acts on the cluster or tells anyone.
"""
