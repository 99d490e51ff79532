"""Queries over the Parquet archive (``fabricflow query``, the console's history, replay's archive source)."""
