"""The console's history: the Parquet archive through the same DuckDB layer as ``fabricflow query``.

Every query names a time range (the views cover only the hours in it, see
:class:`query.reports.ArchiveQuery`) and passes every user-given value as a DuckDB
parameter: the SQL texts below are constants. Calls are serialised (one DuckDB
connection) and run off the event loop by the web layer.

A missing dataset or an empty range is an empty answer, not an error; an
archive that cannot be reached raises :class:`sinks.archive.fs.ArchiveUnavailable` and flips
``ok`` for the page's banner.
"""

from __future__ import annotations

import threading
import time

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from schemas.columns import addr_str
from sinks.archive import layout
from sinks.archive.fs import ArchiveUnavailable
from query.errors import ArchiveError, DatasetMissing, EmptyRange
from query.reader import connect_duckdb
from query.reports import ArchiveQuery


_CELL_READ = ["window_start_ms", "level", "src", "dst", "category", "bytes_est", "packets_est", "flow_records",
              "samples"]
_MATRIX_WINDOWS = "SELECT DISTINCT window_start_ms, window_end_ms FROM matrix_windows ORDER BY 1"
_INCAST = "SELECT * EXCLUDE (dt, hour) FROM incast_events ORDER BY window_start_ms"
_STRAGGLERS = "SELECT * EXCLUDE (dt, hour) FROM straggler_scores WHERE straggler ORDER BY window_start_ms"
_SCORES = "SELECT * EXCLUDE (dt, hour) FROM straggler_scores WHERE job = $job ORDER BY window_start_ms, node"
_LINK_EVENTS = "SELECT * EXCLUDE (dt, hour) FROM link_health WHERE kind <> 'sample' ORDER BY time_ms"
_ALERTS = "SELECT * EXCLUDE (dt, hour) FROM alerts ORDER BY last_seen_ms"
_PORT_SERIES = """
    SELECT time_ms, util_in, util_out, in_errors_per_s + out_errors_per_s AS errors_per_s,
           in_discards_per_s + out_discards_per_s AS discards_per_s, if_speed, oper_up
    FROM link_health WHERE kind = 'sample' AND switch = $switch AND if_index = $if_index ORDER BY time_ms"""
# a port's series from a ports rollup: rates over each bucket's first and last sample (summed over the files
# of a bucket not yet compacted); a counter that went back (a reset, a 32-bit wrap) gives no rate for that file
_PORT_SERIES_ROLLUP = """
    SELECT bucket_ms AS time_ms,
           sum(greatest(last_in_octets - first_in_octets, 0)) * 8.0 / nullif(sum(last_time_ms - first_time_ms), 0)
             * 1000 / nullif(max(max_if_speed), 0) AS util_in,
           sum(greatest(last_out_octets - first_out_octets, 0)) * 8.0 / nullif(sum(last_time_ms - first_time_ms), 0)
             * 1000 / nullif(max(max_if_speed), 0) AS util_out,
           sum(greatest(last_in_errors - first_in_errors, 0) + greatest(last_out_errors - first_out_errors, 0))
             * 1000.0 / nullif(sum(last_time_ms - first_time_ms), 0) AS errors_per_s,
           sum(greatest(last_in_discards - first_in_discards, 0) + greatest(last_out_discards - first_out_discards, 0))
             * 1000.0 / nullif(sum(last_time_ms - first_time_ms), 0) AS discards_per_s,
           min(min_if_speed) AS if_speed, sum(oper_down_samples) = 0 AS oper_up
    FROM {dataset} WHERE list_contains($agents, exporter) AND if_index = $if_index GROUP BY 1 ORDER BY 1"""
_PORT_LATEST = """
    SELECT switch, if_index, max(time_ms) AS time_ms, arg_max(if_speed, time_ms) AS if_speed,
           arg_max(oper_up, time_ms) AS oper_up, arg_max(util_in, time_ms) AS util_in,
           arg_max(util_out, time_ms) AS util_out,
           arg_max(in_errors_per_s + out_errors_per_s, time_ms) AS errors_per_s,
           arg_max(in_discards_per_s + out_discards_per_s, time_ms) AS discards_per_s
    FROM link_health WHERE kind = 'sample' GROUP BY 1, 2"""
_FLOWS = """
    SELECT time_end_ms, ip_protocol, src_addr, src_port, dst_addr, dst_port, src_node, dst_node, category,
           bytes, packets, bytes_est, packets_est, sampling_rate, exporter_addr, export_protocol
    FROM flows_enriched
    WHERE ($node = '' OR src_node = $node OR dst_node = $node)
      AND ($dst = '' OR dst_node = $dst)
      AND ($src = '' OR src_node = $src)
    ORDER BY bytes_est DESC, time_end_ms LIMIT $limit"""
# phases on the training timeline, per time bin: collective traffic inside the job, dataset reads
# (storage -> job nodes) and checkpoint writes (job nodes -> storage)
_PHASES = """
    SELECT (time_end_ms // $bin) * $bin AS t,
           CASE WHEN category IN ('collective', 'rocev2') AND src_job = $job AND dst_job = $job THEN 'communication'
                WHEN category = 'storage' AND dst_job = $job THEN 'dataset_read'
                WHEN category = 'storage' AND src_job = $job THEN 'checkpoint_write' END AS phase,
           sum(bytes_est)::BIGINT AS bytes_est
    FROM flows_enriched WHERE (src_job = $job OR dst_job = $job) AND list_contains($protocols, export_protocol)
    GROUP BY 1, 2 HAVING phase IS NOT NULL ORDER BY 1"""
# the same from a traffic rollup (a bucket falls in the bin it starts in)
_PHASES_ROLLUP = _PHASES.replace("time_end_ms", "bucket_ms").replace("FROM flows_enriched", "FROM {dataset}")
# each of a job's nodes' traffic per time bin: everything it sent (src) and received (dst), any peer and
# category, each packet once and from one observation layer, as the matrix counts a cell
_NODE_TRAFFIC = """
    SELECT t, node, sum(sent)::BIGINT AS sent, sum(recv)::BIGINT AS recv FROM (
      SELECT (time_end_ms // $bin) * $bin AS t, src_node AS node, bytes_est AS sent, 0 AS recv FROM flows_enriched
      WHERE list_contains($nodes, src_node) AND NOT coalesce(duplicate, false)
        AND list_contains($protocols, export_protocol)
      UNION ALL
      SELECT (time_end_ms // $bin) * $bin, dst_node, 0, bytes_est FROM flows_enriched
      WHERE list_contains($nodes, dst_node) AND NOT coalesce(duplicate, false)
        AND list_contains($protocols, export_protocol))
    GROUP BY 1, 2 ORDER BY 1, 2"""
_NODE_TRAFFIC_ROLLUP = _NODE_TRAFFIC.replace("time_end_ms", "bucket_ms").replace("FROM flows_enriched",
                                                                                  "FROM {dataset}")
_COMM_TIMES = """
    SELECT (time_end_ms // $bin)::BIGINT AS b, sum(bytes_est)::BIGINT AS bytes_est FROM flows_enriched
    WHERE category IN ('collective', 'rocev2') AND src_job = $job AND dst_job = $job
      AND list_contains($protocols, export_protocol) GROUP BY 1 ORDER BY 1"""

_ADDR_COLUMNS = ("src_addr", "dst_addr", "exporter_addr", "next_hop", "bgp_next_hop")
PERIOD_SPAN_MS = 15 * 60_000  # the iteration period is read from the last 15 minutes of the job's communication
# export_protocol codes (flow_record.avsc) of processors.detector_protocols names
PROTOCOL_CODES = {"sflow5": 1, "netflow5": 2, "netflow9": 3, "ipfix": 4}


def _rows(table: pa.Table) -> list[dict]:
    out = table.to_pylist()
    for r in out:
        for c in _ADDR_COLUMNS:
            if isinstance(r.get(c), bytes):
                r[c] = addr_str(r[c])
    return out


def _empty_cells() -> pa.Table:
    from .live import CELL_SCHEMA

    return CELL_SCHEMA.empty_table()


class History:
    def __init__(self, fs, root: str, protocols=("sflow5", "netflow5", "netflow9", "ipfix")):
        """``protocols``: the export protocols the timeline (phases, iteration period) is built from, as
        ``processors.detector_protocols``: one observation layer, so a packet seen by ToR sFlow and core
        NetFlow is not counted twice and NetFlow's export timing (active timeout) does not fake a rhythm."""
        self.fs, self.root = fs, root
        self.protocols = [PROTOCOL_CODES[p] for p in protocols]
        self.lock = threading.Lock()
        self.con = connect_duckdb()
        self.ok = True
        self.error: str | None = None
        self.since_ms = int(time.time() * 1000)
        self.last_files = 0  # files the last query read (under the lock)

    @classmethod
    def from_settings(cls, settings) -> History:
        from sinks.archive.fs import archive_filesystem

        fs, root = archive_filesystem(settings.archive)
        return cls(fs, root, settings.processors.detector_protocols)

    def _set(self, ok: bool, error: str | None) -> None:
        if ok != self.ok:
            self.since_ms = int(time.time() * 1000)
        self.ok, self.error = ok, error

    def status(self) -> dict:
        return {"ok": self.ok, "error": self.error, "since_ms": self.since_ms}

    def check(self) -> bool:
        """Can the archive root be listed? (updates ``ok``)"""
        with self.lock:
            try:
                ArchiveQuery(self.fs, self.root, self.con)
                self._set(True, None)
            except ArchiveError as e:
                self._set(False, str(e))
            except Exception as e:  # network errors from s3fs/aiobotocore come in many types
                self._set(False, f"{type(e).__name__}: {e}")
        return self.ok

    def query(self, sql: str, lo: int, hi: int, params: dict | None = None) -> pa.Table | None:
        """Run a constant ``sql`` over [lo, hi) with ``params``; None when its dataset has no data in range."""
        with self.lock:
            try:
                aq = ArchiveQuery(self.fs, self.root, self.con)
                table = aq.sql(sql, lo, hi, params=params)
                self.last_files = sum(len(f) for f in aq.files_used.values())
                self._set(True, None)
                return table
            except (DatasetMissing, EmptyRange):
                self._set(True, None)
                return None
            except ArchiveError as e:
                if "is not in the archive" in str(e) or "datasets present" in str(e):
                    self._set(True, None)
                    return None
                self._set(False, str(e))
                raise ArchiveUnavailable(str(e)) from None
            except (OSError, duckdb.IOException) as e:
                self._set(False, f"{type(e).__name__}: {e}")
                raise ArchiveUnavailable(str(e)) from None

    # ------------------------------------------------------------------ named reads

    def matrix_cells(self, lo: int, hi: int, level: str) -> tuple[pa.Table, int | None, list[dict]]:
        """(the matrix cells of ``level`` over [lo, hi), the number of matrix windows read (None when rollups
        answered), which datasets answered: ``[{"dataset", "from_ms", "to_ms", "files"}]``).

        The datasets come from the query layer as for ``fabricflow query matrix``
        (:meth:`query.reports.ArchiveQuery.matrix_pieces`): whole hours from the 1-hour rollups, whole minutes
        from the 1-minute rollups, the rest from ``matrix_windows``. A range only ``matrix_windows`` answers
        (one window, a few minutes' edges) is read with Arrow instead of SQL: the files come from
        :meth:`ArchiveQuery.files` (same hour pruning), name columns stay dictionary-encoded and the console
        sums the cells with numpy (:func:`console.views.pair_sums`). A DuckDB ``GROUP BY src, dst`` of one
        512-node window (262k string pairs) takes ~0.5 s; this read takes a few tens of ms. The filters are
        Arrow expressions built from validated values, never SQL text. Rollups hold one row per (node pair,
        category, bucket), so a week of them is summed in DuckDB (:meth:`ArchiveQuery.matrix_cells`).
        """
        lvl = "group" if level == "group" else "node"
        with self.lock:
            try:
                aq = ArchiveQuery(self.fs, self.root, self.con)
                pieces = aq.matrix_pieces(lo, hi)
                if any(d != "matrix_windows" for d, *_ in pieces):
                    try:
                        t = aq.matrix_cells(lo, hi, lvl, self.protocols)
                    except (EmptyRange, DatasetMissing):
                        t = None
                    self._set(True, None)
                    answered = [{"dataset": d, "from_ms": a, "to_ms": b, "files": n} for d, a, b, n in aq.answered]
                    return (_empty_cells() if t is None else t), None, answered
                files = aq.files("matrix_windows", lo, hi)
                self._set(True, None)
            except ArchiveError as e:
                self._set(False, str(e))
                raise ArchiveUnavailable(str(e)) from None
            except (OSError, duckdb.IOException) as e:
                self._set(False, f"{type(e).__name__}: {e}")
                raise ArchiveUnavailable(str(e)) from None
            if not files:
                return _empty_cells(), 0, []
            fmt = ds.ParquetFileFormat(read_options={"dictionary_columns": ["level", "src", "dst", "category"]})
            data = ds.dataset(files, format=fmt, filesystem=self.fs)
            t = data.to_table(columns=_CELL_READ, filter=(pc.field("window_start_ms") >= lo) &
                              (pc.field("window_start_ms") < hi) & (pc.field("level") == lvl))
        windows = len(pc.unique(t.column("window_start_ms"))) if t.num_rows else 0
        return t.drop_columns(["window_start_ms"]), windows, [
            {"dataset": "matrix_windows", "from_ms": lo, "to_ms": hi, "files": len(files)}]

    def matrix_windows(self, lo: int, hi: int) -> list[tuple[int, int]]:
        t = self.query(_MATRIX_WINDOWS, lo, hi)
        return [] if t is None else list(zip(t.column(0).to_pylist(), t.column(1).to_pylist()))

    def event_records(self, lo: int, hi: int, types: set[str]) -> dict[str, list[dict]]:
        out: dict[str, list[dict]] = {}
        for kind, sql in (("incast", _INCAST), ("straggler", _STRAGGLERS), ("link", _LINK_EVENTS), ("alert", _ALERTS)):
            if kind in types:
                t = self.query(sql, lo, hi)
                out[kind] = [] if t is None else _rows(t)
        return out

    def scores(self, job: str, lo: int, hi: int) -> list[dict]:
        t = self.query(_SCORES, lo, hi, {"job": job})
        return [] if t is None else t.to_pylist()

    def port_series(self, switch: str, if_index: int, lo: int, hi: int, agents: list[str] | None = None
                    ) -> tuple[list[tuple], list[dict]]:
        """(a port's samples over [lo, hi), which dataset answered). With the switch's sFlow agent addresses
        (``agents``) a long range is read from the port rollups the query layer picks
        (:meth:`query.reports.ArchiveQuery.series_source`, family ``ports``: a week from ``ports_1h``, one point
        per hour), else from ``link_health`` (one point per counter sample)."""
        dataset = "link_health"
        if agents:
            with self.lock:
                try:
                    dataset, _bin = ArchiveQuery(self.fs, self.root, self.con).series_source(lo, hi, family="ports")
                except ArchiveError:
                    dataset = "link_health"
                except (OSError, duckdb.IOException) as e:
                    self._set(False, f"{type(e).__name__}: {e}")
                    raise ArchiveUnavailable(str(e)) from None
        if dataset == "link_health":
            t = self.query(_PORT_SERIES, lo, hi, {"switch": switch, "if_index": int(if_index)})
        else:
            t = self.query(_PORT_SERIES_ROLLUP.format(dataset=dataset), lo, hi,
                           {"agents": list(agents), "if_index": int(if_index)})
        answered = [] if t is None else [{"dataset": dataset, "from_ms": lo, "to_ms": hi, "files": self.last_files}]
        return ([] if t is None else [tuple(r.values()) for r in t.to_pylist()]), answered

    def ports_latest(self, lo: int, hi: int) -> list[dict]:
        t = self.query(_PORT_LATEST, lo, hi)
        return [] if t is None else t.to_pylist()

    def flows(self, lo: int, hi: int, node: str = "", src: str = "", dst: str = "", limit: int = 20) -> list[dict]:
        t = self.query(_FLOWS, lo, hi, {"node": node, "src": src, "dst": dst, "limit": int(limit)})
        return [] if t is None else _rows(t)

    def series_source(self, lo: int, hi: int) -> tuple[str, int]:
        """(dataset, bin ms) of a job's time series over [lo, hi), from the query layer
        (:meth:`query.reports.ArchiveQuery.series_source`): a week from the 1-hour rollups in hourly bins, a day
        from the 1-minute rollups, an hour from the raw flows in 6 s bins."""
        with self.lock:
            try:
                return ArchiveQuery(self.fs, self.root, self.con).series_source(lo, hi)
            except ArchiveError:
                return "flows_enriched", max(1000, (hi - lo) // 600 // 1000 * 1000)
            except (OSError, duckdb.IOException) as e:
                self._set(False, f"{type(e).__name__}: {e}")
                raise ArchiveUnavailable(str(e)) from None

    def phases(self, job: str, lo: int, hi: int, bin_ms: int | None = None) -> tuple[list[dict], int, list[dict]]:
        """(a job's phase bytes per time bin, the bin ms, which dataset answered ``[{"dataset", "from_ms",
        "to_ms", "files"}]``). Without ``bin_ms`` the dataset and bin come from :meth:`series_source`."""
        dataset = "flows_enriched"
        if bin_ms is None:
            dataset, bin_ms = self.series_source(lo, hi)
        sql = _PHASES if dataset == "flows_enriched" else _PHASES_ROLLUP.format(dataset=dataset)
        t = self.query(sql, lo, hi, {"job": job, "bin": int(bin_ms), "protocols": self.protocols})
        answered = [] if t is None else [{"dataset": dataset, "from_ms": lo, "to_ms": hi, "files": self.last_files}]
        return ([] if t is None else t.to_pylist()), int(bin_ms), answered

    def node_traffic(self, nodes: list[str], lo: int, hi: int) -> tuple[list[dict], int, int, list[dict]]:
        """(bytes each of ``nodes`` sent and received per time bin over [lo, hi) as ``[{t, node, sent,
        recv}]``, the bin ms, the bucket ms of the dataset read (1 for the raw flows), which dataset answered).
        All of a node's traffic, any peer and category; the dataset and bin from :meth:`series_source`, as
        the job's bands."""
        dataset, bin_ms = self.series_source(lo, hi)
        if not nodes:
            return [], int(bin_ms), 1, []
        if dataset == "flows_enriched":
            sql, bucket = _NODE_TRAFFIC, 1
        else:
            sql, bucket = _NODE_TRAFFIC_ROLLUP.format(dataset=dataset), layout.spec(dataset).bucket_ms
        t = self.query(sql, lo, hi, {"nodes": list(nodes), "bin": int(bin_ms), "protocols": self.protocols})
        answered = [] if t is None else [{"dataset": dataset, "from_ms": lo, "to_ms": hi, "files": self.last_files}]
        return ([] if t is None else t.to_pylist()), int(bin_ms), bucket, answered

    def iteration_period_ms(self, job: str, lo: int, hi: int, bin_ms: int = 100, comm_end_ms: int | None = None
                            ) -> float | None:
        """The job's dominant iteration period from the raw flows of the last :data:`PERIOD_SPAN_MS` of the
        range (100 ms bins: only the raw flows answer; periods up to a minute need no more). ``comm_end_ms``:
        where the job's communication in the range ends (from :meth:`phases`); the span then ends there, so a
        range reaching past the job's traffic (a past hour, a job that stopped) still finds the period."""
        if comm_end_ms is not None:
            hi = max(lo + 1, min(hi, comm_end_ms))
        lo = max(lo, hi - PERIOD_SPAN_MS)
        t = self.query(_COMM_TIMES, lo, hi, {"job": job, "bin": int(bin_ms), "protocols": self.protocols})
        if t is None or t.num_rows < 8:
            return None
        b = t.column("b").to_numpy()
        series = np.zeros(int(b.max() - b.min()) + 1)
        series[b - b.min()] = t.column("bytes_est").to_numpy()
        return period_ms(series, bin_ms)


def period_ms(series: np.ndarray, bin_ms: int, min_ms: int = 300, max_ms: int = 60_000) -> float | None:
    """The dominant period of a binned rate series by autocorrelation (None when nothing stands out)."""
    x = np.asarray(series, dtype=float)
    if len(x) < 8 or not np.any(x):
        return None
    x = x - x.mean()
    n = len(x)
    f = np.fft.rfft(x, 2 * n)
    ac = np.fft.irfft(f * np.conj(f))[:n]
    if ac[0] <= 0:
        return None
    ac = ac / ac[0]
    lo, hi = max(1, min_ms // bin_ms), min(n // 2, max_ms // bin_ms)
    if hi <= lo + 1:
        return None
    seg = ac[lo:hi]
    # first clear local maximum above 0.3 (the fundamental, not a multiple)
    for i in range(1, len(seg) - 1):
        if seg[i] >= 0.3 and seg[i] >= seg[i - 1] and seg[i] >= seg[i + 1]:
            return float((lo + i) * bin_ms)
    return None
