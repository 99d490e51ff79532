"""The compare report as text: the entity's metrics in a table, each node's significant changes, the steps and
the events of both periods. ``--format json`` prints :func:`query.compare.report.build_report`'s dict instead."""

from __future__ import annotations

import io
from datetime import UTC, datetime

__all__ = ["fmt_value", "render_text"]

_MARK = {"improved": "improved", "worse": "WORSE", "no significant change": "no significant change",
         "no verdict": "(no verdict)", "insufficient data": "insufficient data"}


def _iso(ms) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def fmt_value(v, unit: str, signed: bool = False) -> str:
    """A value in its unit, compactly (shares as %, rates with SI prefixes)."""
    if v is None:
        return "-"
    sign = "+" if signed and v > 0 else ""
    if unit == "share":
        return f"{sign}{100 * v:.2f}%"
    if unit in ("bit/s", "B/s"):
        a = abs(v)
        for div, p in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
            if a >= div:
                return f"{sign}{v / div:.2f} {p}{unit}"
        return f"{sign}{v:.0f} {unit}"
    if unit == "ms":
        return f"{sign}{v:.0f} ms"
    if unit in ("1/s", "1/min"):
        return f"{sign}{v:.2f}{unit[1:]}"
    return f"{sign}{v:.2f}"


def _interval(r: dict) -> str:
    iv = r["interval"]
    if not iv:
        return "-"
    return f"[{fmt_value(iv[0], r['unit'], True)}, {fmt_value(iv[1], r['unit'], True)}]"


def _table(rows: list[dict], title: str, with_entity: bool) -> str:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    if with_entity:
        t.add_column("node")
    for c in ("metric", "before", "after", "change", "interval", "verdict"):
        t.add_column(c, justify="left" if c in ("metric", "verdict") else "right")
    for r in rows:
        cells = [r["label"], fmt_value(r["before"], r["unit"]), fmt_value(r["after"], r["unit"]),
                 fmt_value(r["change"], r["unit"], True), _interval(r), _MARK.get(r["verdict"], r["verdict"])]
        t.add_row(*([r["entity"]] if with_entity else []), *cells)
    buf = io.StringIO()
    Console(file=buf, width=150, force_terminal=False, color_system=None).print(t)
    return buf.getvalue()


def render_text(rep: dict, all_nodes: bool = False) -> str:
    """The report for a terminal; node rows only where the verdict is improved/worse (all with ``all_nodes``)."""
    out = []
    b, a = rep["before"], rep["after"]
    head = f"compare {rep['scope']} {rep['entity']}"
    m = rep.get("marker")
    if m:
        head += f" around the change at {_iso(m['time_ms'])}: {m['text']!r}"
        if m.get("author"):
            head += f" ({m['author']})"
    out.append(head)
    out.append(f"  before {_iso(b['from_ms'])} .. {_iso(b['to_ms'])} ({b['windows']} windows of "
               f"{rep['window_ms'] // 1000} s)")
    settle = f"; the first {rep['settle_ms'] // 1000} s after the change left out" if m else ""
    out.append(f"  after  {_iso(a['from_ms'])} .. {_iso(a['to_ms'])} ({a['windows']} windows{settle})")
    out.append(f"  intervals: {100 * (1 - rep['alpha']):.0f} % for the whole report ({rep['family']} comparisons, "
               "Bonferroni); docs/closed-loop.md")
    main = [r for r in rep["metrics"] if r["entity_kind"] != "node" or rep["scope"] == "node"]
    nodes = [r for r in rep["metrics"] if r["entity_kind"] == "node" and rep["scope"] != "node"]
    out.append(_table(main, f"{rep['scope']} {rep['entity']}", False).rstrip())
    if nodes:
        shown = nodes if all_nodes else [r for r in nodes if r["verdict"] in ("improved", "worse")]
        quiet = sum(1 for r in nodes if r["verdict"] == "no significant change")
        if shown:
            out.append(_table(shown, "nodes" + ("" if all_nodes else ": significant changes"), True).rstrip())
        if not all_nodes:
            out.append(f"nodes: {quiet} other node metrics with no significant change"
                       + ("; none changed significantly" if not shown else "") + " (--all-nodes lists them)")
    st = rep.get("steps")
    if st:
        out.append("steps (from the job's step marks):")
        for name in ("before", "after"):
            s = st.get(name)
            if s:
                out.append(f"  {name:6} {s['steps']} steps, median {s['median_step_ms']:.0f} ms, communication "
                           f"{s['median_comm_ms']:.0f} ms ({fmt_value(s['comm_bytes_per_step'], 'B/s')[:-2]} per step), "
                           f"I/O {s['io_ms_per_step']:.0f} ms per step; stretched communication: "
                           f"{len(s['stretched'])} steps" + (f" ({', '.join(map(str, s['stretched'][:8]))})"
                                                             if s["stretched"] else ""))
    ev = rep.get("events") or {}
    for name in ("before", "after"):
        items = ev.get(name) or []
        if items:
            kinds: dict[str, int] = {}
            for e in items:
                kinds[e["type"]] = kinds.get(e["type"], 0) + 1
            diag = [e for e in items if e.get("diagnosis")]
            out.append(f"events {name}: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
                       + (f"; {len(diag)} with a diagnosis" if diag else ""))
    return "\n".join(out) + "\n"
