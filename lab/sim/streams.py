"""The simulator's draws step by step: one world for a scenario and seed, whatever chunks it is made in.

The engine makes a chunk of steps at a time (one tick's for the matrix, a tick's worth of the loop for the closed
loop, up to 240 steps for a trace file). Drawn from one generator in the order of a chunk's arrays (``[parts x
steps]``, one quantity after another), the values of a step depended on the chunk's size: a scenario simulated
into a trace and the same scenario evaluated directly were two worlds, and no run could make its chunks larger
without changing every figure. Here each quantity (a GPU's utilisation, its power noise, one counter's healthy
errors, one fault's errors, ...) draws from a stream of its own, seeded by the scenario's seed and the quantity's
name, and a chunk's draws are made a step at a time (the first step's parts, then the next step's): step ``s`` takes
the stream's draws after those of steps before it, whatever the chunks. A quantity drawn only where something holds
(a burst's size, a fault's errors while it is on) draws in the same step-major order over the same places.

This rests on numpy's generators drawing an array's elements one after the other from the stream (uniform, normal,
poisson, binomial, geometric do; ``integers`` does not: it may keep half a 64-bit word within a call, so integers are
made from uniforms here). ``tests/lab/sim/test_streams.py`` checks a whole simulation in chunks of 1 to 240 steps.
"""

from __future__ import annotations

import hashlib

import numpy as np


def _name_key(name: str) -> int:
    """A stable integer of a quantity's name (Python's ``hash`` of a string changes from run to run)."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "little")


class StepStreams:
    """Named streams of one seed; each draw returns ``[parts x steps]`` made step by step."""

    def __init__(self, *seed: int):
        self._seed = [int(s) for s in seed]
        self._gens: dict[str, np.random.Generator] = {}

    def gen(self, name: str) -> np.random.Generator:
        """The stream of quantity ``name``."""
        g = self._gens.get(name)
        if g is None:
            g = self._gens[name] = np.random.default_rng([*self._seed, _name_key(name)])
        return g

    def uniform(self, name: str, low: float, high: float, parts: int, steps: int) -> np.ndarray:
        return self.gen(name).uniform(low, high, (steps, parts)).T

    def normal(self, name: str, loc: float, scale: float, parts: int, steps: int) -> np.ndarray:
        return self.gen(name).normal(loc, scale, (steps, parts)).T

    def below(self, name: str, k: int, parts: int, steps: int) -> np.ndarray:
        """Whole numbers 0 to ``k - 1``, each as likely (as floats)."""
        return np.floor(self.gen(name).random((steps, parts)) * k).T

    def poisson(self, name: str, lam: np.ndarray | float, parts: int, steps: int) -> np.ndarray:
        """Poisson counts of mean ``lam`` (a number, or ``[parts x steps]``)."""
        if np.ndim(lam) == 0:
            return self.gen(name).poisson(lam, (steps, parts)).T
        return self.gen(name).poisson(np.broadcast_to(lam, (parts, steps)).T).T

    def binomial(self, name: str, n: np.ndarray, p: float) -> np.ndarray:
        """Binomial counts of ``n`` (``[parts x steps]``) trials at ``p``."""
        return self.gen(name).binomial(np.asarray(n).T, p).T

    def geometric_at(self, name: str, p: float, where: np.ndarray) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray]:
        """Geometric counts (mean ``1 / p``) at the nonzero places of ``where`` (``[parts x steps]``), drawn in step
        order: ``((parts, steps), counts)``."""
        steps, parts = np.nonzero(np.asarray(where).T)
        return (parts, steps), self.gen(name).geometric(p, len(parts))
