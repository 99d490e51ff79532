"""A local archive written from raw flow messages and counters, as the archive sink would, for replay tests."""

from __future__ import annotations

import fsspec
import numpy as np
from sinks.archive.buffer import HourlyBuffer
from sinks.archive.parquet import ParquetWriter
from sinks.archive.arrow_schema import table_from_columns


def write_archive(root, msgs: dict[int, list[np.ndarray]], counters: np.ndarray, max_rows=1_000_000):
    """Messages of each partition at offsets 0, 1, ... through HourlyBuffer + ParquetWriter (like the sink)."""
    fs = fsspec.filesystem("file")
    writer = ParquetWriter(fs, str(root))
    for p, ms in msgs.items():
        buf = HourlyBuffer("flows_raw", p, max_rows=max_rows)
        for off, m in enumerate(ms):
            buf.add(table_from_columns(m, "flow_record"), off)
            if max_rows < 1_000_000:
                plan = buf.flush_plan()
                writer.write_plan(plan)
                buf.confirm(plan)
        plan = buf.flush_plan(force=True)
        writer.write_plan(plan)
        buf.confirm(plan)
    cbuf = HourlyBuffer("counters_raw", 0)
    for off, start in enumerate(range(0, len(counters), 3)):
        cbuf.add(table_from_columns(counters[start : start + 3], "counter_sample"), off)
    writer.write_plan(cbuf.flush_plan(force=True))
    return fs
