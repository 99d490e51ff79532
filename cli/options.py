"""Options shared by the archive query commands: one declaration of the time range and the output."""

from __future__ import annotations

import functools
import re
import typing
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Callable, Optional

import typer

FROM_HELP = "Start of the range (ISO-8601, naive = UTC, or unix ms). Default: the whole archive."
TO_HELP = "End of the range, exclusive (ISO-8601 or unix ms). Default: the end of the archive."
LAST_HELP = "Instead of --from/--to: the last DURATION up to now, e.g. 90m, 6h, 2d."
FORMAT_HELP = "Output format: table, csv, json or parquet (parquet needs --output)."
OUTPUT_HELP = "Write the result to this file instead of stdout (required for parquet)."


@dataclass(frozen=True)
class QueryOptions:
    """The range and output options every ``fabricflow query`` command takes."""

    frm: str | None = None
    to: str | None = None
    last: str | None = None
    fmt: str = "table"
    output: Path | None = None


_K = inspect.Parameter.KEYWORD_ONLY
_SHARED = [
    inspect.Parameter("frm", _K, default=None, annotation=Annotated[Optional[str], typer.Option("--from", help=FROM_HELP)]),
    inspect.Parameter("to", _K, default=None, annotation=Annotated[Optional[str], typer.Option("--to", help=TO_HELP)]),
    inspect.Parameter("last", _K, default=None, annotation=Annotated[Optional[str], typer.Option("--last", help=LAST_HELP)]),
    inspect.Parameter("fmt", _K, default="table", annotation=Annotated[str, typer.Option("--format", "-f", help=FORMAT_HELP)]),
    inspect.Parameter("output", _K, default=None,
                      annotation=Annotated[Optional[Path], typer.Option("--output", "-o", help=OUTPUT_HELP)]),
]


def with_query_options(fn: Callable) -> Callable:
    """Give a command the shared options; ``fn`` receives them as ``opts: QueryOptions``."""
    return _with_shared(fn, _SHARED, "opts", QueryOptions)


def _with_shared(fn: Callable, shared: list[inspect.Parameter], name: str, cls: type) -> Callable:
    """``fn`` as a command with the options ``shared`` after its own; it receives them as ``name: cls``."""
    sig = inspect.signature(fn)
    hints = typing.get_type_hints(fn, include_extras=True)
    own = [p.replace(kind=_K, annotation=hints.get(n, p.annotation))
           for n, p in sig.parameters.items() if n != name]

    @functools.wraps(fn)
    def command(**kwargs):
        value = cls(**{p.name: kwargs.pop(p.name) for p in shared})
        return fn(**kwargs, **{name: value})

    params = own + shared
    command.__signature__ = sig.replace(parameters=params)
    command.__annotations__ = {p.name: p.annotation for p in params}
    return command


@dataclass(frozen=True)
class Subject:
    """What ``fabricflow mark`` records a change for and ``fabricflow compare`` compares: the
    ``--job``, ``--node``, ``--link`` (SWITCH/IFINDEX) and ``--groups`` (SRC>DST) options."""

    job: str | None = None
    node: str | None = None
    link: str | None = None
    groups: str | None = None


def with_subject_options(helps: dict[str, str]) -> Callable[[Callable], Callable]:
    """Give a command ``--job``, ``--node``, ``--link`` and ``--groups`` with the help ``helps[name]`` each;
    it receives them as ``subject: Subject``."""
    params = [inspect.Parameter(n, _K, default=None, annotation=Annotated[Optional[str], typer.Option(f"--{n}", help=h)])
              for n, h in helps.items()]
    return lambda fn: _with_shared(fn, params, "subject", Subject)


_DUR = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)\s*$")
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(text: str) -> int:
    """Milliseconds of ``90m``, ``6h``, ``2d``, ``30s``."""
    m = _DUR.match(text)
    if not m:
        raise ValueError(f"cannot read {text!r} as a duration (e.g. 90m, 6h, 2d)")
    return int(float(m.group(1)) * _UNIT_MS[m.group(2)])


EXPORTER_HELP = "One exporter's own view (every record it sent) instead of each packet counted once."
#: ``--exporter ADDR`` of the flow reports
Exporter = Annotated[Optional[str], typer.Option("--exporter", help=EXPORTER_HELP)]


SOURCE_HELP = ("raw (flows_enriched), 1m or 1h (traffic rollups) or auto: the coarsest rollup that answers the "
               "range exactly (whole hours: 1h, whole minutes: 1m, else raw). The dataset used is named on stderr.")
#: ``--source`` of the flow reports (top-talkers, node, job): checked by the command (``query.plan.SOURCE_CHOICES``)
Source = Annotated[str, typer.Option("--source", help=SOURCE_HELP)]
MATRIX_SOURCE_HELP = ("matrix (matrix_windows), raw or flows (flows_enriched), 1m or 1h (traffic rollups) or auto: the "
                      "coarsest rollup that answers the range exactly, else matrix_windows, else raw. The dataset used "
                      "is named on stderr.")
#: ``--source`` of ``query matrix``: the flow reports' choices and matrix_windows
MatrixSource = Annotated[str, typer.Option("--source", help=MATRIX_SOURCE_HELP)]
