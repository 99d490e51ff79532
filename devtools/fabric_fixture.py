"""A rail-optimised two-tier fabric for the console's topology tests, screenshots and benchmark.

``fabric_inventory()`` writes the inventory (spines, rail leaves, nodes with one NIC per rail, leaf uplinks to
every spine), ``fabric_layout()`` reads it through the inventory's validation into the console's
:class:`~console.layout.Layout`; ``fill_ports()`` puts one counter sample per port into a :class:`~console.live.LiveStore` (or returns the
link-health sample records for an archive), with a few known faults: a node NIC negotiated below its speed, an
uplink with errors, an uplink down, and one node whose rail-3 NIC carries a sliver of its traffic.
"""

from __future__ import annotations

import time
from contextlib import contextmanager

from console.layout import Layout

NIC_BPS = 400_000_000_000


def names(nodes: int, rails: int, su: int, spines: int) -> dict:
    """The generated names: nodes, leaves (per scalable unit and rail), spines."""
    sus = -(-nodes // su)
    return {"nodes": [f"gpu{i:03d}" for i in range(nodes)],
            "leaves": [f"leaf-s{u}-r{r}" for u in range(sus) for r in range(rails)],
            "spines": [f"spine{s}" for s in range(spines)]}


def fabric_inventory(nodes: int = 512, rails: int = 8, su: int = 128, rack: int = 16, spines: int = 8,
                     jobs: int = 8) -> dict:
    """An inventory (the YAML shape, docs/inventory.md) of ``nodes`` GPU nodes in racks of ``rack``, in scalable
    units of ``su`` nodes with one leaf per rail each: node NIC r on its unit's rail-r leaf (port = the node's index
    in the unit + 1), every leaf with one uplink to each spine (leaf port 1000 + s, spine port = leaf number + 1)."""
    n = names(nodes, rails, su, spines)
    node_specs = []
    for i, name in enumerate(n["nodes"]):
        u = i // su
        node_specs.append({"name": name, "group": "gpu", "rack": f"rack{i // rack:02d}", "capacity": "400G",
                           "nics": [{"name": f"nic{r}", "addresses": [f"10.{r}.{i // 250}.{i % 250 + 1}"],
                                     "switch": f"leaf-s{u}-r{r}", "port": i % su + 1, "rail": r} for r in range(rails)]})
    switches = [{"name": leaf, "role": "leaf", "rail": int(leaf.rsplit("-r", 1)[1]), "agent": f"10.254.{k // 250}.{k % 250 + 1}"}
                for k, leaf in enumerate(n["leaves"])]
    switches += [{"name": sp, "role": "spine", "agent": f"10.253.0.{s + 1}"} for s, sp in enumerate(n["spines"])]
    links = [{"a": f"{leaf}:{1000 + s}", "b": f"{sp}:{k + 1}", "speed": "800G"}
             for k, leaf in enumerate(n["leaves"]) for s, sp in enumerate(n["spines"])]
    per_job = max(1, nodes // max(1, jobs))
    job_specs = [{"name": f"job{j}", "nodes": n["nodes"][j * per_job:(j + 1) * per_job]} for j in range(-(-nodes // per_job))]
    return {"version": 1, "nodes": node_specs, "switches": switches, "links": links, "jobs": job_specs}


def fabric_layout(nodes: int = 512, rails: int = 8, su: int = 128, rack: int = 16, spines: int = 8,
                  jobs: int = 8) -> Layout:
    """The console's layout of :func:`fabric_inventory`, read through the inventory's own validation."""
    from processors.logic.enrich.inventory import Inventory

    return Layout.from_inventory(Inventory.from_dict(fabric_inventory(nodes, rails, su, rack, spines, jobs)))


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
        if uplink:  # uplinks between 35 and 65 %; a node's NICs within 10 % of the node's level (25-75 %)
            util = 0.35 + 0.3 * ((i * 104729) % 89) / 89
        else:
            k = int(p.node[3:]) if p.node[3:].isdigit() else i
            util = (0.25 + 0.5 * ((k * 7919) % 97) / 97) * (0.95 + 0.1 * ((i * 31) % 11) / 11)
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


@contextmanager
def serving(port: int, nodes: int = 512, rails: int = 8, samples: int = 30):
    """The console on the fixture fabric (live port samples only, no broker or archive) on 127.0.0.1:``port`` in a
    thread; yields its URL."""
    import threading

    import uvicorn

    from console.app import ConsoleState, create_app
    from console.live import LiveStore

    layout = fabric_layout(nodes, rails)
    store = LiveStore(layout)
    fill_ports(store, int(time.time() * 1000) // 10_000 * 10_000, samples=samples)
    server = uvicorn.Server(uvicorn.Config(create_app(ConsoleState(layout, store)), host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="off"))
    server.install_signal_handlers = lambda: None
    t = threading.Thread(target=server.run, daemon=True)
    t.start()
    deadline = time.monotonic() + 15
    while not server.started:
        if time.monotonic() > deadline or not t.is_alive():
            raise RuntimeError(f"the console did not start on 127.0.0.1:{port}")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.should_exit = True
        t.join(10)


def main(argv=None) -> int:
    """Serve the console on the fixture fabric until interrupted: ``python -m devtools.fabric_fixture``."""
    import argparse

    ap = argparse.ArgumentParser(description="the console on a generated rail-optimised fabric (no broker)")
    ap.add_argument("--port", type=int, default=44080)
    ap.add_argument("--nodes", type=int, default=512)
    ap.add_argument("--rails", type=int, default=8)
    args = ap.parse_args(argv)
    with serving(args.port, args.nodes, args.rails) as url:
        print(f"console on {url}#view=topology ({args.nodes} nodes, {args.rails} rails); Ctrl-C stops it")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
