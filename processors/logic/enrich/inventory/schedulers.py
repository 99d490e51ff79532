"""What the schedulers' documents say, as :class:`~.membership.Holding` s: Kubernetes pods and Slurm jobs.

Pure: the JSON documents (dicts) as the APIs return them in, holdings out. The I/O (the Kubernetes client's
list and watch, ``squeue --json``, slurmrestd) lives in :mod:`processors.jobsource`.

- A **pod** holds its node (``spec.nodeName``) for the job named by its job label from ``status.startTime``
  (the kubelet accepted it) until it finished: phase ``Succeeded``/``Failed`` ends it at the last container's
  ``finishedAt`` (else the ``Ready`` condition's last transition), a delete at the same, else at
  ``metadata.deletionTimestamp``, else at the time the caller saw it go. A pod that is ``Pending`` without a
  start time, or not bound to a node, holds nothing yet. Its ``status.podIPs`` are its addresses
  unless it runs in the host's network (``spec.hostNetwork``: its IP is the node's).
- A **Slurm job** holds its node list (hostlist syntax, ``gpu[01-04,07]``) from ``start_time`` until
  ``end_time`` once it is running or has ended; a running job's ``end_time`` is its time limit, not an
  end, so a running job stays open. Times are the v0.0.40 ``{"set", "infinite", "number"}`` objects or
  plain integers (older versions), in seconds.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any

from .membership import OPEN_END, Holding

__all__ = ["SchedulerDocError", "expand_hostlist", "pod_end_ms", "pod_holding", "slurm_holdings"]


class SchedulerDocError(ValueError):
    """A scheduler's document does not have the documented shape (one line)."""


def _ms(ts: Any) -> int | None:
    """Unix ms of an RFC 3339 timestamp (``2026-12-05T10:00:00Z``), None when absent or unreadable."""
    if not isinstance(ts, str) or not ts:
        return None
    try:
        dt = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(dt.timestamp() * 1000)


# ---------------------------------------------------------------- Kubernetes


def pod_key(pod: dict) -> str:
    meta = pod.get("metadata") or {}
    return "pod:" + str(meta.get("uid") or f"{meta.get('namespace', '')}/{meta.get('name', '')}")


def _finished_ms(pod: dict) -> int | None:
    status = pod.get("status") or {}
    ends = [_ms(((c.get("state") or {}).get("terminated") or {}).get("finishedAt"))
            for c in status.get("containerStatuses") or []]
    ends = [e for e in ends if e is not None]
    if ends:
        return max(ends)
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Ready" and cond.get("status") == "False":
            return _ms(cond.get("lastTransitionTime"))
    return None


def pod_end_ms(pod: dict, seen_ms: int) -> int:
    """When a deleted pod stopped holding its node: its containers' end, else its deletion time, else ``seen_ms``."""
    end = _finished_ms(pod)
    if end is None:
        end = _ms((pod.get("metadata") or {}).get("deletionTimestamp"))
    return end if end is not None else seen_ms


def pod_holding(pod: dict, job_label: str, seen_ms: int) -> Holding | None:
    """The holding a pod document describes; None when it holds nothing (no job label, no node, not started)."""
    if not isinstance(pod, dict):
        raise SchedulerDocError(f"a pod must be a JSON object, got {type(pod).__name__}")
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    job = ((meta.get("labels") or {}).get(job_label) or "").strip()
    node = spec.get("nodeName") or ""
    start = _ms(status.get("startTime"))
    if not job or not node or start is None:
        return None
    phase = status.get("phase", "")
    end = OPEN_END
    if phase in ("Succeeded", "Failed"):
        end = _finished_ms(pod) or seen_ms
    addrs: tuple[str, ...] = ()
    if not spec.get("hostNetwork"):
        ips = [p.get("ip") for p in status.get("podIPs") or [] if isinstance(p, dict)] or [status.get("podIP")]
        addrs = tuple(ip for ip in ips if ip)
    return Holding(pod_key(pod), job.replace(" ", "_"), (node,), start, end, addrs)


# ---------------------------------------------------------------- Slurm

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def _split_top(text: str) -> list[str]:
    """Split at commas outside brackets."""
    out, depth, cur = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise SchedulerDocError(f"hostlist {text!r}: unbalanced ']'")
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise SchedulerDocError(f"hostlist {text!r}: unbalanced '['")
    out.append("".join(cur))
    return [s.strip() for s in out if s.strip()]


def _expand_one(item: str, limit: int) -> list[str]:
    m = re.search(r"\[([^\[\]]*)\]", item)
    if m is None:
        return [item]
    head, tail = item[: m.start()], item[m.end():]
    out: list[str] = []
    for part in m.group(1).split(","):
        r = _RANGE.match(part.strip())
        if r is None:
            raise SchedulerDocError(f"hostlist {item!r}: {part!r} is not a number or a range")
        lo, hi = r.group(1), r.group(2) or r.group(1)
        if int(hi) < int(lo):
            raise SchedulerDocError(f"hostlist {item!r}: range {part!r} runs backwards")
        if int(hi) - int(lo) + len(out) >= limit:
            raise SchedulerDocError(f"hostlist {item!r}: more than {limit} hosts")
        width = len(lo) if lo.startswith("0") else 0
        for i in range(int(lo), int(hi) + 1):
            out.extend(_expand_one(f"{head}{str(i).zfill(width)}{tail}", limit))
    return out


def expand_hostlist(text: str, limit: int = 65_536) -> list[str]:
    """Host names of a Slurm hostlist: ``gpu[01-04,07],cpu1`` -> gpu01..gpu04, gpu07, cpu1 (zero padding kept,
    several bracket groups expand as a product); :class:`SchedulerDocError` when malformed or too long."""
    out: list[str] = []
    for item in _split_top(text or ""):
        out.extend(_expand_one(item, limit - len(out)))
    return out


def _slurm_time(v: Any) -> int | None:
    """Seconds of a v0.0.40 ``{"set", "infinite", "number"}`` or a plain integer -> unix ms; None when unset / 0."""
    if isinstance(v, dict):
        if not v.get("set", True) or v.get("infinite"):
            return None
        v = v.get("number")
    if isinstance(v, bool) or not isinstance(v, int | float) or v <= 0:
        return None
    return int(v * 1000)


_RUNNING = {"RUNNING", "COMPLETING", "SUSPENDED", "CONFIGURING"}
_ENDED = {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE",
          "OUT_OF_MEMORY"}


def _states(job: dict) -> set[str]:
    st = job.get("job_state")
    return {str(s).upper() for s in (st if isinstance(st, list) else [st]) if s}


def slurm_holdings(doc: dict, naming: str = "name-id") -> list[Holding]:
    """Holdings of the jobs of a ``squeue --json`` / ``scontrol show job --json`` / slurmrestd ``GET
    /slurm/v0.0.40/jobs`` document (``{"jobs": [...]}``). Pending jobs hold nothing. ``naming``: the job's
    name in the inventory, ``name-id`` (``train-4412``: Slurm names repeat), ``name`` or ``id``."""
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        raise SchedulerDocError("a Slurm job document must be a JSON object with a 'jobs' list")
    out = []
    for job in doc["jobs"]:
        if not isinstance(job, dict) or "job_id" not in job:
            raise SchedulerDocError("every entry of 'jobs' must be an object with a 'job_id'")
        states = _states(job)
        start = _slurm_time(job.get("start_time"))
        nodes = job.get("nodes") or ""
        if start is None or not nodes or not states & (_RUNNING | _ENDED):
            continue
        end = OPEN_END
        if states & _ENDED and not states & _RUNNING:
            end = _slurm_time(job.get("end_time")) or start
        jid = str(job["job_id"])
        base = str(job.get("name") or "").strip().replace(" ", "_")
        name = jid if naming == "id" or not base else base if naming == "name" else f"{base}-{jid}"
        out.append(Holding(f"slurm:{job['job_id']}", name, tuple(expand_hostlist(str(nodes))), start, end))
    return out
