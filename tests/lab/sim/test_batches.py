"""A simulator's chunks as the pipeline's batches (lab/sim/batches.py)."""

import numpy as np
import pandas as pd

from lab.sim.batches import ChunkSamples


def test_a_chunks_samples_split_at_a_tick_as_a_mask_splits_them():
    """The evaluation splits a chunk's samples at each tick: the rows stamped at or before it and the rest, in their
    order; in stamp order (a chunk's) as slices, otherwise (or without stamps) as the mask gives them."""
    def samples(ts):
        ts = np.asarray(ts, dtype=float)
        n = len(ts)
        return ChunkSamples(ts, np.arange(n) % 3, np.arange(n) % 2, np.arange(n) * 1.5,
                            pd.CategoricalDtype(["a", "b", "c"]), pd.CategoricalDtype(["x", "y"]))

    for ts in ([1, 2, 2, 3, 5, 8], [1, 4, 2, 9, 3], [np.nan, 1, 7, 2], [], [9, 10]):
        s = samples(ts)
        due, rest = s.split(3.0)
        mask = ~(s.ts > 3.0)
        for got, want in ((due, s.take(mask)), (rest, s.take(~mask))):
            assert np.array_equal(got.ts, want.ts, equal_nan=True)
            assert all(np.array_equal(getattr(got, c), getattr(want, c)) for c in ("entity", "metric", "value"))
    s = samples([1, 2, 3, 5])
    due, rest = s.split(3.0)
    assert np.shares_memory(due.ts, s.ts) and len(due.ts) == 3 and list(rest.ts) == [5.0]
    assert samples([]).then(s) is s
