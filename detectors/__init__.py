"""Pure computation: feature frames, detectors and their catalogs. Never imports ``daemon``."""
