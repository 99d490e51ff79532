"""The console's bounded in-memory window of recent detector outputs (the live view).

Pure: records come in as dicts, the traffic matrix as ``schemas.matrix.MatrixWindow`` columns (decoded by
:mod:`console.feed` from Kafka, or given by a test), queries return plain values. Thread-safe: the Kafka reader
thread writes while the web server reads. Bounded: ``windows`` matrix windows,
``events`` detections, ``port_samples`` link-health samples per port; the
oldest go first.

Matrix cells are additive (several workers may emit parts of the same cell), so
a window keeps its cells as appended columns and sums them when read.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque

import numpy as np
import pyarrow as pa

from . import events as ev
from . import views
from .layout import Layout
from .visibility import ROCE_OPS

_DICT = pa.dictionary(pa.int32(), pa.string())
# names dictionary-encoded: a window's 262k cells name a few hundred nodes (views.pair_sums works on the codes)
CELL_SCHEMA = pa.schema([("level", _DICT), ("src", _DICT), ("dst", _DICT), ("category", _DICT), ("bytes_est", pa.int64()), ("packets_est", pa.int64()),
                         ("flow_records", pa.int64()), ("samples", pa.int64())])
# a live window's cells also keep the RoCEv2 operations by type (console.visibility); 0 in cells without them
WINDOW_SCHEMA = pa.schema([*CELL_SCHEMA, *[(c, pa.int64()) for c in ROCE_OPS.values()]])
_CELL_COLS = [f.name for f in WINDOW_SCHEMA]
_OPTIONAL = frozenset(ROCE_OPS.values())


class _Window:
    __slots__ = ("cells", "end_ms", "pending", "start_ms", "tables", "totals")

    def __init__(self, start_ms: int, end_ms: int):
        self.start_ms, self.end_ms = start_ms, end_ms
        self.pending: dict[str, list] = {c: [] for c in _CELL_COLS}
        self.tables: list[pa.Table] = []
        self.cells = 0
        self.totals: tuple[int, dict] | None = None  # (cells when summed, views.node_sums of them)

    def add(self, r: dict) -> None:
        for c in _CELL_COLS:
            self.pending[c].append(r.get(c, 0) if c in _OPTIONAL else r[c])
        self.cells += 1

    def add_window(self, w) -> None:
        """The cells of a ``matrix.windows.v2`` message (``schemas.matrix.MatrixWindow``): one table of its columns,
        the names as dictionaries over its label table (no object per cell)."""
        self.table()  # pending dict cells first: the tables keep arrival order
        n = len(w)
        labels = pa.array(w.labels, pa.string(), from_pandas=False)
        cols = {"level": pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array([w.level])),
                **{f: pa.DictionaryArray.from_arrays(pa.array(getattr(w, f), pa.int32()), labels)
                   for f in ("src", "dst", "category")},
                **{f.name: pa.array(w.values[f.name], pa.int64()) for f in WINDOW_SCHEMA if f.type != _DICT}}
        self.tables.append(pa.table(cols, schema=WINDOW_SCHEMA))
        self.cells += n

    def table(self) -> pa.Table:
        if self.pending["src"]:
            cols = {}
            for f in WINDOW_SCHEMA:
                v = self.pending[f.name]
                cols[f.name] = pa.array(v, pa.string()).dictionary_encode() if f.type == _DICT else pa.array(v, f.type)
            self.tables.append(pa.table(cols, schema=WINDOW_SCHEMA))
            self.pending = {c: [] for c in _CELL_COLS}
        if len(self.tables) > 8:  # chunks keep their own dictionaries; views handle chunked columns
            self.tables = [pa.concat_tables(self.tables).unify_dictionaries().combine_chunks()]
        if len(self.tables) > 1:
            return pa.concat_tables(self.tables)
        return self.tables[0] if self.tables else WINDOW_SCHEMA.empty_table()


class PortState:
    """Latest known state of one switch port, from link-health samples and raw counter samples."""

    __slots__ = (
        "discards_per_s",
        "errors_per_s",
        "if_index",
        "if_speed",
        "last_counters",
        "last_event",
        "oper_up",
        "samples",
        "switch",
        "time_ms",
        "util_in",
        "util_out",
    )

    def __init__(self, switch: str, if_index: int, maxlen: int):
        self.switch, self.if_index = switch, if_index
        self.time_ms = 0
        self.if_speed = 0
        self.oper_up: bool | None = None
        self.util_in = self.util_out = None
        self.errors_per_s = self.discards_per_s = None
        self.samples: deque = deque(maxlen=maxlen)  # (time_ms, util_in, util_out, errors/s, discards/s, if_speed, oper)
        self.last_counters: tuple | None = None  # (time_ms, in_octets, out_octets, in_err+out_err, in_disc+out_disc)
        self.last_event: dict[str, int] = {}  # link event kind -> time_ms


class LiveStore:
    def __init__(self, layout: Layout | None = None, windows: int = 60, events: int = 5000, port_samples: int = 360):
        self.layout = layout or Layout()
        self.max_windows, self.max_events, self.max_port_samples = windows, events, port_samples
        self.lock = threading.RLock()
        self.version = 0  # bumped on every change: the event stream tells pages to refresh
        self.last_record_ms = 0  # wall clock of the last record taken
        self.windows: OrderedDict[int, _Window] = OrderedDict()
        self.window_ms: int | None = None
        self.incast: OrderedDict[str, list[dict]] = OrderedDict()  # event_id -> its records
        self.scores: deque = deque(maxlen=max(events, 64 * windows))  # straggler scores (all, for the jobs view)
        self.link_events: deque = deque(maxlen=events)
        self.alerts: OrderedDict[str, dict] = OrderedDict()
        self.patterns: deque = deque(maxlen=events)  # pattern baselines and deviations (the events)
        self.timelines: dict[str, dict] = {}  # job -> its latest pattern_timeline record (one per window, not an event)
        self.ports: dict[tuple[str, int], PortState] = {}
        self.counts: dict[str, int] = {}

    # ------------------------------------------------------------------ writes

    def _touch(self, kind: str) -> None:
        self.version += 1
        self.last_record_ms = int(time.time() * 1000)
        self.counts[kind] = self.counts.get(kind, 0) + 1

    @classmethod
    def shows(cls, kind: str) -> bool:
        """Whether the store keeps records of processor output ``kind`` (``fabricflow.streams.OUTPUTS``)."""
        return hasattr(cls, f"_add_{kind}")

    def add(self, kind: str, r: dict) -> None:
        """One decoded record of ``kind`` (matrix, incast, straggler, link, alert, pattern)."""
        with self.lock:
            getattr(self, f"_add_{kind}")(r)
            self._touch(kind)

    def _add_matrix(self, r) -> None:
        """A ``matrix.windows.v2`` window (``schemas.matrix.MatrixWindow``) or one v1 cell dict."""
        cols = not isinstance(r, dict)
        ws = r.window_start_ms if cols else int(r["window_start_ms"])
        w = self.windows.get(ws)
        if w is None:
            if self.windows and ws < next(iter(self.windows)) and len(self.windows) >= self.max_windows:
                return  # older than everything kept
            w = self.windows[ws] = _Window(ws, r.window_end_ms if cols else int(r["window_end_ms"]))
            self.window_ms = w.end_ms - w.start_ms
            if len(self.windows) > 1 and ws < next(reversed(self.windows)):
                self.windows = OrderedDict(sorted(self.windows.items()))
            while len(self.windows) > self.max_windows:
                self.windows.popitem(last=False)
        w.add_window(r) if cols else w.add(r)

    def _add_incast(self, r: dict) -> None:
        recs = self.incast.setdefault(r["event_id"], [])
        recs.append(r)
        del recs[:-8]  # first windows are kept in the merged event's start; the latest few suffice
        self.incast.move_to_end(r["event_id"])
        while len(self.incast) > self.max_events:
            self.incast.popitem(last=False)

    def _add_straggler(self, r: dict) -> None:
        self.scores.append(r)

    def _add_alert(self, r: dict) -> None:
        self.alerts[r["dedup_key"]] = r
        self.alerts.move_to_end(r["dedup_key"])
        while len(self.alerts) > self.max_events:
            self.alerts.popitem(last=False)

    def _add_pattern(self, r: dict) -> None:
        if r.get("kind") == "pattern_timeline":
            self.timelines[str(r.get("job", ""))] = r
            return
        self.patterns.append(r)

    def _port(self, switch: str, if_index: int) -> PortState:
        key = (switch, int(if_index))
        p = self.ports.get(key)
        if p is None:
            p = self.ports[key] = PortState(switch, int(if_index), self.max_port_samples)
        return p

    def _add_link(self, r: dict) -> None:
        p = self._port(r.get("switch", ""), r.get("if_index", 0))
        t = int(r["time_ms"])
        if r.get("kind") == "sample":
            if t >= p.time_ms:
                p.time_ms, p.if_speed, p.oper_up = t, int(r.get("if_speed") or 0), bool(r.get("oper_up", True))
                p.util_in, p.util_out = r.get("util_in"), r.get("util_out")
                p.errors_per_s = (r.get("in_errors_per_s") or 0.0) + (r.get("out_errors_per_s") or 0.0)
                p.discards_per_s = (r.get("in_discards_per_s") or 0.0) + (r.get("out_discards_per_s") or 0.0)
            p.samples.append((t, r.get("util_in"), r.get("util_out"),
                              (r.get("in_errors_per_s") or 0.0) + (r.get("out_errors_per_s") or 0.0),
                              (r.get("in_discards_per_s") or 0.0) + (r.get("out_discards_per_s") or 0.0),
                              int(r.get("if_speed") or 0), bool(r.get("oper_up", True))))
            return
        p.last_event[r.get("kind", "")] = max(t, p.last_event.get(r.get("kind", ""), 0))
        if r.get("kind") in ("link_downgrade", "speed_change") and t >= p.time_ms:
            p.if_speed = int(r.get("if_speed") or p.if_speed)
        if r.get("kind") in ("oper_down", "oper_up") and t >= p.time_ms:
            p.oper_up = r.get("kind") == "oper_up"
        self.link_events.append(r)

    def add_counters(self, rows: np.ndarray) -> None:
        """Raw sFlow counter samples (a decoded counter_batch): latest speed/oper status and octet rates per port.

        Link-health samples (when the processors emit them) carry the same figures; raw counters keep the
        topology current when they do not, and show ports the processors have not reported yet.
        """
        if len(rows) == 0:
            return
        with self.lock:
            for r in rows:
                switch = self.layout.switch_of_agent(bytes(r["exporter_addr"]))
                p = self._port(switch, int(r["if_index"]))
                t = int(r["time_received_ms"])
                octets = (int(r["in_octets"]), int(r["out_octets"]))
                errs = int(r["in_errors"]) + int(r["out_errors"])
                disc = int(r["in_discards"]) + int(r["out_discards"])
                prev = p.last_counters
                p.last_counters = (t, *octets, errs, disc)
                if t < p.time_ms:
                    continue
                speed = int(r["if_speed"])
                if not p.samples or p.samples[-1][0] < t - 1:  # link health did not report this sample
                    p.time_ms, p.if_speed, p.oper_up = t, speed, bool(r["if_oper_up"])
                    if prev is not None and t > prev[0] and all(a >= b for a, b in zip(p.last_counters[1:], prev[1:])):
                        dt = (t - prev[0]) / 1000.0
                        if speed > 0:
                            p.util_in = (octets[0] - prev[1]) * 8 / dt / speed
                            p.util_out = (octets[1] - prev[2]) * 8 / dt / speed
                        p.errors_per_s = (errs - prev[3]) / dt
                        p.discards_per_s = (disc - prev[4]) / dt
            self._touch("counters")

    # ------------------------------------------------------------------ reads

    def window_list(self) -> list[tuple[int, int, int]]:
        with self.lock:
            return [(w.start_ms, w.end_ms, w.cells) for w in self.windows.values()]

    def latest_window(self, complete_only: bool = True) -> int | None:
        """Start of the newest window (the one before it when a newer may still be filling)."""
        with self.lock:
            starts = list(self.windows)
        if not starts:
            return None
        return starts[-2] if complete_only and len(starts) > 1 and self._filling(starts[-1]) else starts[-1]

    def _filling(self, ws: int) -> bool:
        return int(time.time() * 1000) - self.last_record_ms < 1000 and ws == next(reversed(self.windows))

    def cells(self, window_start_ms: int) -> tuple[pa.Table, int, int] | None:
        """(cells table, start, end) of one live window, or None when not held."""
        with self.lock:
            w = self.windows.get(int(window_start_ms))
            if w is None:
                return None
            return w.table(), w.start_ms, w.end_ms

    def cells_range(self, lo: int, hi: int) -> tuple[pa.Table, int] | None:
        """All cells of held windows starting in [lo, hi), and how many windows; None if the store does not
        cover the range (its oldest window starts after ``lo``)."""
        with self.lock:
            if not self.windows or next(iter(self.windows)) > lo:
                return None
            ws = [w for s, w in self.windows.items() if lo <= s < hi]
            tables = [w.table() for w in ws]
        if not tables:
            return WINDOW_SCHEMA.empty_table(), 0
        return pa.concat_tables(tables), len(tables)

    def node_totals(self, lo: int | None = None, hi: int | None = None, complete_only: bool = True
                    ) -> list[tuple[int, int, dict[str, tuple[int, int]]]]:
        """Per held window (starting in [lo, hi) when given), oldest first: (start, end, {node: (bytes sent,
        bytes received)}) over its node-level cells, all categories and peers (:func:`console.views.node_sums`).
        ``complete_only``: without the newest window while it is still filling (as :meth:`latest_window`).

        A window's sums are kept until it takes more cells, so a complete window is summed once (a 512-node
        window, 262k cells, takes a few tens of ms); the summing runs outside the lock.
        """
        with self.lock:
            held = [(s, w) for s, w in self.windows.items() if (lo is None or s >= lo) and (hi is None or s < hi)]
            if complete_only and held and self._filling(held[-1][0]):
                held.pop()
            todo = [(w, w.cells, w.table()) for _s, w in held if w.totals is None or w.totals[0] != w.cells]
        done = {id(w): (n, views.node_sums(t)) for w, n, t in todo}
        with self.lock:
            for w, n, _t in todo:
                if w.cells == n:
                    w.totals = done[id(w)]
        return [(w.start_ms, w.end_ms, (done.get(id(w)) or w.totals)[1]) for _s, w in held]

    def events(self) -> list[dict]:
        """Every held detection as a console event."""
        with self.lock:
            incast = [r for recs in self.incast.values() for r in recs]
            scores = list(self.scores)
            links = list(self.link_events)
            alerts = list(self.alerts.values())
            patterns = list(self.patterns)
        out = ev.merge_incast(incast)
        out += ev.straggler_events(scores, self.window_ms)
        for r in links:
            port = self.layout.port_by_key.get((r.get("switch"), r.get("if_index")))
            e = ev.link_event(r, port.node if port else "")
            if e:
                out.append(e)
        out += [ev.alert_event(r) for r in alerts]
        out += [ev.pattern_event(r) for r in patterns]
        return out

    def straggler_scores(self, job: str | None = None) -> list[dict]:
        with self.lock:
            return [s for s in self.scores if job is None or s.get("job") == job]

    def pattern_records(self, job: str | None = None) -> list[dict]:
        with self.lock:
            return [p for p in self.patterns if job is None or p.get("job") == job]

    def port_states(self) -> list[PortState]:
        with self.lock:
            return list(self.ports.values())

    def port_series(self, switch: str, if_index: int) -> list[tuple] | None:
        with self.lock:
            p = self.ports.get((switch, int(if_index)))
            return None if p is None else list(p.samples)

    def summary(self) -> dict:
        with self.lock:
            return {"windows": len(self.windows), "window_ms": self.window_ms,
                    "latest_window_ms": next(reversed(self.windows)) if self.windows else None,
                    "incast_events": len(self.incast), "straggler_scores": len(self.scores),
                    "link_events": len(self.link_events), "alerts": len(self.alerts), "patterns": len(self.patterns),
                    "ports": len(self.ports), "records": dict(self.counts), "last_record_ms": self.last_record_ms or None,
                    "version": self.version}
