"""The rules that name a bottleneck class, one function per event kind, from evidence only.

Each function gets what the detectors and the port state already know (:class:`~.signals.FlowSignals`,
:class:`~.signals.PortFacts`) and returns a diagnosis record (:func:`~.catalog.diagnosis`). A class is
named only when its evidence is there and nothing contradicts it; otherwise the verdict is
``undetermined`` and ``missing`` says what was absent or contradictory. The rules, in words:
docs/detectors.md, "Diagnosis". Pure: no clock, no I/O.
"""

from __future__ import annotations

from .catalog import (
    CC_NOT_REACTING, DCQCN_HANDLED, HOST, LINK_FAULT, MICROBURST, UNDETERMINED, DiagnosisConfig, diagnosis, evidence,
    limits, undetermined,
)  # fmt: skip
from .drops import buffer_share, drop_items, forwarding_verdict
from .signals import FlowSignals, PortFacts

__all__ = ["diagnose_incast", "diagnose_congestion", "diagnose_straggler", "diagnose_link", "LINK_DIAGNOSED"]

#: link record kinds that carry a diagnosis (samples, counter resets, speed rises and utilisation do not)
LINK_DIAGNOSED = ("link_downgrade", "error_burst", "oper_down", "oper_up", "discard_burst", "packet_drops")


def _next_buffer(port: PortFacts) -> str:
    sw = port.name.split("/")[0]
    return (f"Check {sw}'s buffer and ECN thresholds on {port.name}'s egress queue (shared-buffer limit / alpha, "
            "ECN Kmin-Kmax below the point where it drops), and whether the collective can spread its senders "
            "(fewer simultaneous sources, NCCL channels, placement).")


def _next_cc(where: str) -> str:
    return (f"Check the DCQCN and NCCL settings: ECN marking enabled for this traffic class on {where}, DCQCN "
            "(notification and reaction point) enabled on the NICs for that priority, the CNP's DSCP/priority, and "
            "NCCL_IB_TC / NCCL_IB_SL matching the lossless class; for TCP, ECN enabled in the senders' stack.")


NEXT_DCQCN = ("Nothing to fix at the port: congestion control is working. If the job is still slow, look at the "
              "traffic pattern (NCCL algorithm and channels, placement across racks) and the DCQCN rate-recovery "
              "timers rather than the switch.")


def _next_link(port: PortFacts) -> str:
    return (f"Check the cable or optic of {port.name}: the transceiver's DOM (ethtool -m: rx/tx power, temperature), "
            "the error counters on both ends, auto-negotiation or a forced speed; reseat or swap the cable or optic.")


def _next_host(node: str) -> str:
    return (f"Look at {node} itself: its GPUs (nvidia-smi / DCGM: XID errors, clocks, thermal or power "
            "throttling), its NIC (ethtool -S: pause frames, out-of-sequence, errors), the NCCL logs "
            "(NCCL_DEBUG=INFO) and its data loader / CPU.")


def _collect(missing: list[str]) -> str:
    return "Collect what is missing, then look again: " + "; ".join(missing) + "."


# --------------------------------------------------------------------------- incast

def diagnose_incast(dst: str, flows: FlowSignals, port: PortFacts | None, cfg: DiagnosisConfig,
                    started_ms: int) -> dict:
    """An incast into ``dst``: its port's drops since the burst began (``port.samples_since``: counter
    samples taken since ``started_ms``), the ECN codepoints of the traffic into it and the CNPs ``dst``
    sent back (``flows``)."""
    items = flows.items(f"traffic into {dst}", cfg, f"CNPs sent by {dst}")
    poll = port.interval_ms if port else 0
    cannot = limits(UNDETERMINED, poll, flows.sampling_rate)
    if port is None:
        return undetermined(f"incast into {dst}: its switch port was never seen in counter samples",
                            [f"counter samples of {dst}'s switch port (an inventory switches: port of an sFlow agent)"],
                            items, _collect([f"sFlow counter samples of {dst}'s port"]), cannot)
    items = port.items(f"{dst}'s port") + items
    if port.physical:
        return diagnosis(LINK_FAULT, f"incast into {dst} while its port has a link fault: {port.fault_text()}",
                         _next_link(port), limits(LINK_FAULT, poll), items)
    ecn, marks, cnps, roce = flows.ecn_capable(cfg), flows.marks(cfg), flows.cnps(cfg), flows.rocev2(cfg)
    ce = f"{flows.ce:.0f} of {flows.samples:.0f} sampled packets CE-marked"
    if port.samples_since == 0:
        if marks and roce and cnps is False:
            return diagnosis(CC_NOT_REACTING, f"incast into {dst}: {ce} and no CNP came back from {dst}, where "
                             "DCQCN would answer them", _next_cc(port.name.split("/")[0]),
                             limits(CC_NOT_REACTING, poll, flows.sampling_rate), items)
        return undetermined(f"incast into {dst}: no counter sample of {port.name} since the burst began",
                            [f"a counter sample of {port.name} after the burst began ({_poll(port)}): "
                             "drops during it are not known yet"], items,
                            _collect([f"the next counter sample of {port.name}"]), cannot)
    if port.dropping(cfg):
        drops = f"{port.name} dropped {port.out_discards_per_s:.0f} packets/s"
        if roce and marks and cnps is False:
            return diagnosis(CC_NOT_REACTING, f"incast into {dst}: {drops}; {ce}, and {dst} sent no CNP back",
                             _next_cc(port.name.split("/")[0]), limits(CC_NOT_REACTING, poll, flows.sampling_rate),
                             items)
        if ecn is True and marks is False:
            return diagnosis(CC_NOT_REACTING, f"incast into {dst}: {drops}, yet none of {flows.samples:.0f} "
                             "sampled packets of its ECN-capable traffic carried a CE mark: the queue dropped "
                             "before it marked", _next_cc(port.name.split("/")[0]),
                             limits(CC_NOT_REACTING, poll, flows.sampling_rate), items)
        if ecn is False or (ecn is True and marks is True):
            why = ("its traffic is not ECN-capable" if ecn is False
                   else f"ECN marked the traffic ({ce}) but the buffer overflowed anyway")
            return diagnosis(MICROBURST, f"incast into {dst}: {drops} while many sources burst into it; {why}", _next_buffer(port),
                             limits(MICROBURST, poll, flows.sampling_rate), items)
        need = (f"enough sampled packets into {dst} to tell whether its traffic is ECN-capable and marked "
                f"({flows.samples:.0f} sampled, {cfg.min_samples} needed; ECN-capable share between the bounds)")
        return undetermined(f"incast into {dst}: {drops}, but whether ECN was in play is not known", [need], items,
                            _collect([need]), cannot)
    # the port was sampled since the burst began and did not drop
    if marks and cnps:
        return diagnosis(DCQCN_HANDLED, f"incast into {dst}: {ce}, {flows.cnp:.0f} sampled CNPs came back and "
                         f"{port.name} dropped nothing", NEXT_DCQCN, limits(DCQCN_HANDLED, poll, flows.sampling_rate),
                         items)
    if marks and roce and cnps is False:
        return diagnosis(CC_NOT_REACTING, f"incast into {dst}: {ce} and {dst} sent no CNP back (no drops yet)",
                         _next_cc(port.name.split("/")[0]), limits(CC_NOT_REACTING, poll, flows.sampling_rate), items)
    if marks:
        miss = _cnp_missing(flows, roce, cfg, dst)
        return undetermined(f"incast into {dst}: {ce}, no drops; whether congestion control reacted is not known",
                            [miss], items, _collect([miss]), cannot)
    miss = (f"a congestion symptom: {port.name} dropped nothing and no sampled packet into {dst} was CE-marked "
            "(the buffer may have absorbed the burst)")
    return undetermined(f"incast into {dst}: no drops, no ECN marks", [miss], items,
                        f"Nothing to fix if the job is not slow; if it is, compare {dst}'s step times with the "
                        "bursts (training-step marks) before touching the switch.", cannot)


def _poll(port: PortFacts) -> str:
    return f"counters every {port.interval_ms / 1000:.0f} s" if port.interval_ms > 0 else "one counter sample so far"


def _cnp_missing(flows: FlowSignals, roce: bool | None, cfg: DiagnosisConfig, who: str) -> str:
    if roce is False:
        return ("a way to see the senders' reaction: the marked traffic is not RoCEv2, so no CNPs are expected "
                "(TCP reacts to ECN inside the hosts, invisible in flow records)")
    if roce is None:
        return f"enough sampled packets ({flows.samples:.0f}; {cfg.min_samples} needed) to tell the traffic's transport"
    if flows.roce > 0 and flows.bth / flows.roce < cfg.bth_share:
        return ("sFlow header samples of the RoCEv2 traffic: it was seen without its BTH (NetFlow/IPFIX), "
                "so CNPs cannot show")
    return (f"more sampled CE marks: {flows.ce:.0f} marks make {flows.ce * cfg.min_cnp_per_ce:.1f} sampled CNPs "
            f"expected at {cfg.min_cnp_per_ce:g} CNP per mark, 3 needed to call their absence (CNPs from {who} "
            "to nodes of its own job only)")


# --------------------------------------------------------------------------- congestion alert

def diagnose_congestion(job: str, flows: FlowSignals, ports: dict[str, PortFacts | None], cfg: DiagnosisConfig) -> dict:
    """A job whose ECN-CE or CNP share rose: its internal traffic's marks and CNPs over the alert's
    elevated windows (``flows``) and the ports of the congested receivers (``ports``: node -> port)."""
    items = flows.items(f"job {job}'s internal traffic", cfg)
    known = {n: p for n, p in ports.items() if p is not None}
    for n, p in sorted(known.items()):
        items = p.items(f"{n}'s port") + items
    poll = max((p.interval_ms for p in known.values()), default=0)
    cannot = limits(UNDETERMINED, poll, flows.sampling_rate)
    where = ", ".join(p.name for _n, p in sorted(known.items())) or f"the switches of {job}'s receivers"
    faulty = [p for _n, p in sorted(known.items()) if p.physical]
    if faulty:
        return diagnosis(LINK_FAULT, f"job {job}: congestion marks towards a port with a link fault: "
                         + "; ".join(p.fault_text() for p in faulty), _next_link(faulty[0]),
                         limits(LINK_FAULT, poll), items)
    marks, cnps, roce = flows.marks(cfg), flows.cnps(cfg), flows.rocev2(cfg)
    ce = f"{flows.ce:.0f} of {flows.samples:.0f} sampled packets CE-marked"
    dropping = [p for _n, p in sorted(known.items()) if p.dropping(cfg)]
    if marks and roce and cnps is False:
        drops = f"; {', '.join(p.name for p in dropping)} dropped too" if dropping else ""
        return diagnosis(CC_NOT_REACTING, f"job {job}: {ce} and no CNP answered them{drops}", _next_cc(where),
                         limits(CC_NOT_REACTING, poll, flows.sampling_rate), items)
    if not marks:
        miss = (f"sampled CE marks in job {job}'s traffic ({flows.ce:.0f} sampled, {cfg.min_ce_samples} needed): "
                "CNPs without visible marks")
        return undetermined(f"job {job}: CNPs rose without enough sampled CE marks to judge", [miss], items,
                            _collect([miss]), cannot)
    if dropping:
        txt = ", ".join(f"{p.name} {p.out_discards_per_s:.0f}/s" for p in dropping)
        if cnps:
            miss = (f"a consistent picture: CNPs answer the marks ({flows.cnp:.0f} sampled) yet {txt} dropped: "
                    "DCQCN reacts but too late for the buffer")
            return undetermined(f"job {job}: {ce}, CNPs answer them, and ports dropped", [miss], items,
                                f"{_next_buffer(dropping[0])} Then {_next_cc(where)[0].lower()}{_next_cc(where)[1:]}",
                                cannot)
        miss = _cnp_missing(flows, roce, cfg, "the receivers")
        return undetermined(f"job {job}: {ce}, ports dropped ({txt})", [miss], items, _collect([miss]), cannot)
    if cnps:
        unsampled = sorted(n for n, p in ports.items() if p is None)
        if unsampled:
            miss = f"counter samples of the receivers' ports ({', '.join(unsampled)}): 'no drops' cannot be checked"
            return undetermined(f"job {job}: {ce}, CNPs answer them; drops unknown", [miss], items,
                                _collect([miss]), cannot)
        return diagnosis(DCQCN_HANDLED, f"job {job}: {ce}, {flows.cnp:.0f} sampled CNPs answer them and the "
                         f"receivers' ports ({where}) dropped nothing", NEXT_DCQCN,
                         limits(DCQCN_HANDLED, poll, flows.sampling_rate), items)
    miss = _cnp_missing(flows, roce, cfg, "the receivers")
    return undetermined(f"job {job}: {ce}; whether congestion control reacted is not known", [miss], items,
                        _collect([miss]), cannot)


# --------------------------------------------------------------------------- straggler

def diagnose_straggler(node: str, job: str, own: PortFacts | None, peer: str, peer_port: PortFacts | None,
                       flows: FlowSignals, recv_ratio: float, now_ms: int, cfg: DiagnosisConfig) -> dict:
    """A node flagged as straggler: its own port, the port of ``peer`` (the node it sends most to, its ring
    successor), the ECN marks on its traffic (``flows``) and what it receives against its peers
    (``recv_ratio``: received bytes / the peers' median)."""
    items = flows.items(f"{node}'s job traffic", cfg)
    items.append(evidence("recv_ratio", "flows", node, recv_ratio,
                          note="bytes it received / median of its peers' (sampled estimates)"))
    if peer_port is not None:
        items = peer_port.items(f"{peer}'s port, which {node} sends to") + items
    if own is not None:
        items = own.items(f"{node}'s port") + items
    poll = max(own.interval_ms if own else 0, peer_port.interval_ms if peer_port else 0)
    cannot = limits(UNDETERMINED, poll, flows.sampling_rate)
    for p, whose in ((own, f"{node}'s own port"), (peer_port, f"the port of {peer}, which {node} sends to")):
        if p is not None and p.physical:
            return diagnosis(LINK_FAULT, f"{node} sends less; {whose} has a link fault: {p.fault_text()}",
                             _next_link(p), limits(LINK_FAULT, poll), items)
    missing = []
    if own is None:
        missing.append(f"counter samples of {node}'s switch port")
    elif own.stale(now_ms, cfg):
        missing.append(f"a recent counter sample of {own.name} (last one older than {cfg.max_port_age_s:g} s)")
    if not peer:
        missing.append(f"the node {node} sends to (it sent no job traffic to a single busiest peer in the window)")
    elif peer_port is None:
        missing.append(f"counter samples of the port of {peer}, the node {node} sends to")
    elif peer_port.stale(now_ms, cfg):
        missing.append(f"a recent counter sample of {peer_port.name} ({peer}'s port)")
    if missing:
        return undetermined(f"{node} sends less; the health of its path is not known", missing, items,
                            _collect(missing), cannot)
    for p, whose in ((own, f"{node}'s port"), (peer_port, f"{peer}'s port")):
        if p.dropping(cfg):
            miss = (f"a healthy path: {whose} {p.name} dropped {p.out_discards_per_s:.0f} packets/s without link "
                    "errors: congestion, not the host (see the incast or congestion events of that port)")
            return undetermined(f"{node} sends less while {whose} drops", [miss], items,
                                f"Look at the incast / congestion events on {p.name} first.", cannot)
        if p.util >= cfg.max_util:
            miss = f"a port with headroom: {whose} {p.name} runs at {p.util:.0%}"
            return undetermined(f"{node} sends less while {whose} is full", [miss], items,
                                f"Look at what else uses {p.name}.", cannot)
    s, lo, _hi = flows.share("ce", z=cfg.z)
    if lo > cfg.congested_ce_share:
        miss = (f"a congestion-free path: {s:.1%} of {node}'s sampled job packets carry ECN-CE (lower bound "
                f"{lo:.1%}): the network marks its path")
        return undetermined(f"{node} sends less and its traffic is marked", [miss], items,
                            "Look at the job's congestion alert and its receivers' ports.", cannot)
    return diagnosis(HOST, f"{node} sends less than its peers while "
                     f"its port {own.name} and {peer}'s port {peer_port.name} are healthy (no link event, no drops, "
                     f"utilisation {own.util:.0%} / {peer_port.util:.0%}) and its traffic carries no congestion "
                     f"marks; it receives {recv_ratio:.0%} of its peers' median", _next_host(node),
                     limits(HOST, poll), items)


# --------------------------------------------------------------------------- link events

def diagnose_link(record: dict, port: PortFacts | None, cfg: DiagnosisConfig) -> dict | None:
    """A link event record (link_health.avsc, ``kind`` in :data:`LINK_DIAGNOSED`); None for other kinds and
    for an ``oper_up`` that ends a single outage (not a flap)."""
    kind = record["kind"]
    if kind not in LINK_DIAGNOSED:
        return None
    name = f"{record['switch']}/if{record['if_index']}"
    iv = int(record.get("interval_ms") or (port.interval_ms if port else 0))
    errs = float(record["in_errors_per_s"]) + float(record["out_errors_per_s"])
    poll = f"counter interval {iv / 1000:.0f} s" if iv > 0 else "first counter sample"
    items = [evidence("port_errors_per_s", "counters", name, errs, note=poll),
             evidence("port_out_discards_per_s", "counters", name, float(record["out_discards_per_s"]), note=poll),
             evidence("port_speed_bps", "counters", name, float(record["if_speed"]),
                      note=f"previous or configured {int(record['previous_if_speed']) / 1e9:g}G")]
    drops = record.get("_drops")  # the port's dropped-packet notifications of the interval (link health)
    items += drop_items(drops, name, iv)
    flaps = port.flaps if port else 0
    if flaps:
        items.append(evidence("oper_down_transitions", "counters", name, float(flaps),
                              note="oper-down transitions within the flap window"))
    fake = port or PortFacts(f"{record['exporter']}|{record['if_index']}", name, 0.0, int(record["if_speed"]),
                             float("nan"), 0.0, errs, kind, int(record["time_ms"]), iv)
    what = {"link_downgrade": f"{name} runs at {int(record['if_speed']) / 1e9:g}G, below "
                              f"{int(record['previous_if_speed']) / 1e9:g}G",
            "error_burst": f"{name} counts {errs:.0f} errors/s",
            "oper_down": f"{name} lost its link" + (f" ({flaps} times within the flap window)" if flaps > 1 else "")}
    if kind == "oper_down" and port is not None and not port.admin_up:
        miss = f"a fault: {name} is administratively down (ifAdminStatus down), a configuration action"
        return undetermined(f"{name} was shut down", [miss], items,
                            f"Ask who shut {name} down, or bring it up if that was a mistake.", limits(UNDETERMINED, iv))
    if kind in what:
        return diagnosis(LINK_FAULT, what[kind], _next_link(fake), limits(LINK_FAULT, iv), items)
    if kind == "oper_up":
        if flaps > 1:
            return diagnosis(LINK_FAULT, f"{name} is flapping: {flaps} outages within the flap window",
                             _next_link(fake), limits(LINK_FAULT, iv), items)
        return None
    # discard_burst, packet_drops
    if errs >= cfg.min_discards_per_s:
        return diagnosis(LINK_FAULT, f"{name} drops and counts {errs:.0f} errors/s", _next_link(fake),
                         limits(LINK_FAULT, iv), items)
    forwarding = forwarding_verdict(drops, name, items, iv)
    if forwarding is not None:
        return forwarding
    if buffer_share(drops) > 0.5:
        miss = (f"the kind of congestion: most of {name}'s dropped-packet notifications say its buffer overflowed "
                f"({drops['groups']['buffer']} of {drops['total']}), not a faulty link; the incast or congestion "
                "event of this port's node says which kind (notifications and counters alone cannot)")
        return undetermined(f"{name} drops packets for a full buffer", [miss], items,
                            f"Open the incast / congestion events of the node behind {name}.", limits(UNDETERMINED, iv))
    if kind == "packet_drops":
        miss = (f"the reason: {name}'s dropped-packet notifications give no dominant reason "
                f"({drops['total'] if drops else 0} notifications)" if drops and drops.get("total") else
                f"the notifications: none of {name}'s dropped-packet notifications remain in the interval")
        return undetermined(f"{name} drops packets for mixed or unknown reasons", [miss], items,
                            "Break the drops down: fabricflow query drops --by reason,src_node,dst_node.",
                            limits(UNDETERMINED, iv))
    miss = (f"the traffic behind the drops: {name} drops {float(record['out_discards_per_s']):.0f} packets/s with "
            "no link errors (congestion, not a faulty link); the incast or congestion event of this port's node "
            "says which kind (counters alone cannot)")
    return undetermined(f"{name} drops packets without link errors", [miss], items,
                        f"Open the incast / congestion events of the node behind {name}.", limits(UNDETERMINED, iv))
