"""Sinks: the hourly Parquet archive (layout, buffering, atomic writes, retention),
hourly summaries and analyst queries over the archive.

Pure-ish modules (no Kafka): :mod:`sinks.archive.arrow_schema` (Arrow schemas from the
Avro schemas), :mod:`sinks.archive.layout` (paths and keys), :mod:`sinks.archive.buffer`
(exactly-once writer core), :mod:`sinks.archive.retention`, :mod:`sinks.archive.summaries`,
:mod:`query.reports`. The Kafka side: :mod:`sinks.archive.service` (the consumer loop
feeding them, with :mod:`sinks.archive.commit_ledger`, :mod:`sinks.archive.summary_emitter` and
:mod:`sinks.archive.metrics`), :mod:`sinks.archive.fs` (archive filesystem from the settings) and
:mod:`cli.archive` (``fabricflow sink ...`` and ``fabricflow query ...``).
"""
