"""The measurements a diagnosis reads: ECN / CNP counts of sampled flows and a port's counter state.

:class:`FlowSignals` holds sampled packet counts (packets as sampled, not scaled: the shares and their
bounds come from them); :class:`PortFacts` is a port as :meth:`LinkHealthDetector.node_state` last saw
it. Both turn into evidence items (:func:`~.catalog.evidence`) with their bounds. Pure: no clock, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from .catalog import DiagnosisConfig, evidence, wilson

__all__ = ["FlowSignals", "PortFacts", "PHYSICAL_EVENTS", "cell_signals"]

#: link events of a port that are a physical fault (discard_burst is congestion, not a fault of the link)
PHYSICAL_EVENTS = ("link_downgrade", "oper_down", "error_burst")


@dataclass
class FlowSignals:
    """Sampled packets of some traffic: all of them (``samples``), those with an ECT or CE codepoint
    (``ect``), CE-marked (``ce``), RoCEv2 CNPs answering them (``cnp``), in category rocev2 (``roce``), and
    RoCEv2 packets whose BTH the sample showed (``bth``: sFlow header samples; NetFlow/IPFIX never).
    ``ect`` < 0: not counted (window cells carry no ECT column)."""

    samples: float = 0.0
    ect: float = -1.0
    ce: float = 0.0
    cnp: float = 0.0
    roce: float = 0.0
    bth: float = 0.0
    sampling_rate: int = 0

    def add(self, other: "FlowSignals") -> None:
        for f in fields(self):
            if f.name == "sampling_rate":
                self.sampling_rate = max(self.sampling_rate, other.sampling_rate)
            elif f.name == "ect" and (self.ect < 0 or other.ect < 0):
                self.ect = -1.0
            else:
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def as_list(self) -> list:
        return [getattr(self, f.name) for f in fields(self)]

    @classmethod
    def from_list(cls, values) -> "FlowSignals":
        *counts, rate = values
        return cls(*(float(x) for x in counts), sampling_rate=int(rate))

    # -- judgements -----------------------------------------------------------------------------------
    def share(self, part: str, of: str = "samples", z: float = 1.96) -> tuple[float, float, float]:
        """(share, low, high) of ``part`` among ``of`` (sampled packets, Wilson bounds)."""
        k, n = getattr(self, part), getattr(self, of)
        lo, hi = wilson(k, n, z)
        return (k / n if n > 0 else 0.0), lo, hi

    def ecn_capable(self, cfg: DiagnosisConfig) -> bool | None:
        """True / False when the sample says the traffic carries ECN codepoints or not; None: too few samples
        or a share whose bounds straddle the threshold."""
        if self.samples < cfg.min_samples or self.ect < 0:
            return None
        _s, lo, hi = self.share("ect", z=cfg.z)
        if lo >= cfg.ecn_capable_share:
            return True
        if hi < cfg.ecn_capable_share:
            return False
        return None

    def marks(self, cfg: DiagnosisConfig) -> bool | None:
        """CE marks present (True), absent (False: none among at least ``min_samples``), or not known."""
        if self.ce >= cfg.min_ce_samples:
            return True
        if self.ce == 0 and self.samples >= cfg.min_samples:
            return False
        return None

    def rocev2(self, cfg: DiagnosisConfig) -> bool | None:
        if self.samples < cfg.min_samples:
            return None
        return self.roce / self.samples >= cfg.rocev2_share

    def cnps(self, cfg: DiagnosisConfig) -> bool | None:
        """CNPs answer the marks (True: at least one sampled; a CNP is never anything else), do not (False:
        none sampled though a working notification point would have given >= 3 sampled CNPs), or not known
        (too few marks, or RoCEv2 seen without its BTH so CNPs could not show)."""
        if self.cnp >= 1:
            return True
        if self.roce <= 0 or self.bth / self.roce < cfg.bth_share:
            return None
        return False if self.ce * cfg.min_cnp_per_ce >= 3 else None

    def items(self, subject: str, cfg: DiagnosisConfig, cnp_subject: str = "") -> list[dict]:
        """Evidence items: ECN-capable share, CE share, CNPs per CE-marked packet, RoCEv2 share."""
        how = (f"{self.samples:.0f} sampled packets" + (f" at 1:{self.sampling_rate}" if self.sampling_rate > 1 else ""))
        out = []
        if self.samples > 0:
            if self.ect >= 0:
                s, lo, hi = self.share("ect", z=cfg.z)
                out.append(evidence("ecn_capable_share", "flows", subject, s, lo, hi, how))
            s, lo, hi = self.share("ce", z=cfg.z)
            out.append(evidence("ecn_ce_share", "flows", subject, s, lo, hi, f"{self.ce:.0f} CE-marked of {how}"))
            s, lo, hi = self.share("roce", z=cfg.z)
            out.append(evidence("rocev2_share", "flows", subject, s, lo, hi, how))
        if self.ce > 0 or self.cnp > 0:
            ratio = self.cnp / self.ce if self.ce > 0 else float(self.cnp)
            lo, hi = wilson(self.cnp, self.cnp + self.ce, cfg.z) if self.ce > 0 else (0.0, 0.0)
            # bounds of cnp / (cnp + ce) turned into bounds of cnp / ce
            to_ratio = (lambda p: p / (1 - p) if p < 1 else float("inf"))
            out.append(evidence("cnp_per_ce", "flows", cnp_subject or subject, ratio, to_ratio(lo),
                                min(to_ratio(hi), 1e9), f"{self.cnp:.0f} sampled CNPs for {self.ce:.0f} sampled CE marks"
                                + ("" if self.roce <= 0 else f"; BTH seen on {self.bth / self.roce:.0%} of RoCEv2 samples")))
        return out


def cell_signals(cells: dict, mask, rocev2: int) -> FlowSignals:
    """FlowSignals of the window cells selected by ``mask`` (``rocev2``: the interner code of that category).
    Cells carry estimates; they become sampled packets at the selection's own ratio samples / packets_est
    (exact for one sampling rate; ``sampling_rate`` is that ratio). No ECT count: cells have none."""
    packets = float(cells["packets_est"][mask].sum())
    samples = float(cells["samples"][mask].sum())
    scale = samples / packets if packets > 0 else 0.0

    def sampled(col, m=mask):
        return float(cells[col][m].sum()) * scale

    roce = mask & (cells["cat"] == rocev2)
    bth = sampled("bth_packets_est") if "bth_packets_est" in cells else 0.0
    return FlowSignals(samples=samples, ce=sampled("ecn_ce_packets_est"), cnp=sampled("cnp_packets_est"),
                       roce=sampled("packets_est", roce), bth=bth,
                       sampling_rate=int(round(packets / samples)) if samples > 0 else 0)


@dataclass
class PortFacts:
    """A switch port as last seen in its counter samples (``LinkHealthDetector.node_state``)."""

    port: str  # link key exporter|if_index
    name: str  # switch/ifN
    util: float
    if_speed: int
    configured_bps: float
    out_discards_per_s: float
    errors_per_s: float
    event: str
    sampled_ms: int
    interval_ms: int
    flaps: int = 0
    samples_since: int = -1  # samples after the time asked about (-1: not asked)
    admin_up: bool = True

    @classmethod
    def of(cls, state: dict | None) -> "PortFacts | None":
        if state is None:
            return None
        return cls(state["port"], f"{state['switch']}/if{state['if_index']}", float(state["util"]),
                   int(state["if_speed"]), float(state["configured_bps"]), float(state["out_discards_per_s"]),
                   float(state.get("errors_per_s", 0.0)), str(state["event"]), int(state.get("sampled_ms", -1)),
                   int(state.get("interval_ms", 0)), int(state.get("flaps", 0)), int(state.get("samples_since", -1)),
                   bool(state.get("admin_up", True)))

    @property
    def physical(self) -> bool:
        """A link fault: a downgrade, errors, or the link down while the port is administratively up."""
        return self.event in PHYSICAL_EVENTS and (self.event != "oper_down" or self.admin_up)

    def dropping(self, cfg: DiagnosisConfig) -> bool:
        return self.out_discards_per_s >= cfg.min_discards_per_s or self.event == "discard_burst"

    def stale(self, now_ms: int, cfg: DiagnosisConfig) -> bool:
        return self.sampled_ms < 0 or now_ms - self.sampled_ms > cfg.max_port_age_s * 1000

    def fault_text(self) -> str:
        if self.event == "link_downgrade":
            conf = f" (configured {self.configured_bps / 1e9:g}G)" if self.configured_bps == self.configured_bps else ""
            return f"{self.name} runs at {self.if_speed / 1e9:g}G{conf}"
        if self.event == "oper_down":
            return f"{self.name} went down" + (f" ({self.flaps} times within the flap window)" if self.flaps > 1 else "")
        if self.event == "error_burst":
            return f"{self.name} counts {self.errors_per_s:.0f} errors/s"
        if self.event == "discard_burst":
            return f"{self.name} drops {self.out_discards_per_s:.0f} packets/s (a discard burst, no link errors)"
        return f"{self.name}: {self.event}"

    def items(self, role: str) -> list[dict]:
        """Counter evidence of the port (``role``: whose port it is)."""
        poll = f"counter interval {self.interval_ms / 1000:.0f} s" if self.interval_ms > 0 else "one counter sample"
        subject = f"{self.name} ({role})"
        out = [evidence("port_out_discards_per_s", "counters", subject, self.out_discards_per_s, note=poll),
               evidence("port_errors_per_s", "counters", subject, self.errors_per_s, note=poll),
               evidence("port_utilisation", "counters", subject, self.util, note=poll),
               evidence("port_speed_bps", "counters", subject, float(self.if_speed),
                        note="ifSpeed" + (f"; configured {self.configured_bps / 1e9:g}G"
                                          if self.configured_bps == self.configured_bps else ""))]
        if self.event:
            out.append(evidence(f"link_event:{self.event}", "counters", subject, 1.0, note=self.fault_text()))
        if self.flaps:
            out.append(evidence("oper_down_transitions", "counters", subject, float(self.flaps),
                                note="oper-down transitions within the link detector's flap window"))
        return out
