"""Our own export encoders (sFlow v5, NetFlow v9, IPFIX), independent of ``ingest.decode``."""
