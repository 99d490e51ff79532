"""The errors of the query layer: a question the archive cannot answer, with the reason in the message."""

from __future__ import annotations


class ArchiveError(Exception):
    """A query cannot be answered (message says why)."""


class DatasetMissing(ArchiveError):
    pass


class EmptyRange(ArchiveError):
    pass
