"""Inventory files for tests: written from an indented literal, and the problems reading one must report."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from processors.config_files import read_inventory
from processors.logic.enrich.inventory import InventoryError


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text).lstrip())
    return p


def errors_of(path: Path) -> list[str]:
    with pytest.raises(InventoryError) as ei:
        read_inventory(path)
    assert str(ei.value) == "\n".join(f"{path}: {p}" for p in ei.value.problems)
    return ei.value.problems
