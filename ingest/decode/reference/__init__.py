"""Readable reference decoders, used by tests only: the compiled production decoders must equal them.

``reference.sflow.decode_sflow`` (with ``reference.packet`` for sampled headers) defines what the sFlow
decoder returns for any bytes; ``tests/unit/ingest/decode/test_sflow_differential.py`` and the golden tests hold
the compiled decoder (:mod:`ingest.decode.sflow`) to it. No product module imports this package
(``tests/unit/foundation/test_reference_use.py``).
"""
