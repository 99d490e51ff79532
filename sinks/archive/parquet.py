"""The archive's Parquet files: how they are encoded, written atomically (with their rollups) and what schema
each dataset's files have.
"""

from __future__ import annotations

import os
import posixpath
import time

import pyarrow as pa
import pyarrow.parquet as pq

from sinks.archive import layout, rollups
from sinks.archive.arrow_schema import ADDR_TYPE, TEXT_ADDR_TYPE, arrow_schema
from sinks.archive.flush import FileToWrite, FlushPlan
from sinks.archive.fs import filesystem, is_local, root_path

ROW_GROUP_SIZE = 128 * 1024


def _flat(schema: pa.Schema) -> bool:
    return not any(pa.types.is_nested(f.type) for f in schema)


def parquet_column_options(schema: pa.Schema) -> dict:
    """``use_dictionary`` / ``write_statistics`` for a file of ``schema``.

    Dictionary encoding only for string, dictionary and binary(16) columns: numeric
    columns (random sizes, ports, times) compress better and faster as plain + zstd.
    Statistics on every column except the derived address text columns (their min/max
    never prunes anything and costs more than the rest of the file). Schemas with nested
    columns keep pyarrow's defaults (leaf paths differ from the column names).
    """
    if not _flat(schema):
        return {"use_dictionary": True, "write_statistics": True}
    dict_cols = [f.name for f in schema
                 if pa.types.is_string(f.type) or pa.types.is_dictionary(f.type) or f.type == ADDR_TYPE]
    stats = [f.name for f in schema if f.type != TEXT_ADDR_TYPE]
    return {"use_dictionary": dict_cols, "write_statistics": stats}


class ParquetWriter:
    """Writes planned files as Parquet (zstd, ~128k-row groups) to an fsspec filesystem.

    The file is encoded in memory (pyarrow, without the GIL), then stored. Local
    filesystems: write ``.<name>.tmp`` beside the target, fsync, rename, fsync the
    directory. Object stores (s3fs): one PUT (``pipe_file``; a completed multipart
    upload for large files) is atomic, so the object is written in place. Returns once
    durable. Safe to use from one writer thread while another thread plans files.
    """

    def __init__(self, fs, root: str, *, compression: str = "zstd", compression_level: int | None = None,
                 row_group_size: int = ROW_GROUP_SIZE) -> None:
        self.fs = filesystem(fs)
        self.root = root_path(self.fs, root)
        self.local = is_local(self.fs)
        self.compression = compression
        self.compression_level = compression_level
        self.row_group_size = row_group_size
        self.files_written = 0
        self.rows_written = 0
        self.rollup_rows_written = 0
        self.rollup_seconds = 0.0  # time spent aggregating and writing rollups

    def _write_table(self, table: pa.Table, sink) -> None:
        pq.write_table(table, sink, compression=self.compression, compression_level=self.compression_level,
                       row_group_size=self.row_group_size, **parquet_column_options(table.schema))

    def encode(self, table: pa.Table) -> pa.Buffer:
        """The Parquet file of ``table`` as one buffer."""
        out = pa.BufferOutputStream()
        self._write_table(table, out)
        return out.getvalue()

    def write(self, f: FileToWrite) -> str:
        """Write one file; returns its key."""
        key = f.key(self.root)
        table = f.table
        meta = dict(table.schema.metadata or {})
        meta.update({b"fabricflow.dataset": f.dataset.encode(), b"fabricflow.partition": str(f.partition).encode(),
                     b"fabricflow.offsets": f"{f.first_offset}-{f.last_offset}".encode()})
        self.write_table(key, table.replace_schema_metadata(meta))
        self.files_written += 1
        self.rows_written += f.num_rows
        self.write_rollups(f.dataset, f.hour, posixpath.basename(key), table, meta)
        return key

    def write_rollups(self, dataset: str, hour: int, name: str, table: pa.Table, meta: dict | None = None) -> list[str]:
        """Write the rollups of one file of ``dataset`` (``sinks.archive.rollups``) under the same file name.

        Called after the file itself is durable and before :meth:`write` returns, so a file counts as
        written (committed past, confirmed) only with its rollups. A crash in between leaves a file without
        some rollup: :class:`FsWrittenIndex` finds it when the re-read rows of its hour arrive and calls
        :meth:`repair_rollups` before anything is committed past them.
        """
        keys = []
        t0 = time.perf_counter()
        derived = rollups.derive(dataset, table)
        for rd, rt in derived.items():
            k = f"{self.root}/{rd}/{layout.hour_dir(hour)}/{name}"
            m = dict(meta or {})
            m.update({b"fabricflow.dataset": rd.encode(), b"fabricflow.derived_from": dataset.encode()})
            self.write_table(k, rt.replace_schema_metadata({**(rt.schema.metadata or {}), **m}))
            keys.append(k)
            self.rollup_rows_written += rt.num_rows
        if derived:
            self.rollup_seconds += time.perf_counter() - t0
        return keys

    def repair_rollups(self, dataset: str, hour: int, name: str) -> list[str]:
        """Rebuild the rollups of an already written file of ``dataset`` from the file itself."""
        key = f"{self.root}/{dataset}/{layout.hour_dir(hour)}/{name}"
        with self.fs.open(key, "rb") as fh:
            table = pq.read_table(fh)
        meta = {k: v for k, v in (table.schema.metadata or {}).items() if k.startswith(b"fabricflow.")}
        return self.write_rollups(dataset, hour, name, table, meta)

    def write_table(self, key: str, table: pa.Table) -> None:
        """Atomically write ``table`` at ``key`` (full key, no protocol)."""
        d, name = posixpath.split(key)
        data = self.encode(table)
        if self.local:
            os.makedirs(d, exist_ok=True)
            tmp = posixpath.join(d, f".{name}.tmp")
            with open(tmp, "wb") as fh:
                fh.write(memoryview(data))
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, key)
            dfd = os.open(d, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        else:
            self.fs.pipe_file(key, data.to_pybytes())
            self.fs.invalidate_cache(d)

    def write_plan(self, plan: FlushPlan) -> list[str]:
        """Write every file of ``plan`` (in order); returns the keys."""
        return [self.write(f) for f in plan.files]


def dataset_schema(dataset: str) -> pa.Schema:
    """Arrow schema of a dataset's files (rollups: :mod:`sinks.archive.rollups`)."""
    s = layout.spec(dataset)
    if s.derived_from is not None:
        return rollups.schema(dataset)
    return arrow_schema(s.avsc)


def empty_table(dataset: str) -> pa.Table:
    """A zero-row table of a dataset's Arrow schema."""
    return dataset_schema(dataset).empty_table()
