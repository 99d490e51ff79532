"""The demo's terminal screen: at any terminal size, what fits and can be read (rich).

The traffic matrix shows the finest level whose labels fit whole: ``node``, else ``group``, else ``rack``.
Each level is tried with the column names as headers, then with numbered columns (row ``3 gpu03`` is column
``3``), with the estimated rate in each cell, then with a shade. A level that would need a label cut is not
chosen; when no matrix fits, a ranked list of the top node pairs takes its place. The panel title names the
level. The top talkers panel stands beside the matrix when there is room for it; detections show the newest
that fit, newest last. Tests: tests/unit/devtools/test_demo_view.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timezone

from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.layout import Layout
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from .detections import Detection, MatrixView, fmt_bps

LEVELS = ("node", "group", "rack")
SHADES = ["grey42", "blue", "cyan", "green", "yellow", "dark_orange", "red"]
CORNER = "src\\dst"
TALKERS_MIN_WIDTH = 34  # narrower than this, the top talkers panel is left out
EVENTS_MIN = 9  # rows the detections panel keeps whatever the matrix needs (half of a short terminal)
RANKED_ROWS = 10  # node pairs in the ranked list that stands for a matrix too large for the terminal


def _ts(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%H:%M:%S")


def rate(bps: float) -> str:
    """A bit rate in at most 4 characters: ``980M``, ``1.2G``, ``25G``, ``3k``, ``0``."""
    if bps < 999.5:
        return f"{bps:.0f}"
    for unit, div in (("k", 1e3), ("M", 1e6), ("G", 1e9)):
        v = bps / div
        if v < 9.95:
            return f"{v:.1f}{unit}"
        if v < 999.5:
            return f"{v:.0f}{unit}"
    v = bps / 1e12
    return f"{v:.1f}T" if v < 9.95 else f"{v:.0f}T"


def _order(labels) -> list[str]:
    """Labels sorted, ``unknown`` (outside the inventory) last."""
    return sorted(set(labels), key=lambda x: (x == "unknown", x))


def _fit_title(options: list[str], width: int) -> str:
    """The first title that fits a panel ``width`` wide whole (rich cuts a longer one with an ellipsis)."""
    return next((t for t in options if len(t) <= width - 4), "")


@dataclass(frozen=True)
class Grid:
    """One way to draw the matrix: a level's labels, named or numbered columns, rates or shades in the cells."""

    level: str
    labels: tuple[str, ...]
    numbered: bool
    values: bool

    @property
    def cell(self) -> int:
        return 4 if self.values else 1

    def columns(self) -> list[int]:
        if self.numbered:
            return [max(len(str(len(self.labels))), self.cell)] * len(self.labels)
        return [max(len(x), self.cell) for x in self.labels]

    def row_label(self) -> int:
        longest = max(len(x) for x in self.labels)
        return max(len(CORNER), longest + (len(str(len(self.labels))) + 1 if self.numbered else 0))

    @property
    def width(self) -> int:
        return self.row_label() + sum(1 + w for w in self.columns())

    @property
    def height(self) -> int:
        return 1 + len(self.labels)


def plan_matrix(view: MatrixView, width: int, height: int) -> Grid | None:
    """The first :class:`Grid` (finest level first) that fits ``width`` x ``height`` characters, or None."""
    for level in LEVELS:
        _, cells = view.latest(level)
        if not cells:
            continue
        labels = tuple(_order([s for s, _ in cells] + [d for _, d in cells]))
        for numbered in (False, True):
            for values in (True, False):
                g = Grid(level, labels, numbered, values)
                if g.width <= width and g.height <= height:
                    return g
    return None


class MatrixPanel:
    """The traffic matrix panel, drawn for the space it is given (see the module docstring)."""

    def __init__(self, view: MatrixView, grid: Grid | None = None):
        self.view, self.grid = view, grid

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width, height = options.max_width, options.height or console.height
        if all(self.view.latest(x)[0] is None for x in LEVELS):
            yield Panel(Text("waiting for the first traffic-matrix window ...", style="dim"),
                        title=_fit_title(["traffic matrix"], width), title_align="left", height=height)
            return
        grid = self.grid or plan_matrix(self.view, width - 4, height - 2)
        body, title = self._grid(grid, width, height) if grid else self._ranked(width, height)
        yield Panel(body, title=title, title_align="left", height=height)

    def _grid(self, g: Grid, width: int, height: int):
        ws, cells = self.view.latest(g.level)
        secs = self.view.window_ms / 1000
        peak = max(cells.values()) or 1
        t = Table(box=None, show_header=True, header_style="bold", pad_edge=False, padding=(0, 0), expand=False)
        t.add_column(CORNER, width=g.row_label(), no_wrap=True, style="bold")
        n = len(str(len(g.labels)))
        for i, (label, w) in enumerate(zip(g.labels, g.columns()), 1):
            t.add_column(str(i) if g.numbered else label, width=w + 1, justify="right", no_wrap=True)
        for i, src in enumerate(g.labels, 1):
            row = []
            for dst in g.labels:
                b = cells.get((src, dst), 0)
                if b <= 0:
                    row.append(Text("." if g.values else "·", style="grey35"))
                    continue
                shade = min(len(SHADES) - 1, max(0, int(len(SHADES) * math.log10(1 + b) / math.log10(1 + peak)) - 1))
                row.append(Text(rate(b * 8 / secs) if g.values else "■", style=f"bold {SHADES[shade]}"))
            t.add_row(f"{i:>{n}} {src}" if g.numbered else src, *row)
        what = "est. bits/s" if g.values else "shade = est. bytes, log scale"
        title = _fit_title([f"traffic matrix, {g.level} level, {what}, window {_ts(ws)} +{secs:g}s",
                            f"traffic matrix, {g.level} level, window {_ts(ws)}", f"{g.level} level matrix",
                            f"{g.level} level", g.level], width)
        parts = ["rows send to columns", "column n = row n" if g.numbered else "", f"peak {fmt_bps(peak * 8 / secs)}",
                 "unknown = not in the inventory" if "unknown" in g.labels else ""]
        parts = [x for x in parts if x]
        legends = ("; ".join(parts[:k]) for k in range(len(parts), 0, -1))
        legend = next((x for x in legends if len(x) <= width - 4), None)
        if legend is None or g.height + 1 > height - 2:
            return t, title
        return Group(t, Text(legend, style="dim")), title

    def _ranked(self, width: int, height: int):
        """The top node pairs of the latest window, as many as fit."""
        level = next(x for x in LEVELS if self.view.latest(x)[0] is not None)
        ws, cells = self.view.latest(level)
        secs = self.view.window_ms / 1000
        t = Table(box=None, show_header=True, header_style="bold", pad_edge=False, expand=False)
        t.add_column("src", overflow="fold")
        t.add_column("dst", overflow="fold")
        t.add_column("bits/s", justify="right", no_wrap=True)
        top = sorted(cells.items(), key=lambda kv: (-kv[1], kv[0]))[:max(1, min(RANKED_ROWS, height - 3))]
        for (s, d), b in top:
            t.add_row(s, d, rate(b * 8 / secs))
        title = _fit_title([f"top {level} pairs, window {_ts(ws)} +{secs:g}s (matrix too large here)",
                            f"top {level} pairs, window {_ts(ws)}", f"top {level} pairs", f"{level} pairs", level],
                           width)
        return t, title


def talkers_panel(view: MatrixView, width: int) -> Panel:
    t = Table(box=None)
    t.add_column("src", overflow="fold")
    t.add_column("dst", overflow="fold")
    t.add_column("est. rate", justify="right", no_wrap=True)
    span = max(1, len(view.windows)) * view.window_ms / 1000
    for s, d, b in view.top_talkers(10):
        t.add_row(s, d, fmt_bps(b * 8 / span))
    return Panel(t, title=_fit_title([f"top talkers, node level, last {span:.0f}s", "top talkers", "talkers"],
                                     width), title_align="left")


class EventsPanel:
    """The newest detections that fit the height given, newest last."""

    COLORS = {"critical": "red", "warning": "yellow", "info": "cyan"}

    def __init__(self, events: list[Detection]):
        self.events = events

    def _table(self, events: list[Detection]) -> Table:
        t = Table(box=None, show_header=True)
        t.add_column("time", no_wrap=True)
        t.add_column("kind", style="bold", overflow="fold")
        t.add_column("what", overflow="fold")
        for d in events:
            t.add_row(_ts(d.time_ms), Text(d.kind, style=self.COLORS.get(d.severity, "white")), d.summary)
        return t

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width, height = options.max_width, options.height or console.height
        if not self.events:
            yield Panel(Text("no detections yet", style="dim"), title="detections", title_align="left", height=height)
            return
        inner = options.update(width=width - 4, height=None)
        k = min(len(self.events), max(1, height - 3))
        while k > 1 and len(console.render_lines(self._table(self.events[-k:]), inner, pad=False)) > height - 2:
            k -= 1
        hidden = len(self.events) - k
        title = _fit_title([f"detections (newest last; {hidden} earlier not shown)", f"detections (+{hidden} earlier)",
                            "detections"] if hidden else ["detections"], width)
        yield Panel(self._table(self.events[-k:]), title=title, title_align="left", height=height)


def _status_lines(status: list[str], width: int) -> Text:
    """The status line(s): each the longest of its variants that fits ``width``."""
    out = [next((v for v in variants if len(v) <= width), variants[-1][:width]) for variants in status]
    return Text("\n".join(out), style="bold")


class Screen:
    """The whole demo screen for the terminal it is drawn on: status lines, matrix (+ top talkers), detections.

    ``status``: per line, its variants from longest to shortest (the first that fits is shown)."""

    def __init__(self, view: MatrixView, events: list[Detection], status: list[list[str]]):
        self.view, self.events, self.status = view, events, status

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width, height = options.max_width, options.height or console.height
        head = len(self.status)
        rest = max(2, height - head)
        # the matrix may take all but EVENTS_MIN rows (half on a short terminal), and takes what it needs
        top_max = rest - EVENTS_MIN if rest >= 2 * EVENTS_MIN else (rest + 1) // 2
        grid = plan_matrix(self.view, width - 4, top_max - 2)
        beside = width - (grid.width + 4 if grid else width)
        talkers = grid is not None and beside >= TALKERS_MIN_WIDTH
        if grid is not None:
            need = grid.height + 1 + 2  # + legend, borders
        else:
            need = RANKED_ROWS + 3 if any(self.view.latest(x)[0] is not None for x in LEVELS) else 3
        if talkers:
            need = max(need, len(self.view.top_talkers(10)) + 3)
        top_h = max(3, min(top_max, need))
        lay = Layout()
        lay.split_column(Layout(_status_lines(self.status, width), size=head), Layout(name="top", size=top_h),
                         Layout(EventsPanel(self.events), size=max(1, rest - top_h)))
        if talkers:
            lay["top"].split_row(Layout(MatrixPanel(self.view, grid), size=width - min(beside, 60)),
                                 Layout(talkers_panel(self.view, min(beside, 60))))
        else:
            lay["top"].update(MatrixPanel(self.view, grid))
        yield from lay.__rich_console__(console, options.update(height=height))
