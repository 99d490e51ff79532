"""``fabricflow compare``: before vs after a change. ``data`` reads per-window values from the archive,
``series`` assembles each scope's metrics, ``steps`` aligns step marks, ``stats`` decides, ``report`` builds the
report, ``render`` prints it; docs/closed-loop.md."""
