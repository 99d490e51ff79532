"""congestion: a job's ECN-CE / RoCEv2 CNP share far above its own baseline; marks at the usual level are quiet."""

from processors.logic.engine import Engine, EngineConfig
from processors.logic.windows.tumbling import WindowConfig

from tests.support.flows import flows

RING = [("a", "b"), ("b", "c"), ("c", "d"), ("d", "a")]
ECT0, CE = 2, 3


def engine():
    return Engine(EngineConfig(window=WindowConfig(size_ms=10_000, lateness_ms=0), enabled=("congestion",)))


def window(w, ce=None, cnp=None, job="j"):
    """The ring's four flows, 100 sampled packets each (rate 100); ``ce``: {dst: CE-marked of its 100 samples};
    ``cnp``: {src: CNP samples it sends back to its ring predecessor}."""
    ce, cnp = ce or {}, cnp or {}
    t = w * 10_000 + 100
    out = []
    for s, d in RING:
        marked = ce.get(d, 0)
        if 100 - marked:
            out.append(dict(src=s, dst=d, t=t, packets=100 - marked, rate=100, tos=ECT0, job=job))
        if marked:
            out.append(dict(src=s, dst=d, t=t, packets=marked, rate=100, tos=CE, job=job))
        if cnp.get(d):
            out.append(dict(src=d, dst=s, t=t, packets=cnp[d], rate=100, bytes=64, roce_opcode=0x81, job=job))
    return out


def run(windows, e=None):
    e = e or engine()
    recs = [r for w, kw in enumerate(windows) for r in window(w, **kw)]
    return e.process_flows(flows(recs)) + e.flush()


def test_ecn_marks_at_the_jobs_normal_baseline_on_a_balanced_job_raise_nothing():
    # a balanced job: every receiver gets 5 % of its packets marked in every window (a fabric that always marks
    # a little): that is its own baseline, and no fixed threshold applies
    assert run([dict(ce={"a": 5, "b": 5, "c": 5, "d": 5})] * 14) == []
    # the usual level wobbling (1-2 marks of 100 per receiver) stays inside the sampling bounds
    assert run([dict(ce={"c": 1 + w % 2, "a": w % 3}) for w in range(14)]) == []


def test_a_congestion_episode_fires_with_job_node_share_and_baseline_then_resolves():
    base = dict(ce={"c": 1})  # 1 of 400 sampled packets: 0.25 %
    hot = dict(ce={"c": 30, "d": 6})  # receiver c's downlink marks 30 %, d 6 %
    out = run([base] * 6 + [hot] * 3 + [base] * 5)
    assert [(o.kind, o.key, o.value["state"], o.value["window_end_ms"]) for o in out] == [
        ("alert", "congestion|j|ecn_ce", "firing", 80_000),  # second elevated window (persist_windows 2)
        ("alert", "congestion|j|ecn_ce", "resolved", 130_000),  # quiet for more than 3 windows
    ]
    assert out[0].value == {
        "dedup_key": "congestion|j|ecn_ce", "rule": "congestion", "severity": "warning", "state": "firing",
        "summary": "job j: 9.00% of its packets are ECN-CE marked packets (95 % bounds 6.20%-11.80%, 400 sampled "
                   "packets), 36.0x its baseline 0.25%, for 2 windows; congested receivers: c 30.0%; d 6.0%",
        "entities": {"job": "j", "signal": "ecn_ce", "reference": "baseline", "share": "0.0900", "baseline": "0.0025",
                     "floor": "0.0300", "floor_hits": "", "peer_hits": "",
                     "fraction_low": "0.0620", "fraction_high": "0.1180", "samples": "400", "packets_est": "40000",
                     "signal_packets_est": "3600", "evidence_windows": "2", "nodes": "c:0.300,d:0.060", "ports": ""},
        "window_start_ms": 70_000, "window_end_ms": 80_000, "first_seen_ms": 60_000, "last_seen_ms": 80_000,
        "bytes_est": 0, "flows": 0, "sample_flows": [], "diagnosis": None,
    }  # fmt: skip


def test_cnp_burst_names_the_notification_point_and_its_port():
    e = engine()
    e.congestion.link_state = lambda node, now: (
        {"switch": "tor1", "if_index": 7, "port": "192.0.2.10|7"} if node == "c" else None)
    out = run([{}] * 6 + [dict(cnp={"c": 20})] * 2 + [{}] * 4, e)
    firing = [o.value for o in out if o.value["state"] == "firing"]
    assert [a["dedup_key"] for a in firing] == ["congestion|j|cnp"]
    ent = firing[0]["entities"]
    assert (ent["share"], ent["baseline"], ent["nodes"], ent["ports"], ent["samples"]) == (
        "0.0476", "0.0000", "c:0.200", "c=tor1/if7", "420")
    assert "c 20.0% (port tor1/if7)" in firing[0]["summary"]


def test_a_short_spike_or_too_few_samples_do_not_fire():
    hot = dict(ce={"c": 30})
    assert run([{}] * 6 + [hot] + [{}] * 6) == []  # one window: persist_windows is 2
    e = Engine(EngineConfig(window=WindowConfig(size_ms=10_000, lateness_ms=0), enabled=("congestion",)))
    # 1 in 100 sampled packets fewer than min_samples: nothing judged at all
    few = [dict(src=s, dst=d, t=w * 10_000 + 1, packets=10, rate=100, tos=CE if w >= 6 else ECT0, job="j")
           for w in range(12) for s, d in RING]
    assert e.process_flows(flows(few)) + e.flush() == []


def test_traffic_between_jobs_is_not_a_jobs_congestion():
    recs = [r for w in range(12) for r in window(w)]
    recs += [dict(src="a", dst="x", t=w * 10_000 + 5, packets=100, rate=100, tos=CE, src_job="j", dst_job="k")
             for w in range(6, 12)]
    e = engine()
    assert e.process_flows(flows(recs)) + e.flush() == []


def test_snapshot_restore_continues_the_same():
    windows = [dict(ce={"c": 1})] * 6 + [dict(ce={"c": 40})] * 3
    recs = [r for w, kw in enumerate(windows) for r in window(w, **kw)]
    a = engine()
    first = a.process_flows(flows(recs[: len(recs) // 2]))
    b = engine()
    b.restore(a.snapshot())
    assert first + b.process_flows(flows(recs[len(recs) // 2:])) + b.flush() == run(windows)


def test_the_inventory_names_the_port_when_no_counter_sample_did():
    from processors.logic.core import ProcessorCore
    from processors.logic.enrich.inventory import Inventory

    inv = Inventory.from_dict({
        "nodes": [{"name": n, "ips": [f"10.0.0.{i + 1}"], "switch": "tor1", "group": "gpu"} for i, n in enumerate("abcd")],
        "switches": [{"name": "tor1", "agent": "192.0.2.10",
                      "ports": [{"if_index": i + 1, "node": n} for i, n in enumerate("abcd")]}],
    })
    assert inv.node_ports() == {"a": "tor1/if1", "b": "tor1/if2", "c": "tor1/if3", "d": "tor1/if4"}
    core = ProcessorCore(inv, EngineConfig(window=WindowConfig(size_ms=10_000, lateness_ms=0), enabled=("congestion",)))
    out = run([dict(ce={"c": 1})] * 6 + [dict(ce={"c": 30})] * 2 + [dict(ce={"c": 1})] * 4, core.engine)
    firing = [o.value for o in out if o.value["state"] == "firing"]
    assert [(a["dedup_key"], a["entities"]["ports"]) for a in firing] == [("congestion|j|ecn_ce", "c=tor1/if3")]


def roce(windows):
    """``window`` records as RoCEv2 traffic (the floor reference judges RoCEv2 only)."""
    return [dict(r, category="rocev2") for w, kw in enumerate(windows) for r in window(w, **kw)]


def test_a_job_congested_from_its_first_window_fires_on_the_floor_as_soon_as_a_later_episode_does():
    # born broken: receiver c gets 12 % of its RoCEv2 packets CE-marked from the job's first window. Its own past
    # is all congested (no normal window to learn), so only the floor reference can see it
    e = engine()
    out = e.process_flows(flows(roce([dict(ce={"c": 12})] * 4 + [{}] * 4))) + e.flush()
    assert [(o.key, o.value["state"], o.value["window_end_ms"]) for o in out] == [
        ("congestion|j|ecn_ce", "firing", 20_000),  # second window: persist_windows 2, as an episode after a baseline
        ("congestion|j|ecn_ce", "resolved", 80_000),
    ]
    first = out[0].value
    assert first["summary"] == (
        "job j: 3.00% of its packets are ECN-CE marked packets (95 % bounds 1.33%-4.67%, 400 sampled packets), "
        "above the RoCEv2 floor 3.0%: c 12.0% (lower bound 5.6%), for 2 windows; congested receivers: c 12.0%")
    ent = first["entities"]
    assert (ent["reference"], ent["baseline"], ent["floor"], ent["floor_hits"], first["first_seen_ms"]) == (
        "floor", "", "0.0300", "c:0.056", 0)
    # the same episode after six normal windows fires after the same two elevated windows, on both references
    e = engine()
    out = e.process_flows(flows(roce([{}] * 6 + [dict(ce={"c": 12})] * 2 + [{}] * 4))) + e.flush()
    assert [(o.value["state"], o.value["window_end_ms"] - o.value["first_seen_ms"], o.value["entities"]["reference"])
            for o in out] == [("firing", 20_000, "baseline,floor"), ("resolved", 60_000, "baseline,floor")]


def test_a_healthy_roce_job_and_a_few_marks_stay_below_the_floor():
    # 0-2 marks of 100 per receiver: lower bounds far below 3 %; no baseline is needed to stay quiet
    e = engine()
    assert e.process_flows(flows(roce([dict(ce={"c": w % 3, "a": 1}) for w in range(14)]))) + e.flush() == []


def test_a_floor_episode_is_never_rebaselined_into_normal():
    from processors.logic.detectors.congestion import CongestionConfig

    e = Engine(EngineConfig(window=WindowConfig(size_ms=10_000, lateness_ms=0), enabled=("congestion",),
                            congestion=CongestionConfig(rebaseline_windows=4)))
    out = e.process_flows(flows(roce([dict(ce={"c": 30})] * 12 + [{}] * 4))) + e.flush()
    # fires at window 2 and stays firing (updated every 6 windows) past rebaseline_windows: no resolve in between
    assert [(o.value["state"], o.value["window_end_ms"]) for o in out] == [
        ("firing", 20_000), ("updated", 80_000), ("updated", 140_000), ("resolved", 160_000)]


def test_a_tcp_job_is_judged_against_its_baseline_only():
    # ECN on TCP (DCTCP) marks at a few percent by design: the floor reference is RoCEv2 only
    assert run([dict(ce={"c": 12})] * 8) == []


def test_cnps_from_the_first_window_fire_on_the_cnp_floor():
    # receiver c sends back 5 CNPs per 100 RoCEv2 packets it gets, from the job's first window: 5 % (lower
    # bound 0.7 %) against cnp_floor 0.5 %; the ECN-CE floor sees no marks
    e = engine()
    out = e.process_flows(flows(roce([dict(cnp={"c": 5})] * 3 + [{}] * 4))) + e.flush()
    firing = [o.value for o in out if o.value["state"] == "firing"]
    assert [(a["dedup_key"], a["window_end_ms"], a["entities"]["reference"], a["entities"]["floor_hits"])
            for a in firing] == [("congestion|j|cnp", 20_000, "floor", "c:0.007")]


def fabric(windows, peers=("k", "m"), roce_traffic=False):
    """Job j (``window`` kwargs per window) beside healthy peer jobs on their own four nodes each (``k``, ``m``:
    no marks), all TCP unless ``roce_traffic``."""
    recs = []
    for w, kw in enumerate(windows):
        recs += window(w, **kw)
        for p in peers:
            recs += [dict(r, src=p + r["src"], dst=p + r["dst"]) for r in window(w, job=p)]
    return [dict(r, category="rocev2") for r in recs] if roce_traffic else recs


def test_a_tcp_job_congested_from_its_first_window_fires_on_its_peer_jobs_as_soon_as_a_later_episode_does():
    # born broken: receiver c of TCP job j gets 16 % of its packets CE-marked from the first window (4 % of the
    # job's); the RoCEv2 floor does not judge TCP and the job's own past is all congested: only the other jobs
    # on the same fabric in the same window (k and m, no marks) can see it
    e = engine()
    out = e.process_flows(flows(fabric([dict(ce={"c": 16})] * 4 + [{}] * 4))) + e.flush()
    assert [(o.key, o.value["state"], o.value["window_end_ms"]) for o in out] == [
        ("congestion|j|ecn_ce", "firing", 20_000),  # second window, as an episode after a baseline
        ("congestion|j|ecn_ce", "resolved", 80_000),
    ]
    first = out[0].value
    assert first["summary"] == (
        "job j: 4.00% of its packets are ECN-CE marked packets (95 % bounds 2.08%-5.92%, 400 sampled packets), "
        "far above the other jobs on the fabric: its TCP traffic 4.0% (lower bound 2.1%) against 0.00%, the median "
        "of 2 peer jobs, for 2 windows; congested receivers: c 16.0%")
    ent = first["entities"]
    assert (ent["reference"], ent["baseline"], ent["floor_hits"], ent["peer_hits"], first["first_seen_ms"]) == (
        "peer", "", "", "TCP:0.021>0.000/2", 0)
    # the same episode after six normal windows: the same two windows, on both references
    e = engine()
    out = e.process_flows(flows(fabric([{}] * 6 + [dict(ce={"c": 16})] * 2 + [{}] * 4))) + e.flush()
    assert [(o.value["state"], o.value["window_end_ms"] - o.value["first_seen_ms"], o.value["entities"]["reference"])
            for o in out] == [("firing", 20_000, "baseline,peer"), ("resolved", 60_000, "baseline,peer")]
    # without peer jobs on the fabric it stays invisible (its own past is all it has)
    e = engine()
    assert e.process_flows(flows(fabric([dict(ce={"c": 16})] * 8, peers=()))) + e.flush() == []


def test_jobs_that_all_mark_alike_or_one_peer_only_raise_nothing_on_the_peer_reference():
    # DCTCP on every job: each receiver marked 5 % everywhere: no job stands out against its peers
    e = engine()
    recs = []
    for w in range(8):
        recs += window(w, ce={"a": 5, "b": 5, "c": 5, "d": 5})
        for p in ("k", "m"):
            recs += [dict(r, src=p + r["src"], dst=p + r["dst"])
                     for r in window(w, ce={"a": 5, "b": 5, "c": 5, "d": 5}, job=p)]
    assert e.process_flows(flows(recs)) + e.flush() == []
    # one peer job is too few to call a median (peer_min_jobs 2)
    e = engine()
    assert e.process_flows(flows(fabric([dict(ce={"c": 16})] * 8, peers=("k",)))) + e.flush() == []
