"""raswarden: fault-recovery daemon for AI supernode clusters.

This top-level package is called ``daemon`` (see docs/architecture.md §2); it is not python-daemon,
and tests/test_package.py pins that.
"""

__version__ = "0.1.0"
