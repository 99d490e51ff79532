"""Avro schemas (``schemas/avro/*.avsc``) and everything derived from them.

The ``.avsc`` files are the one source of truth: numpy dtypes for the columnar
hot path (:mod:`schemas.columns`), Arrow schemas for Parquet, and the Kafka wire
codec (:mod:`schemas.codec`) are all derived from them.
"""
