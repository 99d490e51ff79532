"""Pure processor logic: enrichment, windowing and detection over numpy batches.

No Kafka, no Faust, no clock reads and no logging here; time comes in as
arguments so the same code runs live and in replay.
"""
