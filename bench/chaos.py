"""Chaos bench: faults under steady load on the embedded stack, with the figures docs/reliability.md tabulates.

The harness is devtools/chaos.py (tests/e2e/test_chaos.py runs it too); this is its command line. What each figure
means: docs/reliability.md, "The chaos suite".

    .venv/bin/python -m bench.chaos --scenario ingest-kill --rate 100000 --seconds 120 --port-base 31520 --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import yaml

from devtools.chaos import BASELINE, SCENARIOS, run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="ingest-kill",
                    help=f"one of {', '.join(SCENARIOS)}, or all; {BASELINE} = no fault")
    ap.add_argument("--rate", type=float, default=100_000, help="flow records per second sent")
    ap.add_argument("--seconds", type=float, default=120, help="seconds of load")
    ap.add_argument("--outage", type=float, default=30, help="s3-stop: seconds the object store is down")
    ap.add_argument("--drain", type=float, default=300, help="at most this many seconds after the load for the archive to catch up")
    ap.add_argument("--port-base", type=int, default=31520, help="first of ~30 loopback ports")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--no-compare", action="store_true", help="skip the comparison of output windows with a replay")
    ap.add_argument("--keep", help="keep logs and state in this directory (default: a temporary one, removed)")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="a setting of the pipeline's services, e.g. processors.fetch_max_wait_ms=500 (repeatable)")
    a = ap.parse_args()
    overrides: dict = {}
    for item in a.set:
        key, sep, value = item.partition("=")
        section, dot, name = key.partition(".")
        if not (sep and dot and section and name):
            ap.error(f"--set {item!r}: expected SECTION.KEY=VALUE")
        overrides.setdefault(section, {})[name] = yaml.safe_load(value)
    names = SCENARIOS if a.scenario == "all" else (a.scenario,)
    if any(n not in SCENARIOS + (BASELINE,) for n in names):
        ap.error(f"--scenario: one of {', '.join(SCENARIOS + (BASELINE,))} or all")
    results = []
    for name in names:
        if a.keep:
            d = Path(a.keep) / name
            d.mkdir(parents=True, exist_ok=True)
            r = run(name, a.rate, a.seconds, a.port_base, a.outage, a.drain, d, compare=not a.no_compare,
                    overrides=overrides)
        else:
            with tempfile.TemporaryDirectory(prefix=f"chaos-{name}-") as d:
                r = run(name, a.rate, a.seconds, a.port_base, a.outage, a.drain, Path(d), compare=not a.no_compare,
                        overrides=overrides)
        results.append(r)
        print(f"{name}: sent {r['sent_records']} kafka {r['kafka_records']} archive {r['archive_rows']} "
              f"lost {r['lost']} duplicated {r['duplicated']} recover {r['recover_s']} s (fault at {r['fault_at_s']} s), "
              f"archive complete {r['archived_after_load_s']} s after the load",
              flush=True)
        print(f"  sink flows_raw lag (records) max {r['sink_raw_lag_max']}, "
              f"at the load's end {r['sink_raw_lag_at_load_end']}; "
              f"ingest drops: socket {r['ingest_socket_drops']} producer {r['ingest_producer_drops']}; "
              f"processors done {r['processors_done_after_load_s']} s after the load", flush=True)
        print(f"  metrics during the load: {r['metrics_during_load']}", flush=True)
        print(f"  cpu-s during the load: {r['cpu_load_s']}; until the end (catch-up, replay): {r['cpu_s']}; "
              f"too late: {r['too_late']}; restarted: {r['restarted']}", flush=True)
        w = r.get("windows")
        if w:
            m = w.get("matrix", {})
            print(f"  outputs vs replay of {w['replayed_records']} records: identical={w.get('identical')} "
                  f"explained_by_too_late={w.get('explained_by_too_late')}; matrix windows {m.get('windows_identical')}"
                  f"/{m.get('windows')} identical, node records missing live {m.get('node_records_missing_live')}; "
                  + ", ".join(f"{k}: {v['identical']} same {v['differ']} differ "
                              f"{v['only_live']}/{v['only_replay']} only live/replay"
                              for k, v in w.items() if isinstance(v, dict) and "differ" in v), flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
