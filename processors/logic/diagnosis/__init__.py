"""Bottleneck diagnosis: the kind of problem an incast, congestion, straggler or link event is, with the next step.

``catalog`` (the classes, their next steps and limits, the record), ``signals`` (ECN / CNP counts of sampled
flows and a port's counter state, as evidence), ``rules`` (one function per event kind). The engine feeds
them what the detectors and the port state know. docs/detectors.md, "Diagnosis". Pure: no clock, no I/O.
"""
