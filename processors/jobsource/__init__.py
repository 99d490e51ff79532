"""Live job membership from a scheduler (Kubernetes, Slurm): the thin I/O beside the inventory file.

- :mod:`.live`: :class:`~.live.LiveJobs`, a source in a thread applied on the owner's timer; metrics;
- :mod:`.kubernetes`: pods through the official client (list, watch, 410 Gone, bookmarks, backoff);
- :mod:`.slurm`: ``squeue --json`` / ``scontrol show job --json`` / slurmrestd, polled.

What the documents mean is pure (:mod:`processors.logic.enrich.inventory.schedulers`, ``.membership``);
docs/inventory.md, "Live jobs from Kubernetes or Slurm", is the user's side.
"""

from .live import LiveJobs

__all__ = ["LiveJobs"]
