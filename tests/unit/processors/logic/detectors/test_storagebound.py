"""storage_bound: storage I/O far below its baseline while the links have room and no link event is open."""

from processors.logic.engine import Engine, EngineConfig
from processors.logic.windows.tumbling import WindowConfig

from tests.support.flows import counters, flows

M = 1_000_000
NODES = ["n0", "n1", "n2", "n3"]
PORTS = {1: "n0", 2: "n1", 3: "n2", 4: "n3", 17: "st"}
SPEED = {"n0": 25e9, "n1": 25e9, "n2": 25e9, "n3": 25e9, "st": 100e9}
EXPORTER = "192.0.2.10"


def engine():
    def port_info(exporter, if_index):
        node = PORTS.get(if_index, "") if exporter == EXPORTER else ""
        return node, SPEED.get(node, float("nan"))

    return Engine(EngineConfig(window=WindowConfig(size_ms=10_000, lateness_ms=0), enabled=("storage_bound", "link")),
                  port_info=port_info, node_job=lambda node, t: "j" if node in NODES else "")


def io(w, reads=100 * M, writes=0):
    """Dataset reads st -> each node and checkpoint writes each node -> st in window ``w``."""
    out = []
    for n in NODES:
        if reads:
            out.append(dict(src="st", dst=n, t=w * 10_000 + 100, bytes=reads, packets=50, category="storage",
                            src_group="storage", dst_job="j"))
        if writes:
            out.append(dict(src=n, dst="st", t=w * 10_000 + 200, bytes=writes, packets=50, category="storage",
                            dst_group="storage", src_job="j"))
    return out


def ports(w, st_speed=100e9, errors=0):
    """One counter sample per port at the start of window ``w`` (light load: 1 % of 25G)."""
    out = []
    for i, node in PORTS.items():
        octets = int(w * 10 * 25e9 / 8 * 0.01)
        speed = st_speed if node == "st" else 25e9
        out.append(dict(exporter=EXPORTER, if_index=i, t=w * 10_000, seq=w + 1, speed=int(speed),
                        in_octets=octets, out_octets=octets, in_errors=errors * w if node == "st" else 0))
    return out


def run(plan, rated_write=None, dataset_read=None, **port_kw):
    """plan: per window (reads, writes) bytes per node; ``rated_write``: the storage's rated bits/s per client;
    ``dataset_read``: job j's declared read bits/s per node."""
    e = engine()
    if rated_write:
        e.storage_bound.rated_write = {"st": rated_write}
    if dataset_read:
        e.storage_bound.dataset_read = {"j": dataset_read}
    out = []
    for w, (reads, writes) in enumerate(plan):
        out += e.process_counters(counters(ports(w, **port_kw)))
        out += e.process_flows(flows(io(w, reads, writes)))
    out += e.flush()
    return [o.value for o in out if o.kind == "alert"]


STEADY = [(100 * M, 0)] * 8
SLOW = [(25 * M, 0)] * 4


def test_reads_far_below_baseline_with_link_headroom_give_a_verdict():
    out = run(STEADY + SLOW + STEADY)
    assert [(a["state"], a["window_end_ms"]) for a in out] == [("firing", 110_000), ("resolved", 160_000)]
    assert out[0] == {
        "dedup_key": "storage_bound|j|st|dataset_reads", "rule": "storage_bound", "severity": "warning", "state": "firing",
        "summary": "job j: dataset reads with st at 80.00 Mb/s, 25% of their baseline 320.00 Mb/s for 3 windows, "
                   "while the 5 ports involved stay at <= 1% utilisation with no link event: the network is not "
                   "the bottleneck",
        "entities": {"job": "j", "storage": "st", "signal": "dataset_reads", "throughput_bps": "80000000",
                     "baseline_bps": "320000000", "ratio": "0.250", "windows": "3", "reference": "baseline",
                     "max_link_util": "0.010",
                     "link_headroom": "0.990", "storage_port": "192.0.2.10|17", "storage_port_util": "0.003",
                     "ports_checked": "5"},
        "window_start_ms": 100_000, "window_end_ms": 110_000, "first_seen_ms": 100_000, "last_seen_ms": 110_000,
        "bytes_est": 100 * M, "flows": 0, "sample_flows": [], "diagnosis": None,
    }  # fmt: skip


def test_a_slowdown_that_comes_with_a_link_fault_gives_no_verdict():
    # the storage port runs at 10G instead of its configured 100G: the network may be the cause
    assert run(STEADY + SLOW + STEADY, st_speed=10e9) == []


def test_a_slowdown_during_an_error_burst_gives_no_verdict():
    assert run(STEADY + SLOW + STEADY, errors=1000) == []


def test_no_counter_samples_no_verdict():
    e = engine()
    out = []
    for w, (reads, writes) in enumerate(STEADY + SLOW):
        out += e.process_flows(flows(io(w, reads, writes)))
    assert [o for o in out + e.flush() if o.kind == "alert"] == []


def test_one_or_two_slow_windows_and_a_stopped_job_give_no_verdict():
    assert run(STEADY + [(25 * M, 0)] * 2 + STEADY) == []
    assert run(STEADY + [(0, 0)] * 5) == []


def test_checkpoint_bursts_of_any_alignment_give_no_verdict():
    # a 15 s burst spans 2 or 3 windows; the partial windows are far below the peak, the middle one is not
    bursts = [(100 * M, 0), (100 * M, 500 * M), (100 * M, 3000 * M), (100 * M, 1500 * M)] * 2
    bursts += [(100 * M, 0), (100 * M, 2000 * M), (100 * M, 2500 * M), (100 * M, 0)]
    assert run(STEADY + bursts + bursts) == []


def test_a_stretched_checkpoint_at_a_quarter_of_its_rate_gives_a_verdict():
    normal = [(100 * M, 0), (100 * M, 1500 * M), (100 * M, 3000 * M), (100 * M, 0)]
    slow = [(100 * M, 0)] + [(100 * M, 750 * M)] * 6 + [(100 * M, 0)]
    out = run(STEADY + normal * 2 + slow + STEADY)
    assert [(a["state"], a["window_end_ms"], a["entities"]["signal"], a["entities"]["ratio"]) for a in out] == [
        ("firing", 200_000, "checkpoint_writes", "0.250"),  # third window of the stretched burst
        ("updated", 260_000, "checkpoint_writes", "0.250"),  # update_every 6 windows, while it was seen
        ("resolved", 270_000, "checkpoint_writes", "0.250"),  # 3 quiet windows after the burst ended at 230 s
    ]


def test_storage_slow_from_the_start_is_judged_against_its_rated_write_throughput():
    """No earlier burst to compare with (issue 31, born broken): the inventory's rated per-client write
    throughput is the reference. 1.6 Gb/s per client is 2000 MB per client and window; the stretched
    burst's 750 MB per client is 38 % of it; the healthy burst's 3000 MB is above it."""
    slow = [(100 * M, 0)] + [(100 * M, 750 * M)] * 6 + [(100 * M, 0)]
    normal = [(100 * M, 0), (100 * M, 1500 * M), (100 * M, 3000 * M), (100 * M, 1500 * M), (100 * M, 0)]
    assert run(STEADY + slow) == []  # no rating: no reference for the first burst
    out = run(STEADY + slow + STEADY, rated_write=1.6e9)
    assert [(a["state"], a["window_end_ms"], a["entities"]["reference"], a["entities"]["ratio"],
             a["entities"]["baseline_bps"]) for a in out] == [
        ("firing", 120_000, "rated", "0.375", "6400000000"),  # third window of the first burst
        ("updated", 180_000, "rated", "0.375", "6400000000"),
        ("resolved", 190_000, "rated", "0.375", "6400000000"),
    ]
    assert "of the storage node's rated per-client write throughput for its clients 6.40 Gb/s" in out[0]["summary"]
    assert run(STEADY + normal * 3, rated_write=1.6e9) == []  # healthy bursts reach the rating


def test_snapshot_restore_gives_the_same_verdicts():
    plan = STEADY + SLOW + STEADY
    whole = run(plan)
    a = engine()
    out = []
    for w, (reads, writes) in enumerate(plan[:10]):
        out += a.process_counters(counters(ports(w)))
        out += a.process_flows(flows(io(w, reads, writes)))
    b = engine()
    b.restore_bytes(a.snapshot_bytes())
    for w, (reads, writes) in enumerate(plan):
        if w >= 10:
            out += b.process_counters(counters(ports(w)))
            out += b.process_flows(flows(io(w, reads, writes)))
    out += b.flush()
    assert [o.value for o in out if o.kind == "alert"] == whole


def test_reads_slow_from_the_jobs_start_are_judged_against_its_declared_read_throughput_as_fast_as_a_later_fall():
    """Born broken (issue 31): the job's declared 80 Mb/s per node (100 MB per node and window) is the reference
    its own past cannot be; 25 MB per node is 25 % of it. Flagged at the third window, as a later fall is."""
    born = [(25 * M, 0)] * 5 + [(100 * M, 0)] * 5
    assert run(born) == []  # no declaration: the slow reads are all the past it has
    out = run(born, dataset_read=80e6)
    assert [(a["state"], a["window_end_ms"], a["first_seen_ms"]) for a in out] == [
        ("firing", 30_000, 20_000),  # third low window
        ("resolved", 90_000, 20_000),
    ]
    first = out[0]
    assert first["summary"] == (
        "job j: dataset reads with st at 80.00 Mb/s, 25% of the job's declared dataset-read throughput for its "
        "reading nodes 320.00 Mb/s for 3 windows, while the 5 ports involved stay at <= 1% utilisation with no "
        "link event: the network is not the bottleneck")
    assert (first["entities"]["reference"], first["entities"]["baseline_bps"], first["entities"]["ratio"]) == (
        "declared", "320000000", "0.250")
    # a fall after a healthy start: the same third window, on the job's own baseline
    later = [(100 * M, 0)] * 6 + [(25 * M, 0)] * 4 + [(100 * M, 0)] * 4
    out = run(later, dataset_read=80e6)
    assert [(a["state"], a["window_end_ms"] - a["first_seen_ms"], a["entities"]["reference"]) for a in out][:1] == [
        ("firing", 10_000, "baseline")]
    assert out[0]["window_end_ms"] == 90_000  # windows 6, 7, 8 low: the third ends at 90 s
    # healthy reads at the declared rate raise nothing
    assert run([(100 * M, 0)] * 12, dataset_read=80e6) == []
