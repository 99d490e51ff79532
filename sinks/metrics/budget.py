"""Cardinality budget of the node-pair families: which node pairs get their own series.

:class:`PairBudget` gives the node pairs what ``metrics.series_budget`` leaves after every other
family (which it never cuts): first the pairs within one job, then the other pairs by a decaying
traffic rate (pairs holding series count double, so the cut does not flap). Cells of the pairs left
out are added to ``src_node="other", dst_node="other"`` and counted as folded; the selection is made
again at every new window (:meth:`PairBudget.reselect`), and between selections a new pair gets
series while there is room. What the budget bounds and what it cannot, with series counts per
cluster size: docs/metrics.md, "Cardinality budget". Pure logic.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from .store import Family

__all__ = ["PairBudget", "OTHER", "OTHER_RESERVE"]

OTHER = "other"
OTHER_RESERVE = 2 * 8 + 2  # series the "other" bucket may need: bytes + packets per category, syn, rst


class PairBudget:
    """Node-pair series of the families ``bytes``, ``packets`` (per category), ``syn``, ``rst`` (per pair)."""

    def __init__(self, budget: int, bytes_: Family, packets: Family, syn: Family, rst: Family, folded: Family):
        self.budget = budget
        self.f_bytes, self.f_packets, self.f_syn, self.f_rst = bytes_, packets, syn, rst
        self.folded = folded
        self.selected: set[tuple[str, str]] = set()
        self.series: dict[tuple[str, str], int] = {}  # selected pair -> series it has now
        self.total = 0  # series of selected pairs
        self.fixed = 0  # series of every other family (set by the owner before reselect / admission)
        self.full = False  # a cell folded since the last selection: new pairs wait for the next one
        self.score: dict[tuple[str, str], float] = {}
        self.acc: dict[tuple[str, str], int] = {}  # bytes since the last selection
        self.cats: dict[tuple[str, str], set[str]] = {}
        self.tcp: set[tuple[str, str]] = set()
        self.selections = 0
        self.dropped: dict[str, int] = {}  # family name -> series the pairs left out at the latest selection

    @property
    def room(self) -> int:
        """Series the node pairs may have in all."""
        return max(0, self.budget - self.fixed - OTHER_RESERVE)

    # ------------------------------------------------------------------ cells

    def add(self, src: str, dst: str, cat: str, bytes_est: int, packets_est: int, syn: int, rst: int) -> bool:
        """One node-level cell; False when it was folded into "other"."""
        pair = (src, dst)
        self.acc[pair] = self.acc.get(pair, 0) + bytes_est
        cats = self.cats.get(pair)
        if cats is None:
            cats = self.cats[pair] = set()
        cats.add(cat)
        if syn or rst:
            self.tcp.add(pair)
        if pair not in self.selected and not self._admit(pair):
            self._fold(cat, bytes_est, packets_est, syn, rst)
            return False
        key = (src, dst, cat)
        need = 2 * (key not in self.f_bytes.values) + (syn > 0 and pair not in self.f_syn.values) \
            + (rst > 0 and pair not in self.f_rst.values)
        if need and self.total + need > self.room:
            self.full = True
            self._fold(cat, bytes_est, packets_est, syn, rst)
            return False
        if need:
            self.total += need
            self.series[pair] = self.series.get(pair, 0) + need
        self.f_bytes.inc(key, bytes_est)
        self.f_packets.inc(key, packets_est)
        if syn:
            self.f_syn.inc(pair, syn)
        if rst:
            self.f_rst.inc(pair, rst)
        return True

    def _admit(self, pair: tuple[str, str]) -> bool:
        if self.full:
            return False
        self.selected.add(pair)
        self.series.setdefault(pair, 0)
        return True

    def _fold(self, cat: str, bytes_est: int, packets_est: int, syn: int, rst: int) -> None:
        key = (OTHER, OTHER, cat)
        self.f_bytes.inc(key, bytes_est)
        self.f_packets.inc(key, packets_est)
        self.folded.inc((self.f_bytes.name,), 1)
        self.folded.inc((self.f_packets.name,), 1)
        if syn:
            self.f_syn.inc((OTHER, OTHER), syn)
            self.folded.inc((self.f_syn.name,), 1)
        if rst:
            self.f_rst.inc((OTHER, OTHER), rst)
            self.folded.inc((self.f_rst.name,), 1)

    # ------------------------------------------------------------------ selection

    def cost(self, pair: tuple[str, str]) -> int:
        """Series a pair needs: bytes + packets per category seen, syn + rst once it had either."""
        return 2 * len(self.cats.get(pair, ())) + (2 if pair in self.tcp else 0)

    def reselect(self, job_of: Mapping[str, str] | Callable[[str], str] | None = None) -> dict[str, int]:
        """Choose the pairs with series (docs/metrics.md, "Cardinality budget"); returns counts for logs and tests."""
        self.selections += 1
        get_job = job_of if callable(job_of) else (job_of or {}).get
        for pair in set(self.score) | set(self.acc):
            self.score[pair] = self.score.get(pair, 0.0) * 0.5 + self.acc.get(pair, 0)
        self.acc = {}

        def intra_job(pair):
            js = get_job(pair[0]) or ""
            return js != "" and js == (get_job(pair[1]) or "")

        def rank(pair):
            s = self.score.get(pair, 0.0) * (2.0 if pair in self.selected else 1.0)
            return (0 if intra_job(pair) else 1, -s, pair)

        room = self.room
        chosen: set[tuple[str, str]] = set()
        used = 0
        left_out = 0
        for pair in sorted(self.cats, key=rank):
            c = max(self.cost(pair), self.series.get(pair, 0))
            if used + c <= room:
                chosen.add(pair)
                used += c
            else:
                left_out += 1
        evicted = self.selected - chosen
        for pair in evicted:
            self._drop_series(pair)
        for pair in chosen - self.selected:
            self.series[pair] = 0
        self.selected = chosen
        self.full = left_out > 0
        # forget pairs without traffic that hold no series (bounded memory)
        for pair in [p for p, s in self.score.items() if s < 1.0 and p not in chosen]:
            self.score.pop(pair, None)
            self.cats.pop(pair, None)
            self.tcp.discard(pair)
        self._count_dropped(chosen)
        return {"selected": len(chosen), "evicted": len(evicted), "left_out": left_out}

    def _count_dropped(self, chosen: set[tuple[str, str]]) -> None:
        """Series the pairs left out by a selection would need, per family (as :meth:`cost` counts them)."""
        cats = tcp = 0
        for pair, c in self.cats.items():
            if pair not in chosen:
                cats += len(c)
                tcp += pair in self.tcp
        self.dropped = {self.f_bytes.name: cats, self.f_packets.name: cats, self.f_syn.name: tcp,
                        self.f_rst.name: tcp}

    def _drop_series(self, pair: tuple[str, str]) -> None:
        for cat in self.cats.get(pair, ()):
            self.f_bytes.remove((*pair, cat))
            self.f_packets.remove((*pair, cat))
        self.f_syn.remove(pair)
        self.f_rst.remove(pair)
        self.total -= self.series.pop(pair, 0)
