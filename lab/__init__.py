"""The lab: what runs offline, never on a management node's daemon.

The simulator (``lab/sim``), the closed loop that runs detectors and playbooks against a simulated Slurm and
accounts GPU-hours (``closedloop``, its tables in ``closedloop.report``), scoring on labelled traces
(``evaluate``) and over the matrix of simulated fleets (``matrix``), and training the learned detectors
(``train``). The lab imports ``daemon``, ``detectors`` and ``playbooks``; the daemon's runtime never imports the
lab (only the command line, the face of both, does, inside its commands); the service retrains by running
``raswarden train`` as a child process.
"""
