"""Typed detector parameters: each detector's settings class is declared beside its code with this decorator.

A parameter class is a frozen dataclass validated by pydantic (types, bounds, unknown names rejected), so
``processors.detectors.<detector>.<parameter>`` overrides are checked when a worker or replay starts, and
``fabricflow config docs`` lists every parameter with its default and description.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic import ConfigDict, ValidationError
from pydantic.dataclasses import dataclass as _pydantic_dataclass

__all__ = ["detector_params", "build_params", "describe_params", "ParamsError"]


class ParamsError(ValueError):
    """Bad detector parameters; the message is one line naming the detector and parameter."""


def detector_params(cls):
    """Make ``cls`` a frozen, validated parameter dataclass (fields use ``pydantic.Field`` for bounds and docs)."""
    return _pydantic_dataclass(frozen=True, config=ConfigDict(extra="forbid", arbitrary_types_allowed=False))(cls)


def build_params(cls, overrides: dict[str, Any], where: str):
    """``cls(**overrides)``; a :class:`ParamsError` naming ``where``.parameter on any problem."""
    try:
        return cls(**overrides)
    except ValidationError as e:
        err = e.errors()[0]
        name = ".".join(str(x) for x in err["loc"]) or "?"
        if err["type"] == "unexpected_keyword_argument":
            known = ", ".join(f.name for f in dataclasses.fields(cls))
            raise ParamsError(f"{where}.{name}: unknown parameter (known: {known})") from None
        raise ParamsError(f"{where}.{name}: {err['msg']} (got {err.get('input')!r})") from None


def describe_params(cls) -> list[tuple[str, Any, str]]:
    """(name, default, description) of every parameter of a parameter class."""
    out = []
    for name, info in cls.__pydantic_fields__.items():
        default = info.get_default(call_default_factory=True)
        out.append((name, default, info.description or ""))
    return out
