"""Collective visibility per job from node-level matrix cells (pure logic, no Kafka).

What share of a job's expected collective traffic the telemetry sees, per closed window. *Expected*: every
member node that the flows show active in the window (it sent or received anything, any category, any peer)
takes part in the job's collectives, so it should send collective traffic (category ``collective``: TCP
collectives such as NCCL sockets / Gloo, or ``rocev2``: UDP 4791) to another member. *Seen*: the members whose
such traffic is in the window's cells or in a window that ended less than :data:`HORIZON_MS` before it (a
checkpoint write, a data-loading or evaluation pass stops the collectives for a while: that is a pause of a job
whose collectives the telemetry sees, not a blind spot). ``share = seen / expected``. The state names what that means:
``visible`` (share >= 0.5), ``partial`` (0 < share < 0.5), ``not_visible`` (members active, no collective
flow at all: InfiniBand, RDMA on a fabric that is not sampled, or NetFlow-only exporters that never see it),
``idle`` (no member active: nothing to expect), ``serving`` (an inference job: a member received from a node of
a frontend group, :data:`SERVING_GROUPS`, and none sent collectives: none are expected). docs/metrics.md,
"Collective visibility".
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from .store import GAUGE

__all__ = ["VisibilityFamilies", "COLLECTIVE", "HORIZON_MS", "SERVING_GROUPS", "STATES", "visibility", "Recent"]

COLLECTIVE = ("collective", "rocev2")
STATES = ("visible", "partial", "not_visible", "idle", "serving")
#: inventory groups of frontends (load balancers): a job whose members they send to serves requests (the
#: ``lb_skew`` detector's default ``frontend_groups``)
SERVING_GROUPS = ("frontend",)
#: how long a member's collective traffic counts as seen after its window (event time): longer than a
#: checkpoint write or an evaluation pass, and the processors' alert needs six 10-s windows in a row
HORIZON_MS = 60_000


def visibility(active: set[str], senders: set[str], served: bool = False) -> tuple[float | None, str]:
    """(share or None, state) of one job's window: ``active`` members, members seen sending collectives,
    ``served``: a member received from a frontend (an inference job, no collectives expected)."""
    if not active:
        return None, "idle"
    share = len(senders & active) / len(active)
    if share == 0 and served:
        return None, "serving"
    return share, "visible" if share >= 0.5 else "partial" if share > 0 else "not_visible"


#: windows gathered at once: a window is judged when the second newer one arrives. A window's node cells come in
#: one message per processors shard, and the sink reads partitions in batches, so shard B's part of window N
#: may come after shard A's window N+1; judging N at that point would call a job whose collectives are in
#: shard B's part "not_visible".
HOLD_WINDOWS = 2


class Recent:
    """The senders (nodes, or (node, job) pairs in the metrics sink) seen sending collectives within
    :data:`HORIZON_MS` of a window's end, windows given oldest first."""

    def __init__(self, horizon_ms: int = HORIZON_MS):
        self.horizon_ms = horizon_ms
        self.last: dict[Hashable, int] = {}

    def update(self, end_ms: int, senders: set) -> set:
        """Add the window's ``senders``; the senders seen within the horizon of ``end_ms``."""
        for n in senders:
            self.last[n] = max(self.last.get(n, end_ms), end_ms)
        for n in [n for n, e in self.last.items() if end_ms - e >= self.horizon_ms]:
            del self.last[n]
        return set(self.last)


class _Gathered:
    __slots__ = ("active", "senders", "served")

    def __init__(self):
        self.active: set[str] = set()
        self.senders: set[tuple[str, str]] = set()
        self.served: set[str] = set()


class VisibilityFamilies:
    """Gauges per job of the inventory at the window's end, set when the second newer window than the one being
    gathered arrives (a window's node cells all carry its end; :data:`HOLD_WINDOWS`), so they show the window
    before the newest two. A job no longer in the inventory loses its series. ``jobs_at(t_ms)``: {node: job}."""

    def __init__(self, family, jobs_at: Callable[[int], dict[str, str]],
                 frontend: Callable[[str], bool] | None = None):
        self.ratio = family("job_collective_visibility_ratio", "Share of the job's active member nodes whose "
                            "collective traffic (TCP collectives or RoCEv2) the flows show, latest window",
                            ("job",), GAUGE)
        self.state = family("job_collective_visibility_state", "1 for the job's collective visibility state of "
                            "the latest window (visible, partial, not_visible: collectives not visible, "
                            "InfiniBand or this fabric is not sampled; idle; serving: an inference job)",
                            ("job", "state"), GAUGE)
        self.jobs_at = jobs_at
        self.frontend = frontend or (lambda node: False)
        self.judged = -1  # end of the newest window judged: cells of it or older are late
        self.recent = Recent()  # (node, job) pairs seen sending collectives lately
        self.pending: dict[int, _Gathered] = {}

    def _window(self, end_ms: int) -> _Gathered | None:
        """The gathered window ending ``end_ms`` (None: already judged, its cells are late); judges the oldest
        pending windows beyond :data:`HOLD_WINDOWS`."""
        if end_ms <= self.judged:
            return None
        g = self.pending.get(end_ms)
        if g is None:
            g = self.pending[end_ms] = _Gathered()
            while len(self.pending) > HOLD_WINDOWS:
                self._judge(min(self.pending))
        return self.pending.get(end_ms)

    def add_window(self, end_ms: int, active: set[str], senders: set[tuple[str, str]],
                   served: set[str] = frozenset()) -> None:
        """A window's node cells at once (or one shard's part of them): the nodes they show ``active``, the
        (src, dst) pairs that sent collective traffic to another node (``senders``), and the nodes a frontend
        sent to (``served``: a member among them makes its job ``serving``)."""
        g = self._window(end_ms)
        if g is None:
            return  # late cells of an already judged window
        g.active |= active
        g.senders |= senders
        g.served |= served

    def add_cell(self, src: str, dst: str, category: str, end_ms: int) -> None:
        g = self._window(end_ms)
        if g is None:
            return  # a late cell of an already judged window
        g.active.update((src, dst))
        if category in COLLECTIVE and src != dst:
            g.senders.add((src, dst))
        if src != dst and self.frontend(src):
            g.served.add(dst)

    def close(self) -> None:
        """Judge every window gathered so far (tests, and a sink that stops)."""
        for end in sorted(self.pending):
            self._judge(end)

    def _judge(self, end: int) -> None:
        g = self.pending.pop(end)
        self.judged = max(self.judged, end)
        jobs = self.jobs_at(end)
        members: dict[str, set[str]] = {}
        for node, job in jobs.items():
            members.setdefault(job, set()).add(node)
        now = {(s, jobs[s]) for s, d in g.senders if jobs.get(s) and jobs.get(s) == jobs.get(d)}
        senders = {n for n, job in self.recent.update(end, now) if jobs.get(n) == job}
        for job, nodes in members.items():
            share, state = visibility(g.active & nodes, senders & nodes, bool(g.served & nodes))
            if share is not None:
                self.ratio.set((job,), share)
            else:
                self.ratio.remove((job,))
            for st in STATES:
                self.state.set((job, st), 1 if st == state else 0)
        for fam in (self.ratio, self.state):
            for key in [k for k in fam.values if k[0] not in members]:
                fam.remove(key)
