"""Query results as people read them: a text table, CSV, JSON or a Parquet file, and which datasets
answered."""

from __future__ import annotations

import io
import json
from decimal import Decimal

import pyarrow as pa

from schemas.columns import addr_str

FORMATS = ("table", "csv", "json", "parquet")

#: What a dataset that answers a report is called on a page ("from 1-hour rollups").
DESCRIPTIONS = {"traffic_1h": "1-hour rollups", "traffic_1m": "1-minute rollups", "flows_enriched": "raw flows",
                "matrix_windows": "matrix windows", "ports_1h": "1-hour port rollups",
                "ports_1m": "1-minute port rollups", "link_health": "link health samples"}


def describe(answered: list[tuple]) -> str:
    """``1-hour rollups + 1-minute rollups + matrix windows`` from :attr:`query.reports.ArchiveQuery.answered`."""
    return " + ".join(DESCRIPTIONS.get(d, d) for d in dict.fromkeys(a[0] for a in answered))


def _jsonable(v):
    if isinstance(v, bytes):
        if len(v) == 16:
            return addr_str(v)
        return v.hex()
    return str(v)


def _cell(v) -> str:
    """A value as the ``table`` format shows it: integers (DuckDB's ``sum`` of BIGINT is a 38-digit decimal) with
    thousands separators."""
    if v is None:
        return ""
    if isinstance(v, bytes):
        return _jsonable(v)
    integral = isinstance(v, Decimal) and v.is_finite() and v == v.to_integral_value()
    if integral or isinstance(v, int) and not isinstance(v, bool):
        return f"{int(v):,}"
    return str(v)


def render(table: pa.Table, fmt: str = "table", path: str | None = None, title: str | None = None) -> str:
    """Render a result: ``table`` (rich text), ``csv``, ``json`` (array of objects) as a string;
    ``parquet`` writes ``path`` and returns it."""
    if fmt == "parquet":
        if not path:
            raise ValueError("parquet output needs a path")
        import pyarrow.parquet as pq

        pq.write_table(table, path, compression="zstd")
        return path
    if fmt == "csv":
        import pyarrow.csv as pacsv

        buf = io.BytesIO()
        plain = table.select([i for i, f in enumerate(table.schema) if not pa.types.is_nested(f.type)])
        pacsv.write_csv(plain, buf)
        return buf.getvalue().decode()
    if fmt == "json":
        return json.dumps(table.to_pylist(), default=_jsonable, indent=1)
    if fmt == "table":
        from rich.console import Console
        from rich.table import Table

        rt = Table(title=title)
        for f in table.schema:
            numeric = pa.types.is_integer(f.type) or pa.types.is_floating(f.type) or pa.types.is_decimal(f.type)
            rt.add_column(f.name, justify="right" if numeric else "left")
        for row in table.to_pylist():
            rt.add_row(*[_cell(v) for v in row.values()])
        out = io.StringIO()
        Console(file=out, width=200, force_terminal=False, color_system=None).print(rt)
        if table.num_rows == 0:
            out.write("(no rows)\n")
        return out.getvalue()
    raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
