"""Where each ingest worker keeps its NetFlow v9/IPFIX templates, and how they come back at start.

With ``ingest.workers > 1`` every worker used to write the one ``ingest.template_path`` (the last writer
won, the other workers' templates were lost) and only on a clean shutdown. Now:

* worker ``i`` of ``n > 1`` writes ``<stem>.w<i><suffix>`` beside the configured path (``templates.json``
  -> ``templates.w0.json``, ``templates.w1.json``); one worker keeps the configured name;
* every ``ingest.template_save_s`` seconds (and at shutdown), atomically (temp file + rename);
* at start a worker loads every worker's file, oldest first: the kernel's SO_REUSEPORT hash may hand an
  exporter to another worker after a restart (the socket order is not stable), so each worker starts with
  all known templates. Templates are keyed by exporter; the ones a worker never sees expire as usual.

A corrupt or unreadable file is logged (one line) and skipped; ingest still starts.
"""

from __future__ import annotations

import glob
import logging
import os
from pathlib import Path

from .decode.templates import TemplateCache

log = logging.getLogger("fabricflow.ingest")

__all__ = ["restore_templates", "template_files", "worker_template_path"]


def worker_template_path(path: str, index: int, workers: int) -> str:
    """The file worker ``index`` of ``workers`` writes its templates to."""
    if workers <= 1:
        return path
    p = Path(path)
    return str(p.with_name(f"{p.stem}.w{index}{p.suffix}"))


def template_files(path: str) -> list[str]:
    """Every template file of any worker count for the configured ``path``, oldest first."""
    p = Path(path)
    found = set(glob.glob(glob.escape(str(p.with_name(p.stem))) + ".w*" + glob.escape(p.suffix)))
    if p.exists():
        found.add(str(p))
    return sorted(found, key=lambda f: (os.path.getmtime(f), f))


def restore_templates(cache: TemplateCache, path: str) -> int:
    """Load every worker's file for ``path`` into ``cache`` (newest last wins); returns templates loaded."""
    n = 0
    for f in template_files(path):
        try:
            n += cache.load(f)
        except (OSError, ValueError, KeyError, TypeError) as e:
            log.warning("templates file %s not loaded (%s: %s); templates are learned again from the exporters",
                        f, type(e).__name__, e)
    return n
