"""The processor worker (``fabricflow process``): raw topics -> ``prepare`` -> shuffle -> ``detect`` -> outputs.

``prepare`` (prepare.py) enriches raw flows, publishes ``flows.enriched.v1`` and re-partitions the raw rows to
the shuffle (shuffle.py) by detector shard; ``detect`` (detect.py) applies each shuffle partition to its
shard (shard.py); checkpoint.py orders outputs, snapshots and acknowledgements; faust_app.py is the Faust
wiring; service.py puts them together.
"""

from .service import Processors, run_processors

__all__ = ["Processors", "run_processors"]
