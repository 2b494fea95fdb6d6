"""detectors.schema: reading an events frame row by row."""

import numpy as np
import pandas as pd

from detectors.schema import EVENT_COLUMNS, event_records, event_rows, events_frame


def test_event_rows_are_pandas_rows_with_plain_codes():
    rows = [(1.5, "n1", "xid", 79, "error", "NVRM: Xid 79", "kernel", "0000:01:00.0", None),
            (2.0, "n2", "aer", None, "corrected", "AER: Corrected", "kernel", None, "ib0"),
            (3.25, "n3/gpu1", "xid", 13, "error", None, "dcgm", None, None)]
    frame = events_frame(rows)
    def plain(rows):
        return [tuple(None if x is pd.NA else x for x in r) for r in rows]

    ours = list(event_rows(frame))
    assert plain(ours) == plain(frame.itertuples(index=False, name=None))
    assert ours[1][3] is pd.NA and type(ours[0][3]) is int  # (pandas' rows give numpy's int64)
    records = list(event_records(frame))
    assert [r.kind for r in records] == ["xid", "aer", "xid"] and records[0].pci == "0000:01:00.0"
    assert list(event_rows(events_frame([]))) == []
    other = frame.assign(extra=np.arange(3))  # a frame with other columns: pandas' rows, by name
    assert [r.extra for r in event_records(other)] == [0, 1, 2] and tuple(frame.columns) == EVENT_COLUMNS
