"""fabricflow: flow telemetry pipeline for AI training clusters.

This package holds the CLI (:mod:`fabricflow.cli`), the typed settings
(:mod:`fabricflow.settings`), topic definitions (:mod:`fabricflow.topics`)
and the embedded stack launcher (:mod:`fabricflow.stack`). The data path
itself lives in the top-level packages ``ingest``, ``processors``,
``schemas`` and ``sinks``.
"""

__version__ = "0.1.0"
