"""conn_storm: a node's sampled SYN / RST rate far above its own baseline (a packet-capture trigger)."""

from processors.logic.engine import Engine, EngineConfig
from processors.logic.windows.tumbling import WindowConfig

from tests.support.flows import flows

TCP, SYN, RST_ACK, ACK = 6, 0x02, 0x14, 0x10
PEERS = [f"p{i}" for i in range(10)]


def engine():
    return Engine(EngineConfig(window=WindowConfig(size_ms=10_000, lateness_ms=0), enabled=("conn_storm",)))


def steady(w):
    """Node s and its peers exchanging established TCP traffic (ACK only), 1 in 100 sampled."""
    t = w * 10_000 + 50
    return [dict(src="s", dst=p, t=t, packets=20, rate=100, ip_protocol=TCP, tcp_flags=ACK, dst_port=443)
            for p in PEERS[:3]]


def storm(w, syn=30, rst=True):
    """``syn`` sampled SYNs from s spread over ten peers (each 100 real ones), refused with RST/ACK."""
    t = w * 10_000 + 60
    out = [dict(src="s", dst=PEERS[i % 10], t=t, packets=1, bytes=60, rate=100, ip_protocol=TCP, tcp_flags=SYN,
                dst_port=8000) for i in range(syn)]
    if rst:
        out += [dict(src=PEERS[i % 10], dst="s", t=t, packets=1, bytes=40, rate=100, ip_protocol=TCP,
                     tcp_flags=RST_ACK, dst_port=40000) for i in range(syn)]
    return out


def run(per_window, e=None):
    e = e or engine()
    recs = [r for w, f in enumerate(per_window) for r in f(w)]
    return e.process_flows(flows(recs)) + e.flush()


def test_steady_traffic_raises_nothing():
    assert run([steady] * 10) == []


def test_a_syn_storm_fires_once_names_node_rates_and_capture_port():
    e = engine()
    e.conn_storm.link_state = lambda node, now: (
        {"switch": "tor1", "if_index": 3, "port": "192.0.2.10|3"} if node == "s" else None)
    both = lambda w: steady(w) + storm(w)  # noqa: E731
    out = run([steady] * 3 + [both] * 3 + [steady] * 5, e)
    assert [(o.key, o.value["state"], o.value["window_end_ms"]) for o in out] == [
        ("conn_storm|s", "firing", 50_000),  # second storm window (persist_windows 2)
        ("conn_storm|s", "resolved", 100_000),  # quiet for more than 3 windows
    ]
    assert out[0].value["entities"] == {
        "node": "s", "signals": "syn,rst", "reference": "baseline", "syn_per_s": "300.0", "syn_baseline_per_s": "0.0", "syn_sampled": "30",
        "syn_per_s_low": "192.6", "rst_per_s": "300.0", "rst_baseline_per_s": "0.0", "rst_sampled": "30",
        "rst_per_s_low": "192.6", "syn_peers": "10", "evidence_windows": "2", "port": "tor1/if3",
    }  # fmt: skip
    assert out[0].value["summary"] == (
        "connection storm at s: sends ~300 SYN/s (baseline 0/s, 30 sampled), receives ~300 RST/s (baseline 0/s, "
        "30 sampled) to 10 peers for 2 windows, above its own baseline; capture on port tor1/if3. Sampled SYN/RST counts are a hint, "
        "not a measurement: confirm with a packet capture")
    assert out[0].value["first_seen_ms"] == 30_000


def test_a_checkpoint_burst_is_not_a_storm():
    """A checkpoint opens a few connections and moves many bytes over them: a few sampled SYNs, no storm."""

    def burst(w):
        t = w * 10_000 + 70
        return steady(w) + [
            dict(src="s", dst="st", t=t, packets=4, bytes=240, rate=100, ip_protocol=TCP, tcp_flags=SYN, dst_port=2049),
            dict(src="s", dst="st", t=t, packets=50_000, bytes=75_000_000, rate=100, ip_protocol=TCP,
                 tcp_flags=0x18, dst_port=2049, category="storage"),
        ]
    assert run([steady] * 4 + [burst] * 3 + [steady] * 3) == []


def test_few_sampled_syns_or_a_node_that_always_storms_do_not_fire():
    # 12 sampled SYNs (120/s estimated) in each of three windows: below min_samples and min_rate_per_s
    assert run([steady] * 3 + [lambda w: steady(w) + storm(w, syn=12, rst=False)] * 3 + [steady] * 2) == []
    # the same SYN rate in every window from the start is this node's baseline
    assert run([lambda w: steady(w) + storm(w)] * 10) == []


def test_a_node_storming_from_its_first_window_fires_on_the_floor_as_soon_as_a_later_storm_does():
    # born broken: 8000 SYN/s estimated (800 sampled in 10 s), refused, from the node's first window: no normal
    # past to learn, the floor reference (5000/s) judges it
    hard = lambda w: steady(w) + storm(w, syn=800)  # noqa: E731
    out = run([hard] * 3 + [steady] * 5)
    assert [(o.key, o.value["state"], o.value["window_end_ms"], o.value["entities"]["reference"]) for o in out] == [
        ("conn_storm|s", "firing", 20_000, "floor"),  # second storm window, as after a baseline (persist_windows 2)
        ("conn_storm|s", "resolved", 70_000, "floor"),
    ]
    assert out[0].value["summary"] == (
        "connection storm at s: sends ~8000 SYN/s (baseline not yet known, 800 sampled), receives ~8000 RST/s "
        "(baseline not yet known, 800 sampled) to 10 peers for 2 windows, above the floor of 5000/s. Sampled SYN/RST counts are a hint, not a measurement: confirm with a packet capture")
    # the same storm after a normal past: both references, same number of windows to fire
    out = run([steady] * 3 + [hard] * 2 + [steady] * 5)
    assert [(o.value["state"], o.value["window_end_ms"] - o.value["first_seen_ms"], o.value["entities"]["reference"])
            for o in out][0] == ("firing", 20_000, "baseline,floor")
