"""The archive's filesystem: ``archive.url`` -> (fsspec filesystem, root), and what every module of the
archive and its readers needs to know about one.

* ``file://DIR``: local directory, relative to the current directory unless
  absolute (``file:///var/lib/...``). A writer (``write=True``: the archive sink,
  retention, compaction) creates it if missing and checks it is writable (one line,
  :class:`~fabricflow.statedir.StateDirError`, otherwise); a reader leaves it as it is.
* ``s3://BUCKET/PREFIX``: s3fs with ``archive.s3_endpoint`` / keys / region
  (no endpoint = AWS); the bucket must exist. A fresh client per call
  (``skip_instance_cache``) so settings never leak between instances.
* ``memory://NAME``: fsspec's in-process memory filesystem (tests).

The root is returned without protocol and without a trailing slash (:func:`root_path`), as
:class:`sinks.archive.parquet.ParquetWriter` and :class:`query.reader.ArchiveReader` take it.
"""

from __future__ import annotations

import os

import fsspec

from fabricflow.statedir import writable_dir


class ArchiveUrlError(ValueError):
    """``archive.url`` cannot be used (message names the setting)."""


class ArchiveUnavailable(RuntimeError):
    """The archive's storage did not answer (one line; the caller says what it does about it).

    The archive sink exits 1 when the store fails where it cannot retry in place (reading which offsets an
    hour already holds: offsets are committed only after their files are written, so a restart re-reads
    exactly what is missing). The console shows it in the page's banner and answers again once the store
    is back.
    """


def filesystem(fs) -> fsspec.AbstractFileSystem:
    """``fs``, or the local filesystem when None."""
    return fsspec.filesystem("file") if fs is None else fs


def is_local(fs) -> bool:
    """Whether ``fs`` is the local filesystem (files written with rename + fsync, read by path)."""
    proto = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
    return "file" in proto or "local" in proto


def root_path(fs, root: str) -> str:
    """``root`` as ``fs`` names it: without protocol and without a trailing slash."""
    r = fs._strip_protocol(str(root)) if hasattr(fs, "_strip_protocol") else str(root)
    return r.rstrip("/") or "/"


def archive_filesystem(archive, write: bool = False) -> tuple[fsspec.AbstractFileSystem, str]:
    """(filesystem, root) for :class:`fabricflow.settings.ArchiveSettings` ``archive``; ``write``: the caller
    writes there (a local directory is created and checked)."""
    url = archive.url
    if url.startswith("file://"):
        path = url[len("file://"):]
        if not path:
            raise ArchiveUrlError("archive.url: file:// needs a directory (file://./var/archive or file:///abs/dir)")
        root = os.path.abspath(path)
        if write:
            writable_dir(root, "archive.url")  # StateDirError (a ValueError): one line naming the setting
        return fsspec.filesystem("file"), root
    if url.startswith("s3://"):
        import s3fs

        rest = url[len("s3://"):].strip("/")
        if not rest:
            raise ArchiveUrlError("archive.url: s3:// needs a bucket (s3://BUCKET/PREFIX)")
        client_kwargs = {"region_name": archive.s3_region}
        if archive.s3_endpoint:
            client_kwargs["endpoint_url"] = archive.s3_endpoint
        secret = archive.s3_secret_key.get_secret_value() if archive.s3_secret_key else None
        fs = s3fs.S3FileSystem(
            key=archive.s3_access_key, secret=secret, client_kwargs=client_kwargs, skip_instance_cache=True,
        )
        return fs, rest
    if url.startswith("memory://"):
        fs = fsspec.filesystem("memory")
        name = url[len("memory://"):].strip("/") or "archive"
        return fs, "/" + name
    raise ArchiveUrlError(f"archive.url: unsupported scheme in {url!r} (file://, s3:// or memory://)")
