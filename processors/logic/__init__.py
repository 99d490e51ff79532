"""Pure processor logic: enrichment, windowing and detection over numpy batches.

- ``enrich/``: the inventory (parsed from text), longest-prefix match, app categories, the observation
  policy and the :class:`~processors.logic.enrich.enricher.Enricher` (flow records -> enriched records);
- ``windows/``: event-time windows, group-by, string interning, snapshot encoding and the traffic-matrix
  cell aggregator the window detectors read;
- ``detectors/``: one module per detector (incast, straggler, link health, pattern, timeline and the
  one-rule baseline alerts);
- ``rules/``: the policy and security rules, their configuration and the :class:`PolicyEngine`;
- ``alerts.py`` (alert lifecycle), ``params.py`` (typed detector parameters), ``engine.py`` (windows +
  detectors) and ``core.py`` (one shard: enrichment, engine, policy) at the top.

No Kafka, no Faust, no file reads, no clock reads and no logging here; time comes in as arguments so
the same code runs live and in replay. Files are read by :mod:`processors.config_files`.
"""
