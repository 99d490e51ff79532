"""The processor worker (``fabricflow process``): raw topics -> ``prepare`` -> shuffle -> ``detect`` -> outputs.

``prepare`` (prepare.py) enriches raw flows, publishes ``flows.enriched.v1`` and re-partitions the raw rows to
the shuffle (shuffle.py) by detector shard; ``detect`` (detect.py) applies each shuffle partition to its
shard (shard.py); checkpoint.py orders outputs, snapshots and acknowledgements; service.py puts them
together (:class:`Processors`), faust_app.py is the Faust wiring around them, run.py builds and runs both.
"""

from .run import run_processors
from .service import Processors

__all__ = ["Processors", "run_processors"]
