"""Where the CPU goes inside each service of bench/pipeline.py (``--profile DIR``, with ``--rate``).

During the measured step: ``py-spy record`` samples every Python service (``--nonblocking``: the process is not
paused; 50 samples/s; idle threads left out, so samples follow on-CPU Python time), and /proc gives the CPU of every
thread of every service (librdkafka's own threads, ``rdk:*``, are native and invisible to py-spy). Afterwards
``DIR/summary.txt`` lists per service: CPU by thread, then py-spy's samples by Python thread, by package of the
innermost frame (self time), the top functions by self time and by inclusive time, each as a share of the service's
samples. The collapsed stacks stay in ``DIR/<service>.txt`` (flamegraph tools read them).

Not a benchmark: imported by bench/pipeline.py.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from devtools.loadgen import CLK_TCK, process_tree

RATE = 50  # py-spy samples per second
SKIP_THREAD_FRAMES = ("_bootstrap", "_bootstrap_inner", "run", "<module>", "_run_module_as_main", "_run_code")


def py_spy() -> str:
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(exe).exists():
        raise SystemExit("--profile needs py-spy: .venv/bin/pip install py-spy")
    return exe


def thread_cpu(pids: dict[str, list[int]]) -> dict[tuple[str, str], float]:
    """(service, thread) -> CPU seconds so far; threads by name (``comm``), a process's own thread as "main"."""
    out: Counter = Counter()
    for svc, roots in pids.items():
        for root in roots:
            for pid in process_tree(root):
                try:
                    tids = os.listdir(f"/proc/{pid}/task")
                except OSError:
                    continue
                for tid in tids:
                    try:
                        with open(f"/proc/{pid}/task/{tid}/stat") as f:
                            s = f.read()
                    except OSError:
                        continue
                    comm = s[s.index("(") + 1: s.rindex(")")]
                    cols = s.rsplit(")", 1)[1].split()
                    name = "main" if tid == str(pid) else re.sub(r"\d+$", "N", comm)
                    out[(svc, name)] += (int(cols[11]) + int(cols[12])) / CLK_TCK
    return dict(out)


class Profiler:
    """py-spy on every Python service for ``seconds``, and per-thread CPU over the same span."""

    def __init__(self, pipe, out: Path, seconds: float):
        self.pipe, self.out = pipe, out
        out.mkdir(parents=True, exist_ok=True)
        exe = py_spy()
        self.pids = {k: v for k, v in pipe.pids().items() if k not in ("broker", "s3")}
        self.cpu0 = thread_cpu(self.pids)
        self.procs = []
        for svc, pids in self.pids.items():
            for i, pid in enumerate(pids):
                f = out / f"{svc}{i if len(pids) > 1 else ''}.txt"
                self.procs.append((svc, f, subprocess.Popen(
                    [exe, "record", "--pid", str(pid), "--output", str(f), "--format", "raw", "--rate", str(RATE),
                     "--duration", str(max(1, int(seconds))), "--nonblocking", "--subprocesses", "--threads",
                     "--full-filenames", "--nolineno"], stdout=subprocess.DEVNULL, stderr=open(f"{f}.log", "w"))))

    def finish(self) -> None:
        for _, _, p in self.procs:
            try:
                p.wait(120)
            except subprocess.TimeoutExpired:
                p.kill()
        cpu1 = thread_cpu(self.pids)
        delta = {k: cpu1[k] - self.cpu0.get(k, 0.0) for k in cpu1}
        lines = []
        for svc in self.pids:
            stacks = Counter()
            for s, f, _ in self.procs:
                if s == svc and f.exists():
                    stacks.update(read_collapsed(f))
            lines += summarise(svc, stacks, {t: v for (s, t), v in delta.items() if s == svc})
        text = "\n".join(lines) + "\n"
        (self.out / "summary.txt").write_text(text)
        print(f"profile: {self.out / 'summary.txt'}\n{text}", flush=True)


def pure_core(settings) -> dict:
    """The processors' pure core (``fabricflow replay``'s path: enrich, shard, detectors; no codec, no Kafka) on every
    record of flows.raw, in this process: CPU-s per 1 M records, to hold against the worker's in the pipeline (the
    core is this checkout's: meaningful for the checkout under test only). Timed up to the last batch."""
    from devtools.chaos_outputs import read_raw
    from replay import core_factory_from, replay_batches

    src = read_raw(settings)
    n = len(src.flows)
    batches = src.flow_batches()
    src.flows = None
    end = [0.0]
    c0 = time.process_time()
    replay_batches(batches, [], core_factory_from(settings.processors), settings.kafka.partitions,
                   on_batch=lambda _k, _n: end.__setitem__(0, time.process_time()))
    return {"records": n, "cpu_s": end[0] - c0, "cpu_s_per_m": (end[0] - c0) / n * 1e6 if n else float("nan")}


def read_collapsed(path: Path) -> Counter:
    out: Counter = Counter()
    for line in path.read_text(errors="replace").splitlines():
        stack, _, n = line.rpartition(" ")
        if stack and n.isdigit():
            out[stack] += int(n)
    return out


def short(frame: str) -> str:
    """``function (path)`` with the path cut after site-packages/ or the checkout: ``function (pkg/module.py)``."""
    m = re.match(r"^(.*) \((.*)\)$", frame)
    if not m:
        return frame
    fn, path = m.groups()
    path = re.sub(r"^.*/site-packages/", "", path)
    path = re.sub(r"^.*/lib/python3\.\d+/", "stdlib/", path)
    path = re.sub(r"^/work/[^ ]*?/(fabricflow|schemas|ingest|processors|sinks|replay|console|cli|devtools)/", r"\1/", path)
    return f"{fn} ({path})"


def package(frame: str) -> str:
    m = re.match(r"^.* \((.*)\)$", short(frame))
    path = m.group(1) if m else frame
    parts = path.split("/")
    if parts[0] in ("sinks", "processors", "ingest", "schemas", "fabricflow") and len(parts) > 2:
        return "/".join(parts[:2])
    return parts[0] if len(parts) > 1 else path


def summarise(svc: str, stacks: Counter, threads: dict[str, float], top: int = 25) -> list[str]:
    total = sum(stacks.values())
    cpu = sum(threads.values())
    out = [f"== {svc}: {cpu:.1f} CPU-s over the profile ({total} py-spy samples = {total / RATE:.1f} s of on-CPU "
           f"Python thread time)", "  CPU by thread (/proc; rdk:* = librdkafka's native threads):"]
    for name, v in sorted(threads.items(), key=lambda kv: -kv[1])[:12]:
        if v > 0:
            out.append(f"    {v:7.2f} s {100 * v / cpu if cpu else 0:5.1f} %  {name}")
    if not total:
        return out + ["  (no py-spy samples)"]
    by_thread, by_pkg, self_t, incl = Counter(), Counter(), Counter(), Counter()
    for stack, n in stacks.items():
        frames = stack.split(";")
        body = [f for f in frames if not f.startswith(("process ", "thread ("))]  # py-spy's root frames
        named = [f for f in body if f.split(" (")[0] not in SKIP_THREAD_FRAMES]
        by_thread[short(named[0]) if named else "?"] += n
        if body:
            by_pkg[package(body[-1])] += n
            self_t[short(body[-1])] += n
        for f in {short(f) for f in body}:
            incl[f] += n
    for title, c in (("Python threads (by their first frame)", by_thread), ("self time by package", by_pkg),
                     ("top functions by self time", self_t), ("top functions by inclusive time", incl)):
        out.append(f"  {title}:")
        for name, n in c.most_common(top if "functions" in title else 12):
            out.append(f"    {100 * n / total:5.1f} %  {name}")
    return out
