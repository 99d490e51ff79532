"""UDP ingest: listener -> decode (pure) -> publish to Kafka."""
