"""Inventory files: YAML and CSV parsing, exact error messages, jobs over time, lookups."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processors.config_files import read_inventory
from processors.logic.enrich.inventory import Inventory, parse_bps
from schemas.columns import addr16, addr16_column
from tests.support.inventory_files import errors_of, write

REPO = Path(__file__).resolve().parents[5]
EXAMPLE_YAML = REPO / "scenarios" / "inventory.example.yaml"
EXAMPLE_CSV = REPO / "scenarios" / "inventory.example.csv"


# ---------------------------------------------------------------- good files


def test_example_files_load_and_agree():
    y = read_inventory(EXAMPLE_YAML)
    c = read_inventory(EXAMPLE_CSV)
    assert y.spec == c.spec
    assert y.entry_prefixes == c.entry_prefixes
    assert "gpu-r1-01" in y.node_names and y.switch_names == ["tor-r1", "tor-r2", "tor-r3"]


def test_yaml_lookup_labels(tmp_path):
    p = write(tmp_path, "inv.yaml", """
        cluster_ranges: [10.0.0.0/16]
        nodes:
          - name: gpu-1
            addresses: [10.0.1.1, "fd00::1"]
            group: gpu
            rack: r1
            switch: tor-1
            capacity: 400G
          - name: store-1
            addresses: 10.0.9.0/28
            group: storage
            capacity: 100Gbps
        networks:
          - {prefix: 10.0.9.0/24, group: storage, rack: r9}
        external_authorized: [203.0.113.0/24]
    """)
    inv = read_inventory(p)
    addrs = addr16_column(["10.0.1.1", "fd00::1", "10.0.9.3", "10.0.9.200", "203.0.113.5", "10.0.5.5", "8.8.8.8"])
    idx = inv.lookup(addrs)
    assert inv.entry_node[idx + 1].tolist() == ["gpu-1", "gpu-1", "store-1", "", "", "", ""]
    assert inv.entry_group[idx + 1].tolist() == [
        "gpu", "gpu", "storage", "storage", "external-authorized", "unknown", "unknown"]
    assert inv.entry_rack[idx + 1].tolist() == ["r1", "r1", "", "r9", "", "", ""]
    assert inv.entry_switch[idx + 1].tolist() == ["tor-1", "tor-1", "", "", "", "", ""]
    assert inv.in_cluster(addrs).tolist() == [True, False, True, True, False, True, False]
    caps = inv.node_capacity_bps(["gpu-1", "store-1", "nope"])
    assert caps[:2].tolist() == [400e9, 100e9] and math.isnan(caps[2])


def test_in_cluster_without_ranges_means_known_and_not_external(tmp_path):
    inv = Inventory.from_dict({
        "nodes": [{"name": "a", "addresses": ["10.0.0.1"], "group": "gpu"}],
        "external_authorized": ["203.0.113.0/24"],
    })
    addrs = addr16_column(["10.0.0.1", "203.0.113.1", "10.0.0.2"])
    assert inv.in_cluster(addrs).tolist() == [True, False, False]


@pytest.mark.parametrize("text,bps", [
    ("25G", 25e9), ("100Gbps", 100e9), ("400G", 400e9), ("10 Mb/s", 10e6), ("1.5T", 1.5e12),
    ("100g", 100e9), (1000, 1000), ("800", 800),
])
def test_parse_bps(text, bps):
    assert parse_bps(text) == bps


@pytest.mark.parametrize("text", ["1GB", "fast", "-1G", "0", True, None, "G"])
def test_parse_bps_rejects(text):
    with pytest.raises(ValueError):
        parse_bps(text)


def test_switch_agents_and_ports():
    inv = read_inventory(EXAMPLE_YAML)
    agents = addr16_column(["10.10.255.1", "10.10.255.3", "10.10.1.11", "::1"])
    assert inv.switch_for_agents(agents).tolist() == ["tor-r1", "tor-r3", "", ""]
    assert inv.agent_switch[addr16("10.10.255.2")] == "tor-r2"
    assert inv.switch_name("10.10.255.2") == "tor-r2"
    assert inv.switch_name(bytes([10, 10, 255, 3])) == "tor-r3"
    assert inv.switch_name("10.9.9.9") == "10.9.9.9"
    assert inv.node_capacities()["modelstore-01"] == 100e9
    assert bool(Inventory.empty()) is True and Inventory.empty().n_entries == 0
    peer, speed = inv.port_info(addr16_column(["10.10.255.1", "10.10.255.2", "10.10.255.1", "9.9.9.9"]),
                                np.array([2, 1, 7, 1]))
    assert peer.tolist() == ["gpu-r1-02", "gpu-r2-01", "", ""]
    assert speed[:2].tolist() == [400e9, 400e9] and np.isnan(speed[2:]).all()


def test_empty_inventory_labels_everything_unknown():
    inv = Inventory.empty()
    idx = inv.lookup(addr16_column(["10.0.0.1", "fd00::1"]))
    assert idx.tolist() == [-1, -1]
    assert inv.entry_group[idx + 1].tolist() == ["unknown", "unknown"]
    assert inv.switch_for_agents(addr16_column(["10.0.0.1"])).tolist() == [""]
    assert inv.jobs_at(np.array([-1]), np.array([0])).tolist() == [""]


# ---------------------------------------------------------------- jobs over time

JOBS = {
    "nodes": [
        {"name": "g1", "addresses": ["10.0.0.1"], "group": "gpu"},
        {"name": "g2", "addresses": ["10.0.0.2"], "group": "gpu"},
    ],
    "jobs": [
        {"name": "early", "nodes": ["g1", "g2"], "from": "2026-12-01T00:00:00Z", "until": "2026-12-02T00:00:00Z"},
        {"name": "late", "nodes": ["g1"], "from": "2026-12-02T00:00:00Z"},
        {"name": "before", "nodes": ["g2"], "until": "2026-11-01T00:00:00+00:00"},
    ],
}


def ms(day: str) -> int:
    return int(datetime.fromisoformat(day).replace(tzinfo=timezone.utc).timestamp() * 1000)


T = {d: ms(d) for d in ("2026-10-01", "2026-11-15", "2026-12-01", "2026-12-02")}


def test_jobs_resolved_at_flow_time():
    inv = Inventory.from_dict(JOBS)
    nid = np.array([0, 0, 0, 1, 1, 1, 1, -1])
    t = np.array([T["2026-12-01"] - 1, T["2026-12-01"], T["2026-12-02"], T["2026-12-01"] + 5,
                  T["2026-12-02"], T["2026-10-01"], T["2026-11-15"], T["2026-12-01"]])
    assert inv.jobs_at(nid, t).tolist() == ["", "early", "late", "early", "", "before", "", ""]


def test_naive_timestamps_are_utc_and_dates_accepted():
    inv = Inventory.from_dict({
        "nodes": [{"name": "g1", "addresses": ["10.0.0.1"], "group": "gpu"}],
        "jobs": [{"name": "j", "nodes": "g1", "from": "2026-12-01", "until": "2026-12-02T00:00:00"}],
    })
    assert inv.jobs_at(np.array([0, 0]), np.array([T["2026-12-01"], T["2026-12-02"]])).tolist() == ["j", ""]


# ---------------------------------------------------------------- bad YAML files, exact messages


def test_yaml_value_errors(tmp_path):
    p = write(tmp_path, "inv.yaml", """
        version: 2
        nodes:
          - name: gpu-1
            addresses: [10.0.0.300, 10.0.1.5/24]
            group: GPU
            capacity: fast
            colour: red
          - name: gpu-2
            group: gpu
        jobs:
          - name: j
            nodes: [gpu-1]
            from: yesterday
        switches:
          - name: tor-1
            agents: 10.0.255.0/24
            ports:
              x: {speed: 1G}
              3: {speed: 1GB}
    """)
    assert errors_of(p) == [
        "version: unsupported version 2 (expected 1)",
        "nodes[0] (gpu-1).addresses[0]: '10.0.0.300' is not an IP address or CIDR",
        "nodes[0] (gpu-1).addresses[1]: '10.0.1.5/24' has host bits set (network is 10.0.1.0/24)",
        "nodes[0] (gpu-1).group: 'GPU' is not a valid group name (lower-case letters, digits, '.', '_', '-')",
        "nodes[0] (gpu-1).capacity: 'fast' is not a link speed (use bits/s or e.g. 25G, 100Gbps, 400G)",
        "nodes[0] (gpu-1).colour: unknown key",
        "nodes[1] (gpu-2).addresses: required key missing",
        "jobs[0] (j).from: 'yesterday' is not an ISO 8601 timestamp",
        "switches[0] (tor-1).agents[0]: '10.0.255.0/24' is a network; expected a single IP address",
        "switches[0] (tor-1).ports.x: port key 'x' is not an ifIndex (integer 0..4294967295)",
        "switches[0] (tor-1).ports[3].speed: '1GB' is not a link speed (use bits/s or e.g. 25G, 100Gbps, 400G)",
    ]


def test_yaml_cross_reference_errors(tmp_path):
    p = write(tmp_path, "inv.yaml", """
        nodes:
          - {name: a, addresses: [10.0.0.1], group: gpu}
          - {name: b, addresses: [10.0.0.1/32], group: gpu}
          - {name: a, addresses: ["fd00::1"], group: gpu}
        networks:
          - {prefix: "fd00::1/128", group: storage}
        jobs:
          - {name: j1, nodes: [a, zz], from: 2026-12-01T00:00:00Z, until: 2026-11-01T00:00:00Z}
          - {name: j2, nodes: [b], from: 2026-12-01T00:00:00Z}
          - {name: j3, nodes: [b], until: 2026-12-05T00:00:00Z}
        switches:
          - {name: s1, agents: [10.0.255.1]}
          - {name: s2, agents: [10.0.255.1]}
          - {name: s1}
    """)
    assert errors_of(p) == [
        "nodes[2] (a).name: duplicate node name 'a' (also at nodes[0] (a))",
        "nodes[1] (b).addresses[0]: prefix 10.0.0.1/32 is already used at nodes[0] (a).addresses[0]",
        "networks[0] (fd00::1/128).prefix: prefix fd00::1/128 is already used at nodes[2] (a).addresses[0]",
        "jobs[0] (j1).until: until (2026-11-01T00:00:00+00:00) is not after from (2026-12-01T00:00:00+00:00)",
        "jobs[0] (j1).nodes[1]: unknown node 'zz'",
        "jobs[1] (j2): node 'b' is also in jobs[2] (j3) at an overlapping time",
        "switches[1] (s2).agents[0]: agent address 10.0.255.1/32 is already used at switches[0] (s1).agents[0]",
        "switches[2] (s1).name: duplicate switch name 's1' (also at switches[0] (s1))",
    ]


@pytest.mark.parametrize("text,problem", [
    ("", "file is empty"),
    ("- a\n- b\n", "top level must be a mapping, got list"),
    ("nodes: [\n", "line 2: YAML syntax error: expected the node content, but found '<stream end>'"),
    ("nodes:\n  - {name: a, addresses: [10.0.0.1], group: unknown}\n",
     "nodes[0] (a).group: group 'unknown' is reserved for addresses not in the inventory"),
])
def test_yaml_file_level_errors(tmp_path, text, problem):
    p = tmp_path / "inv.yaml"
    p.write_text(text)
    assert errors_of(p) == [problem]


def test_unsupported_extension_and_missing_file(tmp_path):
    p = tmp_path / "inv.txt"
    p.write_text("nodes: []")
    assert errors_of(p) == ["unsupported inventory format '.txt' (use .yaml, .yml or .csv)"]
    assert errors_of(tmp_path / "missing.yaml") == ["cannot read file: No such file or directory"]


# ---------------------------------------------------------------- CSV


def test_csv_without_kind_column_is_a_host_table(tmp_path):
    p = write(tmp_path, "inv.csv", """
        address,node,group,rack,switch,capacity
        10.0.0.1,gpu-1,gpu,r1,tor-1,400G
        fd00::1,gpu-1,,,,
        10.0.9.0/24,,storage,r9,,
    """)
    inv = read_inventory(p)
    idx = inv.lookup(addr16_column(["fd00::1", "10.0.9.9"]))
    assert inv.entry_node[idx + 1].tolist() == ["gpu-1", ""]
    assert inv.entry_group[idx + 1].tolist() == ["gpu", "storage"]
    assert inv.entry_rack[idx + 1].tolist() == ["r1", "r9"]
    assert inv.node_capacity_bps(["gpu-1"]).tolist() == [400e9]


def test_csv_value_errors(tmp_path):
    p = write(tmp_path, "inv.csv", """
        kind,address,node,group,rack,switch,capacity,job,from,until,if_index,speed
        host,10.0.0.300,gpu-1,gpu,,,,,,,,
        host,10.0.0.2,gpu-2,GPU,,,,,,,,
        host,10.0.0.3,gpu-3,gpu,,,fast,,,,,
        host,10.0.0.4,,,,,,,,,,
        job,,gpu-3,,,,,j1,2026-13-01,,,
        switch_port,,gpu-1,,,tor,,,,,x,1G
        switch_port,,gpu-1,,,tor,,,,,2,1GB
        switch_agent,10.1.0.0/24,,,,tor,,,,,,
    """)
    assert errors_of(p) == [
        "line 2: column 'address': '10.0.0.300' is not an IP address or CIDR",
        "line 3: column 'group': 'GPU' is not a valid group name (lower-case letters, digits, '.', '_', '-')",
        "line 4: column 'capacity': 'fast' is not a link speed (use bits/s or e.g. 25G, 100Gbps, 400G)",
        "line 5: column 'group': required value missing",
        "line 6: column 'from': '2026-13-01' is not an ISO 8601 timestamp",
        "line 7: column 'if_index': port key 'x' is not an ifIndex (integer 0..4294967295)",
        "line 8: column 'speed': '1GB' is not a link speed (use bits/s or e.g. 25G, 100Gbps, 400G)",
        "line 9: column 'address': '10.1.0.0/24' is a network; expected a single IP address",
    ]


def test_csv_row_shape_errors(tmp_path):
    p = write(tmp_path, "inv.csv", """
        # comment lines are skipped but still counted
        kind,address,node,group,speed
        host,10.0.0.1,gpu-1,gpu,
        host,10.0.0.2,gpu-1,storage,
        router,10.0.0.3,,,
        job,10.0.0.4,gpu-1,,
        host,10.0.0.5,gpu-5,gpu,,extra
        switch_port,,,,1G
        host,,gpu-1,,
    """)
    assert errors_of(p) == [
        "line 4: column 'group': 'storage' conflicts with 'gpu' given for node 'gpu-1' on line 3",
        "line 5: column 'kind': unknown kind 'router' (expected one of host, cluster_range, external_authorized, "
        "job, switch_agent, switch_port, nic, switch, link)",
        "line 6: column 'address' does not apply to kind 'job'",
        "line 7: 6 cells but the header has 5 columns",
        "line 8: column 'switch': required value missing",
        "line 9: column 'address': required value missing",
    ]


def test_csv_header_and_cross_reference_errors(tmp_path):
    p = write(tmp_path, "bad_header.csv", """
        address,node,colour
        10.0.0.1,a,red
    """)
    assert errors_of(p) == [
        "line 1: unknown column 'colour' (known columns: kind, address, node, group, rack, switch, capacity, "
        "job, from, until, if_index, speed, nic, rail, role, peer_switch, peer_if_index)"
    ]
    p = write(tmp_path, "xref.csv", """
        kind,address,node,group,job,from
        host,10.0.0.1,a,gpu,,
        host,10.0.0.1,b,gpu,,
        job,,a,,j1,2026-12-01
        job,,zz,,j1,2026-12-01
        switch_port,,,,,
    """.replace("switch_port,,,,,\n", ""))
    assert errors_of(p) == [
        "line 3: column 'address': prefix 10.0.0.1/32 is already used at line 2: column 'address'",
        "line 5: column 'node': unknown node 'zz'",
    ]
    p = tmp_path / "empty.csv"
    p.write_text("")
    assert errors_of(p) == ["file is empty (expected a header line)"]


def test_in_cluster_for_entries_partly_inside_a_range():
    inv = Inventory.from_dict({
        "cluster_ranges": ["10.0.0.0/16", "10.1.0.0/24"],
        "networks": [{"prefix": "10.0.0.0/8", "group": "storage"}, {"prefix": "10.0.5.0/24", "group": "mgmt"},
                     {"prefix": "11.0.0.0/8", "group": "storage"}],
    })
    addrs = addr16_column(["10.0.1.1", "10.1.0.9", "10.1.1.9", "10.0.5.5", "11.0.0.1", "10.0.200.1", "12.0.0.1"])
    assert inv.in_cluster(addrs).tolist() == [True, True, False, True, False, True, False]


# ---------------------------------------------------------------- simulator scenario shape

SCENARIOS = sorted(p for p in (REPO / "scenarios").glob("*.yaml")
                   if any(line.startswith("nodes:") for line in p.read_text().splitlines()))


def test_scenario_style_keys(tmp_path):
    p = write(tmp_path, "scenario.yaml", """
        simulation: {name: demo, anything: [1, 2]}
        nodes:
          - {name: gpu01, ips: [10.0.1.1], rack: r1, switch: tor1, group: gpu, capacity: 25G}
        switches:
          - name: tor1
            agent: 10.0.255.1
            ports:
              - {if_index: 1, node: gpu01, speed: 25G}
              - {if_index: 2, peer: spine1, speed: 100G}
    """)
    inv = read_inventory(p)
    assert inv.switch_for_agents(addr16_column(["10.0.255.1"])).tolist() == ["tor1"]
    peer, speed = inv.port_info(addr16_column(["10.0.255.1", "10.0.255.1"]), np.array([1, 2]))
    assert peer.tolist() == ["gpu01", "spine1"] and speed.tolist() == [25e9, 100e9]
    bad = write(tmp_path, "bad.yaml", """
        nodes:
          - {name: gpu01, ips: [10.0.1.300], group: gpu}
        switches:
          - name: tor1
            ports:
              - {if_index: 1, node: gpu01}
              - {if_index: 1, node: gpu02}
              - {node: gpu03}
    """)
    assert errors_of(bad) == [
        "nodes[0] (gpu01).ips[0]: '10.0.1.300' is not an IP address or CIDR",
        "switches[0] (tor1).ports: list item 1 repeats if_index 1",
    ]


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.name for p in SCENARIOS])
def test_simulator_scenarios_load_as_inventories(path):
    inv = read_inventory(path)
    assert inv.node_names and inv.switch_names


def test_csv_duplicate_port_and_millisecond_job_bounds(tmp_path):
    p = write(tmp_path, "ports.csv", """
        kind,switch,if_index,node,address
        switch_port,tor,3,gpu-1,
        switch_port,tor,03,gpu-2,
    """)
    assert errors_of(p) == ["line 3: column 'if_index': port 03 of switch 'tor' already given on line 2"]
    inv = Inventory.from_dict({
        "nodes": [{"name": "g", "addresses": "10.0.0.1", "group": "gpu"}],
        "jobs": [{"name": "j", "nodes": "g", "from": "2026-12-01T00:00:00.001Z", "until": "2026-12-01T00:00:00.003Z"}],
    })
    t0 = ms("2026-12-01")
    assert inv.jobs_at(np.zeros(4, int), np.array([t0, t0 + 1, t0 + 2, t0 + 3])).tolist() == ["", "j", "j", ""]


@settings(max_examples=60, deadline=None)
@given(jobs=st.lists(st.tuples(st.lists(st.integers(0, 4), min_size=1, max_size=5, unique=True),
                               st.integers(0, 20), st.integers(1, 10)), max_size=6),
       queries=st.lists(st.tuples(st.integers(-2, 6), st.integers(-5, 40)), min_size=1, max_size=40))
def test_job_codes_equal_a_search_over_all_memberships(jobs, queries):
    """Nodes in one job are a table lookup, nodes in several a binary search: both give the membership that
    started last at or before the time and has not ended (checked against a plain scan of the rows)."""
    day = 86_400_000
    busy: dict[int, list[tuple[int, int]]] = {}
    spec_jobs = []
    for k, (nodes, start, days) in enumerate(jobs):
        t0, t1 = start * day, (start + days) * day
        nodes = [n for n in nodes if all(t1 <= a or b <= t0 for a, b in busy.get(n, []))]  # no overlaps per node
        if not nodes:
            continue
        for n in nodes:
            busy.setdefault(n, []).append((t0, t1))
        spec_jobs.append({"name": f"j{k}", "nodes": [f"g{n}" for n in nodes],
                          "from": datetime.fromtimestamp(t0 / 1000, timezone.utc).isoformat(),
                          "until": datetime.fromtimestamp(t1 / 1000, timezone.utc).isoformat()})
    inv = Inventory.from_dict({"nodes": [{"name": f"g{i}", "addresses": [f"10.0.0.{i + 1}"], "group": "gpu"} for i in range(5)],
                               "jobs": spec_jobs})
    nid = np.array([q[0] for q in queries])
    t = np.array([q[1] * day // 2 for q in queries])
    want = []
    for n, tt in zip(nid.tolist(), t.tolist()):
        rows = [(j["name"], int(datetime.fromisoformat(j["from"]).timestamp() * 1000),
                 int(datetime.fromisoformat(j["until"]).timestamp() * 1000)) for j in spec_jobs if f"g{n}" in j["nodes"]]
        hit = [name for name, a, b in rows if a <= max(tt, 0) < b] if 0 <= n < 5 else []
        want.append(hit[0] if hit else "")
    assert inv.jobs_at(nid, t).tolist() == want


def test_rated_write_of_storage_nodes(tmp_path):
    """A storage node's rated per-client write throughput: storage_bound's reference without a past (issue 31)."""
    p = write(tmp_path, "inv.yaml", """
        nodes:
          - {name: gpu01, ips: [10.0.1.1], group: gpu, capacity: 25G}
          - {name: stor01, ips: [10.0.10.1], group: storage, capacity: 100G, rated_write: 1.5G}
    """)
    assert read_inventory(p).rated_writes() == {"stor01": 1.5e9}
    bad = write(tmp_path, "bad.yaml", """
        nodes:
          - {name: stor01, ips: [10.0.10.1], group: storage, rated_write: fast}
    """)
    assert errors_of(bad) and "rated_write" in errors_of(bad)[0]


def test_declared_dataset_read_of_jobs(tmp_path):
    """A job's declared per-node dataset-read throughput: storage_bound's read reference without a past (issue 31)."""
    p = write(tmp_path, "inv.yaml", """
        nodes:
          - {name: gpu01, ips: [10.0.1.1], group: gpu}
          - {name: gpu02, ips: [10.0.1.2], group: gpu}
        jobs:
          - {name: train-a, nodes: [gpu01], dataset_read: 120M}
          - {name: train-b, nodes: [gpu02]}
    """)
    assert read_inventory(p).dataset_reads() == {"train-a": 120e6}
    bad = write(tmp_path, "bad.yaml", """
        nodes:
          - {name: gpu01, ips: [10.0.1.1], group: gpu}
        jobs:
          - {name: train-a, nodes: [gpu01], dataset_read: lots}
    """)
    assert errors_of(bad) and "dataset_read" in errors_of(bad)[0]
