"""Sinks: the hourly Parquet archive (layout, buffering, atomic writes, retention),
hourly summaries and analyst queries over the archive.

Modules: :mod:`sinks.arrow_schema` (Arrow schemas from the Avro schemas),
:mod:`sinks.layout` (paths and keys), :mod:`sinks.archive` (exactly-once writer
core), :mod:`sinks.retention`, :mod:`sinks.summaries`, :mod:`sinks.query`.
No Kafka here: the consumer loop feeds these with tables and offsets.
"""
