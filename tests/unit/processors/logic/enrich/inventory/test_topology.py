"""Fabric topology in the inventory: switch roles, switch-to-switch links, multi-NIC nodes and rails."""

from __future__ import annotations

import math

from processors.config_files import read_inventory
from processors.logic.enrich.inventory import Inventory
from schemas.columns import addr16_column

from tests.support.inventory_files import errors_of, write

FABRIC_YAML = """
    nodes:
      - name: gpu-1
        group: gpu
        rack: r1
        capacity: 400G
        nics:
          - {name: eth0, address: 10.0.0.1, switch: leaf-0, port: 1, rail: 0}
          - {name: eth1, address: 10.1.0.1, switch: leaf-1, port: 1, rail: 1, speed: 200G}
      - name: gpu-2
        group: gpu
        rack: r1
        addresses: [10.9.0.2]
        nics:
          - {name: eth0, address: 10.0.0.2, switch: leaf-0, port: 2, rail: 0}
          - {name: eth1, address: 10.1.0.2, switch: leaf-1, port: 2, rail: 1}
    switches:
      - {name: leaf-0, role: leaf, rail: 0, agents: [10.255.0.1]}
      - {name: leaf-1, role: leaf, rail: 1, agents: [10.255.0.2]}
      - {name: spine-0, role: spine}
      - {name: spine-1, role: spine}
    links:
      - {a: "leaf-0:49", b: "spine-0:1", speed: 400G}
      - {a: {switch: leaf-0, port: 50}, b: {switch: spine-1, port: 1}, speed: 400G}
      - {a: leaf-1:49, b: spine-0:2, speed: 400G}
      - {a: leaf-1:50, b: spine-1:2, speed: 400G}
"""

FABRIC_CSV = """
    kind,node,nic,address,group,rack,capacity,switch,if_index,rail,speed,role,peer_switch,peer_if_index
    nic,gpu-1,eth0,10.0.0.1,gpu,r1,400G,leaf-0,1,0,,,,
    nic,gpu-1,eth1,10.1.0.1,,,,leaf-1,1,1,200G,,,
    host,gpu-2,,10.9.0.2,gpu,r1,,,,,,,,
    nic,gpu-2,eth0,10.0.0.2,,,,leaf-0,2,0,,,,
    nic,gpu-2,eth1,10.1.0.2,,,,leaf-1,2,1,,,,
    switch,,,10.255.0.1,,,,leaf-0,,0,,leaf,,
    switch,,,10.255.0.2,,,,leaf-1,,1,,leaf,,
    switch,,,,,,,spine-0,,,,spine,,
    switch,,,,,,,spine-1,,,,spine,,
    link,,,,,,,leaf-0,49,,400G,,spine-0,1
    link,,,,,,,leaf-0,50,,400G,,spine-1,1
    link,,,,,,,leaf-1,49,,400G,,spine-0,2
    link,,,,,,,leaf-1,50,,400G,,spine-1,2
"""


def test_fabric_yaml_and_csv_agree(tmp_path):
    y = read_inventory(write(tmp_path, "fab.yaml", FABRIC_YAML))
    c = read_inventory(write(tmp_path, "fab.csv", FABRIC_CSV))
    assert y.spec.links == c.spec.links and y.spec.switches == c.spec.switches
    assert [n.nics for n in y.spec.nodes] == [n.nics for n in c.spec.nodes]
    assert y.topology.to_dict() == c.topology.to_dict()


def test_address_resolves_to_node_nic_and_rail(tmp_path):
    inv = read_inventory(write(tmp_path, "fab.yaml", FABRIC_YAML))
    addrs = addr16_column(["10.0.0.1", "10.1.0.1", "10.1.0.2", "10.9.0.2", "10.7.7.7"])
    idx = inv.lookup(addrs)
    nic, rail = inv.nic_info(addrs)
    assert inv.entry_node[idx + 1].tolist() == ["gpu-1", "gpu-1", "gpu-2", "gpu-2", ""]
    assert nic.tolist() == ["eth0", "eth1", "eth1", "", ""]
    assert rail.tolist() == [0, 1, 1, -1, -1]
    assert inv.entry_switch[idx + 1].tolist() == ["leaf-0", "leaf-1", "leaf-1", "", ""]
    assert inv.entry_capacity_bps[idx + 1][:2].tolist() == [400e9, 200e9]


def test_topology_uplinks_nics_and_ports(tmp_path):
    inv = read_inventory(write(tmp_path, "fab.yaml", FABRIC_YAML))
    t = inv.topology
    assert t.leaves == ["leaf-0", "leaf-1"] and t.spines == ["spine-0", "spine-1"] and t.rails == [0, 1]
    assert t.uplinks("leaf-0") == [(49, "spine-0", 1, 400e9), (50, "spine-1", 1, 400e9)]
    assert t.uplinks("spine-0") == []
    assert t.port("spine-0", 2).kind == "downlink" and t.port("spine-0", 2).peer == "leaf-1"
    use = t.port("leaf-1", 2)
    assert (use.kind, use.peer, use.nic, use.rail) == ("nic", "gpu-2", "eth1", 1)
    assert math.isnan(use.speed_bps)  # neither the NIC nor gpu-2 gives a speed
    assert [n.name for n in t.node_nics("gpu-1")] == ["eth0", "eth1"]
    # link ends and NIC ports feed the port table of link health (peer and speed per agent/ifIndex)
    peer, speed = inv.port_info(addr16_column(["10.255.0.1", "10.255.0.1", "10.255.0.2"]), [49, 1, 7])
    assert peer.tolist() == ["spine-0", "gpu-1", ""]
    assert speed[:2].tolist() == [400e9, 400e9] and math.isnan(speed[2])


def test_old_single_nic_inventory_has_an_empty_topology():
    inv = Inventory.from_dict({"nodes": [{"name": "a", "addresses": ["10.0.0.1"], "group": "gpu", "switch": "tor"}],
                               "switches": [{"name": "tor", "ports": {1: {"peer": "a", "speed": "100G"}}}]})
    assert inv.topology.links == [] and inv.topology.nics == [] and inv.topology.uplinks("tor") == []
    nic, rail = inv.nic_info(addr16_column(["10.0.0.1"]))
    assert nic.tolist() == [""] and rail.tolist() == [-1]


def test_yaml_topology_errors(tmp_path):
    p = write(tmp_path, "bad.yaml", """
        nodes:
          - name: a
            group: gpu
            nics:
              - {name: eth0, address: 10.0.0.1, switch: leaf-0, port: 1, rail: 0}
              - {name: eth1, address: 10.0.0.2, switch: leaf-0, port: 1, rail: 0}
              - {name: eth2, address: 10.0.0.3, switch: leaf-9, port: 3, rail: 2}
          - name: b
            group: gpu
            nics:
              - {name: eth0, address: 10.0.0.1, switch: leaf-1, port: 1, rail: 0}
              - {name: eth1, address: 10.0.1.2, switch: leaf-1, port: 2}
          - name: c
            group: gpu
            addresses: []
        switches:
          - {name: leaf-0, role: leaf}
          - {name: leaf-1, role: leaf, rail: 1}
          - {name: spine-0, role: spine}
        links:
          - {a: leaf-0:1, b: spine-0:1, speed: 400G}
          - {a: leaf-0:50, b: spine-7:1, speed: 400G}
          - {a: leaf-0:51, b: leaf-0:52, speed: 400G}
    """)
    assert errors_of(p) == [
        "nodes[1] (b).nics[0].addresses[0]: prefix 10.0.0.1/32 is already used at nodes[0] (a).nics[0].addresses[0]",
        "nodes[0] (a).nics[1].rail: inconsistent rails: rail 0 is also on nodes[0] (a).nics[0]",
        "nodes[0] (a).nics[1].port: port 1 of switch 'leaf-0' is used twice (also at nodes[0] (a).nics[0].port)",
        "nodes[0] (a).nics[2].switch: unknown switch 'leaf-9'",
        "nodes[1] (b).nics[1]: inconsistent rails: NIC 'eth1' has no rail but other NICs of node 'b' do",
        "nodes[1] (b).nics[0].rail: inconsistent rails: NIC on rail 0 is cabled to switch 'leaf-1', "
        "which carries rail 1",
        "nodes[2] (c): node 'c' has no addresses and no nics",
        "links[0].a.port: port 1 of switch 'leaf-0' is used twice (also at nodes[0] (a).nics[0].port)",
        "links[1].b.switch: unknown switch 'spine-7'",
        "links[2].b.switch: link from switch 'leaf-0' to itself",
    ]


def test_yaml_link_value_errors(tmp_path):
    p = write(tmp_path, "bad.yaml", """
        switches: [{name: leaf-0, role: tor}]
        links:
          - {a: leaf-0:1, b: spine-0, speed: 100G}
          - {a: leaf-0:2, b: spine-0:2}
    """)
    problems = errors_of(p)
    assert problems[0].startswith("switches[0] (leaf-0).role: Input should be '', 'leaf' or 'spine'")
    assert problems[1:] == [
        "links[0].b: 'spine-0' is not a link end (use 'switch:ifIndex' or {switch, port})",
        "links[1].speed: required key missing",
    ]


#: the first lines of the bad topology CSVs below: a leaf, a spine and one NIC on the leaf
CSV_TWO_SWITCHES_ONE_NIC = """
        kind,node,nic,address,group,switch,if_index,rail,speed,role,peer_switch,peer_if_index
        switch,,,,,leaf-0,,,,leaf,,
        switch,,,,,spine-0,,,,spine,,
        nic,a,eth0,10.0.0.1,gpu,leaf-0,1,0,,,,"""


def test_csv_topology_errors_name_the_line(tmp_path):
    p = write(tmp_path, "bad.csv", """
        kind,node,nic,address,group,switch,if_index,rail,speed,role,peer_switch,peer_if_index
        switch,,,,,leaf-0,,,,leaf,,
        switch,,,,,spine-0,,,,spine,,
        switch,,,,,spine-0,,,,leaf,,
        nic,a,eth0,10.0.0.1,gpu,leaf-0,1,0,,,,
        nic,a,eth0,10.0.0.5,,leaf-0,2,,,,,
        link,,,,,leaf-0,49,,,,spine-0,1
        link,,,,,leaf-0,1,,400G,,spine-0,2
        link,,,,,leaf-0,50,,400G,,spine-0,
    """)
    assert errors_of(p) == [
        "line 4: column 'role': 'leaf' conflicts with 'spine' given for switch 'spine-0' on line 3",
        "line 6: column 'if_index': '2' conflicts with '1' given for NIC 'eth0' of node 'a' on line 5",
        "line 9: column 'peer_if_index': required value missing",
    ]
    p = write(tmp_path, "bad2.csv", CSV_TWO_SWITCHES_ONE_NIC + """
        link,,,,,leaf-0,49,,,,spine-0,1
        link,,,,,leaf-0,1,,400G,,spine-0,2
        link,,,,,leaf-0,50,,400G,,spine-9,3
    """)
    assert errors_of(p) == [
        "line 5: column 'speed': required value missing",
    ]
    p = write(tmp_path, "bad3.csv", CSV_TWO_SWITCHES_ONE_NIC + """
        link,,,,,leaf-0,1,,400G,,spine-0,2
        link,,,,,leaf-0,50,,400G,,spine-9,3
    """)
    assert errors_of(p) == [
        "line 5: column 'if_index': port 1 of switch 'leaf-0' is used twice (also at line 4: column 'if_index')",
        "line 6: column 'peer_switch': unknown switch 'spine-9'",
    ]


def test_a_link_end_on_a_port_listed_with_another_peer(tmp_path):
    p = write(tmp_path, "bad.yaml", """
        nodes: [{name: gpu-1, addresses: [10.0.0.1], group: gpu}]
        switches:
          - {name: leaf-0, role: leaf, ports: {49: {peer: gpu-1, speed: 400G}}}
          - {name: spine-0, role: spine}
        links:
          - {a: leaf-0:49, b: spine-0:1, speed: 400G}
    """)
    assert errors_of(p) == [
        "links[0].a.port: port 49 of switch 'leaf-0' connects 'spine-0' here but 'gpu-1' at "
        "switches[0] (leaf-0).ports[49]"]
