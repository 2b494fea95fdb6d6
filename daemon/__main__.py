"""``python -m daemon`` runs the raswarden command line."""

from daemon.cli import main

raise SystemExit(main())
