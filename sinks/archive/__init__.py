"""The hourly Parquet archive and the sink service that writes it (``fabricflow sink archive``).

No Kafka: :mod:`.layout` (paths and keys), :mod:`.arrow_schema`, :mod:`.buffer` (rows by event hour,
flush plans), :mod:`.flush` (the files to write), :mod:`.index` (offsets already written),
:mod:`.parquet` (the writer and the rollups written with each file), :mod:`.rollups`,
:mod:`.compaction`, :mod:`.retention`, :mod:`.summaries`, :mod:`.fs` (the filesystem). The Kafka side:
:mod:`.service` (the consumer loop) with :mod:`.commit_ledger`, :mod:`.write_queue`,
:mod:`.summary_emitter` and :mod:`.metrics`. Design and guarantees: docs/archive.md.
"""
