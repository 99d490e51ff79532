"""What a flush writes: the files planned from the buffers, and the offsets that are durable once they are.

A :class:`FileToWrite` holds the buffered rows of one event hour from one Kafka partition; its key comes
from the data (:func:`sinks.archive.layout.object_key`), so writing it again overwrites. Its Arrow table is
built on first use, in the writer thread (:func:`build_table`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from schemas.codec import CodedBatch
from sinks.archive import layout
from sinks.archive.arrow_schema import arrow_schema, conform, table_from_columns, table_from_parts


def row_count(part) -> int:
    """Rows of a buffered part (an Arrow table or a numpy structured array)."""
    return part.num_rows if isinstance(part, pa.Table) else len(part)


def build_table(parts: list, avsc: str) -> pa.Table:
    """One Arrow table (one chunk per column, derived text columns added) from buffered parts.

    Parts are Arrow tables of the dataset's base columns or numpy structured arrays of
    ``schemas.columns.dtype_for(avsc)``, in offset order. All-numpy parts are scattered once into
    contiguous columns (:func:`sinks.archive.arrow_schema.table_from_parts`) and wrapped without further
    copies; the text columns are built once per file, from its distinct addresses.
    """
    if parts and all(isinstance(p, (np.ndarray, CodedBatch)) for p in parts):
        if len({p.rows.dtype if isinstance(p, CodedBatch) else p.dtype for p in parts}) == 1:
            return table_from_parts(parts, avsc)
        parts = [p.to_array() if isinstance(p, CodedBatch) else p for p in parts]
    tables = [p if isinstance(p, pa.Table) else table_from_columns(p, avsc, text_addresses=False) for p in parts]
    if not tables:
        return arrow_schema(avsc).empty_table()
    t = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    return conform(t.combine_chunks(), avsc)


@dataclass(eq=False)
class FileToWrite:
    """One object to write: the rows of one event hour from one Kafka partition.

    ``parts`` are the buffered pieces (see :func:`build_table`); :attr:`table` builds the
    file's table on first use (in the writer, off the consumer thread) and keeps it.
    """

    dataset: str
    hour: int
    partition: int
    first_offset: int
    last_offset: int
    parts: list
    late: bool = False
    _table: pa.Table | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.parts, pa.Table):
            self.parts = [self.parts]
        self.num_rows = sum(row_count(p) for p in self.parts)

    @property
    def table(self) -> pa.Table:
        t = self._table
        if t is None:
            t = self._table = build_table(self.parts, layout.spec(self.dataset).avsc)
            self.parts = []  # the table holds the rows now
        return t

    def key(self, root: str) -> str:
        return layout.object_key(root, self.dataset, self.hour, self.partition, self.first_offset, self.last_offset)

    @property
    def ident(self) -> tuple:
        return (self.dataset, self.hour, self.partition, self.first_offset, self.last_offset)


@dataclass
class FlushPlan:
    """Files to write, and per (dataset, partition) the last offset durable once they are written."""

    files: list[FileToWrite] = field(default_factory=list)
    safe_offsets: dict[tuple[str, int], int] = field(default_factory=dict)

    @property
    def commit_offsets(self) -> dict[tuple[str, int], int]:
        """Kafka commit values (next offset to read) = ``safe_offset + 1``; -1 safe means nothing yet."""
        return {k: v + 1 for k, v in self.safe_offsets.items() if v >= 0}

    def extend(self, other: FlushPlan) -> None:
        self.files.extend(other.files)
        self.safe_offsets.update(other.safe_offsets)
