"""Flow metrics from the processors' outputs and the switches' counter samples (pure logic, no Kafka).

:class:`MetricsState` takes decoded messages (matrix cells, counter sample batches, link health,
incast events, straggler scores, alerts, patterns) and keeps every family of docs/metrics.md as plain
values; it is a prometheus_client custom collector (:meth:`MetricsState.collect`). Traffic counters
advance by each closed window's cells (node pairs through :mod:`sinks.metrics.budget`, per-node
families from every node cell); port families are the switches' own counters; detector gauges expire
after ``ttl_s``. Re-emitted matrix cells are counted once by Kafka key and window within
``duplicate_horizon_s`` (:class:`CellKeys`); a bad record is counted and skipped whole. Time comes in
as arguments (``now``: processing time in unix seconds).
"""

from __future__ import annotations

import math
import re
import time as _time
from collections.abc import Iterable, Mapping

import numpy as np

from processors.logic.diagnosis.catalog import VERDICTS
from processors.logic.enrich.inventory import Inventory
from schemas.columns import addr16

from .budget import PairBudget
from .dedup import CellKeys, SeenIds
from .decode import STREAM_OF, Undecodable, decode_value
from .drops import DropFamilies
from .membership import LiveMembership
from .visibility import SERVING_GROUPS
from .roce import RoceFamilies
from .fabric import FabricMetrics
from .labels import UNKNOWN, node_label
from .matrix import BadCell, add_window, as_window, window_identity
from .store import COUNTER, GAUGE, Family

__all__ = ["MetricsState", "KINDS", "BadRecord"]

KINDS = tuple(STREAM_OF)
_U64 = 0xFFFF_FFFF_FFFF_FFFF
_KIND_RE = re.compile(r"^[a-z][a-z0-9_]{0,39}$")


class BadRecord(ValueError):
    """A decoded record whose fields are missing or of the wrong type."""


def _int(rec: Mapping, field: str) -> int:
    v = rec[field]
    if type(v) is not int:
        raise BadRecord(f"{field} is not an integer: {v!r}")
    return v


def _float(rec: Mapping, field: str) -> float:
    v = rec[field]
    if type(v) not in (int, float) or not math.isfinite(v):
        raise BadRecord(f"{field} is not a finite number: {v!r}")
    return float(v)


def _str(rec: Mapping, field: str) -> str:
    v = rec[field]
    if not isinstance(v, str):
        raise BadRecord(f"{field} is not a string: {v!r}")
    return v


def _name(rec: Mapping, field: str) -> str:
    """A closed-set name (event kind, rule): lower-case identifier."""
    v = _str(rec, field)
    if not _KIND_RE.match(v):
        raise BadRecord(f"{field} {v!r} is not a lower-case name")
    return v


class MetricsState:
    """Every flow-metric family as values; a prometheus_client custom collector (``collect``)."""

    def __init__(
        self,
        inventory: Inventory | None = None,
        series_budget: int = 50_000,
        topics: Mapping[str, str] | None = None,
        ttl_s: float = 600.0,
        duplicate_horizon_s: float = 300.0,
    ):
        self.inventory = self.base_inventory = inventory or Inventory.empty()
        self._groups: tuple[Inventory | None, set[str]] = (None, set())  # frontend nodes of an inventory
        self.live_jobs = LiveMembership()  # inventory.jobs.v1: the scheduler's membership over the file's jobs
        self.topics = {k: (topics or {}).get(k, k) for k in KINDS}
        self.ttl_s = ttl_s
        self.families: list[Family] = []
        F = self._family
        node_pair = ("src_node", "dst_node", "app_category")
        # traffic (matrix.windows.v1)
        self.n2n_bytes = F("node_to_node_flow_traffic_bytes_total", "Estimated bytes from node to node (sampling-scaled; counted when a window closes)", node_pair, COUNTER)
        self.n2n_packets = F("node_to_node_flow_traffic_packets_total", "Estimated packets from node to node (sampling-scaled; counted when a window closes)", node_pair, COUNTER)
        self.r2r_bytes = F("rack_to_rack_flow_traffic_bytes_total", "Estimated bytes from rack to rack", ("src_rack", "dst_rack", "app_category"), COUNTER)
        self.r2r_packets = F("rack_to_rack_flow_traffic_packets_total", "Estimated packets from rack to rack", ("src_rack", "dst_rack", "app_category"), COUNTER)
        self.g2g_bytes = F("group_to_group_flow_traffic_bytes_total", "Estimated bytes from group to group", ("src_group", "dst_group", "app_category"), COUNTER)
        self.g2g_packets = F("group_to_group_flow_traffic_packets_total", "Estimated packets from group to group", ("src_group", "dst_group", "app_category"), COUNTER)
        self.app_bytes = F("app_flow_traffic_bytes_total", "Estimated bytes per node, app category and direction (tx = sent by the node)", ("node", "app_category", "direction"), COUNTER)
        self.app_packets = F("app_flow_traffic_packets_total", "Estimated packets per node, app category and direction", ("node", "app_category", "direction"), COUNTER)
        # TCP and congestion signals
        nd = ("node", "direction")
        self.syn = F("node_flow_tcp_syn_packets_total", "Estimated TCP SYN packets per node (NetFlow/IPFIX records give a lower bound)", nd, COUNTER)
        self.rst = F("node_flow_tcp_rst_packets_total", "Estimated TCP RST packets per node (NetFlow/IPFIX records give a lower bound)", nd, COUNTER)
        self.n2n_syn = F("node_to_node_flow_tcp_syn_packets_total", "Estimated TCP SYN packets from node to node (within the series budget)", ("src_node", "dst_node"), COUNTER)
        self.n2n_rst = F("node_to_node_flow_tcp_rst_packets_total", "Estimated TCP RST packets from node to node (within the series budget)", ("src_node", "dst_node"), COUNTER)
        self.ecn = F("node_flow_ecn_ce_packets_total", "Estimated packets with IP ECN bits 11 (congestion experienced)", nd, COUNTER)
        self.cnp = F("node_flow_roce_cnp_packets_total", "Estimated RoCEv2 CNP packets (BTH opcode 0x81; sFlow header samples only)", nd, COUNTER)
        # switch ports (counters.raw.v1): the switch's own counters
        port = ("switch", "port", "node")
        t = ttl_s
        self.port_rx_bytes = F("sflow_port_rx_bytes_total", "Octets received by the switch port (ifInOctets, the switch's counter)", port, COUNTER, t)
        self.port_tx_bytes = F("sflow_port_tx_bytes_total", "Octets sent by the switch port (ifOutOctets)", port, COUNTER, t)
        self.port_rx_packets = F("sflow_port_rx_packets_total", "Packets received by the switch port (unicast + multicast + broadcast)", port, COUNTER, t)
        self.port_tx_packets = F("sflow_port_tx_packets_total", "Packets sent by the switch port (unicast + multicast + broadcast)", port, COUNTER, t)
        self.port_speed = F("sflow_port_speed_bps", "Port speed reported by the switch (ifSpeed, bits/s)", port, GAUGE, t)
        self.port_cfg_speed = F("sflow_port_configured_speed_bps", "Port speed configured in the inventory (bits/s)", port, GAUGE, t)
        self.port_errors = F("sflow_port_errors_total", "Port errors (ifIn/OutErrors)", (*port, "direction"), COUNTER, t)
        self.port_discards = F("sflow_port_discards_total", "Port discards (ifIn/OutDiscards)", (*port, "direction"), COUNTER, t)
        self.port_up = F("sflow_port_oper_up", "1 when the port is operationally up", port, GAUGE, t)
        self.drops, self.roce = DropFamilies(F, t), RoceFamilies(F, self._jobs_at, self._frontend)  # drop reasons; RoCEv2 ops
        self.bandwidth = F("node_interface_bandwidth_bytes", "Node link bandwidth in bytes/s: live ifSpeed/8 of its switch port(s), else the inventory capacity/8", nd, GAUGE)
        # detector state
        self.straggler_score = F("straggler_score", "Smoothed robust z-score of the node within its job (latest window; negative = sends less)", ("job", "node"), GAUGE, t)
        self.straggler_flagged = F("straggler_flagged", "1 when the node is flagged as the job's straggler", ("job", "node"), GAUGE, t)
        dn = ("dst_node", "dst_group")
        self.incast_events = F("incast_events_total", "Incast events opened per destination", dn, COUNTER)
        self.incast_active = F("incast_active", "1 while an incast event at the destination is open", dn, GAUGE, t)
        self.incast_fraction = F("incast_capacity_fraction", "Aggregate incast rate / destination link capacity (latest incast window)", dn, GAUGE, t)
        self.link_events = F("link_events_total", "Link health events (link.health.v1 kinds other than sample)", (*port, "kind"), COUNTER)
        self.diagnoses = F("event_diagnoses_total", "Events (incast, straggler episode, link event, congestion alert) that reached a diagnosis verdict, each counted once per verdict", ("event", "diagnosis"), COUNTER)
        self.link_util = F("link_utilization_ratio", "Port utilisation 0..1 between the last two counter samples", (*port, "direction"), GAUGE, t)
        self.alerts_total = F("flow_alerts_total", "Flow alerts fired", ("rule", "severity"), COUNTER)
        self.alerts_firing = F("flow_alerts_firing", "Flow alerts currently firing", ("rule", "severity"), GAUGE)
        self.fabric = FabricMetrics(F, t, self.inventory)  # per-uplink and per-rail families (fabric.py)
        self.period = F("job_iteration_period_seconds", "Detected training iteration (compute/communication cycle) period", ("job",), GAUGE, t)
        # change markers (changes.v1): for Grafana annotations (deploy/grafana) and alert silences
        scope = ("job", "scope")
        self.changes = F("change_markers_total", "Change markers recorded (fabricflow mark, console), by job and scope "
                         "(job, node, link, pair, cluster)", scope, COUNTER)
        self.change_time = F("change_marker_timestamp_seconds", "Unix time the latest change marker of the job and "
                             "scope took effect (a Grafana annotation: the series value as the time)", scope, GAUGE)
        # own health
        self.series_gauge = F("fabricflow_metrics_series", "Series exported per family", ("family",), GAUGE)
        self.folded = F("fabricflow_metrics_series_folded_total", "Window cells folded into src_node=dst_node=\"other\" by the series budget", ("family",), COUNTER)
        self.dropped = F("fabricflow_metrics_series_dropped", "Node-pair series the series budget left out at its latest selection (their cells fold into other)", ("family",), GAUGE)
        self.last_window = F("fabricflow_metrics_last_window_end_seconds", "Unix time of the latest closed window (or sample) per topic", ("stream",), GAUGE)
        self.messages = F("fabricflow_metrics_messages_total", "Kafka messages consumed", ("topic",), COUNTER)
        self.undecodable = F("fabricflow_metrics_undecodable_messages_total", "Messages or records skipped: not decodable, or fields missing / of the wrong type", ("topic", "reason"), COUNTER)
        self.skipped = F("fabricflow_metrics_skipped_records_total", "Records skipped on purpose (before_lookback, unknown_switch, older_sample, duplicate)", ("topic", "reason"), COUNTER)
        self.budget = PairBudget(series_budget, self.n2n_bytes, self.n2n_packets, self.n2n_syn, self.n2n_rst, self.folded)
        self._pair_families = {id(f) for f in (self.n2n_bytes, self.n2n_packets, self.n2n_syn, self.n2n_rst)}
        self._set_dropped()  # four series from the start, so the budget counts them before the first scrape
        self._port_time: dict[tuple[str, str], int] = {}
        self._port_peer: dict[tuple[str, int], str] = {}
        self._incast_seen = SeenIds()
        self._link_seen = SeenIds()
        self._alert_seen = SeenIds()
        self._change_seen = SeenIds()
        self._diag_seen = SeenIds()
        self._straggling: dict[tuple[str, str], int] = {}  # (job, node) flagged -> end of its first flagged window
        self._cell_seen = CellKeys(int(duplicate_horizon_s * 1000))
        self._firing: dict[str, tuple[tuple[str, str], float]] = {}  # dedup key -> ((rule, severity), last update)
        self._window_ms: dict[str, int] = {}
        self.matrix_window_ms = -1  # latest matrix window end seen
        self.selected_window_ms = -1  # window end at the last budget selection
        self.generation = 0  # scrapes served

    def _family(self, *args) -> Family:
        f = Family(*args)
        self.families.append(f)
        return f

    # ------------------------------------------------------------------ bookkeeping

    def set_inventory(self, inventory: Inventory) -> None:
        """The file's inventory (reloaded): the live job membership, once any arrived, replaces its jobs."""
        self.base_inventory = inventory
        self._use_inventory(self.live_jobs.apply(inventory))

    def add_jobs(self, rows: list[Mapping], now: float) -> int:
        """``inventory.jobs.v1`` rows: the live membership applied to the file's inventory when it changed."""
        if self.live_jobs.add(rows):
            self._use_inventory(self.live_jobs.apply(self.base_inventory))
        return len(rows)

    def _use_inventory(self, inventory: Inventory) -> None:
        self.inventory = inventory
        self._port_peer.clear()
        self.fabric.set_inventory(inventory)

    def count_message(self, kind: str, n: int = 1) -> None:
        self.messages.inc((self.topics[kind],), n)

    def count_undecodable(self, kind: str, reason: str, n: int = 1) -> None:
        self.undecodable.inc((self.topics[kind], reason), n)

    def count_skipped(self, kind: str, reason: str, n: int = 1) -> None:
        self.skipped.inc((self.topics[kind], reason), n)

    def _window(self, kind: str, end_ms: int) -> None:
        if end_ms > self._window_ms.get(kind, -1):
            self._window_ms[kind] = end_ms
            self.last_window.set((self.topics[kind],), end_ms / 1000.0)

    def _each(self, kind: str, records: Iterable[Mapping], apply) -> int:
        """``apply(record)`` for each record; bad ones counted and skipped. Records applied."""
        n = 0
        for r in records:
            try:
                done = apply(r)
            except (BadRecord, KeyError, TypeError, ValueError, AttributeError):
                self.count_undecodable(kind, "bad_record")
                continue
            n += done is not False  # False: a duplicate, skipped
        return n

    def add_values(self, kind: str, values: Iterable[bytes | None], now: float,
                   keys: Iterable[bytes | None] | None = None) -> int:
        """Raw message values of one topic kind, in order: decoded, applied; undecodable ones counted and
        skipped. ``keys``: the messages' Kafka keys (matrix cells are counted once per key and window).
        Records applied."""
        decoded, dkeys = [], []
        for v, k in zip(values, keys) if keys is not None else ((v, None) for v in values):
            self.count_message(kind)
            try:
                decoded.append(decode_value(kind, v))
            except Undecodable as e:
                self.count_undecodable(kind, e.reason)
                continue
            dkeys.append(k)
        if not decoded:
            return 0
        if kind in ("counters", "discards"):
            arr = decoded[0] if len(decoded) == 1 else np.concatenate(decoded)
            return self.add_counters(arr, now) if kind == "counters" else self.drops.add(self.inventory, arr, now)
        if kind == "matrix":
            return self.add_matrix(decoded, dkeys)
        return self._adders[kind](decoded, now)

    @property
    def _adders(self):
        return {"link": self.add_link_health, "incast": self.add_incast, "straggler": self.add_straggler,
                "alerts": self.add_alerts, "patterns": self.add_patterns, "changes": self.add_changes,
                "jobs": self.add_jobs}

    # ------------------------------------------------------------------ matrix.windows.v2

    def add_matrix(self, windows: Iterable, keys: Iterable[bytes | None] | None = None) -> int:
        """Matrix windows (``schemas.matrix.MatrixWindow``; a v1 cell dict counts as a one-cell window) of closed
        windows: counters advance by their cells' estimates, summed columnar (:mod:`.matrix`). ``keys``: each
        message's Kafka key (deterministic per window, level, shard and part): a message whose key was seen for
        its window is a re-emitted duplicate, its cells counted as skipped ``duplicate`` and not added again
        (:class:`CellKeys`). A message without a key is always added. Cells applied."""
        self.budget.fixed = self._fixed_series()
        applied = 0
        for item, key in zip(windows, keys) if keys is not None else ((w, None) for w in windows):
            try:
                w = as_window(item)
            except (BadCell, KeyError, TypeError, ValueError, AttributeError):
                self.count_undecodable("matrix", "bad_record")
                continue
            end = w.window_end_ms
            if key is not None and not self._cell_seen.add(end, window_identity(item, w, key)):
                self.count_skipped("matrix", "duplicate", max(len(w), 1))
                continue
            add_window(self, w)
            applied += len(w)
            self._window("matrix", end)
            if end > self.matrix_window_ms:
                self.matrix_window_ms = end
        return applied

    def reselect_due(self) -> bool:
        """A newer matrix window arrived since the last budget selection."""
        return self.matrix_window_ms > self.selected_window_ms

    def reselect(self) -> dict[str, int]:
        """Choose the node pairs with their own series (see :mod:`sinks.metrics.budget`)."""
        self.selected_window_ms = self.matrix_window_ms
        self.budget.fixed = self._fixed_series()
        return self.budget.reselect(self._jobs_at(self.matrix_window_ms))

    def _frontend(self, node: str) -> bool:
        """Whether ``node`` is in a frontend group (it sends requests to inference jobs: sinks.metrics.visibility)."""
        inv = self.inventory
        if self._groups[0] is not inv:
            self._groups = (inv, {n for n, g in inv.node_groups().items() if g in SERVING_GROUPS})
        return node in self._groups[1]

    def _jobs_at(self, t_ms: int) -> dict[str, str]:
        inv = self.inventory
        if not inv.node_names or not inv.job_names:
            return {}
        ids = np.arange(len(inv.node_names))
        jobs = inv.jobs_at(ids, np.full(len(ids), max(t_ms, 0), dtype=np.int64))
        return {n: j for n, j in zip(inv.node_names, jobs.tolist()) if j}

    def _fixed_series(self) -> int:
        """Series of every family outside the node-pair ones (the series gauge: one per family)."""
        return len(self.families) + sum(
            len(f) for f in self.families if id(f) not in self._pair_families and f is not self.series_gauge)

    # ------------------------------------------------------------------ counters.raw.v1

    def add_counters(self, arr: np.ndarray, now: float) -> int:
        """Counter samples (``COUNTER_DTYPE`` rows): the switches' latest counter values per port."""
        n = len(arr)
        if n == 0:
            return 0
        inv = self.inventory
        switches = inv.switch_for_agents(arr["exporter_addr"])
        peers, cfg_speed = inv.port_info(arr["exporter_addr"], arr["if_index"])
        cols = {c: arr[c].astype(np.uint64).tolist() for c in (
            "in_octets", "out_octets", "in_ucast_pkts", "in_mcast_pkts", "in_bcast_pkts", "out_ucast_pkts",
            "out_mcast_pkts", "out_bcast_pkts", "in_errors", "out_errors", "in_discards", "out_discards")}
        times = arr["time_received_ms"].tolist()
        ifx = arr["if_index"].tolist()
        speed = arr["if_speed"].astype(np.uint64).tolist()
        up = arr["if_oper_up"].tolist()
        applied = 0
        for i in range(n):
            sw = switches[i]
            if not sw:
                self.count_skipped("counters", "unknown_switch")
                continue
            port = str(ifx[i])
            pk = (sw, port)
            if times[i] < self._port_time.get(pk, -1):
                self.count_skipped("counters", "older_sample")
                continue
            self._port_time[pk] = times[i]
            key = (sw, port, peers[i] or "")
            c = {k: v[i] for k, v in cols.items()}
            self.port_rx_bytes.set(key, c["in_octets"], now)
            self.port_tx_bytes.set(key, c["out_octets"], now)
            self.port_rx_packets.set(key, c["in_ucast_pkts"] + c["in_mcast_pkts"] + c["in_bcast_pkts"], now)
            self.port_tx_packets.set(key, c["out_ucast_pkts"] + c["out_mcast_pkts"] + c["out_bcast_pkts"], now)
            self.port_errors.set((*key, "rx"), c["in_errors"], now)
            self.port_errors.set((*key, "tx"), c["out_errors"], now)
            self.port_discards.set((*key, "rx"), c["in_discards"], now)
            self.port_discards.set((*key, "tx"), c["out_discards"], now)
            self.port_speed.set(key, speed[i], now)
            if not math.isnan(cfg_speed[i]):
                self.port_cfg_speed.set(key, float(cfg_speed[i]), now)
            self.port_up.set(key, 1 if up[i] else 0, now)
            self._window("counters", times[i])
            applied += 1
        return applied

    def _peer(self, exporter: str, if_index: int) -> str:
        key = (exporter, if_index)
        hit = self._port_peer.get(key)
        if hit is None:
            try:
                a = np.frombuffer(addr16(exporter), dtype=np.uint8).reshape(1, 16)
            except ValueError:
                hit = ""
            else:
                hit = self.inventory.port_info(a, np.array([if_index]))[0][0] or ""
            if len(self._port_peer) > 100_000:
                self._port_peer.clear()
            self._port_peer[key] = hit
        return hit

    # ------------------------------------------------------------------ detector topics

    def add_link_health(self, recs: Iterable[Mapping], now: float) -> int:
        def apply(r):
            kind, verdict = _name(r, "kind"), self._verdict(r)
            exporter, ifx, t = _str(r, "exporter"), _int(r, "if_index"), _int(r, "time_ms")
            switch = node_label(_str(r, "switch"))
            key = (switch, str(ifx), self._peer(exporter, ifx))
            if kind == "sample":
                ui, uo = _float(r, "util_in"), _float(r, "util_out")
                if switch != UNKNOWN:
                    self.link_util.set((*key, "rx"), ui, now)
                    self.link_util.set((*key, "tx"), uo, now)
                    self.fabric.add_sample(switch, ifx, r.get("interval_ms") or 0, r.get("if_speed") or 0, ui, uo, now)
            elif self._link_seen.add((exporter, ifx, kind, t)):
                self.link_events.inc((*key, kind), 1)
                self._diagnosis("link", (exporter, ifx, kind, t), verdict)
            else:
                self.count_skipped("link", "duplicate")
            self._window("link", t)

        return self._each("link", recs, apply)

    @staticmethod
    def _verdict(rec: Mapping) -> str | None:
        """The record's diagnosis verdict (None: no diagnosis); BadRecord when it is not one of VERDICTS. Read
        before a record changes anything, so a bad one is skipped whole."""
        d = rec.get("diagnosis")
        if d is None:
            return None
        verdict = d.get("verdict") if isinstance(d, Mapping) else None
        if verdict not in VERDICTS:
            raise BadRecord(f"diagnosis verdict {verdict!r}")
        return verdict

    def _diagnosis(self, event: str, ref, verdict: str | None) -> None:
        """Count ``verdict`` the first time its event (``ref``) reaches it."""
        if verdict is not None and self._diag_seen.add((event, ref, verdict)):
            self.diagnoses.inc((event, verdict), 1)

    def add_incast(self, recs: Iterable[Mapping], now: float) -> int:
        def apply(r):
            state, ev, verdict = _str(r, "state"), _str(r, "event_id"), self._verdict(r)
            key = (node_label(_str(r, "destination")), node_label(_str(r, "destination_group")))
            fraction, end = _float(r, "fraction"), _int(r, "window_end_ms")
            if state not in ("open", "update", "close"):
                raise BadRecord(f"incast state {state!r}")
            if state == "open":
                if not self._incast_seen.add(ev):
                    self.count_skipped("incast", "duplicate")  # re-delivered: neither counted nor shown again
                    return
                self.incast_events.inc(key, 1)
            self._diagnosis("incast", ev, verdict)
            self.incast_active.set(key, 0 if state == "close" else 1, now)
            self.incast_fraction.set(key, fraction, now)
            self._window("incast", end)

        return self._each("incast", recs, apply)

    def add_straggler(self, recs: Iterable[Mapping], now: float) -> int:
        def apply(r):
            key = (node_label(_str(r, "job")), node_label(_str(r, "node")))
            score, flagged, end = _float(r, "score"), r["straggler"], _int(r, "window_end_ms")
            verdict = self._verdict(r)
            if type(flagged) is not bool:
                raise BadRecord("straggler is not a boolean")
            if flagged:
                start = self._straggling.setdefault(key, end)  # the episode: from its first flagged window
                self._diagnosis("straggler", (*key, start), verdict)
            else:
                self._straggling.pop(key, None)
            self.straggler_score.set(key, score, now)
            self.straggler_flagged.set(key, 1 if flagged else 0, now)
            self._window("straggler", end)

        return self._each("straggler", recs, apply)

    def add_alerts(self, recs: Iterable[Mapping], now: float) -> int:
        def apply(r):
            rule, sev, state = _name(r, "rule"), _name(r, "severity"), _str(r, "state")
            dk, first, end = _str(r, "dedup_key"), _int(r, "first_seen_ms"), _int(r, "window_end_ms")
            key, verdict = (rule, sev), self._verdict(r)
            if state not in ("firing", "updated", "resolved"):
                raise BadRecord(f"alert state {state!r}")
            self._diagnosis(rule, (dk, first), verdict)
            if state == "firing":
                if self._alert_seen.add((dk, first)):
                    self.alerts_total.inc(key, 1)
                else:
                    self.count_skipped("alerts", "duplicate")
                self._firing[dk] = (key, now)
            elif state == "updated":
                self.alerts_total.ensure(key)
                self._firing[dk] = (key, now)
            elif state == "resolved":
                self._firing.pop(dk, None)
            else:
                raise BadRecord(f"alert state {state!r}")
            self._window("alerts", end)

        return self._each("alerts", recs, apply)

    def add_patterns(self, recs: Iterable[Mapping], now: float) -> int:
        def apply(r):
            job, period, end = _str(r, "job"), _int(r, "current_period_ms"), _int(r, "window_end_ms")
            if not job:
                raise BadRecord("pattern without a job")
            if r.get("kind") == "pattern_timeline":  # per-window phases: no window-level period in it
                self._window("patterns", end)
                return
            if period > 0:
                self.period.set((job,), period / 1000.0, now)
            else:
                self.period.remove((job,))  # not periodic (now): no value rather than a made-up one
            self._window("patterns", end)

        return self._each("patterns", recs, apply)

    def add_changes(self, recs: Iterable[Mapping], now: float) -> int:
        def apply(r):
            mark, t = _str(r, "mark_id"), _int(r, "time_ms")
            job = node_label(_str(r, "job")) if r.get("job") else ""
            scope = ("job" if r.get("job") else "node" if r.get("node") else "link" if r.get("switch")
                     else "pair" if r.get("src_group") else "cluster")
            if not self._change_seen.add(mark):
                self.count_skipped("changes", "duplicate")
                return False
            self.changes.inc((job, scope), 1)
            if t / 1000.0 > self.change_time.values.get((job, scope), -1):
                self.change_time.set((job, scope), t / 1000.0)

        return self._each("changes", recs, apply)

    # ------------------------------------------------------------------ exposition

    def _set_dropped(self) -> None:
        self.dropped.values = {(f.name,): self.budget.dropped.get(f.name, 0)
                               for f in (self.n2n_bytes, self.n2n_packets, self.n2n_syn, self.n2n_rst)}

    def _derive(self, now: float) -> None:
        for f in self.families:
            f.expire(now)
        # firing alerts (entries not updated for ttl_s are taken as resolved: the processor that held them is gone)
        for dk in [dk for dk, (_k, t) in self._firing.items() if now - t > self.ttl_s]:
            del self._firing[dk]
        firing: dict[tuple[str, str], int] = dict.fromkeys(self.alerts_total.values, 0)
        for key, _t in self._firing.values():
            firing[key] = firing.get(key, 0) + 1
        self.alerts_firing.values = dict(firing)
        # node bandwidth: live port speed where known, else inventory capacity
        live: dict[str, float] = {}
        for (_sw, _port, node), bps in self.port_speed.values.items():
            if node and bps > 0:
                live[node] = live.get(node, 0.0) + bps / 8.0
        bw = {}
        for node, cap in self.inventory.node_capacities().items():
            bw[node] = cap / 8.0
        bw.update(live)
        self.bandwidth.values = {(n, d): v for n, v in bw.items() for d in ("rx", "tx")}
        self._set_dropped()
        self.series_gauge.values = {}
        counts = {(f.name,): len(f) for f in self.families if f is not self.series_gauge}
        counts[(self.series_gauge.name,)] = len(counts) + 1
        self.series_gauge.values = counts

    def collect(self, now: float | None = None):
        """Metric families of the current values (prometheus_client custom collector protocol)."""
        self._derive(_time.time() if now is None else now)
        return [f.family() for f in self.families]

    def exposition(self, now: float | None = None) -> bytes:
        """The /metrics body: ``generate_latest`` of :meth:`collect`, rendered by :meth:`Family.exposition`."""
        self._derive(_time.time() if now is None else now)
        return "".join(f.exposition() for f in self.families).encode()

    def scraped(self) -> None:
        """A scrape was served: counters born since the previous one show their values from now on."""
        self.generation += 1
        for f in self.families:
            f.scraped()

    def series_count(self) -> int:
        return sum(len(f) for f in self.families)
