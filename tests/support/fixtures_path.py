"""Where the shared exporter fixtures live (captures from softflowd/pmacct with tshark summaries)."""

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _find() -> Path:
    env = os.environ.get("FABRICFLOW_SHARED_FIXTURES")
    if env:
        return Path(env)
    for cand in (REPO.parent / "shared" / "fixtures", REPO / "tests" / "captures" / "shared"):
        if cand.is_dir():
            return cand
    return REPO.parent / "shared" / "fixtures"


SHARED_FIXTURES = _find()
