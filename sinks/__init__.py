"""Sinks: the hourly Parquet archive (layout, buffering, atomic writes, retention),
hourly summaries and analyst queries over the archive.

Pure-ish modules (no Kafka): :mod:`sinks.arrow_schema` (Arrow schemas from the
Avro schemas), :mod:`sinks.layout` (paths and keys), :mod:`sinks.archive`
(exactly-once writer core), :mod:`sinks.retention`, :mod:`sinks.summaries`,
:mod:`sinks.query`. The Kafka side: :mod:`sinks.archive_service` (the consumer loop
feeding them, with :mod:`sinks.commit_ledger`, :mod:`sinks.summary_emitter` and
:mod:`sinks.archive_metrics`), :mod:`sinks.fs` (archive filesystem from the settings) and
:mod:`cli.archive` (``fabricflow sink ...`` and ``fabricflow query ...``).
"""
