"""The live job membership of the metrics sink, from ``inventory.jobs.v1`` (pure logic, no Kafka).

A processors worker with a live job source (``processors.jobs.source`` kubernetes or slurm) publishes its
membership as versions: a row per changed pod / Slurm job and an hourly snapshot of all of them
(docs/inventory.md, "Live jobs from Kubernetes or Slurm"). The sink keeps the latest row of each key and puts the holdings
into the file's inventory in place of its ``jobs:`` (:meth:`MembershipBook.apply_to`), so every per-job family
(budget pairs, RoCEv2 operations, visibility, drops) follows the scheduler. Holdings carry their own start and end
times: a window or a drop is attributed to the job that held the node at *its* time, whenever the row arrived.
Holdings that ended more than ``keep_ended_ms`` before the newest row are forgotten.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from processors.logic.enrich.inventory import Inventory
from processors.logic.enrich.inventory.membership import book_from_rows

__all__ = ["JOBS_SNAPSHOT_MS", "LiveMembership"]

#: the snapshot period of inventory.jobs.v1 (processors/jobsource/live.py): a reader starting at t reads from
#: t minus this to find every holding
JOBS_SNAPSHOT_MS = 3_600_000


class LiveMembership:
    """The latest ``job_membership`` row per key; :meth:`apply` gives the inventory with them."""

    def __init__(self, pod_addresses: bool = True, keep_ended_ms: int = 86_400_000):
        self.pod_addresses = pod_addresses
        self.keep_ended_ms = int(keep_ended_ms)
        self.latest: dict[str, Mapping] = {}
        self.newest_ms = -1
        self.error: str | None = None

    def add(self, rows: Iterable[Mapping]) -> bool:
        """Rows in topic order; True when the membership changed."""
        changed = False
        for r in rows:
            key, v = str(r["key"]), int(r["version_ms"])
            old = self.latest.get(key)
            if old is not None and int(old["version_ms"]) > v:
                continue  # an older version read late
            if old != r:
                self.latest[key] = r
                changed = True
            self.newest_ms = max(self.newest_ms, v)
        horizon = self.newest_ms - self.keep_ended_ms
        for key in [k for k, r in self.latest.items() if 0 <= int(r["end_ms"]) < horizon]:
            del self.latest[key]
            changed = True
        return changed

    def jobs_between(self, lo_ms: int, hi_ms: int, names: set[str]) -> dict[str, list[str]]:
        """{job: its nodes} of the holdings that held nodes at some time in [lo_ms, hi_ms) (the console's current
        jobs); scheduler host names resolve to ``names`` as :meth:`MembershipBook.apply_to` does (exact, else the
        short name), the others are left out."""
        out: dict[str, list[str]] = {}
        for r in sorted(self.latest.values(), key=lambda r: (int(r["start_ms"]), str(r["key"]))):
            end = int(r["end_ms"])
            if int(r["start_ms"]) >= hi_ms or (0 <= end <= lo_ms):
                continue
            nodes = out.setdefault(str(r["job"]), [])
            for host in r["nodes"]:
                name = host if host in names else host.split(".", 1)[0]
                if name in names and name not in nodes:
                    nodes.append(name)
        return {j: ns for j, ns in out.items() if ns}

    def apply(self, base: Inventory) -> Inventory:
        """``base`` with the live holdings as its jobs (``base`` itself before the first row, or when the rows
        do not fit it: the reason is kept in :attr:`error`)."""
        if not self.latest:
            return base
        book = book_from_rows(self.latest.values(), keep_ended_ms=2**62)
        with_addresses = self.pod_addresses and any(r["source"] == "kubernetes" for r in self.latest.values())
        try:
            inv, _unknown = book.apply_to(base, with_addresses=with_addresses)
        except ValueError as e:
            self.error = f"live job membership not applied: {str(e).splitlines()[0]}"
            return base
        self.error = None
        return inv
