"""Slurm jobs, polled: ``squeue --json``, ``scontrol show job --json`` or slurmrestd ``GET /slurm/<version>/jobs``.

Every ``poll_s`` the source reads the whole job list (a complete view: :meth:`Feed.relist`) and hands it to
the pure :func:`~processors.logic.enrich.inventory.schedulers.slurm_holdings`. A running job holds its nodes
from ``start_time``; a job the list shows ended (``COMPLETED``, ``FAILED``, ...) ends at its ``end_time``; a
job that left the list between two polls ends at the poll that missed it (Slurm keeps finished jobs in the
list for ``MinJobAge``, 300 s by default, so with ``poll_s`` below that the exact end is seen). A failed
poll (command missing or failing, HTTP error, unreachable, not JSON) is reported in one line, the last
membership stays, and the next poll waits a backoff instead of ``poll_s`` while failures go on.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import urllib.error
import urllib.request
from pathlib import Path

from fabricflow.jobs_settings import SlurmJobsSettings
from processors.logic.enrich.inventory.schedulers import slurm_holdings

from .feed import Feed, backoff_delays

__all__ = ["SlurmPollError", "SlurmSource"]


class SlurmPollError(RuntimeError):
    """One poll failed; the message is one line."""


class SlurmSource:
    """Poll Slurm's job list; ``run(feed, stop)`` until ``stop`` is set."""

    def __init__(self, settings: SlurmJobsSettings, backoff_max_s: float = 60.0):
        self.settings = settings
        self.backoff_max_s = backoff_max_s

    def _command(self) -> list[str]:
        s = self.settings
        exe = s.command or ("scontrol" if s.mode == "scontrol" else "squeue")
        path = exe if "/" in exe else shutil.which(exe)
        if not path:
            raise SlurmPollError(f"{exe}: command not found (set processors.jobs.slurm.command)")
        return [path, "show", "job", "--json"] if s.mode == "scontrol" else [path, "--all", "--json"]

    def _run_command(self) -> bytes:
        cmd = self._command()
        try:
            done = subprocess.run(cmd, capture_output=True, timeout=self.settings.timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise SlurmPollError(f"{cmd[0]} did not answer within {self.settings.timeout_s:g} s") from None
        except OSError as e:
            raise SlurmPollError(f"{cmd[0]}: {e.strerror or e}") from None
        if done.returncode != 0:
            err = (done.stderr.decode(errors="replace").strip().splitlines() or [""])[-1]
            raise SlurmPollError(f"{cmd[0]} exited with status {done.returncode}: {err}".rstrip(": "))
        return done.stdout

    def _token(self) -> str | None:
        s = self.settings
        if s.token_file:
            try:
                return Path(s.token_file).read_text().strip()
            except OSError as e:
                raise SlurmPollError(f"cannot read processors.jobs.slurm.token_file: {e.strerror or e}") from None
        return s.token.get_secret_value() if s.token is not None else None

    def _get_rest(self) -> bytes:
        s = self.settings
        url = f"{s.url.rstrip('/')}/slurm/{s.api_version}/jobs"
        req = urllib.request.Request(url, headers={"Accept": "application/json"})
        token = self._token()
        if token:
            req.add_header("X-SLURM-USER-TOKEN", token)
        if s.user:
            req.add_header("X-SLURM-USER-NAME", s.user)
        try:
            with urllib.request.urlopen(req, timeout=s.timeout_s) as resp:
                return resp.read()
        except urllib.error.HTTPError as e:
            raise SlurmPollError(f"slurmrestd {url} answered {e.code} {e.reason}") from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise SlurmPollError(f"slurmrestd {url} unreachable: {reason}") from None

    def poll(self, feed: Feed) -> None:
        """One poll: the job list -> a complete view on the feed; raises :class:`SlurmPollError` / ValueError."""
        raw = self._get_rest() if self.settings.mode == "rest" else self._run_command()
        try:
            doc = json.loads(raw)
        except ValueError:
            raise SlurmPollError(f"the {self.settings.mode} answer is not JSON") from None
        errors = doc.get("errors") if isinstance(doc, dict) else None
        if errors:  # slurmrestd / data_parser report problems in the document
            first = errors[0] if isinstance(errors[0], dict) else {"description": str(errors[0])}
            raise SlurmPollError(f"Slurm reported an error: {first.get('description') or first.get('error') or first}")
        feed.relist(slurm_holdings(doc, self.settings.job_naming), "poll")

    def run(self, feed: Feed, stop: threading.Event) -> None:
        delays = backoff_delays(self.backoff_max_s)
        while not stop.is_set():
            try:
                self.poll(feed)
            except (SlurmPollError, ValueError) as e:
                feed.error((str(e).splitlines() or [type(e).__name__])[0])
                stop.wait(max(next(delays), 1.0))
                continue
            delays = backoff_delays(self.backoff_max_s)
            stop.wait(self.settings.poll_s)
