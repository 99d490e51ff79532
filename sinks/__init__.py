"""Sinks: the services that write the pipeline's outputs out, one package per job.

:mod:`sinks.archive` writes the archived topics as hourly Parquet, exactly once (with rollups,
compaction, retention and the hourly summaries back to Kafka); :mod:`sinks.metrics` turns the
processors' outputs into Prometheus flow metrics. Reading the archive is the query layer's job
(:mod:`query`).
"""
