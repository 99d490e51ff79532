"""Enrichment: flow records -> ``flow_enriched`` records.

- ``inventory/``: the cluster inventory, parsed from YAML or CSV text and compiled into lookup tables;
- ``lpm.py``: vectorised longest-prefix match over 16-byte address columns;
- ``categories.py``: app category of each flow (protocol, ports, groups);
- ``observation.py``: which records count when several exporters see one packet;
- ``enricher.py``: :class:`~processors.logic.enrich.enricher.Enricher`, all of the above over a batch.
"""
