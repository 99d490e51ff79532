"""The console's per-exporter telemetry health: ``/api/exporters`` over the archive's ``ingest_quality`` windows
and ``discards_raw`` notifications (docs/console.md, "Exporters").

One row per exporter over the range: when it was last seen, datagrams and flow records, export loss from its
sequence numbers, records without a sampling rate, clock skew (NetFlow v9/IPFIX only), sFlow sampler drops,
restarts, dropped-packet notifications it sent, and a ``state`` naming the worst problem, with the thresholds
of the Prometheus alerts (deploy/prometheus/rules/fabricflow-telemetry.yml) so the table and the alerts agree.
"""

from __future__ import annotations

import time

from starlette.concurrency import run_in_threadpool

__all__ = ["exporter_routes", "exporter_health", "THRESHOLDS"]

_QUALITY = """
SELECT exporter, arg_max(protocol, window_end_ms) AS protocol, max(window_end_ms) AS last_seen_ms,
       sum(datagrams)::BIGINT AS datagrams, sum(records)::BIGINT AS records,
       sum(sequence_lost)::BIGINT AS sequence_lost, sum(sequence_received)::BIGINT AS sequence_received,
       sum(records_without_rate)::BIGINT AS records_without_rate, sum(restarts)::BIGINT AS restarts,
       arg_max(clock_skew_ms, window_end_ms) AS clock_skew_ms,
       sum(sampler_samples)::BIGINT AS sampler_samples, sum(sampler_drops)::BIGINT AS sampler_drops
FROM ingest_quality GROUP BY exporter ORDER BY exporter"""
_DISCARDS = "SELECT exporter, count(*)::BIGINT AS drop_notifications FROM discards_raw GROUP BY exporter"

DEFAULT_RANGE_MS = 3_600_000
#: the alerts' thresholds: silent after (ms), loss and sampler-drop ratios, skew (ms), share without a rate
THRESHOLDS = {"silent_ms": 600_000, "loss": 0.01, "sampler_loss": 0.01, "skew_ms": 10_000, "no_rate": 0.05}


def _ratio(part, rest) -> float | None:
    part, rest = part or 0, rest or 0
    return part / (part + rest) if part + rest > 0 else None


def exporter_health(quality: list[dict], discards: list[dict], to_ms: int) -> list[dict]:
    """The table's rows from the two queries' rows; ``to_ms``: the range's end (what "silent" is measured to)."""
    drops = {d["exporter"]: d["drop_notifications"] for d in discards}
    out = []
    for q in quality:
        loss = _ratio(max(q["sequence_lost"] or 0, 0), q["sequence_received"])
        sampler = _ratio(q["sampler_drops"], q["sampler_samples"]) if q["sampler_samples"] is not None else None
        no_rate = (q["records_without_rate"] or 0) / q["records"] if q["records"] else None
        skew = q["clock_skew_ms"]
        problems = [name for name, bad in (
            ("silent", to_ms - q["last_seen_ms"] > THRESHOLDS["silent_ms"]),
            ("export loss", loss is not None and loss > THRESHOLDS["loss"]),
            ("sampler drops", sampler is not None and sampler > THRESHOLDS["sampler_loss"]),
            ("clock skew", skew is not None and abs(skew) > THRESHOLDS["skew_ms"]),
            ("no sampling rate", no_rate is not None and no_rate > THRESHOLDS["no_rate"])) if bad]
        out.append({"exporter": q["exporter"], "protocol": q["protocol"], "last_seen_ms": q["last_seen_ms"],
                    "datagrams": q["datagrams"], "records": q["records"], "loss_ratio": loss,
                    "records_without_rate_ratio": no_rate, "clock_skew_ms": skew, "sampler_loss_ratio": sampler,
                    "restarts": q["restarts"], "drop_notifications": drops.pop(q["exporter"], 0),
                    "state": problems[0] if problems else "ok", "problems": problems})
    for exporter, n in sorted(drops.items()):  # drop notifications from an agent with no flow quality windows
        out.append({"exporter": exporter, "protocol": "sflow5", "last_seen_ms": None, "datagrams": None,
                    "records": None, "loss_ratio": None, "records_without_rate_ratio": None, "clock_skew_ms": None,
                    "sampler_loss_ratio": None, "restarts": None, "drop_notifications": n, "state": "ok",
                    "problems": []})
    return out


def exporter_routes(state, api, BadRequest):
    """(path, endpoint, methods) of /api/exporters."""

    async def exporters(request, p):
        p.check_unknown("from", "to", "last")
        now = int(time.time() * 1000)
        lo, hi = p.range() or (now - DEFAULT_RANGE_MS, now)  # default: the last hour
        h = state.history
        if h is None:
            raise BadRequest("no archive configured: the exporter table reads the ingest_quality dataset")

        def read():
            qt = h.query(_QUALITY, lo, hi)
            dt = h.query(_DISCARDS, lo, hi)
            return ([] if qt is None else qt.to_pylist()), ([] if dt is None else dt.to_pylist())

        quality, discards = await run_in_threadpool(read)
        return {"from_ms": lo, "to_ms": hi, "thresholds": THRESHOLDS,
                "exporters": exporter_health(quality, discards, hi)}

    return [("/api/exporters", api(exporters), ["GET"])]
