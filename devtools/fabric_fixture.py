"""A rail-optimised two-tier fabric for the console's topology tests, screenshots and benchmark.

``fabric_layout()`` builds the console's :class:`~console.layout.Layout` directly (spines, rail leaves, nodes with
one NIC per rail, leaf uplinks to every spine) so the views can be exercised at 512 nodes without an inventory
file; ``fill_ports()`` puts one counter sample per port into a :class:`~console.live.LiveStore` (or returns the
link-health sample records for an archive), with a few known faults: a node NIC negotiated below its speed, an
uplink with errors, an uplink down, and one node whose rail-3 NIC carries a sliver of its traffic.
"""

from __future__ import annotations

from console.layout import Layout, LinkInfo, NicInfo, NodeInfo, PortInfo

NIC_BPS = 400_000_000_000
UPLINK_BPS = 800_000_000_000


def names(nodes: int, rails: int, su: int, spines: int) -> dict:
    """The generated names: nodes, leaves (per scalable unit and rail), spines."""
    sus = -(-nodes // su)
    return {"nodes": [f"gpu{i:03d}" for i in range(nodes)],
            "leaves": [f"leaf-s{u}-r{r}" for u in range(sus) for r in range(rails)],
            "spines": [f"spine{s}" for s in range(spines)]}


def fabric_layout(nodes: int = 512, rails: int = 8, su: int = 128, rack: int = 16, spines: int = 8,
                  jobs: int = 8) -> Layout:
    """``nodes`` GPU nodes in racks of ``rack``, scalable units of ``su`` nodes with one leaf per rail each, every
    node NIC r on its unit's rail-r leaf (port = the node's index in the unit + 1), every leaf with one uplink to
    each spine (leaf port 1000 + s, spine port = leaf number + 1)."""
    n = names(nodes, rails, su, spines)
    node_infos, nics, ports = [], [], []
    per_job = max(1, nodes // max(1, jobs))
    for i, name in enumerate(n["nodes"]):
        u = i // su
        node_infos.append(NodeInfo(name, "gpu", f"rack{i // rack:02d}", f"leaf-s{u}-r0", f"job{i // per_job}",
                                   float(NIC_BPS * rails)))
        for r in range(rails):
            leaf = f"leaf-s{u}-r{r}"
            nics.append(NicInfo(name, f"nic{r}", leaf, i % su + 1, r, float(NIC_BPS)))
            ports.append(PortInfo(leaf, i % su + 1, name, float(NIC_BPS)))
    links = []
    for k, leaf in enumerate(n["leaves"]):
        for s, spine in enumerate(n["spines"]):
            links.append(LinkInfo(leaf, 1000 + s, spine, k + 1, float(UPLINK_BPS)))
            ports.append(PortInfo(leaf, 1000 + s, spine, float(UPLINK_BPS)))
            ports.append(PortInfo(spine, k + 1, leaf, float(UPLINK_BPS)))
    job_nodes: dict[str, list[str]] = {}
    for x in node_infos:
        job_nodes.setdefault(x.job, []).append(x.name)
    roles = {x: "leaf" for x in n["leaves"]} | {x: "spine" for x in n["spines"]}
    return Layout(node_infos, ports, job_nodes, {}, n["leaves"] + n["spines"], roles,
                  {x: int(x.rsplit("-r", 1)[1]) for x in n["leaves"]}, nics, links)


# the faults fill_ports() puts in, by link id (as /api/topology names links)
DOWNGRADED = "leaf-s0-r2:6"  # gpu005's rail-2 NIC at 100G of 400G
ERRORS = "leaf-s1-r4:1001"  # an uplink to spine1 with 500 errors/s
DOWN = "leaf-s2-r1:1003"  # an uplink to spine3, oper down
THIN_NODE, THIN_RAIL = "gpu042", 3  # its rail-3 NIC carries 2 % of what its other NICs carry


def link_samples(layout: Layout, t_ms: int, interval_ms: int = 10_000) -> list[dict]:
    """One link-health sample per inventory port at ``t_ms`` (as the processors emit them), with the faults above."""
    down = {f"{k.a_switch}:{k.a_port}" for k in layout.links if k.id == DOWN}
    down |= {f"{k.b_switch}:{k.b_port}" for k in layout.links if k.id == DOWN}
    out = []
    for i, p in enumerate(layout.ports):
        key = f"{p.switch}:{p.if_index}"
        uplink = p.node in layout.roles
        util = 0.25 + 0.5 * ((i * 7919) % 97) / 97 if not uplink else 0.35 + 0.3 * ((i * 104729) % 89) / 89
        speed = int(p.speed_bps or NIC_BPS)
        errors, up = 0.0, True
        if key == DOWNGRADED:
            speed = 100_000_000_000
        if key == ERRORS:
            errors = 500.0
        if key in down:
            up, util = False, 0.0
        if p.node == THIN_NODE and p.switch.endswith(f"-r{THIN_RAIL}"):
            util *= 0.02
        out.append({"time_ms": t_ms, "interval_ms": interval_ms, "kind": "sample", "exporter": "", "switch": p.switch,
                    "if_index": p.if_index, "if_speed": speed, "previous_if_speed": speed, "util_in": util,
                    "util_out": util * 0.9, "in_errors_per_s": errors, "out_errors_per_s": 0.0,
                    "in_discards_per_s": 0.0, "out_discards_per_s": 0.0, "oper_up": up, "detail": ""})
    return out


def fill_ports(store, t_ms: int, samples: int = 3, interval_ms: int = 10_000) -> None:
    """``samples`` counter samples per port into a live store, the last at ``t_ms``."""
    for k in range(samples):
        for r in link_samples(store.layout, t_ms - (samples - 1 - k) * interval_ms, interval_ms):
            store.add("link", r)


def main(argv=None) -> int:
    """Serve the console on the fixture fabric (live port samples only): ``python -m devtools.fabric_fixture``."""
    import argparse
    import time

    import uvicorn

    from console.app import ConsoleState, create_app
    from console.live import LiveStore

    ap = argparse.ArgumentParser(description="the console on a generated rail-optimised fabric (no broker)")
    ap.add_argument("--port", type=int, default=44080)
    ap.add_argument("--nodes", type=int, default=512)
    ap.add_argument("--rails", type=int, default=8)
    args = ap.parse_args(argv)
    layout = fabric_layout(args.nodes, args.rails)
    store = LiveStore(layout)
    fill_ports(store, int(time.time() * 1000) // 10_000 * 10_000, samples=30)
    print(f"console on http://127.0.0.1:{args.port}/#view=topology ({args.nodes} nodes, {args.rails} rails)")
    uvicorn.run(create_app(ConsoleState(layout, store)), host="127.0.0.1", port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
