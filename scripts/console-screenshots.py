#!/usr/bin/env python3
"""Regenerate the console screenshots in docs/images/ from a real scenario run.

Runs the first 260 s of ``mixed`` at 10x through a fresh local pipeline with the console beside it (ports
31300-31399 unless --base-port), waits for the incast, the straggler and the link downgrade, then photographs
each view in headless Chromium: console-matrix.png, console-topology.png (the graph, the downgraded link
opened), console-jobs.png (train-a), console-events.png (the incast with its flows), console-topn.png and
console-diagnosis.png (the straggler gpu03 at its diagnosis).

``--closed-loop``: the ``tuning`` scenario backfilled into a scratch archive, served without Kafka:
console-compare.png (train-b around its change marker) and console-jobs-change.png.

``--fabric``: the 512-node rail-optimised fabric of devtools/fabric_fixture.py with live counter samples:
console-topology-512.png (rack bubbles), console-topology-open.png (a rack opened, an uplink's history) and
console-rails.png (the per-rail view).

``--visibility``: console-job-visibility.png and console-job-roce.png from a made-up two-job cluster (no Kafka).

Usage: .venv/bin/python scripts/console-screenshots.py [--out docs/images] [--base-port 31300]
       [--closed-loop | --fabric | --visibility]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from devtools.browser import available, browser, console_errors, wait_rendered
from devtools.console_run import ports_in_block, scenario_with_console, wait_for


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(REPO / "docs" / "images"))
    ap.add_argument("--base-port", type=int, default=31300)
    ap.add_argument("--duration", type=float, default=260.0, help="Scenario seconds to send (at 10x).")
    ap.add_argument("--closed-loop", action="store_true", help="The Compare and change-marker shots from a "
                    "backfilled tuning scenario instead.")
    ap.add_argument("--fabric", action="store_true", help="The topology graph and rail shots of a generated "
                    "512-node fabric instead.")
    ap.add_argument("--visibility", action="store_true", help="The collective visibility shots of the jobs view "
                    "(a made-up cluster, no Kafka) instead.")
    args = ap.parse_args()
    why = available()
    if why:
        print(f"console-screenshots: {why}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    _ports, _console, driver_port = ports_in_block(args.base_port)
    if args.closed_loop:
        return closed_loop(out, args.base_port, driver_port)
    if args.fabric:
        return fabric(out, _console, driver_port)
    if args.visibility:
        return visibility(out, _console, driver_port)
    with tempfile.TemporaryDirectory(prefix="fabricflow-shots-") as tmp:
        with scenario_with_console("mixed", Path(tmp) / "mixed", base_port=args.base_port,
                                   duration_s=args.duration) as run:
            wait_for(run.sim.done.is_set, 300, "the simulator", check=run.pipe.check)

            def have(t, sub=None):
                return [e for e in run.console.store.events() if e["type"] == t and (sub is None or e["subtype"] == sub)]

            def gpu03():  # the injected straggler, once its diagnosis is in
                return [e for e in have("straggler") if e["entity"] == "gpu03" and e.get("diagnosis")]

            wait_for(lambda: have("incast") and gpu03() and have("link", "link_downgrade"), 120,
                     "incast, straggler and link downgrade in the console", check=run.pipe.check)
            time.sleep(15)  # the archive sink flushes idle partitions after archive.idle_flush_s (10 s)
            incast = have("incast")[0]
            downgrade = have("link", "link_downgrade")[0]
            lo = run.epoch_ms
            hi = run.epoch_ms + int(args.duration * 1000) + 30_000  # event time runs at the scenario's clock
            rng = f"&mode=range&from={lo}&to={hi}"
            shots = {
                "matrix": "#view=matrix",
                "topology": f"#view=topology&link={downgrade['switch']}:{downgrade['if_index']}",
                "jobs": f"#view=jobs&job=train-a{rng}",
                "events": f"#view=events&event={incast['id']}{rng}",
                "topn": "#view=topn",
            }
            with browser(1500, 1200, driver_port=driver_port) as d:
                for view, frag in shots.items():
                    d.get(run.url + frag)
                    wait_rendered(d, view)
                    time.sleep(1.5)  # detail panels and charts finish drawing
                    path = out / f"console-{view}.png"
                    d.save_screenshot(str(path))
                    print(f"wrote {path}")
                d.get(run.url + f"#view=events&event={gpu03()[0]['id']}{rng}")
                wait_rendered(d, "events")
                time.sleep(1.5)
                d.execute_script("document.getElementById('e-diagnosis').scrollIntoView({block: 'start'})")
                time.sleep(0.5)
                if not shoot(d, out / "console-diagnosis.png"):
                    return 1
    return 0


def shoot(d, path: Path) -> bool:
    """Save the page to ``path``; False (the errors printed) when the browser console has errors."""
    d.save_screenshot(str(path))
    print(f"wrote {path}")
    errs = console_errors(d)
    if errs:
        print("browser console errors:\n  " + "\n  ".join(errs), file=sys.stderr)
    return not errs


def fabric(out: Path, port: int, driver_port: int) -> int:
    """console-topology-512.png, console-topology-open.png and console-rails.png from the generated fabric."""
    from devtools import fabric_fixture as ff

    shots = {"topology-512": ("#view=topology", 1000),
             "topology-open": (f"#view=topology&expand=rack%3Arack05&link={ff.ERRORS}", 1300),
             "rails": ("#view=topology&tsub=rails", 800)}
    with ff.serving(port) as url:
        for name, (frag, height) in shots.items():
            with browser(1600, height, driver_port=driver_port) as d:
                d.get(url + frag)
                wait_rendered(d, "topology")
                time.sleep(1.5)
                if not shoot(d, out / f"console-{name}.png"):
                    return 1
    return 0


def visibility(out: Path, port: int, driver_port: int) -> int:
    """console-job-visibility.png (ib-train: 8 nodes on InfiniBand, only storage and SSH over IP) and
    console-job-roce.png (llm-a: 8 nodes in a RoCEv2 ring) from live matrix windows made up here."""
    import threading

    import uvicorn

    from console.app import ConsoleState, create_app
    from console.layout import Layout
    from console.live import LiveStore
    from processors.logic.enrich.inventory import Inventory

    ib = [f"ib{k:02d}" for k in range(1, 9)]
    eth = [f"gpu{k:02d}" for k in range(1, 9)]
    nodes = [{"name": n, "ips": [f"10.1.{j}.{k}"], "rack": f"r{j}", "group": "gpu", "capacity": "400G"}
             for j, names in ((1, eth), (2, ib)) for k, n in enumerate(names, 1)]
    nodes.append({"name": "stor01", "ips": ["10.9.0.1"], "rack": "r9", "group": "storage", "capacity": "400G"})
    inv = Inventory.from_dict({"nodes": nodes, "jobs": [{"name": "llm-a", "nodes": eth}, {"name": "ib-train", "nodes": ib}]})
    layout = Layout.from_inventory(inv)
    store = LiveStore(layout)
    t0 = int(time.time() * 1000) // 10_000 * 10_000 - 60_000
    for w in range(6):
        ws = t0 + w * 10_000

        def cell(src, dst, cat, b, **ops):
            store.add("matrix", {"window_start_ms": ws, "window_end_ms": ws + 10_000, "level": "node", "src": src,
                                 "dst": dst, "category": cat, "bytes_est": b, "packets_est": b // 4096,
                                 "flow_records": 4, "samples": 200, **ops})
        for k, n in enumerate(eth):  # a ring: writes, their acks back; gpu04 is marked and answers with CNPs
            nxt = eth[(k + 1) % len(eth)]
            cell(n, nxt, "rocev2", 40_000_000_000, roce_write_packets_est=9_500_000 - 400_000 * (n == "gpu03"),
                 roce_send_packets_est=2_000)
            cell(nxt, n, "rocev2", 200_000_000, roce_ack_packets_est=480_000, cnp_packets_est=3_000 * (nxt == "gpu04"))
        for n in ib:  # InfiniBand job: over IP only dataset reads and SSH
            cell("stor01", n, "storage", 3_000_000_000)
            cell(n, "stor01", "storage", 20_000_000)
        cell(ib[0], ib[1], "ssh", 40_000)
    store.last_record_ms -= 2000
    shots = {"console-job-visibility.png": "#view=jobs&job=ib-train", "console-job-roce.png": "#view=jobs&job=llm-a"}
    server = uvicorn.Server(uvicorn.Config(create_app(ConsoleState(layout, store, None, None)), host="127.0.0.1",
                                           port=port, log_level="warning", lifespan="off"))
    server.install_signal_handlers = lambda: None
    threading.Thread(target=server.run, daemon=True).start()
    wait_for(lambda: server.started, 15, "the console")
    url = f"http://127.0.0.1:{port}/"
    try:
        for name, frag in shots.items():
            with browser(1600, 760, driver_port=driver_port) as d:
                d.get(url + frag)
                wait_rendered(d, "jobs")
                time.sleep(1.5)
                ok = shoot(d, out / name)
                d.get("about:blank")
                if not ok:
                    return 1
    finally:
        server.should_exit = True
    return 0


def closed_loop(out: Path, base_port: int, driver_port: int) -> int:
    """console-compare.png and console-jobs-change.png from the tuning scenario, backfilled offline."""
    from console.server import ConsoleServer
    from devtools.simulator.engine import Simulation
    from devtools.simulator.exporters.pcap import DistinctSources, write_pcap
    from fabricflow.settings import load_settings
    from replay.backfill import Backfill
    from replay.config import core_factory_from

    inv = str(REPO / "scenarios" / "tuning.yaml")
    with tempfile.TemporaryDirectory(prefix="fabricflow-shots-") as tmp:
        sim = Simulation("tuning", kinds={"sflow", "netflow9", "ipfix", "marks"})
        cap = Path(tmp) / "tuning.pcap"
        write_pcap(cap, sim.run(), sources=DistinctSources())
        s = load_settings(None, archive={"url": f"file://{tmp}/archive"}, processors={"inventory": inv},
                          console={"metrics_port": base_port + 33})
        Backfill(s, str(cap), root=f"{tmp}/archive", core_factory=core_factory_from(s.processors)).run()
        lo, hi = sim.start_ms, sim.start_ms + sim.duration_ms
        shots = {"console-compare.png": ("compare", "#view=compare&centity=train-b", 1000),
                 "console-jobs-change.png": ("jobs", f"#view=jobs&job=train-b&mode=range&from={lo}&to={hi}", 640)}
        with ConsoleServer(s, listen=f"127.0.0.1:{base_port + 34}", live=False) as svc:
            for name, (view, frag, height) in shots.items():
                with browser(1600, height, driver_port=driver_port) as d:
                    d.get(svc.url + frag)
                    wait_rendered(d, view)
                    time.sleep(1.5)
                    d.save_screenshot(str(out / name))
                    print(f"wrote {out / name}")
                    errs = console_errors(d)
                    if errs:
                        print("browser console errors:\n  " + "\n  ".join(errs), file=sys.stderr)
                        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
