"""The detectors, one module each, fed by :class:`processors.logic.engine.Engine` with closed windows.

Window detectors: ``incast.py`` (short windows), ``straggler.py``, ``pattern.py``, ``timeline.py``; the
one-rule baseline alerts (``baseline.py`` their shared shape): ``congestion.py``, ``connstorm.py``,
``lbskew.py``, ``storagebound.py``; counter samples: ``linkhealth.py``. Methods and parameters:
docs/detectors.md.
"""
