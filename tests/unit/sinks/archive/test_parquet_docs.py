"""docs/archive.md lists every column of every dataset."""

from pathlib import Path

from sinks.archive import layout
from sinks.archive.parquet import dataset_schema

DOC = Path(__file__).resolve().parents[4] / "docs" / "archive.md"


def test_doc_lists_every_column():
    text = DOC.read_text()
    for d in layout.DATASETS.values():
        section = text.split(f"### `{d.name}`", 1)[1].split("\n### ", 1)[0]
        for name in dataset_schema(d.name).names:
            assert f"| `{name}` |" in section, (d.name, name)
