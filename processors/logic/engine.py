"""Detector engine: enriched flow batches and counter samples in, detector outputs out.

Combines the event-time windows with the detectors: main windows (default 10 s) for the traffic
matrix, straggler scores, pattern, timeline and the one-rule alerts (lb_skew, storage_bound,
congestion, conn_storm); short windows (default 1 s) for incast; counter samples for link health.
Every output is an ``Output(kind, key, value)``: kind ("matrix", "incast", "straggler", "link",
"pattern", "alert"), the suggested Kafka key, and a dict matching the kind's Avro schema (matrix: a
:class:`schemas.matrix.MatrixWindow` per window, level and shard, no object per cell).
Deterministic: the same inputs, in the same order, with the same ``tick`` times, give the same outputs;
``snapshot()`` / ``restore()`` carry all state as plain JSON-compatible values.
Pure logic: no clock, no Kafka, no Faust.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from .detectors.congestion import CongestionConfig, CongestionDetector
from .detectors.connstorm import ConnStormConfig, ConnStormDetector
from .detectors.incast import SIGNALS as INCAST_SIGNALS
from .detectors.incast import IncastAggregator, IncastConfig, IncastDetector, as_capacity, endpoint_codes
from .detectors.fabric import FabricBalanceConfig, FabricBalanceDetector
from .detectors.jobspread import JobSpreadConfig, JobSpreadDetector
from .detectors.lbskew import LbSkewConfig, LbSkewDetector
from .detectors.linkhealth import LinkHealthConfig, LinkHealthDetector
from .detectors.pattern import PatternConfig, PatternDetector
from .detectors.storagebound import StorageBoundConfig, StorageBoundDetector
from .detectors.straggler import StragglerConfig, StragglerDetector
from .detectors.timeline import PhaseAggregator, TimelineConfig, TimelineDetector
from .detectors.visibility import VisibilityConfig, VisibilityDetector
from .diagnosis.catalog import DiagnosisConfig
from .diagnosis.feed import Diagnoser
from .windows.interning import Interner, RowInterner
from .windows.matrix import KEY_COLUMNS, ROCE_CNP, CellAggregator, MatrixConfig, matrix_windows, signal_columns
from .windows.snapshots import from_bytes, to_bytes
from .windows.tumbling import WindowConfig, WindowManager

__all__ = ["EngineConfig", "Engine", "Output", "KINDS", "DETECTORS"]

KINDS = ("matrix", "incast", "straggler", "link", "pattern")  # output kinds of their own topics (plus "alert")
# names in EngineConfig.enabled: lb_skew, storage_bound, congestion and conn_storm emit "alert", timeline emits "pattern";
# diagnosis adds the bottleneck diagnosis to incast, straggler, link and congestion outputs
# fabric_balance (uplink_imbalance, rail_imbalance), job_spread and visibility (collectives_not_visible) emit "alert" too
DETECTORS = (*KINDS, "lb_skew", "storage_bound", "timeline", "congestion", "conn_storm", "diagnosis", "fabric_balance",
             "job_spread", "visibility")
MAIN_KINDS = {"matrix", "straggler", "pattern", "lb_skew", "storage_bound", "congestion", "conn_storm", "fabric_balance",
              "job_spread", "visibility"}  # detectors on the main windows
# string columns of a flow batch the detectors use, as interner codes (in this order: KEY_COLUMNS of a cell)
CODED_FIELDS = ("src_node", "dst_node", "src_group", "dst_group", "src_job", "dst_job", "category", "src_rack", "dst_rack")
SNAPSHOT_VERSION = 1


class Output(NamedTuple):
    kind: str
    key: str
    value: dict


@dataclass(frozen=True)
class EngineConfig:
    """All detector settings; ``time_field`` is the flow column used as event time."""

    window: WindowConfig = field(default_factory=WindowConfig)
    matrix: MatrixConfig = field(default_factory=MatrixConfig)
    incast: IncastConfig = field(default_factory=IncastConfig)
    straggler: StragglerConfig = field(default_factory=StragglerConfig)
    pattern: PatternConfig = field(default_factory=PatternConfig)
    link: LinkHealthConfig = field(default_factory=LinkHealthConfig)
    lb_skew: LbSkewConfig = field(default_factory=LbSkewConfig)
    storage_bound: StorageBoundConfig = field(default_factory=StorageBoundConfig)
    timeline: TimelineConfig = field(default_factory=TimelineConfig)
    congestion: CongestionConfig = field(default_factory=CongestionConfig)
    conn_storm: ConnStormConfig = field(default_factory=ConnStormConfig)
    diagnosis: DiagnosisConfig = field(default_factory=DiagnosisConfig)
    fabric_balance: FabricBalanceConfig = field(default_factory=FabricBalanceConfig)
    job_spread: JobSpreadConfig = field(default_factory=JobSpreadConfig)
    visibility: VisibilityConfig = field(default_factory=VisibilityConfig)
    time_field: str = "time_end_ms"
    enabled: tuple[str, ...] = DETECTORS


class Engine:
    """Stateful, deterministic detector pipeline (see module docstring)."""

    def __init__(
        self,
        config: EngineConfig | None = None,
        capacity_bps: Callable[[str], float] | Mapping[str, float] | None = None,
        switch_name: Callable[[str], str] | None = None,
        port_info: Callable[[str, int], tuple[str, float]] | None = None,
        node_job: Callable[[str, int], str] | None = None,
        node_port: Callable[[str], str] | None = None,
    ):
        self.config = cfg = config or EngineConfig()
        self.shard = 0  # the shard (shuffle partition) this engine serves: part of the matrix output keys
        self.interner = Interner([""])
        self.row_interner = RowInterner(self.interner)
        self._tables: dict[int, tuple] = {}  # id(label table) -> (table, interner size, interner codes)
        self.main = WindowManager(cfg.window, CellAggregator(cfg.matrix.compact_rows))
        short = WindowConfig(size_ms=cfg.incast.window_ms, lateness_ms=cfg.incast.lateness_ms,
                             idle_close_s=cfg.window.idle_close_s)
        self.short = WindowManager(short, IncastAggregator())
        self.link = LinkHealthDetector(cfg.link, switch_name, port_info, node_job)
        self.incast = IncastDetector(cfg.incast, capacity_bps)
        self.set_capacity(capacity_bps)
        self.straggler = StragglerDetector(cfg.straggler)
        self.straggler.link_cause = self._link_cause  # nodes behind an open link event are no peers
        self.pattern = PatternDetector(cfg.pattern)
        self.lb_skew = LbSkewDetector(cfg.lb_skew, cfg.window.size_ms)
        self.storage_bound = StorageBoundDetector(cfg.storage_bound, cfg.window.size_ms, self.link.node_state)
        self.diagnoser = None
        if "diagnosis" in cfg.enabled:
            self.diagnoser = Diagnoser(cfg.diagnosis, self.link.node_state, self.link.port_state)
            self.link.diagnose = self.diagnoser.link
        self.congestion = CongestionDetector(cfg.congestion, cfg.window.size_ms, self.link.node_state, node_port,
                                             cfg.diagnosis if self.diagnoser is not None else None)
        self.conn_storm = ConnStormDetector(cfg.conn_storm, cfg.window.size_ms, self.link.node_state, node_port)
        self.phases = WindowManager(cfg.window, PhaseAggregator(cfg.timeline.slot_ms, cfg.window.size_ms))
        self.timeline = TimelineDetector(cfg.timeline, cfg.window.size_ms)
        # topology and rack sizes come with the inventory (ProcessorCore.set_inventory -> set_inventory)
        self.fabric = FabricBalanceDetector(cfg.fabric_balance, cfg.window.size_ms)
        self.job_spread = JobSpreadDetector(cfg.job_spread, cfg.window.size_ms)
        self.visibility = VisibilityDetector(cfg.visibility, cfg.window.size_ms)
        self.incast_starts: dict[str, int] = {}  # open incast event id -> its first window start
        self.records_in = 0
        self.last_codes: dict[str, np.ndarray] | None = None  # string columns of the last flow batch, as interner codes

    # -- flows -------------------------------------------------------------------
    def process_flows(self, batch: np.ndarray, labels: Mapping | None = None) -> list[Output]:
        """One enriched flow batch (``dtype_for("flow_enriched")``) -> outputs of windows it closed.

        ``labels``: optional ``Enricher.label_codes`` of the batch (column -> (rows, table) with
        ``batch[column] == table.strings[rows]``): the string columns are then coded without reading them.
        """
        n = len(batch)
        self.last_codes = None
        if n == 0:
            return []
        self.records_in += n
        cfg = self.config
        coded = self._label_codes(labels)
        if coded is None:
            coded = self.row_interner.codes(*(batch[f] for f in CODED_FIELDS))
        codes = self.last_codes = dict(zip(CODED_FIELDS, coded))
        times = batch[cfg.time_field].astype(np.int64)
        packets = batch["packets"].astype(np.int64)
        bytes_est = batch["bytes_est"].astype(np.int64)
        out: list[Output] = []
        if "fabric_balance" in cfg.enabled:
            self.fabric.observe_flows(batch)
        if MAIN_KINDS & set(cfg.enabled):
            rows = {k: codes[f] for k, f in zip(KEY_COLUMNS, CODED_FIELDS)}
            rows.update(bytes_est=bytes_est, packets_est=batch["packets_est"].astype(np.int64),
                        flow_records=np.ones(n, dtype=np.int64), samples=packets)
            rows.update(signal_columns(batch))
            for ws, we, cells in self.main.process(times, rows):
                out.extend(self._main_window(ws, we, cells))
        if "timeline" in cfg.enabled:
            idx, rows = self._phase_rows(codes, times, bytes_est)
            for ws, we, res in self.phases.process(times[idx], rows, observed_max_ms=int(times.max())):
                out.extend(self._timeline_window(ws, we, res))
        if "incast" in cfg.enabled:
            idx = np.flatnonzero(self._incast_category(codes["category"]))
            # rows in short-window order (stable), so the short windows take them without another sort
            idx = idx[np.argsort(times[idx] // self.short.config.size_ms, kind="stable")]
            rows = self._incast_rows(batch, idx, codes, bytes_est[idx], packets[idx])
            for ws, _we, res in self.short.process(times[idx], rows, observed_max_ms=int(times.max())):
                out.extend(self._incast_window(ws, res))
        return out

    def _label_codes(self, labels: Mapping | None) -> list[np.ndarray] | None:
        """Interner codes of CODED_FIELDS from label codes, or None: no labels, or a label that is not a string
        (the batch then goes through the row interner).

        Strings without an interner code yet get one here, in the order the row interner would give them
        (by column in CODED_FIELDS order, then by first row), so the codes do not depend on the path.
        """
        if labels is None or any(f not in labels for f in CODED_FIELDS):
            return None
        pairs = [labels[f] for f in CODED_FIELDS]
        out = [self._table_codes(table)[rows] for rows, table in pairs]
        if any(len(c) and int(c.min()) < 0 for c in out):
            if not self._intern_new(pairs, out):
                return None
            out = [self._table_codes(table)[rows] for rows, table in pairs]
        return out

    def _intern_new(self, pairs: list, codes: list[np.ndarray]) -> bool:
        """Intern the labels of ``pairs`` ((rows, table) per column) that have no code (-1 in ``codes``) in
        first-occurrence order over the columns one after the other; False (nothing interned) when one of
        them is not a string."""
        new = []
        for (rows, table), c in zip(pairs, codes):
            missing = rows[c < 0]
            if len(missing):
                distinct, first = np.unique(missing, return_index=True)
                new += table.strings[distinct[np.argsort(first, kind="stable")]].tolist()
        if not all(isinstance(s, str) for s in new):
            return False
        for s in new:
            self.interner.code(s)
        return True

    def _table_codes(self, table) -> np.ndarray:
        """Interner code (int32, -1: none yet) of each of ``table.strings``; kept per table until the
        interner grows."""
        known = len(self.interner.strings)
        hit = self._tables.get(id(table))
        if hit is None or hit[0] is not table or hit[1] != known:
            if len(self._tables) >= 64:
                self._tables.clear()
            get = self.interner.index.get
            lut = np.array([get(s, -1) if isinstance(s, str) else -1 for s in table.strings.tolist()], dtype=np.int32)
            hit = self._tables[id(table)] = (table, known, lut)
        return hit[2]

    def _incast_category(self, cat: np.ndarray) -> np.ndarray:
        """Rows whose category code is one of the incast categories (interned on first use)."""
        cats = [self.interner.code(c) for c in self.config.incast.categories]
        wanted = np.zeros(len(self.interner.strings), dtype=bool)
        wanted[cats] = True
        return wanted[cat]

    def _incast_rows(self, batch, idx, codes, bytes_est, packets) -> dict[str, np.ndarray]:
        """IncastAggregator rows of the batch rows ``idx``; ``bytes_est``, ``packets``: of those rows."""
        if not len(idx):
            z = np.zeros(0, dtype=np.int64)
            return {"dst": z.astype(np.int32), "src": z.astype(np.int32), "dgrp": z.astype(np.int32),
                    "rate_bps": z, "rate_sampled_bps": z, "samples": z, "samples_sampled": z, "max_rate": z,
                    **{c: z for c in INCAST_SIGNALS}}
        # column by column: ``batch[idx]`` would copy whole ~300-byte records with their object fields
        dur = batch["time_end_ms"][idx] - batch["time_start_ms"][idx]
        rate = bytes_est * 8000 // np.maximum(dur, self.config.incast.window_ms)
        sr = np.maximum(batch["sampling_rate"][idx], 1)
        sampled = sr > 1
        return {
            "dst": endpoint_codes(codes["dst_node"][idx], batch["dst_addr"], self.interner, idx),
            "src": endpoint_codes(codes["src_node"][idx], batch["src_addr"], self.interner, idx),
            "dgrp": codes["dst_group"][idx],
            "rate_bps": rate,
            "rate_sampled_bps": np.where(sampled, rate, 0),
            "samples": packets,
            "samples_sampled": np.where(sampled, packets, 0),
            "max_rate": sr,
            **self._incast_signals(batch, idx, codes, packets),
        }

    def _incast_signals(self, batch, idx, codes, packets) -> dict[str, np.ndarray]:
        """Sampled packets for the incast diagnosis (IncastAggregator ``SIGNALS``): ECN codepoints, RoCEv2
        CNPs inside one job (they land on the shard of the job's incast flows whatever the sharding), rocev2
        category, BTH seen."""
        zero = np.zeros(len(idx), dtype=np.int64)
        ecn = batch["tos"][idx] & 3
        op = batch["roce_opcode"][idx]
        sj, dj = codes["src_job"][idx], codes["dst_job"][idx]
        same_job = (sj == dj) & (sj != self.interner.code(""))
        return {"n_ect": np.where(ecn != 0, packets, zero), "n_ce": np.where(ecn == 3, packets, zero),
                "n_cnp": np.where((op == ROCE_CNP) & same_job, packets, zero),
                "n_roce": np.where(codes["category"][idx] == self.interner.code("rocev2"), packets, zero),
                "n_bth": np.where(op >= 0, packets, zero)}

    def _main_window(self, ws: int, we: int, cells: dict) -> list[Output]:
        en = self.config.enabled
        out: list[Output] = []
        if "matrix" in en:
            for w in matrix_windows(cells, self.interner, ws, we, self.config.matrix, self.shard):
                # unique per window, level and shard (and part): a group cell is summed over the shards
                # (docs/architecture.md)
                out.append(Output("matrix", w.key(), w))
        if "straggler" in en:
            for s in self.straggler.on_window(ws, we, cells, self.interner):
                if s["straggler"]:
                    s["explained_by"] = self._link_cause(s["job"], s["node"], we)
                    if self.diagnoser is not None:
                        peer = self.straggler.successor.get(f"{s['job']}\x00{s['node']}", "")
                        s["diagnosis"] = self.diagnoser.straggler(s, peer, cells, self.interner,
                                                                  self.config.straggler.categories)
                out.append(Output("straggler", s["job"], s))
        if "pattern" in en:
            for p in self.pattern.on_window(ws, we, cells, self.interner):
                out.append(Output("pattern", p["job"], p))
        if "lb_skew" in en:
            out.extend(Output("alert", a["dedup_key"], a) for a in self.lb_skew.on_window(ws, we, cells, self.interner))
        if "storage_bound" in en:
            out.extend(Output("alert", a["dedup_key"], a)
                       for a in self.storage_bound.on_window(ws, we, cells, self.interner))
        if "congestion" in en:
            out.extend(Output("alert", a["dedup_key"], a) for a in self.congestion.on_window(ws, we, cells, self.interner))
        if "conn_storm" in en:
            out.extend(Output("alert", a["dedup_key"], a) for a in self.conn_storm.on_window(ws, we, cells, self.interner))
        if "fabric_balance" in en:
            out.extend(Output("alert", a["dedup_key"], a) for a in self.fabric.advance(we))
        if "job_spread" in en:
            out.extend(Output("alert", a["dedup_key"], a) for a in self.job_spread.on_window(ws, we, cells, self.interner))
        if "visibility" in en:
            out.extend(Output("alert", a["dedup_key"], a) for a in self.visibility.on_window(ws, we, cells, self.interner))
        return out

    def set_inventory(self, inventory) -> None:
        """The inventory's topology (uplinks, NICs), racks and job memberships for the fabric detectors."""
        self.fabric.set_inventory(inventory)
        self.storage_bound.rated_write = inventory.rated_writes()
        self.storage_bound.dataset_read = inventory.dataset_reads()
        node_id = {n: i for i, n in enumerate(inventory.node_names)}

        def jobs_of(nodes: list[str], t_ms: int) -> list[str]:
            ids = np.array([node_id.get(n, -1) for n in nodes], dtype=np.int64)
            return inventory.jobs_at(ids, np.full(len(ids), t_ms, dtype=np.int64)).tolist()

        self.job_spread.set_racks(inventory.rack_nodes(), jobs_of, inventory.node_groups())

    def _phase_rows(self, codes, times, bytes_est) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Rows of the batch in a timeline phase (PhaseAggregator rows): collective inside a job,
        storage into a job from outside it (dataset reads), storage out of a job (checkpoint writes)."""
        code = self.interner.code
        empty = code("")
        cat, sj, dj = codes["category"], codes["src_job"], codes["dst_job"]
        comm = np.isin(cat, [code(c) for c in self.config.pattern.categories]) & (sj == dj) & (sj != empty)
        storage = cat == code("storage")
        read = storage & (dj != empty) & (sj != dj)
        write = storage & (sj != empty) & (sj != dj) & ~read
        idx = np.flatnonzero(comm | read | write)
        phase = np.where(comm[idx], 0, np.where(read[idx], 1, 2)).astype(np.int64)
        return idx, {"job": np.where(read[idx], dj[idx], sj[idx]).astype(np.int32), "phase": phase,
                     "t": times[idx], "bytes": bytes_est[idx]}

    def _timeline_window(self, ws: int, we: int, res) -> list[Output]:
        return [Output("pattern", r["job"], r)
                for r in self.timeline.on_window(ws, we, res, self.interner, self.pattern,
                                                 judge_iterations="pattern" in self.config.enabled)]

    def _link_cause(self, job: str, node: str, now_ms: int) -> str:
        """Key of an open link event on ``node``'s port or on its busiest destination's (ring successor's), or ""."""
        for n in (node, self.straggler.successor.get(f"{job}\x00{node}", "")):
            st = self.link.node_state(n, now_ms) if n else None
            if st is not None and st["event"]:
                return st["port"]
        return ""

    def _incast_window(self, ws: int, res) -> list[Output]:
        return self._incast_outputs(self.incast.on_window(ws, res, self.interner))

    def _incast_outputs(self, events: list[dict]) -> list[Output]:
        """Incast outputs, each with its destination port and the highest ifOutDiscards/s of that port in the
        counter samples taken since the event opened (cause link). The open record has the last sample before
        the burst (often 0: counters come every 10-30 s); update and close records cover the burst."""
        out = []
        for e in events:
            start = self.incast_starts.setdefault(e["event_id"], e["window_start_ms"])
            if e["state"] == "close":
                del self.incast_starts[e["event_id"]]
            st = self.link.node_state(e["destination"], e["window_end_ms"], since_ms=start)
            if st is not None:
                e["dst_port"], e["dst_out_discards_per_s"] = st["port"], st["out_discards_per_s"]
            if self.diagnoser is not None:
                e["diagnosis"] = self.diagnoser.incast(e, start)
            del e["_signals"]
            out.append(Output("incast", e["destination"], e))
        return out

    def set_capacity(self, capacity_bps) -> None:
        """Incast capacity: the live ifSpeed of the destination's port when sampled, else ``capacity_bps``."""
        base = as_capacity(capacity_bps, self.config.incast.default_capacity_bps)
        live = self.link.live_speed
        self.incast.capacity = lambda node: live(node) or base(node)

    # -- counters ----------------------------------------------------------------
    def process_counters(self, batch: np.ndarray, message: np.ndarray | None = None, emit: bool = True) -> list[Output]:
        """Counter samples (COUNTER_DTYPE) -> link health outputs (``message``: see LinkHealthDetector.process).

        ``emit=False``: only update the port state the other detectors read (storage_bound headroom,
        cause links, live incast capacity) for counters another shard owns and reports."""
        if "link" not in self.config.enabled or len(batch) == 0:
            return []
        out = self.link.process(batch, message, emit=emit)
        if not emit:
            return []
        alerts = []
        if "fabric_balance" in self.config.enabled and out:
            self.fabric.observe_link(out)
            alerts = [Output("alert", a["dedup_key"], a) for a in self.fabric.advance(max(d["time_ms"] for d in out))]
        return [Output("link", f"{d['exporter']}|{d['if_index']}", d) for d in out] + alerts

    def process_discards(self, batch: np.ndarray, jobs: np.ndarray | None = None) -> int:
        """sFlow dropped-packet notifications (DISCARD_DTYPE; ``jobs``: each dropped packet's job) -> link
        health's drop reasons per port (the reasons of the link events that follow); returns how many were
        attributed to a port."""
        if "link" not in self.config.enabled or len(batch) == 0:
            return 0
        return self.link.add_discards(batch, jobs)

    # -- timer -------------------------------------------------------------------
    def tick(self, now_ms: int) -> list[Output]:
        """Timer: close the windows of an idle stream (see WindowManager.tick)."""
        out: list[Output] = []
        for ws, we, cells in self.main.tick(now_ms):
            out.extend(self._main_window(ws, we, cells))
        for ws, we, res in self.phases.tick(now_ms):
            out.extend(self._timeline_window(ws, we, res))
        for ws, _we, res in self.short.tick(now_ms):
            out.extend(self._incast_window(ws, res))
        if self.short.is_idle(now_ms) and self.incast.open_events:
            out.extend(self._incast_outputs(self.incast.close_idle()))
        return out

    def flush(self) -> list[Output]:
        """Close every open window (end of a bounded replay)."""
        out: list[Output] = []
        for ws, we, cells in self.main.flush():
            out.extend(self._main_window(ws, we, cells))
        for ws, we, res in self.phases.flush():
            out.extend(self._timeline_window(ws, we, res))
        for ws, _we, res in self.short.flush():
            out.extend(self._incast_window(ws, res))
        out.extend(self._incast_outputs(self.incast.close_idle()))
        return out

    @property
    def stats(self) -> dict[str, int]:
        """Counters for metrics: records in, too-late records per window kind, stale counter samples."""
        return {
            "records_in": self.records_in,
            "too_late_main": self.main.too_late,
            "too_late_incast": self.short.too_late,
            "stale_counter_samples": self.link.stale,
        }

    # -- state -------------------------------------------------------------------
    def snapshot(self) -> dict:
        """All state as plain JSON-compatible values."""
        return {
            "version": SNAPSHOT_VERSION,
            "interner": list(self.interner.strings),
            "records_in": self.records_in,
            "main": self.main.snapshot(),
            "short": self.short.snapshot(),
            "incast": self.incast.snapshot(),
            "straggler": self.straggler.snapshot(),
            "pattern": self.pattern.snapshot(),
            "link": self.link.snapshot(),
            "lb_skew": self.lb_skew.snapshot(),
            "storage_bound": self.storage_bound.snapshot(),
            "congestion": self.congestion.snapshot(),
            "conn_storm": self.conn_storm.snapshot(),
            "fabric_balance": self.fabric.snapshot(),
            "job_spread": self.job_spread.snapshot(),
            "visibility": self.visibility.snapshot(),
            "incast_starts": dict(sorted(self.incast_starts.items())),
            "phases": self.phases.snapshot(),
            "timeline": self.timeline.snapshot(),
        }

    def restore(self, snap: dict) -> None:
        if snap.get("version") != SNAPSHOT_VERSION:
            raise ValueError(f"unsupported engine snapshot version {snap.get('version')!r}")
        self.interner = Interner(snap["interner"])
        self.row_interner = RowInterner(self.interner)
        self._tables = {}
        self.records_in = int(snap["records_in"])
        self.main.restore(snap["main"])
        self.short.restore(snap["short"])
        self.incast.restore(snap["incast"])
        self.straggler.restore(snap["straggler"])
        self.pattern.restore(snap["pattern"])
        self.link.restore(snap["link"])
        if "lb_skew" in snap:  # snapshots written before these detectors existed start them empty
            self.lb_skew.restore(snap["lb_skew"])
        if "storage_bound" in snap:
            self.storage_bound.restore(snap["storage_bound"])
        if "congestion" in snap:
            self.congestion.restore(snap["congestion"])
        if "conn_storm" in snap:
            self.conn_storm.restore(snap["conn_storm"])
        if "fabric_balance" in snap:
            self.fabric.restore(snap["fabric_balance"])
            self.job_spread.restore(snap["job_spread"])
        if "visibility" in snap:
            self.visibility.restore(snap["visibility"])
        self.incast_starts = {k: int(v) for k, v in snap.get("incast_starts", {}).items()}
        if "timeline" in snap:
            self.phases.restore(snap["phases"])
            self.timeline.restore(snap["timeline"])

    def snapshot_bytes(self) -> bytes:
        return to_bytes(self.snapshot())

    def restore_bytes(self, data: bytes) -> None:
        self.restore(from_bytes(data))
