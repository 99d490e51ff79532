"""Hourly summaries: known aggregates from a small enriched batch, events, quality; Avro-valid."""

from __future__ import annotations

import fastavro

from sinks.archive.arrow_schema import table_from_columns, table_from_dicts
from sinks.archive.layout import HOUR_MS
from sinks.archive.summaries import HourlySummary, SummaryBook, summary_avsc
from tests.support.archive import T0, enriched

ROWS = [
    {"src_node": "g1", "dst_node": "g2", "src_job": "j", "dst_job": "j", "category": "collective",
     "bytes_est": 100, "packets_est": 2},
    {"src_node": "g2", "dst_node": "g1", "src_job": "j", "dst_job": "j", "category": "collective",
     "bytes_est": 50, "packets_est": 1},
    {"src_node": "g1", "dst_node": "s1", "src_job": "j", "category": "storage", "bytes_est": 400, "packets_est": 4},
    {"src_node": "", "src_addr": "10.9.9.9", "dst_node": "g2", "dst_job": "j", "category": "other",
     "bytes_est": 7, "packets_est": 1},
]


def summary():
    s = HourlySummary(top_n=2)
    b = enriched(ROWS)
    s.add_flows(b[:2])  # numpy input
    s.add_flows(table_from_columns(b[2:], "flow_enriched"))  # Arrow input
    s.add_event("incast", {"event_id": "e1", "destination_group": "gpu", "window_start_ms": T0})
    s.add_event("incast", {"event_id": "e1", "destination_group": "gpu", "window_start_ms": T0})
    s.add_event("straggler_scores", {"job": "j", "node": "g2", "straggler": True})
    s.add_event("straggler", {"job": "j", "node": "g1", "straggler": False})
    s.add_event("link", {"kind": "sample"})
    s.add_event("link", {"kind": "link_downgrade"})
    s.add_event("alert", {"rule": "segmentation", "dedup_key": "a"})
    s.set_quality({"clock_skew_ms": {"192.0.2.1": 12.5}, "sampling_rate_missing": 3})
    return s.result(T0)


def test_known_figures():
    r = summary()
    assert (r["flow_records"], r["bytes_est"], r["packets_est"]) == (4, 557, 8)
    nodes = {(n["name"], n["category"]): n for n in r["nodes"]}
    assert nodes[("g1", "collective")]["sent_bytes_est"] == 100
    assert nodes[("g1", "collective")]["recv_bytes_est"] == 50
    assert nodes[("unknown", "other")]["sent_bytes_est"] == 7
    jobs = {(n["name"], n["category"]): n for n in r["jobs"]}
    assert jobs[("j", "storage")]["sent_bytes_est"] == 400 and jobs[("j", "storage")]["recv_bytes_est"] == 0
    assert jobs[("j", "collective")]["sent_flow_records"] == 2
    assert [(t["src"], t["dst"], t["bytes_est"]) for t in r["top_talkers"]] == [("g1", "s1", 400), ("g1", "g2", 100)]
    d = {x["dst"]: x for x in r["top_destinations"]}
    assert d["s1"]["bytes_est"] == 400 and "g2" in d and d["g2"]["sources"] == 2 and d["g2"]["bytes_est"] == 107
    assert any(t["src"] == "10.9.9.9" for t in _talkers_top10())
    ev = {(e["kind"], e["detail"]): e["count"] for e in r["events"]}
    assert ev == {("incast", "gpu"): 1, ("straggler", "j"): 1, ("link", "link_downgrade"): 1,
                  ("alert", "segmentation"): 1}
    assert {(q["metric"], q["exporter"]): q["value"] for q in r["quality"]} == {
        ("clock_skew_ms", "192.0.2.1"): 12.5, ("sampling_rate_missing", ""): 3.0}
    assert r["hour_end_ms"] - r["hour_start_ms"] == HOUR_MS


def _talkers_top10():
    s = HourlySummary(top_n=10)
    s.add_flows(enriched(ROWS))
    return s.result(T0)["top_talkers"]


def test_result_is_valid_avro_and_archivable():
    r = summary()
    fastavro.validation.validate(r, fastavro.parse_schema(summary_avsc()))
    t = table_from_dicts([r], "summary_hourly")
    assert t.num_rows == 1 and t["nodes"].to_pylist()[0] == r["nodes"]


def test_compaction_keeps_totals():
    s = HourlySummary(compact_every=2)
    for _ in range(5):
        s.add_flows(enriched(ROWS))
    r = s.result(T0)
    assert r["bytes_est"] == 5 * 557 and r["flow_records"] == 20


def test_empty_hour():
    r = HourlySummary().result(T0)
    assert r["flow_records"] == 0 and r["nodes"] == [] and r["top_talkers"] == []


def test_book_splits_hours_and_closes_after_grace():
    rows = [dict(r, time_end_ms=T0 + 10) for r in ROWS] + [dict(ROWS[0], time_end_ms=T0 + HOUR_MS + 1)]
    book = SummaryBook(grace_ms=1000)
    book.add_flows(enriched(rows))
    book.add_event("alerts", {"rule": "r", "dedup_key": "k", "window_start_ms": T0 + HOUR_MS + 5})
    assert book.close(T0 + HOUR_MS + 999) == []
    (h0,) = book.close(T0 + HOUR_MS + 1000)
    assert h0["hour_start_ms"] == T0 and h0["bytes_est"] == 557
    (h1,) = book.close(force=True)
    assert h1["bytes_est"] == 100 and h1["events"] == [{"kind": "alert", "detail": "r", "count": 1}]


def test_quality_hours_feed_the_summary_loss_ratio():
    from sinks.archive.summaries import HourlySummary, QualityHours

    H = 1_767_225_600_000  # an hour start
    q = QualityHours()

    def rec(exporter, start, lost, got, lost_est, missing, skew, datagrams):
        return {"window_start_ms": start, "exporter": exporter, "sequence_lost": lost, "sequence_received": got,
                "records_lost_est": lost_est, "records_without_rate": missing, "clock_skew_ms": skew,
                "datagrams": datagrams}

    q.add([rec("a", H, 10, 90, 100, 0, 200.0, 10), rec("a", H + 60_000, 0, 100, 0, 3, 400.0, 30),
           rec("b", H + 120_000, 0, 50, 0, 0, None, 5), rec("a", H + 3_600_000, 5, 5, 50, 0, None, 1)])
    f = q.figures(H // 3_600_000)
    assert f["loss_ratio"]["a"] == 10 / 200 and f["loss_ratio"]["b"] == 0.0
    assert f["loss_ratio"][""] == 10 / 250
    assert f["records_lost_est"] == {"a": 100.0, "b": 0.0, "": 100.0}
    assert f["sampling_rate_missing"][""] == 3.0
    assert f["clock_skew_ms"] == {"a": (200.0 * 10 + 400.0 * 30) / 40}
    s = HourlySummary()
    s.set_quality(f)
    out = s.result(H)["quality"]
    assert {"metric": "loss_ratio", "exporter": "", "value": 10 / 250} in out
    q.drop_through(H // 3_600_000)
    assert q.figures(H // 3_600_000) == {} and q.figures(H // 3_600_000 + 1)["loss_ratio"]["a"] == 0.5


def _coded_batches(n_batches: int, hosts: int, seed: int = 5):
    """flows.enriched.v2 batches as the sink decodes them: outside sources (no node), jobless destinations and
    duplicates among them."""
    import numpy as np

    from schemas import codec

    rng = np.random.default_rng(seed)
    names = np.array([f"n{i:03d}" for i in range(hosts)], dtype=object)
    out = []
    for i in range(n_batches):
        b = enriched([{}] * 700)
        b["time_end_ms"] = T0 + i * 60_000 + rng.integers(0, 60_000, 700)
        b["bytes_est"] = rng.integers(0, 2**40, 700)
        b["packets_est"] = rng.integers(0, 2**20, 700)
        b["src_addr"][:, 15] = rng.integers(0, 250, 700)
        for f in ("src_node", "dst_node", "src_job", "dst_job", "category"):
            b[f] = names[rng.integers(0, hosts, 700)]
        b["src_node"][::7] = ""
        b["dst_job"][::3] = ""
        b["duplicate"][::11] = True
        out.append(codec.decode_coded(codec.encode_coded("flow_enriched_batch_v2", b)))
    return out


def _summaries(table, dense: bool):
    import sinks.archive.summaries as summaries

    saved = summaries._DENSE_MAX_ROWS, summaries._DENSE_MIN_SLOTS
    summaries._DENSE_MAX_ROWS, summaries._DENSE_MIN_SLOTS = (1 << 20, 1 << 30) if dense else (0, 0)
    try:
        book = SummaryBook()
        book.add_flows(table)
        return book.close(force=True)
    finally:
        summaries._DENSE_MAX_ROWS, summaries._DENSE_MIN_SLOTS = saved


def test_coded_chunks_and_dense_grouping_give_the_sorted_grouping_figures():
    """Many v2 batches gathered as one table from their codes, grouped in a dense key table, summarize exactly
    as the batches converted one by one and grouped by sorting."""
    import pyarrow as pa

    from sinks.archive.summaries import coded_summary_columns, summary_columns

    batches = _coded_batches(12, hosts=60)
    reference = _summaries(pa.concat_tables([summary_columns(b) for b in batches]), dense=False)
    assert reference and reference[0]["flow_records"] > 0 and reference[0]["top_talkers"]
    assert _summaries(coded_summary_columns(batches), dense=True) == reference
    assert _summaries(coded_summary_columns(batches), dense=False) == reference


def test_dense_sums_are_exact_int64():
    """Sums past 2**53 (float64's exact range) and past 2**63 (int64 wrap-around) equal the sorted reduction."""
    import numpy as np

    from processors.logic.windows.groupby import GroupBy
    from sinks.archive.summaries import _dense_groups, _sum_by

    rng = np.random.default_rng(1)
    codes = [rng.integers(0, 5, 4000), rng.integers(3, 40, 4000)]
    values = rng.integers(2**40, 2**62, 4000)
    gid, ngroups, firsts = _dense_groups(codes)
    g = GroupBy(*codes)
    assert ngroups == g.ngroups
    assert [f.tolist() for f in firsts] == [c[g.first].tolist() for c in codes]
    assert _sum_by(gid, values, ngroups).tolist() == g.sum(values).tolist()
    small = rng.integers(0, 2**31, 4000)
    assert _sum_by(gid, small, ngroups).tolist() == g.sum(small).tolist()
    assert _dense_groups([np.arange(10**6) * 7, np.arange(10**6)]) is None  # range too large: sorted instead
