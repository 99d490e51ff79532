"""The bottleneck classes a diagnosis can name, their next steps and limits, and the diagnosis record.

A diagnosis (``schemas/avro/diagnosis.avsc``, carried by incast, straggler, link and congestion records)
is ``{verdict, title, summary, next_step, cannot_tell, missing, evidence}``: ``verdict`` one of
:data:`VERDICTS`, ``missing`` what evidence was absent or contradictory (always non-empty for
``undetermined``, empty otherwise), ``evidence`` the counters and flow shares the rules read, each with
its bounds and how it was measured. The rules that choose a class: :mod:`.rules`; their thresholds:
:class:`DiagnosisConfig`. docs/detectors.md, "Diagnosis". Pure: no clock, no I/O.
"""

from __future__ import annotations

import math

from pydantic import Field

from ..params import detector_params

__all__ = [
    "DiagnosisConfig", "VERDICTS", "TITLES", "MICROBURST", "CC_NOT_REACTING", "DCQCN_HANDLED", "LINK_FAULT",
    "HOST", "FORWARDING_DROP", "UNDETERMINED", "evidence", "diagnosis", "undetermined",
]  # fmt: skip

MICROBURST = "switch_buffer_microburst"
CC_NOT_REACTING = "congestion_control_not_reacting"
DCQCN_HANDLED = "congestion_handled_by_dcqcn"
LINK_FAULT = "physical_link_fault"
HOST = "host_not_network"
FORWARDING_DROP = "forwarding_drop"
UNDETERMINED = "undetermined"
#: every verdict, in the order the docs list them (a bounded set: the flow-metrics sink uses it as a label)
VERDICTS = (MICROBURST, CC_NOT_REACTING, DCQCN_HANDLED, LINK_FAULT, HOST, FORWARDING_DROP, UNDETERMINED)
TITLES = {
    MICROBURST: "switch buffer micro-burst",
    CC_NOT_REACTING: "congestion control not reacting",
    DCQCN_HANDLED: "congestion handled by DCQCN",
    LINK_FAULT: "physical link fault",
    HOST: "the host, not the network",
    FORWARDING_DROP: "dropped by forwarding rules (ACL, route, VLAN), not congestion",
    UNDETERMINED: "undetermined",
}


@detector_params
class DiagnosisConfig:
    """Evidence thresholds of the bottleneck diagnosis (docs/detectors.md, "Diagnosis")."""

    min_discards_per_s: float = Field(1.0, ge=0, description="ifOutDiscards/s of a port (over a counter interval) from which the port counts as dropping")
    min_samples: int = Field(100, ge=1, description="Sampled packets needed before an ECN share (ECN-capable, CE) is judged at all")
    ecn_capable_share: float = Field(0.5, gt=0, le=1, description="Share of packets with an ECT or CE codepoint above which the traffic counts as ECN-capable (below it as not ECN-capable)")
    min_ce_samples: int = Field(3, ge=1, description="Sampled CE-marked packets that count as marks present (0 sampled among min_samples: absent)")
    min_cnp_per_ce: float = Field(0.02, gt=0, le=1, description="Fewest CNPs per CE-marked packet a working DCQCN notification point sends; 'no CNPs' needs at least 3 sampled CNPs expected at this ratio")
    rocev2_share: float = Field(0.5, gt=0, le=1, description="Share of the packets in category rocev2 above which traffic counts as RoCEv2 (and CNPs are expected)")
    bth_share: float = Field(0.5, gt=0, le=1, description="Share of the RoCEv2 packets seen with their BTH (sFlow header samples) needed before the absence of CNPs is judged")
    congested_ce_share: float = Field(0.01, gt=0, lt=1, description="A straggler whose traffic's CE share has its lower 95 % bound above this is on a congested path (not 'the host')")
    max_util: float = Field(0.9, gt=0, le=1, description="A port at or above this utilisation is full, not healthy")
    max_port_age_s: float = Field(90.0, gt=0, description="A port's last counter sample must be at most this old to count as healthy")
    z: float = Field(1.96, gt=0, description="Normal quantile of the shares' bounds (Wilson interval; 1.96 ~ 95 %)")


def wilson(k: float, n: float, z: float) -> tuple[float, float]:
    """Wilson score interval of a share of ``k`` hits in ``n`` (sampled) trials; (0, 1) without trials."""
    if n <= 0:
        return 0.0, 1.0
    p = min(max(k / n, 0.0), 1.0)
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, c - h), min(1.0, c + h)


def evidence(signal: str, source: str, subject: str, value: float, low: float | None = None,
             high: float | None = None, note: str = "") -> dict:
    """One evidence item: what was read (``source``: counters, flows or detector), of what, its value and
    bounds (``low``/``high`` equal ``value`` for exact counter rates), and how it was measured."""
    v = float(value)
    return {"signal": signal, "source": source, "subject": subject, "value": v,
            "low": v if low is None else float(low), "high": v if high is None else float(high), "note": note}


def diagnosis(verdict: str, summary: str, next_step: str, cannot_tell: str, items: list[dict],
              missing: list[str] | None = None) -> dict:
    """The diagnosis record (diagnosis.avsc)."""
    if verdict not in VERDICTS:
        raise ValueError(f"unknown verdict {verdict!r}")
    miss = list(missing or [])
    if (verdict == UNDETERMINED) != bool(miss):
        raise ValueError("an undetermined diagnosis says what is missing; a determined one misses nothing")
    return {"verdict": verdict, "title": TITLES[verdict], "summary": summary, "next_step": next_step,
            "cannot_tell": cannot_tell, "missing": miss, "evidence": list(items)}


def undetermined(summary: str, missing: list[str], items: list[dict], next_step: str, cannot_tell: str) -> dict:
    return diagnosis(UNDETERMINED, summary, next_step, cannot_tell, items, missing)


# --------------------------------------------------------------------------- limits (what the data cannot tell)

def polling(interval_ms: float) -> str:
    """``counters polled every N s`` (or "at an unknown interval")."""
    if not interval_ms or interval_ms <= 0:
        return "counters polled at an interval not yet known (one sample so far)"
    return f"counters polled every {interval_ms / 1000:.0f} s"


def limits(verdict: str, interval_ms: float, sampling_rate: int = 0) -> str:
    """What flow and counter data cannot tell for a verdict (with the measured polling interval and
    sampling rate)."""
    poll = polling(interval_ms)
    sampled = f"sFlow samples 1 packet in {sampling_rate}" if sampling_rate > 1 else "flow samples"
    common = (f"{sampled}: it cannot see sub-millisecond queue depth; {poll}, so drops and errors are averaged "
              "over an interval; PFC pause frames are link-level and in neither sFlow flow samples nor NetFlow")
    if verdict in (MICROBURST, DCQCN_HANDLED):
        return common + "; the senders' rate reaction itself is not visible, only its marks and notifications."
    if verdict == CC_NOT_REACTING:
        return (common + "; CNPs are seen only in sFlow header samples of RoCEv2 (NetFlow/IPFIX carry no BTH, and "
                "host NetFlow cannot see RDMA that bypasses the IP stack); the NIC's DCQCN parameters are not "
                "visible.")
    if verdict == LINK_FAULT:
        return (f"{poll}: a flap shorter than one interval can go unseen; counters do not say which part "
                "(cable, optic, NIC or switch port) is at fault.")
    if verdict == HOST:
        return (f"Flow data sees bytes on the wire, not the GPU, CPU, NIC or NCCL inside the host: it cannot tell "
                f"which of them is slow; {poll}, so a fault shorter than an interval can hide; PFC pause frames "
                "are invisible both ways: on a lossless fabric without ECN marking, a switch pausing this node "
                "looks the same (no drop, no mark), so read the NIC's pause counters before the GPU.")
    if verdict == FORWARDING_DROP:
        return (f"sFlow dropped-packet notifications say why the switch dropped, not which ACL entry or route; agents "
                f"rate-limit them (the evidence says how many were lost), so counts are a lower bound; {poll}.")
    return common + "."
