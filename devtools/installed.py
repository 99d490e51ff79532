"""fabricflow installed as a packager installs it, run as a container runs it, and timed to "ready".

:func:`install` builds the wheel from a checkout and installs it non-editable into a fresh prefix from local
wheels only (``scripts/wheelhouse.py`` fills that folder at install time), then makes the prefix read-only.
:class:`Installed` runs its ``fabricflow`` as another user (``setpriv``; e.g. ``nobody``: no home directory)
with a minimal environment in ``/``; :class:`Started` follows a service's output and tells when it logged its
"<name> ready in N s" line (docs/operations.md, "Start-up and readiness") and the CPU time it had used by then.
Used by ``tests/e2e/test_installed.py`` and ``bench/startup.py``. Standard library only.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

SYSTEM_PYTHON = "/usr/bin/python3"  # root's own Python may live where other users cannot read it
SKIP_PARTS = {".git", ".venv", "build", "dist", "var", ".fabricflow", "__pycache__", "tests"}


def port_settings(first: int) -> dict[str, str]:
    """Settings that move every port of ``fabricflow demo`` (and the services it runs) to ``first`` to
    ``first + 20`` on 127.0.0.1 (the object store's internal ports take nine)."""
    p = iter(range(first + 11, first + 22))
    udp = [f"{scheme}://127.0.0.1:{next(p)}" for scheme in ("sflow", "netflow", "ipfix")]
    return {"FABRICFLOW_STACK__KAFKA_PORT": str(first), "FABRICFLOW_STACK__S3_PORT": str(first + 1),
            "FABRICFLOW_STACK__S3_BASE_PORT": str(first + 2), "FABRICFLOW_INGEST__LISTEN": "[" + ",".join(f'"{u}"' for u in udp) + "]",
            **{f"FABRICFLOW_{name}": str(next(p)) for name in (
                "INGEST__METRICS_PORT", "PROCESSORS__WEB_PORT", "PROCESSORS__METRICS_PORT", "ARCHIVE__METRICS_PORT",
                "METRICS__PORT", "CONSOLE__METRICS_PORT")},
            "FABRICFLOW_CONSOLE__LISTEN": f"127.0.0.1:{next(p)}"}


class InstallError(RuntimeError):
    """A build or install step failed (the message holds its command and output)."""


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise InstallError(f"{' '.join(map(str, cmd))} failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r


def copy_sources(repo: Path, dest: Path) -> None:
    """The files a build of ``repo`` sees (tracked and new, not ignored; git when it can say), without tests."""
    try:
        names = _run(["git", "ls-files", "-co", "--exclude-standard"], cwd=repo).stdout.splitlines()
    except (OSError, InstallError):
        names = [str(p.relative_to(repo)) for p in repo.rglob("*") if p.is_file()]
    for name in names:
        if SKIP_PARTS & set(Path(name).parts) or not (repo / name).is_file():
            continue
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / name, dest / name)


def set_writable(root: Path, writable: bool) -> None:
    """Give every file and folder under ``root`` its owner's write bit back, or take every write bit away."""
    for d, _dirs, files in os.walk(root):
        for n in [d, *(os.path.join(d, f) for f in files)]:
            if not os.path.islink(n):
                mode = os.stat(n).st_mode
                os.chmod(n, mode | stat.S_IWUSR if writable else mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def install(repo: Path, wheelhouse: Path, base: Path, python: str = SYSTEM_PYTHON) -> tuple[Path, str]:
    """Build ``repo``'s wheel and install it into ``base/prefix`` from ``wheelhouse`` alone; the prefix ends
    read-only. Returns (prefix, version)."""
    src, dist, prefix = base / "src", base / "dist", base / "prefix"
    src.mkdir(parents=True)
    copy_sources(repo, src)
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-index", "--find-links", wheelhouse,
          "--wheel-dir", dist, src], timeout=900)
    [wheel] = dist.glob("fabricflow-*.whl")
    _run([python, "-m", "venv", prefix], timeout=120)
    _run([prefix / "bin" / "python", "-m", "pip", "install", "--quiet", "--no-index", "--find-links", wheelhouse, wheel],
         timeout=900)
    set_writable(prefix, False)
    return prefix, wheel.name.split("-")[1]


@dataclass
class Installed:
    """An installed ``fabricflow`` run as ``user`` (None: this process's user) in ``/`` with a minimal environment."""

    prefix: Path
    base: Path  # scratch folder the user may read (state folders are made below it)
    user: str | None = None
    version: str = ""

    def __post_init__(self):
        self.uid, self.gid = (os.getuid(), os.getgid()) if self.user is None else pwd.getpwnam(self.user)[2:4]

    @property
    def fabricflow(self) -> str:
        return str(self.prefix / "bin" / "fabricflow")

    def state(self, name: str) -> Path:
        """A fresh folder only the user may write."""
        d = self.base / "state" / f"{name}-{uuid.uuid4().hex[:6]}"
        d.mkdir(parents=True)
        os.chown(d, self.uid, self.gid)
        return d

    def argv(self, args) -> list[str]:
        me = [] if self.user is None else ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups", "--"]
        return [*me, self.fabricflow, *map(str, args)]

    @staticmethod
    def env(settings: dict | None = None) -> dict:
        return {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", **{k: str(v) for k, v in (settings or {}).items()}}

    def run(self, args, settings=None, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(args), env=self.env(settings), cwd="/", capture_output=True, text=True,
                              timeout=timeout)

    def start(self, name: str, args, settings=None) -> Started:
        proc = subprocess.Popen(self.argv(args), env=self.env(settings), cwd="/", text=True, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)
        return Started(name, proc)


@dataclass
class Started:
    """A started command: its output lines with their arrival times (s since the start), read as they come."""

    name: str
    proc: subprocess.Popen
    t0: float = field(default_factory=time.monotonic)
    lines: list[tuple[float, str]] = field(default_factory=list)

    def __post_init__(self):
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append((time.monotonic() - self.t0, line.rstrip("\n")))

    def output(self) -> str:
        return "\n".join(line for _, line in self.lines)

    def cpu_s(self) -> float:
        """CPU seconds (user + system) the process has used so far (``setpriv`` execs it: the same process)."""
        with open(f"/proc/{self.proc.pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def wait_line(self, pattern: str, timeout: float = 90.0) -> tuple[float, str]:
        """(seconds since the start, line) of the first output line matching ``pattern``; AssertionError with the
        output when the process ends or ``timeout`` passes first."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        seen = 0
        while time.monotonic() < deadline:
            for at, line in self.lines[seen:]:
                seen += 1
                if rx.search(line):
                    return at, line
            if self.proc.poll() is not None:
                self._thread.join(2)
                if seen == len(self.lines):
                    raise AssertionError(f"{self.name} exited ({self.proc.returncode}) before /{pattern}/:\n{self.output()}")
            time.sleep(0.01)
        raise AssertionError(f"{self.name}: no /{pattern}/ within {timeout:.0f} s:\n{self.output()}")

    def ready(self, service: str | None = None, timeout: float = 90.0) -> tuple[float, float, float]:
        """Wait for ``<service> ready in N s``: (wall s since the start, CPU s by then, N as the service logged it)."""
        at, line = self.wait_line(rf"\b{re.escape(service or self.name)} ready in [0-9.]+ s", timeout)
        cpu = self.cpu_s()
        return at, cpu, float(re.search(r"ready in ([0-9.]+) s", line).group(1))

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, then SIGKILL after ``timeout``; the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            rc = self.proc.wait(10)
        self._thread.join(5)
        return rc
