"""Analyst queries over the Parquet archive: DuckDB on pyarrow datasets.

:class:`ArchiveQuery` turns each dataset directory under the archive root
into a DuckDB view (``flows_enriched``, ``matrix_windows``, ...) backed by a
``pyarrow.dataset`` with Hive partitioning (``dt`` string, ``hour`` int32).
No DuckDB extension is loaded: files are read through the fsspec filesystem
(local, s3fs, ...) by Arrow. Beside them, the views of :data:`VIEWS`: ``flows``
(each packet once), ``flow_observations`` (every exporter's record), ``flows_1m`` /
``flows_1h`` (the rollups, each packet once).

Time pruning: given ``frm``/``to``, only the ``dt=`` directories of the days in
range are listed and only the files of the hours in range are read; the views
then also filter rows on the dataset's event-time column to [frm, to).
"""

from __future__ import annotations

import io
import json
import posixpath
import re
from datetime import UTC, datetime
from decimal import Decimal

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds

from schemas.columns import addr_str
from sinks import layout

PARTITION_SCHEMA = pa.schema([("dt", pa.string()), ("hour", pa.int32())])
FORMATS = ("table", "csv", "json", "parquet")


#: DuckDB type of a column absent from every file read (Arrow type as text).
_DUCK = {"int64": "BIGINT", "int32": "INTEGER", "bool": "BOOLEAN", "string": "VARCHAR", "double": "DOUBLE",
         "float": "FLOAT", "dictionary<values=string, indices=int32, ordered=0>": "VARCHAR",
         "fixed_size_binary[16]": "BLOB", "binary": "BLOB"}


class ArchiveError(Exception):
    """A query cannot be answered (message says why)."""


class DatasetMissing(ArchiveError):
    pass


class EmptyRange(ArchiveError):
    pass


def parse_time(value) -> int:
    """Unix ms from an int/float (ms), an aware or naive (= UTC) datetime, or an ISO-8601 string."""
    if isinstance(value, bool):
        raise TypeError("a time cannot be a bool")
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, str):
        s = value.strip()
        if re.fullmatch(r"-?\d+", s):
            return int(s)
        try:
            value = datetime.fromisoformat(s)
        except ValueError:
            raise ValueError(f"cannot read {value!r} as a time (ISO-8601 or unix ms)") from None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return int(value.timestamp() * 1000)
    raise TypeError(f"cannot read {value!r} as a time")


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


#: What a dataset that answers a report is called on a page ("from 1-hour rollups").
DESCRIPTIONS = {"traffic_1h": "1-hour rollups", "traffic_1m": "1-minute rollups", "flows_enriched": "raw flows",
                "matrix_windows": "matrix windows", "ports_1h": "1-hour port rollups",
                "ports_1m": "1-minute port rollups", "link_health": "link health samples"}


def describe(answered: list[tuple]) -> str:
    """``1-hour rollups + 1-minute rollups + matrix windows`` from :attr:`ArchiveQuery.answered`."""
    return " + ".join(DESCRIPTIONS.get(d, d) for d in dict.fromkeys(a[0] for a in answered))


#: Views of :meth:`ArchiveQuery.sql` beside the datasets: name -> (dataset, rows kept). A packet seen by several
#: exporters is a row per exporter in ``flows_enriched`` and the traffic rollups, all but one marked ``duplicate``
#: (docs/detectors.md, "Counting each packet once"): ``flows`` is the name to sum, ``flow_observations`` says
#: what it holds. docs/archive.md, "Which name to query".
VIEWS = {
    "flows": ("flows_enriched", "NOT coalesce(duplicate, false)"),
    "flow_observations": ("flows_enriched", None),
    "flows_1m": ("traffic_1m", "NOT duplicate"),
    "flows_1h": ("traffic_1h", "NOT duplicate"),
}
#: The first query to show an analyst (the demo's closing lines, ``fabricflow query sql --help``).
EXAMPLE_SQL = "SELECT category, sum(bytes_est) AS bytes_est FROM flows GROUP BY 1 ORDER BY 2 DESC"
#: Datasets whose sums count a packet once per exporter that saw it (-> the view that counts it once).
EVERY_OBSERVATION = {"flows_raw": "flows", "flows_enriched": "flows", "traffic_1m": "flows_1m",
                     "traffic_1h": "flows_1h"}


def observation_note(query: str) -> str | None:
    """A one-line note when ``query`` sums a dataset of :data:`EVERY_OBSERVATION` without saying which records
    count (it names neither ``duplicate`` nor ``exporter``), else None: ``fabricflow query sql`` prints it."""
    if re.search(r"\b(duplicate|exporter)\b", query, re.I):
        return None
    named = [d for d in EVERY_OBSERVATION if re.search(rf"\b{d}\b", query)]
    if not named:
        return None
    d = named[0]
    fix = "" if d == "flows_raw" else " or add WHERE NOT duplicate"
    return (f"note: {d} has a row for every exporter that saw a packet (seen by ToR sFlow and core NetFlow: "
            f"twice); to count each packet once, query {EVERY_OBSERVATION[d]}{fix} (docs/archive.md, "
            "\"Which name to query\")")


#: ``--source`` of the flow reports -> the dataset it reads (``auto``: :func:`plan_sources`).
SOURCES = {"raw": "flows_enriched", "1m": "traffic_1m", "1h": "traffic_1h"}
SOURCE_CHOICES = ("auto", *SOURCES)


def _aligned(ms: int | None, bucket_ms: int) -> bool:
    return ms is None or ms % bucket_ms == 0


def _ceil(ms: int, b: int) -> int:
    return -(-ms // b) * b


def plan_sources(frm_ms: int | None, to_ms: int | None, present, source: str = "auto",
                 needs_raw: str | None = None) -> list[tuple[str, int | None, int | None]]:
    """The datasets a flow report over [frm_ms, to_ms) reads, as (dataset, from, to) pieces that tile the range.

    ``auto``: the whole hours inside the range from ``traffic_1h``, the whole minutes left at its edges from
    ``traffic_1m``, the rest (under a minute at each end) from ``flows_enriched``; a rollup only if it is
    ``present``, so an archive without rollups reads the raw flows as before. A rollup row is counted in a
    piece when its bucket starts in it, which is exact because pieces are whole buckets. An open end (None) is
    the start or end of the dataset. ``needs_raw`` names what only the raw flows can answer (one exporter's
    view, a node given by address): then ``flows_enriched`` alone. ``raw``/``1m``/``1h`` force one dataset;
    a forced rollup that cannot answer the range exactly raises :class:`ArchiveError` saying why.
    """
    if source not in SOURCE_CHOICES:
        raise ValueError(f"source must be one of {', '.join(SOURCE_CHOICES)}, got {source!r}")
    raw = SOURCES["raw"]
    if source != "auto":
        name = SOURCES[source]
        if name != raw:
            if needs_raw:
                raise ArchiveError(f"{needs_raw} needs the raw flows: use --source raw or auto")
            b = layout.spec(name).bucket_ms
            if not (_aligned(frm_ms, b) and _aligned(to_ms, b)):
                unit = "hours" if b >= layout.HOUR_MS else "minutes"
                raise ArchiveError(
                    f"the {source} rollup answers only ranges of whole {unit} (from "
                    f"{_iso(frm_ms) if frm_ms is not None else 'start'} to {_iso(to_ms) if to_ms is not None else 'end'})"
                    ": use --source raw or auto")
        return [(name, frm_ms, to_ms)]
    if needs_raw is not None:
        return [(raw, frm_ms, to_ms)]
    levels = sorted(((n, layout.spec(n).bucket_ms) for n in SOURCES.values() if n != raw and n in present),
                    key=lambda x: -x[1])

    def split(lo, hi, levels):
        if lo is not None and hi is not None and hi <= lo:
            return []
        if not levels:
            return [(raw, lo, hi)]
        name, b = levels[0]
        a = None if lo is None else _ceil(lo, b)
        z = None if hi is None else hi // b * b
        if a is not None and z is not None and a >= z:
            return split(lo, hi, levels[1:])
        left = [] if lo is None or a == lo else split(lo, a, levels[1:])
        right = [] if hi is None or z == hi else split(z, hi, levels[1:])
        return left + [(name, a, z)] + right

    return split(frm_ms, to_ms, levels)


def _is_address(name: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def connect_duckdb() -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB that spills large sorts and joins to ``$TMPDIR/fabricflow-duckdb-<pid>`` (created only
    when it spills, removed when the connection closes) instead of DuckDB's default ``.tmp`` in the current
    directory, which a read-only working directory refuses and which would leave files where the user stands."""
    import os
    import tempfile

    return duckdb.connect(config={"temp_directory": os.path.join(tempfile.gettempdir(), f"fabricflow-duckdb-{os.getpid()}")})


class ArchiveQuery:
    """Read-only query access to the archive at ``root`` on fsspec filesystem ``fs``."""

    def __init__(self, fs, root: str, con: duckdb.DuckDBPyConnection | None = None) -> None:
        from sinks.archive import _fs, _root

        self.fs = _fs(fs)
        self.root = _root(self.fs, root)
        self.con = con or connect_duckdb()
        self.listed: list[str] = []  # directories listed (for pruning checks)
        self.files_used: dict[str, list[str]] = {}  # dataset -> files behind its current view
        self._present = self._discover()
        self._views: dict[str, tuple] = {}  # dataset -> (frm, to) of its current view
        self._fs_registered = False
        self.answered_by: str | None = None  # datasets the last flow report read, e.g. "traffic_1h + flows_enriched"
        self.answered: list[tuple] = []  # (dataset, from, to, files) per piece the last flow report read

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

    def _need(self, dataset: str) -> layout.DatasetSpec:
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
        self._need(dataset)
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
        if hi <= lo:
            raise ArchiveError(f"empty time range: from {_iso(lo)} is not before to {_iso(hi)}")
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
                f" between {_iso(parse_time(frm)) if frm is not None else 'start'} and "
                f"{_iso(parse_time(to)) if to is not None else 'end'}")
            raise EmptyRange(f"no {dataset} data{rng} (the archive has {span})")
        return files

    def dataset(self, dataset: str, frm=None, to=None) -> ds.Dataset:
        """``pyarrow.dataset`` over the files of ``dataset`` in range (raises :class:`EmptyRange` when none)."""
        files = self.files_in_range(dataset, frm, to)
        from sinks.archive import dataset_schema

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
        spec = self._need(dataset)
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
        from sinks.archive import _is_local, dataset_schema

        if _is_local(self.fs):
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
        """Run SQL over the dataset views and :data:`VIEWS`; with a range, the views only cover [frm, to).

        Every dataset the query names gets a view over that range first, and so does the dataset of every view
        of :data:`VIEWS` it names; a view whose dataset is not in the archive is left undefined, one whose
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

    def _sql(self, query: str, params) -> pa.Table:
        """Run a report over views already registered (:meth:`_flows`)."""
        try:
            return self.con.sql(query, params=params).to_arrow_table()
        except duckdb.CatalogException as e:
            raise ArchiveError(f"{e} (datasets present: {', '.join(self._present) or 'none'})") from None

    # -- named reports

    def flows_view(self, exporter: str | None = None, dataset: str = "flows_enriched") -> tuple[str, dict]:
        """The flow records a report reads, as SQL, and its parameters: counted records only (each packet
        once: docs/detectors.md, "Counting each packet once"), or every record of one ``exporter``'s view.
        ``dataset``: flows_enriched or a traffic rollup (rows with a ``flow_records`` count)."""
        self._need(dataset)
        if exporter is None:
            return f"(SELECT * FROM {dataset} WHERE NOT coalesce(duplicate, false))", {}
        if dataset != "flows_enriched":
            raise ArchiveError("one exporter's view needs the raw flows: use --source raw or auto")
        return "(SELECT * FROM flows_enriched WHERE exporter = $exporter)", {"exporter": exporter}

    def sources(self, frm, to, source: str = "auto", needs_raw: str | None = None) -> list[tuple[str, int | None, int | None]]:
        """The (dataset, from, to) pieces a flow report over [frm, to) reads (:func:`plan_sources`)."""
        lo = parse_time(frm) if frm is not None else None
        hi = parse_time(to) if to is not None else None
        if lo is not None and hi is not None and hi <= lo:
            raise ArchiveError(f"empty time range: from {_iso(lo)} is not before to {_iso(hi)}")
        return plan_sources(lo, hi, self._present, source, needs_raw)

    def _has_files(self, dataset: str, frm, to) -> bool:
        try:
            return bool(self.files(dataset, frm, to))
        except EmptyRange:
            return False

    def _flows(self, frm, to, source: str, exporter: str | None, needs_raw: str | None = None) -> tuple[str, dict]:
        """FROM clause (flow rows with src/dst node, ip, group, rack, job, category, bytes_est, packets_est and
        ``n``, the flow records a row stands for) and params of a flow report; sets :attr:`answered`.

        Each piece of :meth:`sources` is a view of its own (only its hours' files are listed and read);
        pieces with no file in their range add nothing (a range older than the raw flows' retention is
        answered by the rollups alone).
        """
        if exporter is not None:
            needs_raw = "one exporter's view (--exporter)"
        pieces = self.sources(frm, to, source, needs_raw)
        if source == "auto" and any(d != "flows_enriched" for d, *_ in pieces) \
                and not any(self._has_files(d, lo, hi) for d, lo, hi in pieces if d != "flows_enriched"):
            # rollups with no file at all in range (say an archive older than its rollups): the raw flows
            pieces = [("flows_enriched", pieces[0][1], pieces[-1][2])]
        parts, used = [], []
        params: dict = {}
        for i, (d, lo, hi) in enumerate(pieces):
            alias = f"piece{i}_{d}"
            try:
                self.register(d, lo, hi, alias=alias)
            except EmptyRange:
                if len(pieces) > 1:
                    continue
                raise
            used.append((d, lo, hi, len(self.files_used[alias])))
            if d == "flows_enriched":
                cond = "NOT coalesce(duplicate, false)" if exporter is None else "exporter = $exporter"
                if exporter is not None:
                    params["exporter"] = exporter
                n = "1"
            else:
                cond, n = "NOT duplicate", "flow_records"
            parts.append(f"""SELECT src_node, dst_node, src_ip::VARCHAR AS src_ip, dst_ip::VARCHAR AS dst_ip,
                src_group, dst_group, src_rack, dst_rack, src_job, dst_job, category, bytes_est, packets_est, {n} AS n
                FROM {alias} WHERE {cond}""")
        if not parts:
            raise EmptyRange("no flow data in range (neither raw flows nor rollups)")
        self.answered = used
        self.answered_by = " + ".join(dict.fromkeys(d for d, *_ in used))
        return "(" + " UNION ALL ".join(parts) + ")", params

    def series_source(self, frm, to, min_bins: int = 150, max_bins: int = 600, family: str = "traffic"
                      ) -> tuple[str, int]:
        """(dataset, bin ms) for a time series over [frm, to): the coarsest rollup that still gives at least
        ``min_bins`` bins (a week: ``traffic_1h``, hourly bins; a day: ``traffic_1m``, two-minute bins) and has
        files in range, the bin a whole number of its buckets and at most ``max_bins`` bins; else the raw
        dataset with whole-second bins (an hour: 6 s). A rollup row falls in the bin its bucket starts in.
        ``family``: ``traffic`` (raw: ``flows_enriched``; the console's job timeline) or ``ports`` (raw:
        ``link_health``; a port's series). docs/console.md."""
        lo, hi = parse_time(frm), parse_time(to)
        if hi <= lo:
            raise ArchiveError(f"empty time range: from {_iso(lo)} is not before to {_iso(hi)}")
        names = {"traffic": (SOURCES["1h"], SOURCES["1m"], SOURCES["raw"]),
                 "ports": ("ports_1h", "ports_1m", "link_health")}[family]
        target = max(1000, (hi - lo) // max_bins)
        for name in names[:2]:
            b = layout.spec(name).bucket_ms
            if name in self._present and (hi - lo) // b >= min_bins and self._has_files(name, lo, hi):
                return name, max(b, target // b * b)
        return names[2], target // 1000 * 1000

    def matrix_pieces(self, frm, to) -> list[tuple[str, int | None, int | None]]:
        """The (dataset, from, to) pieces :meth:`matrix_cells` reads over [frm, to)."""
        finest = "matrix_windows" if "matrix_windows" in self._present else SOURCES["raw"]
        pieces = [(finest if d == SOURCES["raw"] else d, lo, hi) for d, lo, hi in self.sources(frm, to, "auto")]
        if any(d != finest for d, *_ in pieces) and not any(self._has_files(d, lo, hi) for d, lo, hi in pieces
                                                             if d != finest):
            pieces = [(finest, pieces[0][1], pieces[-1][2])]  # no rollup file in range: the finest alone
        return pieces

    def matrix_cells(self, frm, to, level: str = "node", protocols=None) -> pa.Table:
        """Matrix cells (level, src, dst, category, bytes_est, packets_est, flow_records, samples) summed per
        (src, dst, category) over [frm, to), from the smallest datasets that answer: the console's matrix.

        The range is tiled as for the flow reports (:func:`plan_sources`): whole hours from ``traffic_1h``,
        whole minutes from ``traffic_1m``; what is left (under a minute at each end, or a range with no
        rollup) from ``matrix_windows`` (cells of the windows starting in it), else ``flows_enriched``.
        Counted as the processors count a matrix cell: each packet once (``duplicate`` skipped) and only the
        export protocols in ``protocols`` (codes, ``processors.detector_protocols``; None = all); an endpoint
        without a node (group) is ``unknown``; ``samples`` are the sampled packets. ``level``: node or group
        (the console folds nodes into racks). Sets :attr:`answered` / :attr:`answered_by`.
        """
        if level not in ("node", "group"):
            raise ValueError("level must be 'node' or 'group'")
        pieces = self.matrix_pieces(frm, to)
        col = "node" if level == "node" else "group"
        parts, used = [], []
        params: dict = {"level": level}
        proto = "" if protocols is None else " AND list_contains($protocols, export_protocol)"
        for i, (d, lo, hi) in enumerate(pieces):
            alias = f"cells{i}_{d}"
            try:
                self.register(d, lo, hi, alias=alias)
            except (EmptyRange, DatasetMissing):
                continue
            used.append((d, lo, hi, len(self.files_used[alias])))
            if d == "matrix_windows":
                parts.append(f"""SELECT src, dst, category, bytes_est, packets_est, flow_records, samples
                    FROM {alias} WHERE level = $level""")
                continue
            dup = "NOT duplicate" if d != SOURCES["raw"] else "NOT coalesce(duplicate, false)"
            n, smp = ("flow_records", "packets") if d != SOURCES["raw"] else ("1", "packets")
            parts.append(f"""SELECT CASE WHEN src_{col} <> '' THEN src_{col} ELSE 'unknown' END AS src,
                    CASE WHEN dst_{col} <> '' THEN dst_{col} ELSE 'unknown' END AS dst, category,
                    bytes_est, packets_est, {n} AS flow_records, {smp} AS samples
                FROM {alias} WHERE {dup}{proto}""")
            if proto:
                params["protocols"] = [int(p) for p in protocols]
        self.answered = used
        self.answered_by = " + ".join(dict.fromkeys(d for d, *_ in used)) or None
        if not parts:
            raise EmptyRange("no matrix data in range (neither rollups nor matrix windows)")
        return self._sql(f"""
            SELECT $level AS level, src, dst, category, sum(bytes_est)::BIGINT AS bytes_est,
                   sum(packets_est)::BIGINT AS packets_est, sum(flow_records)::BIGINT AS flow_records,
                   sum(samples)::BIGINT AS samples
            FROM ({" UNION ALL ".join(parts)}) GROUP BY src, dst, category""", params)

    def top_talkers(self, frm, to, n: int = 10, exporter: str | None = None, source: str = "auto") -> pa.Table:
        """Largest src -> dst pairs by estimated bytes (node name, else IP)."""
        f, params = self._flows(frm, to, source, exporter)
        return self._sql(f"""
            SELECT CASE WHEN src_node <> '' THEN src_node ELSE src_ip END AS src,
                   CASE WHEN dst_node <> '' THEN dst_node ELSE dst_ip END AS dst,
                   sum(bytes_est)::BIGINT AS bytes_est, sum(packets_est)::BIGINT AS packets_est,
                   sum(n)::BIGINT AS flow_records
            FROM {f} GROUP BY 1, 2 ORDER BY bytes_est DESC, src, dst LIMIT {int(n)}""", params)

    def matrix(self, frm, to, level: str = "node", source: str = "auto", exporter: str | None = None) -> pa.Table:
        """Traffic matrix (src, dst, category) summed over [frm, to).

        ``source``: ``matrix`` (matrix_windows cells), ``flows``/``raw`` (flows_enriched), ``1m``/``1h``
        (traffic rollups) or ``auto``: the coarsest rollup that answers the range exactly
        (:func:`plan_sources`), else matrix_windows when it has data in range, else flows_enriched.
        ``exporter``: one exporter's view, from flows_enriched.
        """
        if level not in ("node", "rack", "group"):
            raise ValueError("level must be 'node', 'rack' or 'group'")
        if source not in ("matrix", "flows", *SOURCE_CHOICES):
            raise ValueError(f"source must be one of matrix, flows, {', '.join(SOURCE_CHOICES)}")
        if exporter is not None and source == "matrix":
            raise ValueError("one exporter's view comes from the flow records: use source flows or auto")
        if source == "matrix":
            self._need("matrix_windows")
        if source == "auto" and exporter is None:
            raw_only = all(d == "flows_enriched" for d, *_ in self.sources(frm, to, "auto"))
            if raw_only and "matrix_windows" in self._present and self.files("matrix_windows", frm, to):
                source = "matrix"
        if source == "matrix":
            self.answered_by = "matrix_windows"
            self.answered = [("matrix_windows", frm, to, len(self.files("matrix_windows", frm, to)))]
            return self.sql("""
                SELECT src, dst, category, sum(bytes_est)::BIGINT AS bytes_est,
                       sum(packets_est)::BIGINT AS packets_est, sum(flow_records)::BIGINT AS flow_records
                FROM matrix_windows WHERE level = ? GROUP BY 1, 2, 3
                ORDER BY bytes_est DESC, src, dst, category""", frm, to, params=[level])
        f, params = self._flows(frm, to, "raw" if source == "flows" else source, exporter)
        col = level
        return self._sql(f"""
            SELECT CASE WHEN src_{col} <> '' THEN src_{col} ELSE 'unknown' END AS src,
                   CASE WHEN dst_{col} <> '' THEN dst_{col} ELSE 'unknown' END AS dst,
                   category, sum(bytes_est)::BIGINT AS bytes_est, sum(packets_est)::BIGINT AS packets_est,
                   sum(n)::BIGINT AS flow_records
            FROM {f} GROUP BY 1, 2, 3 ORDER BY bytes_est DESC, src, dst, category""", params)

    def node(self, name: str, frm, to, exporter: str | None = None, source: str = "auto") -> pa.Table:
        """One node's (or IP's) traffic: direction, peer, category, bytes/packets/records.

        A node given by address reads the raw flows (rollups keep the address only of a side with no node).
        """
        needs_raw = f"a node given by its address ({name})" if _is_address(name) else None
        f, params = self._flows(frm, to, source, exporter, needs_raw)
        return self._sql(f"""
            SELECT direction, peer, category, sum(bytes_est)::BIGINT AS bytes_est,
                   sum(packets_est)::BIGINT AS packets_est, sum(n)::BIGINT AS flow_records FROM (
              SELECT 'sent' AS direction, CASE WHEN dst_node <> '' THEN dst_node ELSE dst_ip END AS peer,
                     category, bytes_est, packets_est, n
              FROM {f} WHERE src_node = $name OR src_ip = $name
              UNION ALL
              SELECT 'recv', CASE WHEN src_node <> '' THEN src_node ELSE src_ip END, category, bytes_est, packets_est, n
              FROM {f} WHERE dst_node = $name OR dst_ip = $name)
            GROUP BY 1, 2, 3 ORDER BY direction DESC, bytes_est DESC, peer, category""", {**params, "name": name})

    def job(self, name: str, frm, to, exporter: str | None = None, source: str = "auto") -> pa.Table:
        """A job's nodes: bytes sent and received per node and category."""
        f, params = self._flows(frm, to, source, exporter)
        return self._sql(f"""
            WITH tx AS (SELECT src_node AS node, category, sum(bytes_est) AS b, sum(n) AS n
                        FROM {f} WHERE src_job = $job GROUP BY 1, 2),
                 rx AS (SELECT dst_node AS node, category, sum(bytes_est) AS b, sum(n) AS n
                        FROM {f} WHERE dst_job = $job GROUP BY 1, 2)
            SELECT node, category,
                   coalesce(tx.b, 0)::BIGINT AS sent_bytes_est, coalesce(rx.b, 0)::BIGINT AS recv_bytes_est,
                   coalesce(tx.n, 0)::BIGINT AS sent_flow_records, coalesce(rx.n, 0)::BIGINT AS recv_flow_records
            FROM tx FULL OUTER JOIN rx USING (node, category) ORDER BY node, category""", {**params, "job": name})

    def segmentation(self, frm, to, exporter: str | None = None) -> pa.Table:
        """Group x group traffic by category (the input to a segmentation review)."""
        f, params = self.flows_view(exporter)
        return self.sql(f"""
            SELECT src_group, dst_group, category, sum(bytes_est)::BIGINT AS bytes_est,
                   sum(packets_est)::BIGINT AS packets_est, count(*)::BIGINT AS flow_records
            FROM {f} GROUP BY 1, 2, 3 ORDER BY src_group, dst_group, category""", frm, to, params=params)


# ----------------------------------------------------------------------------- rendering


def _jsonable(v):
    if isinstance(v, bytes):
        if len(v) == 16:
            return addr_str(v)
        return v.hex()
    return str(v)


def _cell(v) -> str:
    """A value as the ``table`` format shows it: integers (DuckDB's ``sum`` of BIGINT is a 38-digit decimal) with
    thousands separators."""
    if v is None:
        return ""
    if isinstance(v, bytes):
        return _jsonable(v)
    integral = isinstance(v, Decimal) and v.is_finite() and v == v.to_integral_value()
    if integral or isinstance(v, int) and not isinstance(v, bool):
        return f"{int(v):,}"
    return str(v)


def render(table: pa.Table, fmt: str = "table", path: str | None = None, title: str | None = None) -> str:
    """Render a result: ``table`` (rich text), ``csv``, ``json`` (array of objects) as a string;
    ``parquet`` writes ``path`` and returns it."""
    if fmt == "parquet":
        if not path:
            raise ValueError("parquet output needs a path")
        import pyarrow.parquet as pq

        pq.write_table(table, path, compression="zstd")
        return path
    if fmt == "csv":
        import pyarrow.csv as pacsv

        buf = io.BytesIO()
        plain = table.select([i for i, f in enumerate(table.schema) if not pa.types.is_nested(f.type)])
        pacsv.write_csv(plain, buf)
        return buf.getvalue().decode()
    if fmt == "json":
        return json.dumps(table.to_pylist(), default=_jsonable, indent=1)
    if fmt == "table":
        from rich.console import Console
        from rich.table import Table

        rt = Table(title=title)
        for f in table.schema:
            numeric = pa.types.is_integer(f.type) or pa.types.is_floating(f.type) or pa.types.is_decimal(f.type)
            rt.add_column(f.name, justify="right" if numeric else "left")
        for row in table.to_pylist():
            rt.add_row(*[_cell(v) for v in row.values()])
        out = io.StringIO()
        Console(file=out, width=200, force_terminal=False, color_system=None).print(rt)
        if table.num_rows == 0:
            out.write("(no rows)\n")
        return out.getvalue()
    raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")


def segmentation_review(q, cfg, frm=None, to=None, exporter: str | None = None):
    """Observed group x group traffic checked against ``cfg.segmentation``.

    One row per (src_group, dst_group, category, status, rule): ``status`` is
    ``allowed``, ``violation``, or ``ignored`` (a side is 'unknown' and the policy
    has ``skip_unknown``); ``rule`` names the allow rule that matched. Ports are
    taken into account (flows grouped by destination and source port) only when
    some allow rule restricts ports.
    """
    from processors.logic.rules.policy import segmentation_matrix  # the policy's own matcher: same verdicts as live

    seg = cfg.segmentation
    by_port = any(r.ports for r in seg.allow)
    ports = ", dst_port, src_port" if by_port else ""
    f, params = q.flows_view(exporter)
    t = q.sql(f"""
        SELECT src_group, dst_group, category{ports}, sum(bytes_est)::BIGINT AS bytes,
               count(*)::BIGINT AS flows, sum(packets_est)::BIGINT AS packets
        FROM {f} GROUP BY ALL""", frm, to, params=params)
    rows = t.to_pylist()
    packets: dict[tuple, int] = {}
    for r in rows:
        k = (r["src_group"], r["dst_group"], r["category"], r.get("dst_port"), r.get("src_port"))
        packets[k] = packets.get(k, 0) + r["packets"]
    checked = segmentation_matrix(rows, seg)
    agg: dict[tuple, list[int]] = {}
    for r in checked:
        k = (r["src_group"], r["dst_group"], r["category"], r.get("dst_port"), r.get("src_port"))
        if seg.skip_unknown and "unknown" in (r["src_group"], r["dst_group"]):
            status = "ignored"
        else:
            status = "allowed" if r["allowed"] else "violation"
        key = (r["src_group"], r["dst_group"], r["category"], status, r["rule"] or "")
        a = agg.setdefault(key, [0, 0, 0])
        a[0] += r["bytes"]
        a[1] += packets.get(k, 0)
        a[2] += r["flows"]
    keys = sorted(agg, key=lambda k: (k[3] != "violation", k[0], k[1], k[2], k[4]))
    cols = list(zip(*keys)) if keys else [[], [], [], [], []]
    vals = list(zip(*(agg[k] for k in keys))) if keys else [[], [], []]
    return pa.table({
        "src_group": pa.array(cols[0], pa.string()), "dst_group": pa.array(cols[1], pa.string()),
        "category": pa.array(cols[2], pa.string()), "status": pa.array(cols[3], pa.string()),
        "rule": pa.array(cols[4], pa.string()), "bytes_est": pa.array(vals[0], pa.int64()),
        "packets_est": pa.array(vals[1], pa.int64()), "flow_records": pa.array(vals[2], pa.int64()),
    })
