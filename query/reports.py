"""The named reports over the archive (``fabricflow query top-talkers|matrix|node|job|segmentation``, the
console's matrix and series): each reads the smallest datasets that answer its range exactly
(:func:`query.plan.plan_sources`) and counts each packet once.
"""

from __future__ import annotations

import ipaddress

import duckdb
import pyarrow as pa

from query.errors import ArchiveError, DatasetMissing, EmptyRange
from query.plan import SOURCE_CHOICES, SOURCES, plan_sources
from query.reader import ArchiveReader
from query.timerange import check_range, parse_time
from sinks.archive import layout


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class ArchiveQuery(ArchiveReader):
    """The archive's reader with the named reports; :attr:`answered` says which datasets the last one read."""

    def __init__(self, fs, root: str, con: duckdb.DuckDBPyConnection | None = None) -> None:
        super().__init__(fs, root, con)
        self.answered_by: str | None = None  # datasets the last flow report read, e.g. "traffic_1h + flows_enriched"
        self.answered: list[tuple] = []  # (dataset, from, to, files) per piece the last flow report read

    def flows_view(self, exporter: str | None = None, dataset: str = "flows_enriched") -> tuple[str, dict]:
        """The flow records a report reads, as SQL, and its parameters: counted records only (each packet
        once: docs/detectors.md, "Counting each packet once"), or every record of one ``exporter``'s view.
        ``dataset``: flows_enriched or a traffic rollup (rows with a ``flow_records`` count)."""
        self.need(dataset)
        if exporter is None:
            return f"(SELECT * FROM {dataset} WHERE NOT coalesce(duplicate, false))", {}
        if dataset != "flows_enriched":
            raise ArchiveError("one exporter's view needs the raw flows: use --source raw or auto")
        return "(SELECT * FROM flows_enriched WHERE exporter = $exporter)", {"exporter": exporter}

    def sources(self, frm, to, source: str = "auto", needs_raw: str | None = None) -> list[tuple[str, int | None, int | None]]:
        """The (dataset, from, to) pieces a flow report over [frm, to) reads (:func:`plan_sources`)."""
        lo = parse_time(frm) if frm is not None else None
        hi = parse_time(to) if to is not None else None
        if lo is not None and hi is not None:
            check_range(lo, hi)
        return plan_sources(lo, hi, self.datasets, source, needs_raw)

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
        check_range(lo, hi)
        names = {"traffic": (SOURCES["1h"], SOURCES["1m"], SOURCES["raw"]),
                 "ports": ("ports_1h", "ports_1m", "link_health")}[family]
        target = max(1000, (hi - lo) // max_bins)
        for name in names[:2]:
            b = layout.spec(name).bucket_ms
            if name in self.datasets and (hi - lo) // b >= min_bins and self._has_files(name, lo, hi):
                return name, max(b, target // b * b)
        return names[2], target // 1000 * 1000

    def matrix_pieces(self, frm, to) -> list[tuple[str, int | None, int | None]]:
        """The (dataset, from, to) pieces :meth:`matrix_cells` reads over [frm, to)."""
        finest = "matrix_windows" if "matrix_windows" in self.datasets else SOURCES["raw"]
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
        return self.run(f"""
            SELECT $level AS level, src, dst, category, sum(bytes_est)::BIGINT AS bytes_est,
                   sum(packets_est)::BIGINT AS packets_est, sum(flow_records)::BIGINT AS flow_records,
                   sum(samples)::BIGINT AS samples
            FROM ({" UNION ALL ".join(parts)}) GROUP BY src, dst, category""", params)

    def top_talkers(self, frm, to, n: int = 10, exporter: str | None = None, source: str = "auto") -> pa.Table:
        """Largest src -> dst pairs by estimated bytes (node name, else IP)."""
        f, params = self._flows(frm, to, source, exporter)
        return self.run(f"""
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
            self.need("matrix_windows")
        if source == "auto" and exporter is None:
            raw_only = all(d == "flows_enriched" for d, *_ in self.sources(frm, to, "auto"))
            if raw_only and "matrix_windows" in self.datasets and self.files("matrix_windows", frm, to):
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
        return self.run(f"""
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
        return self.run(f"""
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
        return self.run(f"""
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
