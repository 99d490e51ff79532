"""Flow metrics for Prometheus (``fabricflow sink metrics``): processors' outputs -> /metrics.

Pure logic: :mod:`.state` (families), :mod:`.budget` (series budget), :mod:`.store`, :mod:`.decode`,
:mod:`.labels`. Wiring: :mod:`.service` (Kafka consumer + HTTP); the command is :mod:`cli.metrics`.
"""
