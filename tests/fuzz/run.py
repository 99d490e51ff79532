"""Coverage-guided fuzzing of one target with atheris (libFuzzer): ``python -m tests.fuzz.run TARGET [libFuzzer args]``.

    nice -n 19 .venv/bin/python -m tests.fuzz.run sflow -max_total_time=3600
    .venv/bin/python -m tests.fuzz.run sflow var/fuzz/sflow/crashes/crash-...   # replay one input

Without corpus arguments the run reads the committed seeds (``tests/fuzz/corpus/TARGET``) and writes
what it finds to ``var/fuzz/TARGET/corpus``; crashes, hangs (``-timeout``, seconds per input) and
out-of-memory inputs (``-rss_limit_mb``) land in ``var/fuzz/TARGET/crashes/``. Defaults added unless
given: ``-max_len=16384 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1``. ``-max_cpu_time=SECONDS``
(ours) stops the run after that much process CPU time; every other libFuzzer flag passes through
(``-runs``, ``-max_total_time``, ``-jobs``, ``-merge=1``, ``-minimize_crash=1``, ...). docs/fuzzing.md
says how to run a campaign and add its findings to the corpus.

The decoders' Python bytecode is instrumented (``ingest``, ``schemas``), the plain-Python references
included; the compiled decoders (Cython extension modules) cannot be (no coverage feedback from native
code): the targets run them on every input and compare them with the references instead. The custom mutator (:mod:`tests.fuzz.mutate`) keeps headers, lengths and templates consistent
most of the time and falls back to libFuzzer's byte mutations.
"""

from __future__ import annotations

import os
import random
import resource
import shlex
import sys
import time
import types
from pathlib import Path

import atheris
from atheris.instrument_bytecode import patch_code

REPO = Path(__file__).resolve().parents[2]
# Modules that mostly compare numpy arrays: branch coverage only. atheris 3.0.0 leaks about one
# allocation per instrumented comparison with an array operand (RSS grew ~7 kB per sFlow input),
# and libFuzzer cannot use an array's value anyway. The pure-Python decoders keep comparison tracing.
_ARRAYS = ["ingest.decode.sflow", "ingest.decode.batch", "ingest.decode._nf_plan", "ingest.decode._nf_common",
           "ingest.decode.netflow5", "ingest.decode.result", "ingest.sampler_loss", "ingest.quality",
           "schemas.columns", "schemas.varint", "schemas.strings", "schemas.codec"]
_DEFAULTS = {"-max_len": "16384", "-timeout": "10", "-rss_limit_mb": "2048", "-print_final_stats": "1"}

with atheris.instrument_imports(include=["ingest", "schemas"], exclude=_ARRAYS):
    # every module a target reaches, imported now (lazy imports at run time would escape instrumentation)
    # (the compiled extension modules they load are native code: the import hook leaves them as they are)
    import ingest.decode.ipfix  # noqa: F401
    import ingest.decode.netflow5  # noqa: F401
    import ingest.decode.netflow9  # noqa: F401
    import ingest.decode.reference.sflow  # noqa: F401
    import ingest.pipeline  # noqa: F401
    import schemas.codec  # noqa: F401
    import schemas.reference.batch  # noqa: F401


def _branch_coverage(module_name: str) -> None:
    """Instrument the functions and methods defined in a module for branch coverage, without comparison tracing."""
    mod = sys.modules.get(module_name)
    if mod is None:  # renamed or gone: nothing to instrument
        return

    def patch(fn) -> None:
        fn = getattr(fn, "__wrapped__", fn)  # functools.cache
        if isinstance(fn, types.FunctionType) and fn.__module__ == module_name:
            fn.__code__ = patch_code(fn.__code__, trace_dataflow=False)

    for obj in list(vars(mod).values()):
        if isinstance(obj, type) and obj.__module__ == module_name:
            for member in vars(obj).values():
                for fn in (member, getattr(member, "__func__", None), getattr(member, "fget", None)):
                    if fn is not None:
                        patch(fn)
        else:
            patch(obj)


for _name in _ARRAYS:
    _branch_coverage(_name)

from . import mutate as M  # noqa: E402
from .targets import TARGETS  # noqa: E402


def _mutator(kind: str):
    if kind == "message":
        from schemas import codec
        from schemas.registry import _history

        headers = [codec.header(n) for n in list(codec.BATCHES) + list(codec.RECORD_SCHEMAS)]
        headers += [codec.MAGIC + fp for fp in _history()]

        def custom(data: bytes, max_size: int, seed: int) -> bytes:
            return M.mutate_message(data, max_size, random.Random(seed), atheris.Mutate, headers)
    else:
        def custom(data: bytes, max_size: int, seed: int) -> bytes:
            return M.mutate_datagrams(data, max_size, random.Random(seed), atheris.Mutate)
    return custom


def _budgeted(name: str, check, cpu_budget_s: float):
    """``check``, stopping the run after ``cpu_budget_s`` of process CPU time with a summary line (exit 0).
    CPU time, not wall time: the machine is shared and campaigns run under ``nice``."""
    runs = [0]

    def run(data: bytes) -> None:
        check(data)
        runs[0] += 1
        if runs[0] % 64 == 0 and time.process_time() >= cpu_budget_s:
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
            sys.stderr.write(f"fabricflow-fuzz: {name}: {time.process_time() / 60:.1f} CPU-minutes, "
                             f"{runs[0]} executions, peak RSS {peak} MB, no finding\n")
            sys.stderr.flush()
            os._exit(0)  # libFuzzer has written every new input to the corpus already

    return run if cpu_budget_s > 0 else check


def _launcher(name: str, work: Path) -> str:
    """An executable that runs this target: libFuzzer re-runs argv[0] in child processes for ``-merge=1``,
    ``-minimize_crash=1`` and ``-fork``, and argv[0] must then be a command that takes libFuzzer's flags."""
    work.mkdir(parents=True, exist_ok=True)
    path = work / "fuzz-target"
    path.write_text(f"#!/bin/sh\ncd {shlex.quote(str(REPO))} && exec {shlex.quote(sys.executable)} -m tests.fuzz.run "
                    f"{shlex.quote(name)} \"$@\"\n")
    path.chmod(0o755)
    return str(path)


def main(argv: list[str]) -> None:
    if len(argv) < 2 or argv[1] not in TARGETS:
        names = "\n".join(f"  {t.name:9} {t.about}" for t in TARGETS.values())
        sys.exit(f"usage: python -m tests.fuzz.run TARGET [libFuzzer flags] [corpus dirs or input files]\n"
                 f"targets:\n{names}")
    target = TARGETS[argv[1]]
    args = argv[2:]
    cpu = [a for a in args if a.startswith("-max_cpu_time=")]
    cpu_budget_s = float(cpu[-1].split("=", 1)[1]) if cpu else 0.0
    flags = [a for a in args if a.startswith("-") and a not in cpu]
    paths = [a for a in args if not a.startswith("-")]
    given = {a.split("=", 1)[0] for a in flags}
    flags += [f"{k}={v}" for k, v in _DEFAULTS.items() if k not in given]
    work = REPO / "var" / "fuzz" / target.name
    if "-artifact_prefix" not in given:
        (work / "crashes").mkdir(parents=True, exist_ok=True)
        flags.append(f"-artifact_prefix={work / 'crashes'}/")
    if not paths:
        (work / "corpus").mkdir(parents=True, exist_ok=True)
        paths = [str(work / "corpus"), str(REPO / "tests" / "fuzz" / "corpus" / target.name)]
    atheris.Setup([_launcher(target.name, work), *flags, *paths], _budgeted(target.name, target.check, cpu_budget_s),
                  custom_mutator=_mutator(target.kind))
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
