"""fabricflow: flow telemetry pipeline for AI training clusters.

This package holds the CLI (:mod:`cli.main`), the typed settings
(:mod:`fabricflow.settings`), topic definitions (:mod:`fabricflow.streams`)
and the embedded stack launcher (:mod:`devtools.stack`). The data path
itself lives in the top-level packages ``ingest``, ``processors``,
``schemas`` and ``sinks``.
"""

__version__ = "0.1.0"
