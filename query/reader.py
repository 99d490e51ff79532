"""Read-only access to the Parquet archive: which datasets it holds, their files in a time range, and DuckDB
views over them.

:class:`ArchiveReader` turns each dataset directory under the archive root into a DuckDB view
(``flows_enriched``, ``matrix_windows``, ...) over DuckDB's own Parquet reader with the Hive partition
columns (``dt`` string, ``hour`` int32). No DuckDB extension is loaded: files on an object store are read
through the fsspec filesystem. Beside them, the views of :data:`query.views.VIEWS` (each packet once).

Time pruning: given ``frm``/``to``, only the ``dt=`` directories of the days in range are listed and only
the files of the hours in range are read; the views then also filter rows on the dataset's event-time
column to [frm, to).
"""

from __future__ import annotations

import os
import posixpath
import re
import tempfile

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds

from query.errors import ArchiveError, DatasetMissing, EmptyRange
from query.timerange import check_range, iso, parse_time
from query.views import VIEWS
from sinks.archive import layout
from sinks.archive.fs import filesystem, is_local, root_path
from sinks.archive.parquet import dataset_schema

PARTITION_SCHEMA = pa.schema([("dt", pa.string()), ("hour", pa.int32())])

#: DuckDB type of a column absent from every file read (Arrow type as text).
_DUCK = {"int64": "BIGINT", "int32": "INTEGER", "bool": "BOOLEAN", "string": "VARCHAR", "double": "DOUBLE",
         "float": "FLOAT", "dictionary<values=string, indices=int32, ordered=0>": "VARCHAR",
         "fixed_size_binary[16]": "BLOB", "binary": "BLOB"}


def connect_duckdb() -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB that spills large sorts and joins to ``$TMPDIR/fabricflow-duckdb-<pid>`` (created only
    when it spills, removed when the connection closes) instead of DuckDB's default ``.tmp`` in the current
    directory, which a read-only working directory refuses and which would leave files where the user stands."""
    return duckdb.connect(config={"temp_directory": os.path.join(tempfile.gettempdir(), f"fabricflow-duckdb-{os.getpid()}")})


class ArchiveReader:
    """Read-only access to the archive at ``root`` on fsspec filesystem ``fs`` (one DuckDB connection, ``con``
    when given)."""

    def __init__(self, fs, root: str, con: duckdb.DuckDBPyConnection | None = None) -> None:
        self.fs = filesystem(fs)
        self.root = root_path(self.fs, root)
        self.con = con or connect_duckdb()
        self.listed: list[str] = []  # directories listed (for pruning checks)
        self.files_used: dict[str, list[str]] = {}  # dataset -> files behind its current view
        self._present = self._discover()
        self._views: dict[str, tuple] = {}  # dataset -> (frm, to) of its current view
        self._fs_registered = False

    # -- discovery

    def _discover(self) -> list[str]:
        try:
            self.fs.invalidate_cache(self.root)
            entries = self.fs.ls(self.root, detail=True)
        except FileNotFoundError:
            raise ArchiveError(f"no archive at {self.root!r}") from None
        names = {posixpath.basename(e["name"].rstrip("/")) for e in entries if e.get("type") == "directory"}
        return sorted(n for n in names if n in layout.DATASETS)

    @property
    def datasets(self) -> list[str]:
        """Datasets present in the archive."""
        return list(self._present)

    def need(self, dataset: str) -> layout.DatasetSpec:
        """The spec of ``dataset``; raises :class:`DatasetMissing` when the archive does not hold it."""
        spec = layout.spec(dataset)
        if dataset not in self._present:
            raise DatasetMissing(
                f"dataset {dataset!r} is not in the archive at {self.root!r} "
                f"(present: {', '.join(self._present) or 'none'})"
            )
        return spec

    def _days(self, dataset: str) -> list[int]:
        d = f"{self.root}/{dataset}"
        self.listed.append(d)
        try:
            entries = self.fs.ls(d, detail=False)
        except FileNotFoundError:
            return []
        return sorted(x for x in (layout.parse_day_dir(e.rstrip("/")) for e in entries) if x is not None)

    def _find(self, path: str) -> list[str]:
        self.listed.append(path)
        try:
            self.fs.invalidate_cache(path)
            found = self.fs.find(path)
        except FileNotFoundError:
            return []
        return [f for f in found if not posixpath.basename(f).startswith((".", "_"))]

    def files(self, dataset: str, frm=None, to=None) -> list[str]:
        """Data files of ``dataset`` whose hour overlaps [frm, to) (all files without a range).

        With a range, only the ``dt=`` directories of the days in range are listed.
        """
        self.need(dataset)
        if frm is None and to is None:
            found = [f for f in self._find(f"{self.root}/{dataset}") if layout.parse_key(f) is not None]
            if layout.spec(dataset).derived_from is not None:
                found = layout.live_files(found)
            return sorted(found)
        lo, hi = self._range(dataset, frm, to)
        hours = layout.hours_in_range(lo, hi)
        if not hours:
            return []
        out = []
        for day in range(hours[0] // 24, hours[-1] // 24 + 1):
            for f in self._find(f"{self.root}/{dataset}/{layout.day_dir(day)}"):
                k = layout.parse_key(f)
                if k is not None and k.hour in hours:
                    out.append(f)
        if layout.spec(dataset).derived_from is not None:
            out = layout.live_files(out)  # files merged by a compaction are not counted twice
        return sorted(out)

    def _range(self, dataset: str, frm, to) -> tuple[int, int]:
        if frm is None or to is None:
            days = self._days(dataset)
            if not days:
                raise EmptyRange(f"dataset {dataset!r} has no data")
            lo = parse_time(frm) if frm is not None else days[0] * layout.DAY_MS
            hi = parse_time(to) if to is not None else (days[-1] + 1) * layout.DAY_MS
        else:
            lo, hi = parse_time(frm), parse_time(to)
        check_range(lo, hi)
        return lo, hi

    def available(self, dataset: str) -> tuple[str, str] | None:
        """First and last day (``YYYY-MM-DD``) present for ``dataset``, or None."""
        days = self._days(dataset)
        if not days:
            return None
        return layout.day_dir(days[0])[3:], layout.day_dir(days[-1])[3:]

    def files_in_range(self, dataset: str, frm=None, to=None) -> list[str]:
        """:meth:`files`, raising :class:`EmptyRange` (saying which days the archive has) when there are none."""
        files = self.files(dataset, frm, to)
        if not files:
            have = self.available(dataset)
            span = f"{have[0]} .. {have[1]}" if have else "nothing"
            rng = "" if frm is None and to is None else (
                f" between {iso(parse_time(frm)) if frm is not None else 'start'} and "
                f"{iso(parse_time(to)) if to is not None else 'end'}")
            raise EmptyRange(f"no {dataset} data{rng} (the archive has {span})")
        return files

    def dataset(self, dataset: str, frm=None, to=None) -> ds.Dataset:
        """``pyarrow.dataset`` over the files of ``dataset`` in range (raises :class:`EmptyRange` when none)."""
        files = self.files_in_range(dataset, frm, to)
        schema = dataset_schema(dataset)
        for f in PARTITION_SCHEMA:
            schema = schema.append(f)
        self.files_used[dataset] = files
        return ds.dataset(
            files, schema=schema, format="parquet", filesystem=self.fs,
            partitioning=ds.partitioning(PARTITION_SCHEMA, flavor="hive"),
            partition_base_dir=f"{self.root}/{dataset}",
        )

    # -- views

    def register(self, dataset: str, frm=None, to=None, alias: str | None = None) -> None:
        """(Re)define view ``alias`` (default: the dataset's name) over ``dataset`` in [frm, to) (everything
        when both are None)."""
        spec = self.need(dataset)
        view = alias or dataset
        if self._views.get(view, ()) == (dataset, frm, to):
            return
        files = self.files_in_range(dataset, frm, to)
        self.files_used[dataset] = files
        if alias:
            self.files_used[alias] = files
        src = self._parquet_sql(dataset, files)
        where = ""
        if frm is not None or to is not None:
            lo, hi = self._range(dataset, frm, to)
            where = f" WHERE {spec.time_column} >= {lo} AND {spec.time_column} < {hi}"
        self.con.execute(f"CREATE OR REPLACE TEMP VIEW {view} AS SELECT * FROM {src}{where}")
        self._views[view] = (dataset, frm, to)

    def _parquet_sql(self, dataset: str, files: list[str]) -> str:
        """DuckDB's own Parquet reader over ``files`` (4-5x less CPU than scanning a pyarrow dataset), Hive
        columns ``dt``/``hour``, columns matched by name across files; a column of the dataset's schema that no
        file has (written before it existed) reads as NULL. Files on a non-local filesystem are read through it
        (``register_filesystem``: fsspec, no DuckDB extension)."""
        if is_local(self.fs):
            paths = files
        else:
            protos = [self.fs.protocol] if isinstance(self.fs.protocol, str) else list(self.fs.protocol)
            if not self._fs_registered:
                if not set(protos) & set(self.con.list_filesystems()):  # a shared connection may have it
                    self.con.register_filesystem(self.fs)
                self._fs_registered = True
            proto = protos[0]
            paths = [f"{proto}://{f.lstrip('/')}" if proto != "memory" else f"memory://{f}" for f in files]
        lst = "[" + ", ".join("'" + p.replace("'", "''") + "'" for p in paths) + "]"
        src = (f"read_parquet({lst}, union_by_name = true, hive_partitioning = true, "
               "hive_types = {'dt': VARCHAR, 'hour': INTEGER})")
        have = {r[0] for r in self.con.execute(f"DESCRIBE SELECT * FROM {src}").fetchall()}
        missing = [f for f in dataset_schema(dataset) if f.name not in have and _DUCK.get(str(f.type))]
        if not missing:
            return src
        nulls = ", ".join(f"NULL::{_DUCK[str(f.type)]} AS {f.name}" for f in missing)
        return f"(SELECT *, {nulls} FROM {src})"

    def register_all(self, frm=None, to=None) -> list[str]:
        """Register every dataset present that has data in range; returns their names.

        Views are otherwise registered on demand by :meth:`sql` (only the datasets a query names).
        """
        done = []
        for name in self._present:
            try:
                self.register(name, frm, to)
                done.append(name)
            except EmptyRange:
                self._views.pop(name, None)
                self.con.execute(f"DROP VIEW IF EXISTS {name}")
        return done

    def sql(self, query: str, frm=None, to=None, params=None) -> pa.Table:
        """Run SQL over the dataset views and :data:`query.views.VIEWS`; with a range, the views only cover [frm, to).

        Every dataset the query names gets a view over that range first, and so does the dataset of every view
        of :data:`query.views.VIEWS` it names; a view whose dataset is not in the archive is left undefined, one whose
        dataset has nothing in range raises :class:`EmptyRange` only if the query reads it (``flows`` is also a
        column of ``alerts``).
        """
        named = [n for n in self._present if re.search(rf"\b{n}\b", query)]
        views = [v for v, (d, _) in VIEWS.items() if d in self._present and re.search(rf"\b{v}\b", query)]
        for n in named:
            self.register(n, frm, to)
        empty: dict[str, EmptyRange] = {}
        for v in views:
            d, rows = VIEWS[v]
            try:
                self.register(d, frm, to)
            except EmptyRange as e:
                empty[v] = e
                self.con.execute(f"DROP VIEW IF EXISTS {v}")
                continue
            self.con.execute(f"CREATE OR REPLACE TEMP VIEW {v} AS SELECT * FROM {d}{f' WHERE {rows}' if rows else ''}")
        try:
            return self.con.sql(query, params=params).to_arrow_table()
        except duckdb.CatalogException as e:
            missing = next((v for v in empty if re.search(rf"\b{v}\b", str(e))), None)
            if missing is not None:
                raise empty[missing] from None
            raise ArchiveError(f"{e} ({self._names_present()})") from None

    def _names_present(self) -> str:
        views = [v for v, (d, _) in VIEWS.items() if d in self._present]
        present = f"datasets present: {', '.join(self._present) or 'none'}"
        return present + (f"; views: {', '.join(views)}" if views else "")

    def run(self, query: str, params) -> pa.Table:
        """Run SQL over views already registered (by :meth:`register`), with DuckDB parameters."""
        try:
            return self.con.sql(query, params=params).to_arrow_table()
        except duckdb.CatalogException as e:
            raise ArchiveError(f"{e} (datasets present: {', '.join(self._present) or 'none'})") from None
