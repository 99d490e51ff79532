"""Queries over the Parquet archive the sinks write: ``fabricflow query``, the console's history and
replay's archive source.

:mod:`.reader` (datasets present, files in a time range, DuckDB views, SQL), :mod:`.views` (the views
that count each packet once), :mod:`.plan` (which datasets answer a range), :mod:`.reports` (the named
reports), :mod:`.render` (table, CSV, JSON, Parquet), :mod:`.timerange`, :mod:`.errors`.
"""
