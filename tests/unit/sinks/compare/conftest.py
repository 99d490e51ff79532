"""Session-wide archives of simulator scenarios, backfilled offline (tests/scenario_archives.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def scenario_archive(tmp_path_factory):
    from tests import scenario_archives

    root = tmp_path_factory.mktemp("scenario-archives")

    def get(doc: dict, seed: int | None = None, duration_s: float | None = None):
        return scenario_archives.build(root, doc, seed, duration_s)

    return get
