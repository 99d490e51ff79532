"""Link health from sFlow interface counter samples -> LinkHealth dicts (link_health.avsc).

Per (exporter, if_index), consecutive counter samples give utilisation, error and discard rates
(kind ``sample``) and the link events ``counter_reset``, ``speed_change`` / ``link_downgrade``,
``oper_down`` / ``oper_up``, ``error_burst``, ``discard_burst``, ``packet_drops`` and
``sustained_utilisation``, each record naming the node behind the port and its job. sFlow dropped-packet
notifications (:meth:`LinkHealthDetector.add_discards`, kept per port by :class:`.drops.PortDrops`) give
every link event of a port the reasons of the packets it dropped in the counter interval (its detail and
the diagnosis' evidence), and ``packet_drops`` when they alone pass ``drop_notify_per_s``. :meth:`LinkHealthDetector.node_state` gives the
other detectors a node's port as last seen (storage_bound headroom, straggler / incast cause links).
Samples are sorted by (port, time) and the k-th sample of every port in a batch is processed in one
numpy step. Rules, wrap handling and parameters: docs/detectors.md, "Link health".
Pure logic: no clock, no Kafka.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from pydantic import Field

from schemas.columns import addr_str

from ..params import detector_params
from .drops import DropSummary, PortDrops

__all__ = ["LinkHealthConfig", "LinkHealthDetector"]

COUNTERS = ("in_octets", "out_octets", "in_errors", "out_errors", "in_discards", "out_discards")
_OCTETS = {"in_octets", "out_octets"}
_U32 = np.uint64(2**32)
_KIND_ORDER = {k: i for i, k in enumerate(
    ["counter_reset", "sample", "speed_change", "link_downgrade", "oper_down", "oper_up", "error_burst",
     "discard_burst", "packet_drops", "sustained_utilisation"])}
RECENT = 8  # counter samples per port kept for node_state's discards since a time
# link events that make a port "faulty" for a while (node_state), by code in the ``event`` state column
EVENT_KINDS = ("", "link_downgrade", "oper_down", "error_burst", "discard_burst")


@detector_params
class LinkHealthConfig:
    """Link health parameters (docs/detectors.md, "Link health")."""

    emit_samples: bool = Field(True, description="Emit one kind=sample record per counter sample (after the first)")
    error_burst_per_s: float = Field(10.0, ge=0, description="In + out errors per second that start an error burst")
    util_threshold: float = Field(0.7, gt=0, le=1, description="Utilisation above which a sustained-utilisation episode runs")
    sustained_s: float = Field(600.0, ge=0, description="Seconds above util_threshold that make the episode an event")
    plausibility: float = Field(1.5, ge=1, description="Allowed factor over line rate before a counter delta counts as a reset")
    unknown_speed_bps: float = Field(400e9, gt=0, description="Line rate assumed for plausibility when ifSpeed is 0")
    discard_burst_per_s: float = Field(100.0, ge=0, description="In + out discards per second that start a discard burst (an incast's drops show up as ifOutDiscards)")
    event_hold_s: float = Field(60.0, ge=0, description="Seconds either side of a query time that a port's last link event still counts as open in node_state (storage_bound headroom, cause links)")
    flap_window_s: float = Field(600.0, gt=0, description="Seconds over which a port's oper-down transitions are counted (node_state flaps: two or more make the port flapping for the diagnosis)")
    drop_notify_per_s: float = Field(1.0, gt=0, description="sFlow dropped-packet notifications per second of a port (over a counter interval) that start a packet_drops episode")
    drop_horizon_s: float = Field(120.0, gt=0, description="Seconds of a port's dropped-packet notifications kept for link events' drop reasons (at least a counter interval and event_hold_s)")


_STATE_FIELDS = {
    "t": np.int64, "uptime": np.int64, "seq": np.int64, "speed": np.int64, "oper": np.bool_,
    "above_since": np.int64, "sustained_sent": np.bool_, "burst_open": np.bool_,
    **{c: np.uint64 for c in COUNTERS},
    # last derived values and events, for node_state (restored as defaults from older snapshots)
    "util": np.float64, "out_disc": np.float64, "discard_open": np.bool_, "event": np.int64, "event_t": np.int64,
    # for the diagnosis: errors/s and length of the last interval with rates, admin status (older snapshots: up)
    "err": np.float64, "iv": np.int64, "admin": np.bool_,
    "drops_open": np.bool_,  # a packet_drops episode (notifications at or above drop_notify_per_s) is open
}
_DEFAULTS = {"event_t": -1, "admin": 1}


class LinkHealthDetector:
    def __init__(self, config: LinkHealthConfig = LinkHealthConfig(), switch_name: Callable[[str], str] | None = None,
                 port_info: Callable[[str, int], tuple[str, float]] | None = None,
                 node_job: Callable[[str, int], str] | None = None):
        self.config = config
        self.switch_name = switch_name or (lambda exporter: exporter)
        self.node_job = node_job or (lambda node, t: "")
        self.keys: list[tuple[str, int]] = []
        self.slot: dict[tuple[str, int], int] = {}
        self.st = {k: np.zeros(0, dtype=t) for k, t in _STATE_FIELDS.items()}
        self.stale = 0
        self.recent: dict[int, list[list]] = {}  # slot -> last RECENT [time_ms, out discards/s] with rates
        self.downs: dict[int, list[int]] = {}  # slot -> times of its oper-down transitions within flap_window_s
        # link record -> its diagnosis or None (the engine's Diagnoser.link); called once the record's port
        # state includes the sample, so it reads that port's state at that sample however messages are batched
        self.diagnose: Callable[[dict], dict | None] | None = None
        self._slot_cache: dict[bytes, np.ndarray] = {}  # exporter + ifIndex columns -> slots (slots never move)
        self.drops = PortDrops(config.drop_horizon_s)
        self._drop_mask: np.ndarray | None = None  # per slot: the port has notifications (None: to compute)
        self.set_port_info(port_info)

    def add_discards(self, arr: np.ndarray, jobs: np.ndarray | None = None) -> int:
        """sFlow dropped-packet notifications (DISCARD_DTYPE rows; ``jobs``: each dropped packet's job) -> their
        ports' drop reasons; returns how many were attributed to a port. Apply them before the counter samples
        of the same time: a link event reads the notifications received within its counter interval."""
        n = self.drops.add(arr, jobs)
        if n:
            self._drop_mask = None
        return n

    def _has_drops(self, slots: np.ndarray) -> np.ndarray:
        mask = self._drop_mask
        if mask is None or len(mask) < len(self.keys):
            ports = self.drops.ports
            mask = self._drop_mask = np.fromiter((k in ports for k in self.keys), dtype=bool, count=len(self.keys))
        return mask[slots]

    def drop_summary(self, slot: int, t_ms: int, interval_ms: int) -> DropSummary:
        """The notifications of the port in its counter interval before ``t_ms`` (``event_hold_s`` without one)."""
        span = interval_ms if interval_ms > 0 else int(self.config.event_hold_s * 1000)
        return self.drops.summary(self.keys[slot], t_ms - span, t_ms)

    def set_port_info(self, port_info: Callable[[str, int], tuple[str, float]] | None) -> None:
        """(exporter text, ifIndex) -> (node behind the port or "", configured speed bit/s or NaN)."""
        self.port_info = port_info or (lambda exporter, if_index: ("", math.nan))
        self.port_node: list[str] = []
        self.port_conf: list[float] = []
        self.node_slots: dict[str, list[int]] = {}
        for key in self.keys:
            self._map_slot(key)

    def _map_slot(self, key: tuple[str, int]) -> None:
        node, conf = self.port_info(*key)
        node, conf = str(node or ""), float(conf) if conf is not None else math.nan
        self.port_node.append(node)
        self.port_conf.append(conf)
        if node:
            self.node_slots.setdefault(node, []).append(len(self.port_node) - 1)

    def _slots(self, batch: np.ndarray) -> np.ndarray:
        """The state slot of each row's port (new ports get one). Agents send the same ports in the same order
        every polling interval: the slots of a (exporter, ifIndex) column pair seen before come from a cache."""
        addrs = np.ascontiguousarray(batch["exporter_addr"], dtype=np.uint8)
        key = addrs.tobytes() + np.ascontiguousarray(batch["if_index"], dtype=np.int64).tobytes()
        hit = self._slot_cache.get(key)
        if hit is not None:
            return hit
        slots = self._new_slots(batch, addrs)
        slots.flags.writeable = False
        if len(self._slot_cache) >= 256:
            self._slot_cache.clear()
        self._slot_cache[key] = slots
        return slots

    def _new_slots(self, batch: np.ndarray, addrs: np.ndarray) -> np.ndarray:
        view = addrs.view(np.dtype((np.void, 16))).ravel()
        uaddr, ainv = np.unique(view, return_inverse=True)
        texts = [addr_str(np.frombuffer(u.tobytes(), np.uint8)) for u in uaddr]
        comb = ainv.ravel().astype(np.int64) * (2**32) + (batch["if_index"].astype(np.int64) & 0xFFFFFFFF)
        ukey, kinv = np.unique(comb, return_inverse=True)
        lut = np.empty(len(ukey), dtype=np.int64)
        for i, k in enumerate(ukey.tolist()):
            key = (texts[k >> 32], k & 0xFFFFFFFF)
            s = self.slot.get(key)
            if s is None:
                s = self.slot[key] = len(self.keys)
                self.keys.append(key)
                self._map_slot(key)
            lut[i] = s
        n = len(self.keys)
        if n > len(self.st["t"]):
            grow = max(n, 2 * len(self.st["t"]))
            for k, arr in self.st.items():
                new = np.zeros(grow, dtype=arr.dtype)
                new[: len(arr)] = arr
                if k in ("t",):
                    new[len(arr):] = np.iinfo(np.int64).min  # no previous sample
                if k in ("above_since", "event_t"):
                    new[len(arr):] = -1
                self.st[k] = new
        return lut[kinv.ravel()]

    def process(self, batch: np.ndarray, message: np.ndarray | None = None, emit: bool = True) -> list[dict]:
        """Counter samples (COUNTER_DTYPE array) -> LinkHealth dicts, sorted by (time, exporter, if_index, kind).

        ``message``: for the samples of several counter messages in one array, each row's message number
        (non-decreasing): the result is what processing the messages one after the other would give (a
        sample older than one of the same port in an earlier message is stale; outputs in message order).
        ``emit=False``: the port state is updated exactly as with ``emit``, no record is built (returns []).
        """
        if len(batch) == 0:
            return []
        slots = self._slots(batch)
        part = np.zeros(len(batch), dtype=np.int64) if message is None else np.asarray(message, dtype=np.int64)
        order = np.lexsort((batch["sample_sequence"], batch["time_received_ms"], part, slots))
        s_sorted = slots[order]
        first = np.r_[True, s_sorted[1:] != s_sorted[:-1]]
        start_idx = np.maximum.accumulate(np.where(first, np.arange(len(order)), 0))
        rank = np.arange(len(order)) - start_idx
        out: list[tuple[int, dict]] = []
        for r in range(int(rank.max()) + 1):
            rows = order[rank == r]
            out.extend(self._step(batch[rows], slots[rows], part[rows], emit))
        if not emit:
            return []
        out.sort(key=lambda pd: (pd[0], pd[1]["time_ms"], pd[1]["exporter"], pd[1]["if_index"],
                                 _KIND_ORDER.get(pd[1]["kind"], 99)))
        return [d for _p, d in out]

    def _delta(self, cur: np.ndarray, prev: np.ndarray, limit: np.ndarray):
        """(delta, bad) with 32/64-bit wrap handling; bad marks implausible steps."""
        fwd = cur >= prev
        d_fwd = cur - np.where(fwd, prev, cur)
        small = (cur < _U32) & (prev < _U32)
        d32 = np.where(small & ~fwd, cur + _U32 - np.where(small & ~fwd, prev, 0), 0).astype(np.uint64)
        with np.errstate(over="ignore"):
            d64 = cur - prev  # modular uint64 arithmetic = 64-bit wrap
        lim = limit.astype(np.float64)
        use32 = ~fwd & small & (d32.astype(np.float64) <= lim)
        use64 = ~fwd & ~use32 & (d64.astype(np.float64) <= lim)
        delta = np.where(fwd, d_fwd, np.where(use32, d32, np.where(use64, d64, 0))).astype(np.uint64)
        bad = (fwd & (d_fwd.astype(np.float64) > lim)) | (~fwd & ~use32 & ~use64)
        return delta, bad

    def _step(self, b: np.ndarray, slots: np.ndarray, part: np.ndarray, emit: bool = True) -> list[tuple[int, dict]]:
        """One sample of each of ``slots`` (distinct ports) -> (message number, LinkHealth dict) pairs
        (none without ``emit``: state update only)."""
        cfg = self.config
        st = self.st
        t = b["time_received_ms"].astype(np.int64)
        uptime = b["agent_uptime_ms"].astype(np.int64)
        seq = b["sample_sequence"].astype(np.int64)
        speed = b["if_speed"].astype(np.int64)
        oper = b["if_oper_up"].astype(bool)
        admin = b["if_admin_up"].astype(bool)
        cur = {c: b[c].astype(np.uint64) for c in COUNTERS}  # int64 -> same 64 bits as uint64

        p_t = st["t"][slots]
        has_prev = p_t != np.iinfo(np.int64).min
        stale = has_prev & ((t < p_t) | ((t == p_t) & (seq <= st["seq"][slots])))
        self.stale += int(stale.sum())
        live = ~stale
        cmp_ = has_prev & live  # rows compared with a previous sample

        p_up = st["uptime"][slots]
        uptime_reset = cmp_ & (uptime < p_up)
        use_up = (uptime > p_up) & (p_up > 0)
        interval = np.where(use_up, uptime - p_up, t - p_t)
        interval = np.where(cmp_, np.maximum(interval, 1), 0)
        secs = interval / 1000.0
        line = np.where(speed > 0, speed, cfg.unknown_speed_bps).astype(np.float64)
        lim_oct = line / 8.0 * secs * cfg.plausibility + 1.0
        lim_pkt = line / (8.0 * 64) * secs * cfg.plausibility + 1.0
        # all six counters in one (6, n) pass: _delta is elementwise, and numpy's per-call cost dominates here
        d, bd = self._delta(np.stack([cur[c] for c in COUNTERS]), np.stack([st[c][slots] for c in COUNTERS]),
                            np.stack([lim_oct if c in _OCTETS else lim_pkt for c in COUNTERS]))
        deltas = dict(zip(COUNTERS, d.astype(np.float64)))
        bad = bd.any(axis=0)
        reset = cmp_ & (uptime_reset | bad)
        ok = cmp_ & ~reset
        with np.errstate(divide="ignore", invalid="ignore"):
            bits_cap = secs * speed
            util_in = np.where(ok & (speed > 0), deltas["in_octets"] * 8.0 / bits_cap, 0.0)
            util_out = np.where(ok & (speed > 0), deltas["out_octets"] * 8.0 / bits_cap, 0.0)
            rate = {c: np.where(ok, deltas[c] / secs, 0.0) for c in COUNTERS[2:]}

        p_speed = st["speed"][slots]
        speed_chg = cmp_ & (speed != p_speed)
        p_oper = st["oper"][slots]
        oper_chg = cmp_ & (oper != p_oper)

        # error bursts (episode: open while above threshold)
        err_ps = rate["in_errors"] + rate["out_errors"]
        burst_now = ok & (err_ps >= cfg.error_burst_per_s)
        burst_was = st["burst_open"][slots]
        burst_start = burst_now & ~burst_was
        new_burst = np.where(ok, burst_now, burst_was)

        # discard bursts (episode: open while above threshold)
        disc_ps = rate["in_discards"] + rate["out_discards"]
        disc_now = ok & (disc_ps >= cfg.discard_burst_per_s)
        disc_was = st["discard_open"][slots]
        disc_start = disc_now & ~disc_was
        new_disc = np.where(ok, disc_now, disc_was)

        # packet_drops episodes: the port's notifications over the interval (ports that have any)
        drops_ps = np.zeros(len(slots))
        drops_was = st["drops_open"][slots]
        if self.drops.ports:
            cand = np.flatnonzero(ok & self._has_drops(slots))
            for i, s_, t_, iv_ in zip(cand.tolist(), slots[cand].tolist(), t[cand].tolist(), interval[cand].tolist()):
                drops_ps[i] = self.drops.summary(self.keys[s_], t_ - iv_, t_)["total"] / (iv_ / 1000.0)
            drops_now = ok & (drops_ps >= cfg.drop_notify_per_s)
            drops_start = drops_now & ~drops_was & ~disc_start  # a discard burst starting now carries the reasons
            new_drops = np.where(ok, drops_now, drops_was)
        else:  # no notification seen: nothing opens, every compared port closes its episode
            drops_start = np.zeros(len(slots), dtype=bool)
            new_drops = ~ok & drops_was

        # a port's first sample below the speed the inventory configures for it
        conf = np.array(self.port_conf, dtype=np.float64)[slots] if len(slots) else np.zeros(0)
        slow_start = live & ~has_prev & (speed > 0) & np.isfinite(conf) & (speed < np.nan_to_num(conf, nan=0.0))
        # a port's first sample oper down while admin up, on a port the inventory names (a node behind it or a
        # configured speed): a link broken before telemetry began, flagged at once like a later oper_down
        # (ports the inventory does not name are often admin up with no cable: not judged)
        down_start = live & ~has_prev & admin & ~oper & ~slow_start
        if down_start.any():
            named = np.fromiter((bool(self.port_node[x]) for x in slots[down_start].tolist()), dtype=bool)
            down_start[np.flatnonzero(down_start)[~(named | np.isfinite(conf[down_start]))]] = False

        # sustained utilisation
        util = np.maximum(util_in, util_out)
        above = ok & (util >= cfg.util_threshold)
        since = st["above_since"][slots]
        since = np.where(above & (since < 0), p_t, since)
        since = np.where(ok & ~above, -1, since)
        sent = st["sustained_sent"][slots] & ~(ok & ~above)
        sustained = above & ~sent & (t - since >= cfg.sustained_s * 1000.0)
        sent = sent | sustained

        # state update for live rows
        ls = slots[live]
        st["t"][ls] = t[live]
        st["uptime"][ls] = uptime[live]
        st["seq"][ls] = seq[live]
        st["speed"][ls] = speed[live]
        st["oper"][ls] = oper[live]
        st["above_since"][ls] = np.where(cmp_, since, -1)[live]
        st["sustained_sent"][ls] = np.where(cmp_, sent, False)[live]
        st["burst_open"][ls] = np.where(cmp_, new_burst, False)[live]
        st["discard_open"][ls] = np.where(cmp_, new_disc, False)[live]
        st["drops_open"][ls] = np.where(cmp_, new_drops, False)[live]
        st["util"][ls] = np.where(ok, util, st["util"][slots])[live]
        st["out_disc"][ls] = np.where(ok, rate["out_discards"], st["out_disc"][slots])[live]
        st["err"][ls] = np.where(ok, err_ps, st["err"][slots])[live]
        st["iv"][ls] = np.where(ok, interval, st["iv"][slots])[live]
        st["admin"][ls] = admin[live]
        went_down = cmp_ & oper_chg & ~oper
        if went_down.any():
            keep = cfg.flap_window_s * 1000
            for s_, t_ in zip(slots[went_down].tolist(), t[went_down].tolist()):
                self.downs[s_] = [x for x in self.downs.get(s_, []) if t_ - x <= keep] + [t_]
        # the last time each port was seen in a faulty state, and which (node_state's hold counts from it)
        below = (speed > 0) & (speed < np.nan_to_num(conf, nan=0.0))
        down = (speed_chg & (speed < p_speed)) | below
        ev = np.select([down, ~oper, np.where(ok, burst_now, False), np.where(ok, disc_now, False)], [1, 2, 3, 4], 0)
        hit = live & (ev > 0)
        st["event"][slots[hit]] = ev[hit]
        st["event_t"][slots[hit]] = t[hit]
        for s_, t_, d_ in zip(slots[ok].tolist(), t[ok].tolist(), rate["out_discards"][ok].tolist()):
            self.recent[s_] = (self.recent.get(s_, []) + [[t_, d_]])[-RECENT:]
        for c in COUNTERS:
            st[c][ls] = cur[c][live]

        # outputs (one dict per emitted record)
        if not emit:
            return []
        emit_rows = np.flatnonzero((cmp_ & (reset | speed_chg | oper_chg | burst_start | disc_start | sustained
                                            | drops_start | (ok & cfg.emit_samples))) | slow_start | down_start)
        if len(emit_rows) == 0:
            return []
        # Python values of the emitted rows, column by column (no numpy scalar per field)
        r = emit_rows
        return self._records([x[r].tolist() for x in (
            part, slots, t, interval, speed, p_speed, util_in, util_out, rate["in_errors"], rate["out_errors"],
            rate["in_discards"], rate["out_discards"], oper, reset, uptime_reset, speed_chg, oper_chg, burst_start,
            err_ps, sustained, since, disc_start, disc_ps, slow_start, conf, drops_start, drops_ps, down_start)])

    def _records(self, cols: list[list]) -> list[tuple[int, dict]]:
        """(message number, LinkHealth dict) pairs of the emitted rows, given as Python lists column by column
        (the order :meth:`_step` builds)."""
        cfg = self.config
        out: list[tuple[int, dict]] = []
        switch: dict[str, str] = {}
        jobs = iter(self._jobs([self.port_node[s_] for s_ in cols[1]], cols[2]))
        for row in zip(*cols):
            (m, slot, t_i, iv, sp, psp, u_in, u_out, ie, oe, idc, odc, op, rst, upr, sch, och, bst, eps, sus, snc,
             dst_, dps, slw, cf, pdr, pdps, dwn) = row
            exporter, if_index = self.keys[slot]
            sw = switch.get(exporter)
            if sw is None:
                sw = switch[exporter] = str(self.switch_name(exporter))
            node = self.port_node[slot]
            if slw or dwn:  # first sample of the port, below its configured speed or down: no rates yet
                kind, prev, detail = (
                    ("link_downgrade", int(cf), f"if_speed {sp} bps below the configured {int(cf)} bps at the first sample")
                    if slw else ("oper_down", sp, "oper status down at the first sample (admin up)"))
                out.append((m, {"time_ms": t_i, "interval_ms": 0, "kind": kind, "exporter": exporter,
                                "switch": sw, "if_index": int(if_index), "if_speed": sp, "previous_if_speed": prev,
                                "util_in": 0.0, "util_out": 0.0, "in_errors_per_s": 0.0, "out_errors_per_s": 0.0,
                                "in_discards_per_s": 0.0, "out_discards_per_s": 0.0, "oper_up": op,
                                "detail": detail, "node": node, "job": next(jobs), "diagnosis": None}))
                continue
            base = {
                "time_ms": t_i,
                "interval_ms": iv,
                "kind": "sample",
                "exporter": exporter,
                "switch": sw,
                "if_index": int(if_index),
                "if_speed": sp,
                "previous_if_speed": psp,
                "util_in": u_in,
                "util_out": u_out,
                "in_errors_per_s": ie,
                "out_errors_per_s": oe,
                "in_discards_per_s": idc,
                "out_discards_per_s": odc,
                "oper_up": op,
                "detail": "",
                "node": node,
                "job": next(jobs),
                "diagnosis": None,  # the engine diagnoses the event kinds (processors/logic/diagnosis)
            }
            if rst:
                why = "agent uptime went backwards" if upr else "counter step not explainable by a wrap"
                out.append((m, base | {"kind": "counter_reset", "detail": why}))
            elif cfg.emit_samples:
                out.append((m, base))
            if sch:
                kind = "link_downgrade" if sp < psp else "speed_change"
                out.append((m, base | {"kind": kind, "detail": f"if_speed {psp} -> {sp} bps"}))
            if och:
                out.append((m, base | {"kind": "oper_up" if op else "oper_down", "detail": "oper status changed"}))
            if bst:
                out.append((m, base | {"kind": "error_burst", "detail": f"{eps:.1f} errors/s"}))
            if dst_:
                out.append((m, base | {"kind": "discard_burst", "detail": f"{dps:.1f} discards/s"}))
            if pdr:
                out.append((m, base | {"kind": "packet_drops", "detail": f"{pdps:.1f} dropped-packet notifications/s"}))
            if sus:
                out.append((m, base | {"kind": "sustained_utilisation",
                                       "detail": f"utilisation >= {cfg.util_threshold:g} since {snc} ms"}))
        self._add_drop_reasons(out)
        return out

    def _add_drop_reasons(self, out: list[tuple[int, dict]]) -> None:
        """Each link event (not the samples) gets its port's drop reasons of the interval in its detail, and the
        diagnosis reads them (``_drops``, removed once it has)."""
        if not self.drops.ports:
            if self.diagnose is not None:
                for _m, d in out:
                    if d["kind"] != "sample":
                        d["diagnosis"] = self.diagnose(d)
            return
        for _m, d in out:
            if d["kind"] == "sample":
                continue
            slot = self.slot[(d["exporter"], d["if_index"])]
            summ = self.drop_summary(slot, d["time_ms"], d["interval_ms"])
            if summ["total"]:
                lost = f", {summ['lost']} more lost by the agent" if summ["lost"] else ""
                jobs = ", ".join(f"{j} {n}" for j, n in summ["jobs"][:3])
                note = f"dropped-packet notifications: {summ.text()}{lost}" + (f" (traffic of {jobs})" if jobs else "")
                d["detail"] = f"{d['detail']}; {note}" if d["detail"] else note
            if self.diagnose is not None:
                d["_drops"] = summ
                d["diagnosis"] = self.diagnose(d)
                del d["_drops"]

    def _jobs(self, nodes: list[str], times: list[int]) -> list[str]:
        """The job of each node at each time ("" for no node): one vectorised lookup when ``node_job`` has a
        ``many(nodes, times)`` (the inventory's), else one call per row."""
        many = getattr(self.node_job, "many", None)
        if many is not None:
            return many(nodes, times)
        return [self.node_job(n, t) if n else "" for n, t in zip(nodes, times)]

    def live_speed(self, node: str) -> float | None:
        """Last sampled ifSpeed (bit/s) of the port behind ``node`` (the lowest when several), None when unknown."""
        speeds = [int(self.st["speed"][s]) for s in self.node_slots.get(node, ())
                  if self.st["t"][s] != np.iinfo(np.int64).min and self.st["speed"][s] > 0]
        return float(min(speeds)) if speeds else None

    def node_state(self, node: str, now_ms: int, since_ms: int | None = None) -> dict | None:
        """The port behind ``node`` as last sampled (the worst one when several), None when no counter
        sample of it was seen: ``port`` (the link output key ``exporter|if_index``), ``switch``,
        ``if_index``, ``util`` (max of in/out of the last interval), ``if_speed``, ``configured_bps``
        (NaN: not configured), ``out_discards_per_s`` and ``event``: the open link event ("" none):
        oper_down, link_downgrade (below the configured speed), error_burst / discard_burst (still
        above threshold), or the port was last seen in one of these states (or just downgraded)
        within ``event_hold_s`` before ``now_ms`` (or after it: callers ask about windows that
        closed a lateness ago). ``since_ms``: ``out_discards_per_s`` is then the highest of the port's
        (last 8) samples taken after it (their intervals reach past it), the last sample's when none is,
        and ``samples_since`` counts those samples. For the diagnosis also: ``errors_per_s`` (in + out,
        last interval), ``sampled_ms`` (time of the last sample), ``interval_ms`` (its interval),
        ``admin_up``, ``oper_up`` and ``flaps`` (oper-down transitions within ``flap_window_s`` of
        ``now_ms``)."""
        best = None
        for s in self.node_slots.get(node, ()):
            d = self._slot_state(s, now_ms, since_ms)
            if d is not None and (best is None or (bool(d["event"]), d["util"]) > (bool(best["event"]), best["util"])):
                best = d
        return best

    def port_state(self, exporter: str, if_index: int, now_ms: int) -> dict | None:
        """:meth:`node_state` of one port by its key, None when it was never sampled."""
        s = self.slot.get((exporter, int(if_index)))
        return None if s is None else self._slot_state(s, now_ms, None)

    def _slot_state(self, s: int, now_ms: int, since_ms: int | None) -> dict | None:
        st = self.st
        if st["t"][s] == np.iinfo(np.int64).min:
            return None
        speed, conf = int(st["speed"][s]), self.port_conf[s]
        event = ""
        if not st["oper"][s]:
            event = "oper_down"
        elif speed > 0 and math.isfinite(conf) and speed < conf:
            event = "link_downgrade"
        elif st["burst_open"][s]:
            event = "error_burst"
        elif st["discard_open"][s]:
            event = "discard_burst"
        elif st["event_t"][s] >= 0 and now_ms - int(st["event_t"][s]) <= self.config.event_hold_s * 1000:
            event = EVENT_KINDS[int(st["event"][s])]
        exporter, if_index = self.keys[s]
        window = self.config.flap_window_s * 1000
        hold = self.config.event_hold_s * 1000
        d = {"port": f"{exporter}|{if_index}", "switch": str(self.switch_name(exporter)), "if_index": int(if_index),
             "util": float(st["util"][s]), "if_speed": speed, "configured_bps": conf,
             "out_discards_per_s": float(st["out_disc"][s]), "event": event,
             "errors_per_s": float(st["err"][s]), "sampled_ms": int(st["t"][s]), "interval_ms": int(st["iv"][s]),
             "admin_up": bool(st["admin"][s]), "oper_up": bool(st["oper"][s]),
             "flaps": sum(1 for x in self.downs.get(s, ()) if now_ms - window <= x <= now_ms + hold)}
        if since_ms is not None:
            after = [d_ for t_, d_ in self.recent.get(s, ()) if t_ > since_ms]
            d["samples_since"] = len(after)
            if after:
                d["out_discards_per_s"] = float(max(after))
        return d

    def snapshot(self) -> dict:
        n = len(self.keys)
        conv = {"f": float, "b": bool}
        return {
            "keys": [[e, i] for e, i in self.keys],
            "state": {k: [conv.get(v.dtype.kind, int)(x) for x in v[:n].tolist()] for k, v in self.st.items()},
            "stale": self.stale,
            "recent": {str(k): v for k, v in sorted(self.recent.items())},
            "downs": {str(k): list(v) for k, v in sorted(self.downs.items())},
            "drops": self.drops.snapshot(),
        }

    def restore(self, snap: dict) -> None:
        self.keys = [(e, int(i)) for e, i in snap["keys"]]
        self.slot = {k: s for s, k in enumerate(self.keys)}
        self._slot_cache = {}
        n = len(self.keys)
        self.st = {k: np.asarray(snap["state"][k], dtype=t) if k in snap["state"]
                   else np.full(n, _DEFAULTS.get(k, 0), dtype=t) for k, t in _STATE_FIELDS.items()}
        self.stale = int(snap["stale"])
        self.recent = {int(k): [[int(t), float(d)] for t, d in v] for k, v in snap.get("recent", {}).items()}
        self.downs = {int(k): [int(t) for t in v] for k, v in snap.get("downs", {}).items()}
        self.drops = PortDrops(self.config.drop_horizon_s)
        self.drops.restore(snap.get("drops"))
        self._drop_mask = None
        self.set_port_info(self.port_info)
