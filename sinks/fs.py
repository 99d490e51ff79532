"""The archive's filesystem from the settings: ``archive.url`` -> (fsspec filesystem, root).

* ``file://DIR``: local directory, relative to the current directory unless
  absolute (``file:///var/lib/...``). A writer (``write=True``: the archive sink,
  retention, compaction) creates it if missing and checks it is writable (one line,
  :class:`~fabricflow.statedir.StateDirError`, otherwise); a reader leaves it as it is.
* ``s3://BUCKET/PREFIX``: s3fs with ``archive.s3_endpoint`` / keys / region
  (no endpoint = AWS); the bucket must exist. A fresh client per call
  (``skip_instance_cache``) so settings never leak between instances.
* ``memory://NAME``: fsspec's in-process memory filesystem (tests).

The root is returned without protocol and without a trailing slash, as
:class:`sinks.archive.ParquetWriter` and :class:`sinks.query.ArchiveQuery` take it.
"""

from __future__ import annotations

import os

import fsspec

from fabricflow.statedir import writable_dir


class ArchiveUrlError(ValueError):
    """``archive.url`` cannot be used (message names the setting)."""


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
