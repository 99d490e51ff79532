"""``python tests/integration/crashing_sink.py STEP AFTER -- <fabricflow sink archive args>``.

Runs the archive sink like ``fabricflow sink archive`` and kills the process (``os._exit``, no cleanup)
at ``STEP`` (one of :data:`sinks.archive.commit_ledger.STEPS`) of the ``AFTER``-th plan that has files: the crash
injection of tests/integration/test_archive_sink.py, kept out of the production code.
"""

from __future__ import annotations

import logging
import os
import sys

CRASH_EXIT_CODE = 99


def main(argv: list[str]) -> None:
    step, after, rest = argv[0], int(argv[1]), argv[3:] if argv[2:3] == ["--"] else argv[2:]
    from sinks.archive import service
    from sinks.archive.commit_ledger import STEPS

    if step not in STEPS:
        raise SystemExit(f"step must be one of {', '.join(STEPS)}, got {step!r}")

    def on_step(at: str, plan: int) -> None:
        if at == step and plan >= after:
            logging.getLogger("fabricflow.sink").error("test hook: crashing at %s of plan %d", at, plan)
            logging.shutdown()
            os._exit(CRASH_EXIT_CODE)

    original = service.ArchiveService.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs, on_step=on_step)

    service.ArchiveService.__init__ = init
    from cli.main import app

    sys.argv = ["fabricflow", "sink", "archive", *rest]
    app()


if __name__ == "__main__":
    main(sys.argv[1:])
