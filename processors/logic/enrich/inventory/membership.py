"""Live job membership: who holds which node when, from a scheduler's events, as inventory job intervals.

A scheduler (Kubernetes, Slurm) says "this pod / job runs on these nodes from t0 (until t1)". Each such
fact is a :class:`Holding` under a stable key (the pod's uid, the Slurm job id). A
:class:`MembershipBook` keeps the holdings: an update replaces the holding of its key, a delete ends it,
a full re-list ends every holding it no longer contains. :meth:`MembershipBook.intervals` turns them into
per-node job intervals that never overlap (the inventory's rule: one node is in at most one job at any
instant) and :meth:`MembershipBook.apply_to` puts them into an :class:`~.tables.Inventory` in place of
the file's ``jobs:``.

Times are event times (unix ms) taken from the scheduler's own timestamps, so a flow at ``t`` is
attributed to the job that held its node at ``t`` even when the event arrives after the flow. Ended
holdings are kept ``keep_ended_ms`` after their end for late flows. No I/O, no clock: the caller passes
the times.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone

from .models import JobSpec, NodeSpec
from .tables import Inventory

__all__ = ["Holding", "MembershipBook", "NodeInterval", "OPEN_END", "book_from_rows", "holding_row"]

#: ``end_ms`` of a holding that has not ended.
OPEN_END = 2**62


@dataclass(frozen=True)
class Holding:
    """One scheduler fact: ``job`` holds ``nodes`` from ``start_ms`` until ``end_ms`` (exclusive; OPEN_END = still
    running). ``addresses``: addresses the job has on those nodes beside the nodes' own (pod IPs)."""

    key: str
    job: str
    nodes: tuple[str, ...]
    start_ms: int
    end_ms: int = OPEN_END
    addresses: tuple[str, ...] = ()

    @property
    def open(self) -> bool:
        return self.end_ms >= OPEN_END


@dataclass(frozen=True)
class NodeInterval:
    """``node`` is in ``job`` from ``from_ms`` (inclusive) until ``until_ms`` (exclusive; OPEN_END = open)."""

    node: str
    job: str
    from_ms: int
    until_ms: int


def _node_intervals(node: str, holdings: list[Holding]) -> list[NodeInterval]:
    """Non-overlapping intervals of one node: where holdings overlap, the one that started first keeps the
    node (ties: the smaller job name), the other gets what is left of its time."""
    cuts = sorted({h.start_ms for h in holdings} | {h.end_ms for h in holdings})
    out: list[NodeInterval] = []
    for t0, t1 in zip(cuts, cuts[1:]):
        active = [h for h in holdings if h.start_ms <= t0 and h.end_ms >= t1]
        if not active:
            continue
        win = min(active, key=lambda h: (h.start_ms, h.job, h.key)).job
        if out and out[-1].job == win and out[-1].until_ms == t0:
            out[-1] = NodeInterval(node, win, out[-1].from_ms, t1)
        else:
            out.append(NodeInterval(node, win, t0, t1))
    return out


def _dt(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, timezone.utc)


class MembershipBook:
    """The holdings of one source, keyed; ``version`` counts the changes (0 = nothing yet).

    ``resolve`` maps a scheduler's host name to an inventory node name (exact, else the short name before
    the first dot); names it cannot map are counted in :meth:`apply_to`'s result, never guessed.
    """

    def __init__(self, keep_ended_ms: int = 86_400_000):
        self.keep_ended_ms = int(keep_ended_ms)
        self.holdings: dict[str, Holding] = {}
        self.version = 0

    # ---- events

    def upsert(self, holding: Holding) -> bool:
        """A pod / job as the scheduler now describes it; True when that changed anything."""
        if holding.end_ms <= holding.start_ms and not holding.open:
            holding = Holding(holding.key, holding.job, holding.nodes, holding.start_ms, holding.start_ms,
                              holding.addresses)
        if self.holdings.get(holding.key) == holding:
            return False
        self.holdings[holding.key] = holding
        self.version += 1
        return True

    def end(self, key: str, at_ms: int) -> bool:
        """The pod / job is gone (deleted, or absent from a re-list): an open holding ends at ``at_ms``."""
        h = self.holdings.get(key)
        if h is None or not h.open:
            return False
        self.holdings[key] = Holding(h.key, h.job, h.nodes, h.start_ms, max(h.start_ms, at_ms), h.addresses)
        self.version += 1
        return True

    def relist(self, holdings: Iterable[Holding], at_ms: int) -> bool:
        """A full listing (start, or after a watch lost its place): every holding in it is upserted, every
        open one not in it ended at ``at_ms`` (it finished while nobody watched; its exact end is unknown)."""
        changed = False
        seen = set()
        for h in holdings:
            seen.add(h.key)
            changed |= self.upsert(h)
        for key in [k for k, h in self.holdings.items() if h.open and k not in seen]:
            changed |= self.end(key, at_ms)
        return changed

    def prune(self, now_ms: int) -> bool:
        """Forget holdings that ended more than ``keep_ended_ms`` before ``now_ms``."""
        old = [k for k, h in self.holdings.items() if not h.open and h.end_ms < now_ms - self.keep_ended_ms]
        for k in old:
            del self.holdings[k]
        if old:
            self.version += 1
        return bool(old)

    # ---- results

    def intervals(self, resolve: Mapping[str, str] | None = None) -> list[NodeInterval]:
        """Per-node job intervals, node by node, oldest first. ``resolve``: scheduler host name -> node name
        (names not in it are left out); None keeps the names as they are."""
        by_node: dict[str, list[Holding]] = {}
        for h in self.holdings.values():
            if h.end_ms <= h.start_ms:
                continue
            for n in dict.fromkeys(h.nodes):
                name = n if resolve is None else resolve.get(n)
                if name is not None:
                    by_node.setdefault(name, []).append(h)
        out: list[NodeInterval] = []
        for node in sorted(by_node):
            out.extend(_node_intervals(node, by_node[node]))
        return out

    def apply_to(self, base: Inventory, with_addresses: bool = True, ended_addresses: bool = False
                 ) -> tuple[Inventory, list[str]]:
        """(``base`` with its ``jobs:`` replaced by this book's intervals, scheduler host names that are no
        inventory node). With ``with_addresses``, the addresses of open holdings (pod IPs; of ended ones too
        with ``ended_addresses``: a replay of a past range) become addresses of their node when the inventory
        has no entry of that exact address (the holding that started first gets a reused one)."""
        names = {n.name for n in base.spec.nodes}
        resolve: dict[str, str] = {}
        unknown: set[str] = set()
        for h in self.holdings.values():
            for host in h.nodes:
                if host in names:
                    resolve[host] = host
                elif host.split(".", 1)[0] in names:
                    resolve[host] = host.split(".", 1)[0]
                else:
                    unknown.add(host)
        jobs = [JobSpec(name=iv.job, nodes=[iv.node], **{"from": _dt(iv.from_ms)},
                        until=None if iv.until_ms >= OPEN_END else _dt(iv.until_ms))
                for iv in self.intervals(resolve)]
        nodes = base.spec.nodes
        if with_addresses:
            nodes = self._nodes_with_addresses(base, resolve, ended_addresses)
        spec = base.spec.model_copy(update={"jobs": jobs, "nodes": nodes})
        return Inventory(spec, f"{base.source} + live jobs"), sorted(unknown)

    def _nodes_with_addresses(self, base: Inventory, resolve: Mapping[str, str], ended: bool) -> list[NodeSpec]:
        """The base's nodes, each with the (open) holdings' addresses on it that no inventory entry has yet."""
        taken = {str(ipaddress.ip_network(p, strict=False)) for p in base.entry_prefixes}
        extra: dict[str, list[str]] = {}
        for h in sorted(self.holdings.values(), key=lambda h: (h.start_ms, h.key)):
            if (not h.open and not ended) or len(h.nodes) != 1 or h.nodes[0] not in resolve:
                continue
            for a in h.addresses:
                try:
                    net = str(ipaddress.ip_network(a, strict=True))
                except ValueError:
                    continue
                if net not in taken:
                    taken.add(net)
                    extra.setdefault(resolve[h.nodes[0]], []).append(net)
        return [n.model_copy(update={"addresses": [*n.addresses, *extra[n.name]]}) if n.name in extra else n
                for n in base.spec.nodes]


# ---------------------------------------------------------------- versions (the inventory.jobs.v1 rows)


def holding_row(h: Holding, source: str, version_ms: int, snapshot: bool = False) -> dict:
    """A ``job_membership`` record (schemas/avro/job_membership.avsc) of one holding."""
    return {"version_ms": int(version_ms), "source": source, "key": h.key, "job": h.job, "nodes": list(h.nodes),
            "addresses": list(h.addresses), "start_ms": int(h.start_ms), "end_ms": -1 if h.open else int(h.end_ms),
            "snapshot": bool(snapshot)}


def book_from_rows(rows: Iterable[Mapping], keep_ended_ms: int = 86_400_000) -> MembershipBook:
    """The membership the published rows describe: per key, the row of the latest ``version_ms`` (the later
    one of equal versions in input order). Replay builds its inventory from the rows of its range with it."""
    latest: dict[str, Mapping] = {}
    for r in rows:
        old = latest.get(r["key"])
        if old is None or int(r["version_ms"]) >= int(old["version_ms"]):
            latest[r["key"]] = r
    book = MembershipBook(keep_ended_ms)
    for r in latest.values():
        end = int(r["end_ms"])
        book.upsert(Holding(str(r["key"]), str(r["job"]), tuple(r["nodes"]), int(r["start_ms"]),
                            OPEN_END if end < 0 else end, tuple(r.get("addresses") or ())))
    return book
