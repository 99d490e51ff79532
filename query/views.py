"""The names an analyst queries beside the datasets: the views that count each packet once.

A packet seen by several exporters is a row per exporter in ``flows_enriched`` and the traffic rollups, all
but one marked ``duplicate`` (docs/detectors.md, "Counting each packet once"). docs/archive.md, "Which name
to query".
"""

from __future__ import annotations

import re

#: Views of :meth:`query.reader.ArchiveReader.sql` beside the datasets: name -> (dataset, rows kept). ``flows`` is
#: the name to sum, ``flow_observations`` says what it holds.
VIEWS = {
    "flows": ("flows_enriched", "NOT coalesce(duplicate, false)"),
    "flow_observations": ("flows_enriched", None),
    "flows_1m": ("traffic_1m", "NOT duplicate"),
    "flows_1h": ("traffic_1h", "NOT duplicate"),
}
#: The first query to show an analyst (the demo's closing lines, ``fabricflow query sql --help``).
EXAMPLE_SQL = "SELECT category, sum(bytes_est) AS bytes_est FROM flows GROUP BY 1 ORDER BY 2 DESC"
#: Datasets whose sums count a packet once per exporter that saw it (-> the view that counts it once).
EVERY_OBSERVATION = {"flows_raw": "flows", "flows_enriched": "flows", "traffic_1m": "flows_1m",
                     "traffic_1h": "flows_1h"}


def observation_note(query: str) -> str | None:
    """A one-line note when ``query`` sums a dataset of :data:`EVERY_OBSERVATION` without saying which records
    count (it names neither ``duplicate`` nor ``exporter``), else None: ``fabricflow query sql`` prints it."""
    if re.search(r"\b(duplicate|exporter)\b", query, re.I):
        return None
    named = [d for d in EVERY_OBSERVATION if re.search(rf"\b{d}\b", query)]
    if not named:
        return None
    d = named[0]
    fix = "" if d == "flows_raw" else " or add WHERE NOT duplicate"
    return (f"note: {d} has a row for every exporter that saw a packet (seen by ToR sFlow and core NetFlow: "
            f"twice); to count each packet once, query {EVERY_OBSERVATION[d]}{fix} (docs/archive.md, "
            "\"Which name to query\")")
