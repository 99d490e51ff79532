"""Window primitives the detectors share: columnar, pure, plain-data state.

- ``tumbling.py``: event-time tumbling windows with allowed lateness (:class:`WindowManager`);
- ``groupby.py``: columnar group-by and reductions;
- ``interning.py``: string <-> int32 code tables of the label columns;
- ``snapshots.py``: window state as canonical snapshot bytes;
- ``matrix.py``: the traffic-matrix cell aggregator (shared by the matrix, straggler and pattern
  detectors) and the matrix cells of a closed window.
"""
