"""Read the detector output topics and turn them into a stream of detections.

Shared by ``fabricflow demo`` (live view / log lines), the end-to-end tests and
``bench/detection.py``. A detection is the *start* of something an operator
should look at: an incast event opening, a node becoming a straggler, a link
downgrade/error burst/oper-down/sustained utilisation, a policy alert firing,
a job's pattern deviating. Updates of ongoing conditions are not repeated, except
that a ``diagnosis`` detection says when an ongoing event's bottleneck class is first
determined or changes (docs/detectors.md, "Diagnosis"); :attr:`DetectionFeed.diagnoses`
keeps the latest diagnosis of every detection, by its ``ref``.
"""

from __future__ import annotations

import re
import uuid
from collections import defaultdict
from dataclasses import dataclass, field

from confluent_kafka import Consumer

from fabricflow.kafka import client_config
from processors.logic.windows.groupby import group_reduce
from schemas import codec
from schemas.matrix import decode_window

LINK_KINDS = {"link_downgrade", "error_burst", "oper_down", "sustained_utilisation", "discard_burst"}


@dataclass(frozen=True)
class Detection:
    kind: str  # incast, straggler, link_downgrade, error_burst, oper_down, sustained_utilisation, <alert rule>, pattern_deviation
    time_ms: int
    entity: str
    summary: str
    severity: str = "warning"
    cause: str = ""  # the detection's own cause link (straggler: explained_by, a link event key)
    ref: str = ""  # the event, episode or alert it belongs to (DetectionFeed.diagnoses is keyed by it)
    diagnosis: str = ""  # the diagnosis verdict the record carried, "" when none


def fmt_bps(v: float) -> str:
    """A bit rate with its unit: ``12.5 Gb/s``."""
    for unit, div in (("Tb/s", 1e12), ("Gb/s", 1e9), ("Mb/s", 1e6), ("kb/s", 1e3)):
        if abs(v) >= div:
            return f"{v / div:.1f} {unit}"
    return f"{v:.0f} b/s"


def readable_speeds(detail: str) -> str:
    """A link event's detail with its bit rates in Gb/s: ``if_speed 25000000000 -> 1000000000 bps`` reads
    ``link speed 25.0 Gb/s -> 1.0 Gb/s``."""
    if not detail.startswith("if_speed "):
        return detail
    return "link speed " + re.sub(r"\b(\d{4,})(?: bps)?", lambda m: fmt_bps(int(m.group(1))), detail[9:])


def pair_bytes(w) -> list[tuple[int, int, int]]:
    """(src code, dst code, estimated bytes) per distinct pair of a ``MatrixWindow`` (categories summed)."""
    (src, dst), (b,), _ = group_reduce([w.src, w.dst], [w.values["bytes_est"]])
    return list(zip(src.tolist(), dst.tolist(), b.tolist()))


@dataclass
class MatrixView:
    """The last :attr:`KEEP` windows of the traffic matrix at each level (node, rack, group), and top talkers."""

    KEEP = 12
    #: level -> window start -> (src, dst) -> estimated bytes
    levels: dict[str, dict[int, dict[tuple[str, str], int]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(lambda: defaultdict(int))))
    window_ms: int = 10_000

    @property
    def windows(self) -> dict[int, dict[tuple[str, str], int]]:
        """The node level's windows."""
        return self.levels["node"]

    def add_window(self, w) -> None:
        """A ``matrix.windows.v2`` window (``schemas.matrix.MatrixWindow``): its bytes summed per (src, dst) pair
        with a group-by over the codes, then added to the window's pairs."""
        windows = self.levels[w.level]
        self.window_ms = w.window_end_ms - w.window_start_ms
        names = [x or "unknown" for x in w.labels.tolist()]
        pairs = windows[w.window_start_ms]
        for s, d, b in pair_bytes(w):
            pairs[(names[s], names[d])] += b
        while len(windows) > self.KEEP:
            del windows[min(windows)]

    def add(self, cell: dict) -> None:
        windows = self.levels[cell["level"]]
        self.window_ms = cell["window_end_ms"] - cell["window_start_ms"]
        windows[cell["window_start_ms"]][(cell["src"] or "unknown", cell["dst"] or "unknown")] += cell["bytes_est"]
        while len(windows) > self.KEEP:
            del windows[min(windows)]

    def latest(self, level: str = "node") -> tuple[int | None, dict[tuple[str, str], int]]:
        windows = self.levels.get(level)
        if not windows:
            return None, {}
        ws = max(windows)
        return ws, dict(windows[ws])

    def top_talkers(self, n: int = 8, level: str = "node") -> list[tuple[str, str, int]]:
        """The ``n`` largest (src, dst, bytes) over the windows kept."""
        tot: dict[tuple[str, str], int] = defaultdict(int)
        for cells in self.levels.get(level, {}).values():
            for k, v in cells.items():
                tot[k] += v
        return sorted(((s, d, b) for (s, d), b in tot.items()), key=lambda x: (-x[2], x[0], x[1]))[:n]


class DetectionFeed:
    """Consumes the output topics; ``poll()`` returns new detections and updates ``matrix``."""

    def __init__(self, settings, group: str | None = None, consumer=None):
        t = settings.kafka.topics
        self.topics = {
            t.matrix: "matrix",
            t.incast: "incast",
            t.straggler: "straggler",
            t.link_health: "link",
            t.alerts: "alert",
            t.patterns: "pattern",
        }
        self.consumer = consumer if consumer is not None else Consumer(
            {
                **client_config(settings.kafka),
                "group.id": group or f"fabricflow-view-{uuid.uuid4().hex[:8]}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                # never committed: a re-join reads every topic again from the start and counts matrix cells twice,
                # so this reader keeps a long session even where the pipeline's group members use a short one
                "session.timeout.ms": max(settings.kafka.session_timeout_ms, 10_000),
            }
        )
        self.consumer.subscribe(list(self.topics))
        self.matrix = MatrixView()
        self._stragglers: set[tuple[str, str]] = set()
        self._port_names: dict[str, str] = {}  # "exporter|ifIndex" (a straggler's explained_by) -> "switch/ifN"
        self.diagnoses: dict[str, dict] = {}  # detection ref -> its latest diagnosis record
        self._said: dict[str, str] = {}  # detection ref -> the verdict last announced
        self._episodes: dict[tuple[str, str], str] = {}  # (job, node) flagged -> its straggler ref
        self._alerts: dict[str, str] = {}  # dedup key of a firing alert -> its ref
        self.counts: dict[str, int] = defaultdict(int)
        self.messages = 0

    def close(self) -> None:
        self.consumer.close()

    def poll(self, timeout_s: float = 0.2, max_messages: int = 5000) -> list[Detection]:
        out: list[Detection] = []
        msgs = self.consumer.consume(max_messages, timeout_s)
        for m in msgs:
            if m.error():
                continue
            kind = self.topics.get(m.topic())
            try:  # matrix.windows.v2: one columnar window per message
                v = decode_window(m.value()) if kind == "matrix" else codec.decode_record(m.value())
            except (codec.CodecError, ValueError):
                continue
            self.messages += 1
            d = self.interpret(kind, v)
            if d is not None:
                self.counts[d.kind] += 1
                out.append(d)
        return out

    def _note(self, ref: str, diag: dict | None) -> str:
        """Keep ``diag`` as the latest diagnosis of ``ref``; its verdict ("" when none)."""
        if diag:
            self.diagnoses[ref] = diag
            return diag["verdict"]
        return ""

    def _first(self, ref: str, verdict: str) -> str:
        """What a starting detection adds to its summary about its diagnosis ("" while undetermined)."""
        if not verdict or verdict == "undetermined":
            return ""
        self._said[ref] = verdict
        return f"; diagnosis: {self.diagnoses[ref]['title']}"

    def _announce(self, ref: str, entity: str, time_ms: int) -> Detection | None:
        """A ``diagnosis`` detection when the verdict of ``ref`` became determined or changed."""
        diag = self.diagnoses.get(ref)
        if diag is None or diag["verdict"] == "undetermined" or self._said.get(ref) == diag["verdict"]:
            return None
        self._said[ref] = diag["verdict"]
        step = re.split(r" \(|: ", diag["next_step"], maxsplit=1)[0].rstrip(".")  # its first clause; the console has all
        return Detection("diagnosis", int(time_ms), entity, f"{diag['title']}: {diag['summary']}. Next: {step}.",
                         "info", ref=ref, diagnosis=diag["verdict"])

    def interpret(self, kind: str, v: dict) -> Detection | None:
        if kind == "matrix":
            self.matrix.add(v) if isinstance(v, dict) else self.matrix.add_window(v)
            return None
        if kind == "incast":
            ref = f"incast:{v['event_id']}"
            verdict = self._note(ref, v.get("diagnosis"))
            if v["state"] != "open":
                return self._announce(ref, v["destination"], v["window_end_ms"])
            return Detection(
                "incast", v["window_start_ms"], v["destination"],
                f"{len(v['sources'])} sources -> {v['destination']} at {fmt_bps(v['aggregate_bps'])} "
                f"= {v['fraction']:.0%} of {fmt_bps(v['capacity_bps'])} (95%: {v['fraction_low']:.0%}-{v['fraction_high']:.0%})"
                + (f"; port {v['dst_port']} drops {v['dst_out_discards_per_s']:.0f} packets/s"
                   if v.get("dst_out_discards_per_s", -1.0) > 0 else "") + self._first(ref, verdict),
                "critical", ref=ref, diagnosis=verdict,
            )  # fmt: skip
        if kind == "straggler":
            key = (v["job"], v["node"])
            if v["straggler"] and key not in self._stragglers:
                self._stragglers.add(key)
                ref = self._episodes[key] = f"straggler:{v['job']}:{v['node']}:{v['window_start_ms']}"
                verdict = self._note(ref, v.get("diagnosis"))
                cause = v.get("explained_by", "")
                return Detection(
                    "straggler", v["window_start_ms"], v["node"],
                    f"{v['node']} in job {v['job']} sends {v['ratio_sent']:.0%} of its peers' median per link "
                    f"(score {v['score']:.1f}, {v['evidence_windows']} windows)"
                    + (f"; explained by the link event on {self._port_names.get(cause, cause)}" if cause else "")
                    + self._first(ref, verdict),
                    cause=cause, ref=ref, diagnosis=verdict,
                )  # fmt: skip
            if v["straggler"]:
                ref = self._episodes[key]
                self._note(ref, v.get("diagnosis"))
                return self._announce(ref, v["node"], v["window_end_ms"])
            self._stragglers.discard(key)
            self._episodes.pop(key, None)
            return None
        if kind == "link":
            self._port_names[f"{v['exporter']}|{v['if_index']}"] = f"{v['switch']}/if{v['if_index']}"
        if kind == "link" and v["kind"] in LINK_KINDS:
            ent = f"{v['switch']}/if{v['if_index']}"
            ref = f"link:{v['exporter']}|{v['if_index']}:{v['kind']}:{v['time_ms']}"
            verdict = self._note(ref, v.get("diagnosis"))
            who = f" ({v['node']}" + (f", job {v['job']}" if v.get("job") else "") + ")" if v.get("node") else ""
            return Detection(v["kind"], v["time_ms"], ent, f"{ent}{who}: {readable_speeds(v['detail'])}"
                             + self._first(ref, verdict),
                             "critical" if v["kind"] not in ("sustained_utilisation", "discard_burst") else "warning",
                             ref=ref, diagnosis=verdict)
        if kind == "alert":
            key = v["dedup_key"]
            if v["state"] == "firing":
                ref = self._alerts[key] = f"alert:{key}:{v['first_seen_ms']}"
                verdict = self._note(ref, v.get("diagnosis"))
                return Detection(v["rule"], v["window_start_ms"], key, v["summary"] + self._first(ref, verdict),
                                 v["severity"], ref=ref, diagnosis=verdict)
            ref = self._alerts.get(key)
            if v["state"] == "resolved":
                self._alerts.pop(key, None)
            if ref is not None:
                self._note(ref, v.get("diagnosis"))
                return self._announce(ref, key, v["window_end_ms"])
            return None
        if kind == "pattern" and v.get("kind") == "pattern_deviation" and v.get("state") == "open":
            return Detection("pattern_deviation", v.get("window_start_ms", 0), v.get("job", ""), f"job {v.get('job')}: {v.get('detail', '')}", "info")
        return None
