"""The hourly Parquet archive and the sink service that writes it (``fabricflow sink archive``)."""
