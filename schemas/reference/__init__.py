"""Readable reference decoders, used by tests only: the compiled production decoders must equal them.

``reference.batch.decode_batch`` decodes a batch message one value at a time in plain Python;
``tests/unit/schemas/test_batch_compiled.py`` holds :func:`schemas.codec.decode_batch` (the compiled
column walk) to it. No product module imports this package (``tests/unit/foundation/test_reference_use.py``).
"""
