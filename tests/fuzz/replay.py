"""Run a target's check on saved inputs, without atheris: ``python -m tests.fuzz.replay TARGET FILE|DIR...``.

Prints each finding with its traceback and exits 1 if there was one. Used to reproduce and debug a crash
file from a campaign (``var/fuzz/TARGET/crashes/``) and by the suite's short fuzz run.
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

from .targets import TARGETS


def inputs(paths) -> list[Path]:
    """The files named, and the files inside the folders named, sorted."""
    out: list[Path] = []
    for p in map(Path, paths):
        out += sorted(f for f in p.iterdir() if f.is_file() and not f.name.startswith(".")) if p.is_dir() else [p]
    return out


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] not in TARGETS:
        print(f"usage: python -m tests.fuzz.replay TARGET FILE|DIR...  (targets: {', '.join(TARGETS)})")
        return 2
    check = TARGETS[argv[1]].check
    bad = 0
    files = inputs(argv[2:])
    for f in files:
        try:
            data = f.read_bytes()
        except FileNotFoundError:  # a running campaign replaced it with a smaller input
            continue
        try:
            check(data)
        except Exception:  # every exception is a finding here, reported with its input
            bad += 1
            print(f"== {f}")
            traceback.print_exc(file=sys.stdout)
    print(f"{argv[1]}: {len(files)} inputs, {bad} findings")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
