"""The fault templates and scenarios that ship with raswarden (``lab/library``, package data: an installed wheel
simulates as a checkout does; ``fixtures/faults`` and ``fixtures/scenarios`` in a checkout point here)."""

from __future__ import annotations

from pathlib import Path

LIBRARY = Path(__file__).resolve().parent / "library"
FAULTS = LIBRARY / "faults"
"""The fault template library: ``<class>-<template>.yaml`` (docs/simulator.md)."""
SCENARIOS = LIBRARY / "scenarios"
"""The bundled scenarios: ``mini``, ``dense-all-classes``, ``quiet-7d``, ``scalex640-30d``, ..."""


def scenario_path(name: str | Path) -> Path:
    """A scenario file: ``name`` itself when it is a path that exists, else the bundled scenario of that name (with
    or without ``.yaml``); a name that is neither is returned as given (its loader says it is missing)."""
    path = Path(name)
    if path.exists():
        return path
    bundled = SCENARIOS / (path.name if path.suffix in (".yaml", ".yml") else f"{path.name}.yaml")
    return bundled if bundled.exists() and path.parent == Path(".") else path


def scenario_names() -> list[str]:
    """The bundled scenarios' names."""
    return sorted(p.stem for p in SCENARIOS.glob("*.yaml"))
