"""Hourly summaries: per node / per job traffic by category, top talkers and
destinations, event counts and data-quality figures for one UTC hour.

Pure: flows come in as Arrow tables (or numpy structured arrays) of
``flow_enriched``, events as the detector dicts, quality figures as a dict;
:meth:`HourlySummary.result` returns a dict matching ``schemas/avro/summary_hourly.avsc``.
Flow aggregation is done by Arrow group-by per batch, never per record.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fabricflow import streams
from processors.logic.windows.groupby import GroupBy
from schemas.columns import load_avsc
from schemas.registry import LABEL_FIELDS
from sinks.archive import layout
from sinks.archive.rollups import encode_column

# the streams counted in a summary (their ``event_kind``), their dataset and row-schema names, their event time
_EVENT_STREAMS = [s for s in streams.STREAMS if s.event_kind]
EVENT_KINDS = tuple(s.event_kind for s in _EVENT_STREAMS)
_KIND_ALIASES = {alias: s.event_kind for s in _EVENT_STREAMS for alias in (s.dataset, s.row_schema)}
_EVENT_TIME = {s.event_kind: s.time_column for s in _EVENT_STREAMS}


def summary_avsc() -> dict:
    """``schemas/avro/summary_hourly.avsc``: the schema :meth:`HourlySummary.result` matches."""
    return load_avsc("summary_hourly")


#: The columns of ``flow_enriched`` a summary reads (the addresses only where a row has no node name).
_COLUMNS = ("time_end_ms", "bytes_est", "packets_est", "duplicate", "category", "src_node", "dst_node", "src_job",
            "dst_job", "src_addr", "dst_addr")


def summary_columns(batch) -> pa.Table:
    """The columns a summary reads (:data:`_COLUMNS`) of a numpy structured array, decoded ``flows.enriched.v2``
    rows (label columns as Arrow dictionaries of their codes) or Arrow table of ``flow_enriched``, as Arrow; no
    derived text columns (addresses are formatted only where needed)."""
    from sinks.archive.arrow_schema import addr_array

    if isinstance(batch, pa.Table):
        return batch if batch.column_names == list(_COLUMNS) else batch.select(list(_COLUMNS))
    cols = {}
    dictionary = getattr(batch, "dictionary", None)  # schemas.codec.CodedBatch: label columns from their codes
    for c in _COLUMNS:
        if dictionary is not None and c in LABEL_FIELDS:
            cols[c] = dictionary(c)
            continue
        col = batch[c]
        if c.endswith("_addr"):
            cols[c] = addr_array(col)
        elif col.dtype == object:
            cols[c] = pa.array(col, type=pa.string(), from_pandas=False)
        else:
            cols[c] = pa.array(np.ascontiguousarray(col))
    return pa.table(cols)


_as_table = summary_columns


def coded_summary_columns(parts: list) -> pa.Table:
    """:func:`summary_columns` of several decoded ``flows.enriched.v2`` batches (``schemas.codec.CodedBatch``) as
    one table: each column concatenated once, the label columns as one dictionary over the parts' label tables
    made distinct once (their codes re-pointed with one gather), not one Arrow conversion per message."""
    from sinks.archive.arrow_schema import addr_array, label_dictionary

    offsets = np.cumsum([0] + [len(p.labels) for p in parts[:-1]])
    labels = pc.dictionary_encode(pa.array(np.concatenate([p.labels for p in parts]), type=pa.string(),
                                           from_pandas=False))
    unique = labels.indices.to_numpy(zero_copy_only=False)  # concatenated code -> code of its distinct string
    cols = {}
    for c in _COLUMNS:
        if c in LABEL_FIELDS:
            codes = np.concatenate([p.rows[c].astype(np.int64) + o for p, o in zip(parts, offsets)])
            cols[c] = label_dictionary(unique[codes], labels.dictionary)
        elif c.endswith("_addr"):
            cols[c] = addr_array(np.concatenate([p.rows[c] for p in parts]))
        else:
            cols[c] = pa.array(np.concatenate([p.rows[c] for p in parts]))
    return pa.table(cols)


_SUMS = [("bytes_est", "sum"), ("packets_est", "sum"), ("n", "sum")]
Coded = tuple[np.ndarray, pa.Array]  # (int64 code per row, the distinct strings they index)


def _ints(col) -> np.ndarray:
    return col.to_numpy().astype(np.int64, copy=False)


def _coded(col) -> Coded:
    """A string (or string dictionary) column as codes into distinct strings: a dictionary column with distinct
    values keeps its codes, anything else is dictionary-encoded once."""
    enc = encode_column(col)
    return enc.indices.to_numpy(zero_copy_only=False).astype(np.int64, copy=False), enc.dictionary


def _empty_codes(codes: np.ndarray, values: pa.Array) -> np.ndarray:
    """Rows whose string is ``""``."""
    return pc.equal(values, "").to_numpy(zero_copy_only=False)[codes] if len(codes) else np.zeros(0, bool)


def _or_values(values: pa.Array, fallback: str) -> pa.Array:
    """The distinct strings with ``""`` replaced by ``fallback`` (two codes may then share a string: groups are
    merged by their strings in :meth:`HourlySummary._push`)."""
    return pc.if_else(pc.equal(values, ""), fallback, values)


def _or_address_coded(node: Coded, addr) -> Coded:
    """:func:`_or_address` on codes: rows without a node get codes past the node strings, into the texts of
    their distinct addresses."""
    from sinks.archive.arrow_schema import addr_text_array

    codes, values = node
    empty = _empty_codes(codes, values)
    if not empty.any():
        return codes, values
    if isinstance(addr, pa.ChunkedArray):
        addr = addr.combine_chunks()
    texts = addr_text_array(addr.filter(pa.array(empty)))
    codes = codes.copy()
    codes[empty] = len(values) + texts.indices.to_numpy(zero_copy_only=False)
    return codes, pa.concat_arrays([values.cast(pa.string()), texts.dictionary.cast(pa.string())])


#: Rows up to which :func:`_dense_groups` sums exactly in float64 limbs (2**32 x rows < 2**53).
_DENSE_MAX_ROWS = 1 << 20
#: Key tables up to this many slots (or 8 x the rows, if more) are counted densely (a few MB at most): node
#: pairs of a 512-node inventory (513 x 513 codes) fit.
_DENSE_MIN_SLOTS = 1 << 19


def _dense_groups(codes: list[np.ndarray]) -> tuple[np.ndarray, int, list[np.ndarray]] | None:
    """(group number of every row, number of groups, each group's codes) when the codes' combined range is small
    (at most ``max(8 x rows, 524,288)`` slots): groups counted in a dense table, no sort. Groups come in the order
    :class:`GroupBy` gives (ascending codes, first column most significant). None when the range is too large."""
    n = len(codes[0]) if codes else 0
    if n == 0 or n > _DENSE_MAX_ROWS:
        return None
    limit = max(8 * n, _DENSE_MIN_SLOTS)
    key, span, radix = None, 1, []
    for c in codes:
        lo, hi = int(c.min()), int(c.max())
        r = hi - lo + 1
        span *= r
        if span > limit:
            return None
        part = c.astype(np.int64) - lo if lo else c.astype(np.int64, copy=False)
        key = part if key is None else key * r + part
        radix.append((lo, r))
    present = np.bincount(key, minlength=span) > 0
    slot_group = np.cumsum(present) - 1
    used = np.flatnonzero(present)
    firsts: list[np.ndarray] = []
    for lo, r in reversed(radix):
        firsts.append(used % r + lo)
        used = used // r
    return slot_group[key], int(slot_group[-1]) + 1, firsts[::-1]


def _sum_by(gid: np.ndarray, values: np.ndarray, ngroups: int) -> np.ndarray:
    """Exact int64 sums of ``values`` per group number (what ``np.add.reduceat`` over the sorted rows gives,
    int64 wrap-around included): the high and low 32 bits summed apart in float64, each sum below 2**53."""
    v = values.astype(np.int64, copy=False)
    if len(v) and int(v.min()) >= 0 and int(v.max()) < 1 << 32:  # one sum (flow counts, most packet counts)
        return np.bincount(gid, weights=v.astype(np.float64), minlength=ngroups).astype(np.int64)
    hi = np.bincount(gid, weights=(v >> 32).astype(np.float64), minlength=ngroups)
    lo = np.bincount(gid, weights=(v & 0xFFFFFFFF).astype(np.float64), minlength=ngroups)
    return (hi.astype(np.int64) << 32) + lo.astype(np.int64)


def _group_coded(keys: dict[str, Coded], sums: dict[str, np.ndarray]) -> pa.Table:
    """Rows grouped by the codes of ``keys`` (exact int64 sums): the columns of :func:`_group`. Counted in a
    dense table when the codes' range allows (:func:`_dense_groups`), else sort-based (:class:`GroupBy`)."""
    codes = [c for c, _ in keys.values()]
    dense = _dense_groups(codes)
    if dense is None:
        g = GroupBy(*codes)
        firsts = [c[g.first] for c in codes]
        summed = {k: g.sum(v) for k, v in sums.items()}
    else:
        gid, ngroups, firsts = dense
        summed = {k: _sum_by(gid, v, ngroups) for k, v in sums.items()}
    cols = {k: values.take(pa.array(f)) for (k, (_, values)), f in zip(keys.items(), firsts)}
    cols.update({k: pa.array(v, pa.int64()) for k, v in summed.items()})
    return pa.table(cols)


def _group(table: pa.Table, keys: list[str]) -> pa.Table:
    g = table.group_by(keys, use_threads=False).aggregate(_SUMS)
    g = g.rename_columns([c.removesuffix("_sum") for c in g.column_names])
    return g.select([*keys, *(c for c, _ in _SUMS)])  # keys first, as _group_coded


class HourlySummary:
    """Accumulates one hour of enriched flows and events; :meth:`result` gives the summary dict."""

    def __init__(self, top_n: int = 20, compact_every: int = 32) -> None:
        self.top_n = top_n
        self.compact_every = compact_every
        self._parts: dict[str, list[pa.Table]] = {k: [] for k in ("node_tx", "node_rx", "job_tx", "job_rx", "pair")}
        self._keys = {
            "node_tx": ["e", "category"], "node_rx": ["e", "category"],
            "job_tx": ["e", "category"], "job_rx": ["e", "category"], "pair": ["s", "d"],
        }
        self._distinct: dict[tuple[str, str], set] = {}
        self._link: dict[str, int] = {}
        self._quality: dict = {}

    # -- flows

    def add_flows(self, enriched_batch) -> None:
        """Add a ``flow_enriched`` batch (Arrow table or numpy structured array); only its counted records
        (each packet once: docs/detectors.md, "Counting each packet once").

        Grouped on integer codes (a label column that is a dictionary keeps its codes: no string per row), each
        key's strings taken once per group; :meth:`_push` merges the groups by their strings."""
        t = _as_table(enriched_batch)
        if "duplicate" in t.column_names and t.num_rows and pc.any(t["duplicate"]).as_py():
            t = t.filter(pc.invert(pc.fill_null(t["duplicate"], False)))
        if t.num_rows == 0:
            return
        sums = {"bytes_est": _ints(t["bytes_est"]), "packets_est": _ints(t["packets_est"]),
                "n": np.ones(t.num_rows, dtype=np.int64)}
        category = _coded(t["category"])
        src_node, dst_node = _coded(t["src_node"]), _coded(t["dst_node"])
        for part, (codes, values) in {"node_tx": src_node, "node_rx": dst_node}.items():
            self._push(part, _group_coded({"e": (codes, _or_values(values, "unknown")), "category": category}, sums))
        for part, col in {"job_tx": t["src_job"], "job_rx": t["dst_job"]}.items():
            codes, values = _coded(col)
            keep = ~_empty_codes(codes, values)
            if keep.any():
                self._push(part, _group_coded({"e": (codes[keep], values), "category": (category[0][keep], category[1])},
                                              {k: v[keep] for k, v in sums.items()}))
        pair = {"s": _or_address_coded(src_node, t["src_addr"]), "d": _or_address_coded(dst_node, t["dst_addr"])}
        self._push("pair", _group_coded(pair, sums))

    def _push(self, part: str, tbl: pa.Table) -> None:
        lst = self._parts[part]
        lst.append(tbl)
        if len(lst) >= self.compact_every:
            self._parts[part] = [_group(pa.concat_tables(lst), self._keys[part])]

    def _final(self, part: str) -> pa.Table | None:
        lst = self._parts[part]
        if not lst:
            return None
        return _group(pa.concat_tables(lst), self._keys[part])

    # -- events and quality

    def add_event(self, kind: str, event: Mapping) -> None:
        """Count one detector output: ``kind`` in incast, straggler, link, alert (or their dataset names)."""
        kind = _KIND_ALIASES.get(kind, kind)
        if kind == "incast":
            self._distinct.setdefault(("incast", event["destination_group"]), set()).add(event["event_id"])
        elif kind == "straggler":
            if event["straggler"]:
                self._distinct.setdefault(("straggler", event["job"]), set()).add(event["node"])
        elif kind == "link":
            if event["kind"] != "sample":
                self._link[event["kind"]] = self._link.get(event["kind"], 0) + 1
        elif kind == "alert":
            self._distinct.setdefault(("alert", event["rule"]), set()).add(event["dedup_key"])
        else:
            raise ValueError(f"unknown event kind {kind!r}; expected one of {EVENT_KINDS}")

    def set_quality(self, quality: Mapping) -> None:
        """Data-quality figures: ``{metric: {exporter: value}}`` or ``{metric: value}`` (a total)."""
        self._quality = dict(quality)

    # -- result

    def _entities(self, tx: pa.Table | None, rx: pa.Table | None) -> list[dict]:
        acc: dict[tuple[str, str], dict] = {}

        def row(name, cat):
            return acc.setdefault((name, cat), {
                "name": name, "category": cat, "sent_bytes_est": 0, "recv_bytes_est": 0, "sent_packets_est": 0,
                "recv_packets_est": 0, "sent_flow_records": 0, "recv_flow_records": 0})

        for tbl, side in ((tx, "sent"), (rx, "recv")):
            if tbl is None:
                continue
            for r in tbl.to_pylist():  # one row per (entity, category): small
                x = row(r["e"], r["category"])
                x[f"{side}_bytes_est"] += r["bytes_est"]
                x[f"{side}_packets_est"] += r["packets_est"]
                x[f"{side}_flow_records"] += r["n"]
        return sorted(acc.values(), key=lambda x: (x["name"], x["category"]))

    def result(self, hour_start_ms: int) -> dict:
        """The summary dict for the hour starting at ``hour_start_ms`` (matches ``summary_hourly.avsc``)."""
        pairs = self._final("pair")
        out = {
            "hour_start_ms": int(hour_start_ms), "hour_end_ms": int(hour_start_ms) + layout.HOUR_MS,
            "flow_records": 0, "bytes_est": 0, "packets_est": 0,
            "nodes": self._entities(self._final("node_tx"), self._final("node_rx")),
            "jobs": self._entities(self._final("job_tx"), self._final("job_rx")),
            "top_talkers": [], "top_destinations": [], "events": [], "quality": [],
        }
        if pairs is not None and pairs.num_rows:
            out["flow_records"] = int(pc.sum(pairs["n"]).as_py())
            out["bytes_est"] = int(pc.sum(pairs["bytes_est"]).as_py())
            out["packets_est"] = int(pc.sum(pairs["packets_est"]).as_py())
            top = pairs.sort_by([("bytes_est", "descending"), ("s", "ascending"), ("d", "ascending")])
            out["top_talkers"] = [
                {"src": r["s"], "dst": r["d"], "bytes_est": r["bytes_est"], "packets_est": r["packets_est"],
                 "flow_records": r["n"]}
                for r in top.slice(0, self.top_n).to_pylist()
            ]
            dst = pairs.group_by(["d"], use_threads=False).aggregate(
                [("bytes_est", "sum"), ("packets_est", "sum"), ("n", "sum"), ("s", "count")])
            dst = dst.sort_by([("bytes_est_sum", "descending"), ("d", "ascending")]).slice(0, self.top_n)
            out["top_destinations"] = [
                {"dst": r["d"], "bytes_est": r["bytes_est_sum"], "packets_est": r["packets_est_sum"],
                 "flow_records": r["n_sum"], "sources": r["s_count"]}
                for r in dst.to_pylist()
            ]
        events = [{"kind": k, "detail": d, "count": len(v)} for (k, d), v in self._distinct.items()]
        events += [{"kind": "link", "detail": k, "count": v} for k, v in self._link.items()]
        out["events"] = sorted(events, key=lambda e: (e["kind"], e["detail"]))
        q = []
        for metric, v in self._quality.items():
            if isinstance(v, Mapping):
                q += [{"metric": str(metric), "exporter": str(e), "value": float(x)} for e, x in v.items()]
            else:
                q.append({"metric": str(metric), "exporter": "", "value": float(v)})
        out["quality"] = sorted(q, key=lambda e: (e["metric"], e["exporter"]))
        return out


class SummaryBook:
    """One :class:`HourlySummary` per event hour; hours are emitted once the watermark passes end + grace.

    An hour is emitted once: rows and events that arrive for an hour at or
    before the last closed one are dropped and counted (``late_rows``,
    ``late_events``) instead of opening a second, partial summary of it.
    """

    def __init__(self, grace_ms: int = 5 * 60_000, top_n: int = 20) -> None:
        self.grace_ms = grace_ms
        self.top_n = top_n
        self.hours: dict[int, HourlySummary] = {}
        self.watermark: int | None = None
        self.closed_through: int | None = None  # last hour index closed (emitted or empty)
        self.late_rows = 0
        self.late_events = 0

    def _hour(self, h: int) -> HourlySummary:
        if h not in self.hours:
            self.hours[h] = HourlySummary(self.top_n)
        return self.hours[h]

    def add_flows(self, enriched_batch) -> None:
        t = _as_table(enriched_batch)
        if t.num_rows == 0:
            return
        ts = t["time_end_ms"].to_numpy()
        hours = layout.hour_index(ts)
        self.watermark = max(self.watermark or int(ts.max()), int(ts.max()))
        if self.closed_through is not None:
            late = hours <= self.closed_through
            if late.any():
                self.late_rows += int(late.sum())
                keep = ~late
                t, hours = t.filter(pa.array(keep)), hours[keep]
                if t.num_rows == 0:
                    return
        uniq = np.unique(hours)
        if len(uniq) == 1:
            self._hour(int(uniq[0])).add_flows(t)
            return
        for h in uniq:
            self._hour(int(h)).add_flows(t.filter(pa.array(hours == h)))

    def add_event(self, kind: str, event: Mapping) -> None:
        k = _KIND_ALIASES.get(kind, kind)
        h = layout.hour_index(int(event[_EVENT_TIME.get(k, "window_start_ms")]))
        if self.closed_through is not None and h <= self.closed_through:
            self.late_events += 1
            return
        self._hour(h).add_event(k, event)

    def close(self, watermark_ms: int | None = None, quality_by_hour: Mapping | None = None,
              *, force: bool = False) -> list[dict]:
        """Summaries of every hour whose end + grace <= watermark (all with ``force``), oldest first."""
        wm = watermark_ms if watermark_ms is not None else self.watermark
        out = []
        last = None
        if wm is not None:
            last = (wm - self.grace_ms) // layout.HOUR_MS - 1  # last hour with end + grace <= wm
        for h in sorted(self.hours):
            if force or (last is not None and h <= last):
                s = self.hours.pop(h)
                if quality_by_hour and h * layout.HOUR_MS in quality_by_hour:
                    s.set_quality(quality_by_hour[h * layout.HOUR_MS])
                out.append(s.result(h * layout.HOUR_MS))
                last = h if last is None else max(last, h)
        if last is not None:
            self.closed_through = last if self.closed_through is None else max(self.closed_through, last)
        return out


class QualityHours:
    """Per UTC hour and exporter, the ``IngestQuality`` records (ingest.quality.v1) folded into the summary's
    quality figures: ``loss_ratio`` (per exporter and in total, ``""``), ``records_lost_est``,
    ``records_without_rate`` (the summary's ``sampling_rate_missing``), ``clock_skew_ms`` (mean) and, for
    sFlow exporters, ``sampler_drops`` and ``sampler_loss_ratio`` (samples the agents' samplers dropped,
    recomputed from the summed drops and generated samples).

    A quality window belongs to the hour its start falls in. Loss ratios are recomputed from the sums in
    each protocol's sequence unit, so they stay exact when windows are added up.
    """

    def __init__(self) -> None:
        # hour -> exporter -> [lost, received, lost_est, missing, skew_sum, skew_n, sampler samples, sampler drops
        # (None: no sFlow sampler figures)]
        self._hours: dict[int, dict[str, list]] = {}

    def add(self, rows) -> None:
        for r in rows:
            h = int(r["window_start_ms"]) // layout.HOUR_MS
            acc = self._hours.setdefault(h, {}).setdefault(str(r["exporter"]), [0, 0, 0, 0, 0.0, 0, None, None])
            acc[0] += int(r["sequence_lost"])
            acc[1] += int(r["sequence_received"])
            acc[2] += int(r["records_lost_est"])
            acc[3] += int(r["records_without_rate"])
            if r.get("clock_skew_ms") is not None:
                acc[4] += float(r["clock_skew_ms"]) * int(r["datagrams"])
                acc[5] += int(r["datagrams"])
            if r.get("sampler_samples") is not None:  # rows of writers before the sampler fields have none
                acc[6] = (acc[6] or 0) + int(r["sampler_samples"])
                acc[7] = (acc[7] or 0) + int(r.get("sampler_drops") or 0)

    def figures(self, hour: int) -> dict:
        """``{metric: {exporter: value}}`` for :meth:`HourlySummary.set_quality` (empty when nothing came)."""
        ex = self._hours.get(hour)
        if not ex:
            return {}
        ratio = lambda lost, got: lost / (lost + got) if lost > 0 and lost + got > 0 else 0.0  # noqa: E731
        out: dict[str, dict[str, float]] = {"loss_ratio": {}, "records_lost_est": {}, "sampling_rate_missing": {}}
        for e, (lost, got, lost_est, missing, skew_sum, skew_n, s_samples, s_drops) in ex.items():
            out["loss_ratio"][e] = ratio(lost, got)
            out["records_lost_est"][e] = float(lost_est)
            out["sampling_rate_missing"][e] = float(missing)
            if skew_n:
                out.setdefault("clock_skew_ms", {})[e] = skew_sum / skew_n
            if s_samples is not None:
                out.setdefault("sampler_drops", {})[e] = float(s_drops)
                out.setdefault("sampler_loss_ratio", {})[e] = ratio(s_drops, s_samples)
        totals = [sum(v[i] for v in ex.values()) for i in range(4)]
        # the total ratio mixes units (records and datagrams) only through the per-exporter ratios' weights
        out["loss_ratio"][""] = ratio(totals[0], totals[1])
        out["records_lost_est"][""] = float(totals[2])
        out["sampling_rate_missing"][""] = float(totals[3])
        sampled = [v for v in ex.values() if v[6] is not None]
        if sampled:
            s_drops, s_samples = sum(v[7] for v in sampled), sum(v[6] for v in sampled)
            out["sampler_drops"][""] = float(s_drops)
            out["sampler_loss_ratio"][""] = ratio(s_drops, s_samples)
        return out

    def drop_through(self, hour: int | None) -> None:
        """Forget hours up to ``hour`` (their summaries are out)."""
        if hour is None:
            return
        for h in [h for h in self._hours if h <= hour]:
            del self._hours[h]
