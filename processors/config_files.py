"""The processors' configuration files: inventory, policy and app-category rules, read from disk.

The one place the files the pure logic (:mod:`processors.logic`) is built from are read: by the worker,
replay, the console, the metrics sink, ``fabricflow config check`` and the benchmarks. Loaded and
checked before a worker connects anywhere (:func:`load_config_files`, :func:`check_config_files`), kept
current while a service runs (:class:`ConfigFileWatcher`, :class:`InventoryWatcher`). A problem is
reported as one line naming the file, the line (and key) and what is wrong::

    /config/policy.yaml: line 12 (segmentation.allow.0.src): Input should be a valid string

Each ``load_*_file`` raises :class:`ConfigFileError`; :func:`read_inventory` raises
:class:`~processors.logic.enrich.inventory.InventoryError` with every problem of the file.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from fabricflow.filewatch import FileWatcher
from processors.logic.core import CoreConfigError
from processors.logic.enrich.categories import CategoryRules
from processors.logic.enrich.inventory import Inventory, InventoryError, inventory_format
from processors.logic.rules.config import PolicyConfig

__all__ = [
    "ConfigFileError",
    "ConfigFileWatcher",
    "ConfigFiles",
    "InventoryWatcher",
    "check_config_files",
    "load_categories_file",
    "load_config_files",
    "load_inventory_file",
    "load_policy_file",
    "read_inventory",
]

T = TypeVar("T")


class ConfigFileError(CoreConfigError):
    """A configuration file is missing or invalid. ``str()`` is one line: file, line/key, problem."""

    def __init__(self, path: str, problems: list[str]):
        self.path = str(path)
        self.problems = list(problems) or ["invalid"]
        more = f" (and {len(self.problems) - 1} more problem(s))" if len(self.problems) > 1 else ""
        super().__init__(f"{self.path}: {self.problems[0]}{more}")


def _file_text(path: str | os.PathLike, fail: Callable[[str], Exception]) -> str:
    """The file's text (UTF-8, a byte-order mark dropped); ``fail(problem)`` is raised when it cannot be read."""
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise fail(f"cannot read file: {e.strerror or e}") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise fail(f"not UTF-8 text (byte offset {e.start})") from None


def _read_text(path: str | os.PathLike, setting: str) -> str:
    p = Path(path)
    if not p.exists():
        raise ConfigFileError(str(path), [f"no such file (setting {setting})"])
    if not p.is_file():
        raise ConfigFileError(str(path), [f"not a file (setting {setting})"])
    return _file_text(p, lambda problem: ConfigFileError(str(path), [problem]))


def _yaml_mapping(text: str, path: str) -> tuple[dict, Any]:
    """(data, composed node tree) of a YAML mapping file; ConfigFileError with the line on a syntax error."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        raise ConfigFileError(path, [f"{where}not valid YAML: {getattr(e, 'problem', None) or e}"]) from None
    if data is None:
        return {}, None
    if not isinstance(data, dict):
        raise ConfigFileError(path, [f"line 1: top level must be a mapping, got {type(data).__name__}"])
    return data, node


def _line_of(node, loc: tuple) -> int | None:
    """1-based line of the YAML node at ``loc`` (keys and list indexes), or of its deepest existing parent."""
    if node is None:
        return None
    line = node.start_mark.line + 1
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                if k.value == str(part):
                    # a key that should not be there: its own line; else the value's
                    node, line = v, (k.start_mark.line + 1)
                    break
            else:
                return line
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def _model_problems(err: ValidationError, node) -> list[str]:
    out = []
    for e in err.errors():
        loc = tuple(x for x in e["loc"] if not (isinstance(x, str) and x.startswith("function-")))
        key = ".".join(str(x) for x in loc)
        msg = "unknown key" if e["type"] == "extra_forbidden" else e["msg"]
        line = _line_of(node, loc)
        where = f"line {line}" if line is not None else ""
        if key:
            where = f"{where} ({key})" if where else key
        out.append(f"{where}: {msg}" if where else msg)
    return out


M = TypeVar("M", bound=BaseModel)


def _load_model(path: str | os.PathLike, model: type[M], setting: str) -> M:
    text = _read_text(path, setting)
    data, node = _yaml_mapping(text, str(path))
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise ConfigFileError(str(path), _model_problems(e, node)) from None
    except ValueError as e:  # a validator that raised outside pydantic's wrapping
        raise ConfigFileError(str(path), [str(e)]) from None


def load_policy_file(path: str | os.PathLike) -> PolicyConfig:
    """The policy (docs/alerts.md) from a YAML file; :class:`ConfigFileError` when missing or invalid."""
    return _load_model(path, PolicyConfig, "processors.policy")


def load_categories_file(path: str | os.PathLike) -> CategoryRules:
    """App-category rules (docs/inventory.md) from a YAML file of :class:`CategoryRules` keys."""
    return _load_model(path, CategoryRules, "processors.categories")


def read_inventory(path: str | os.PathLike) -> Inventory:
    """The inventory of a ``.yaml``/``.yml`` or ``.csv`` file; :class:`InventoryError` with every problem."""
    source = str(path)
    fmt = inventory_format(source)
    return Inventory.parse(_file_text(path, lambda problem: InventoryError(source, [problem])), source, fmt)


def load_inventory_file(path: str | os.PathLike) -> Inventory:
    """The inventory (YAML or CSV); :class:`ConfigFileError` with the first problem (and how many more)."""
    if not Path(path).exists():
        raise ConfigFileError(str(path), ["no such file (setting processors.inventory)"])
    try:
        return read_inventory(path)
    except InventoryError as e:
        raise ConfigFileError(e.source, e.problems) from None


@dataclass(frozen=True)
class ConfigFiles:
    """What the processors' files say; None where no file is configured (built-in defaults)."""

    inventory: Inventory | None
    policy: PolicyConfig | None
    categories: CategoryRules | None


def load_config_files(processors) -> ConfigFiles:
    """Load every file :class:`fabricflow.settings.ProcessorSettings` names; the first bad one raises."""
    return ConfigFiles(
        inventory=load_inventory_file(processors.inventory) if processors.inventory else None,
        policy=load_policy_file(processors.policy) if processors.policy else None,
        categories=load_categories_file(processors.categories) if getattr(processors, "categories", None) else None,
    )


def check_config_files(processors) -> list[str]:
    """One line per bad file the processor settings name, and per missing file or command of a live job source
    (empty: all good). For ``fabricflow config check``."""
    out = []
    for setting, loader in (("inventory", load_inventory_file), ("policy", load_policy_file),
                            ("categories", load_categories_file)):
        path = getattr(processors, setting, None)
        if not path:
            continue
        try:
            loader(path)
        except ConfigFileError as e:
            out.append(f"processors.{setting}: {e}")
    return out + _jobs_source_problems(getattr(processors, "jobs", None))


def _jobs_source_problems(jobs) -> list[str]:
    """Files and commands a live job source (``processors.jobs``) names that are not there."""
    import shutil

    out = []
    if jobs is None or jobs.source == "file":
        return out
    if jobs.source == "kubernetes" and jobs.kubernetes.kubeconfig and not Path(jobs.kubernetes.kubeconfig).is_file():
        out.append(f"processors.jobs.kubernetes.kubeconfig: {jobs.kubernetes.kubeconfig}: no such file")
    sl = jobs.slurm
    if jobs.source == "slurm" and sl.token_file and not Path(sl.token_file).is_file():
        out.append(f"processors.jobs.slurm.token_file: {sl.token_file}: no such file")
    if jobs.source == "slurm" and sl.mode != "rest":
        exe = sl.command or ("scontrol" if sl.mode == "scontrol" else "squeue")
        if not (Path(exe).is_file() if "/" in exe else shutil.which(exe)):
            out.append(f"processors.jobs.slurm.command: {exe}: command not found")
    return out


class ConfigFileWatcher(FileWatcher[T]):
    """Keeps what a configuration file says current (:class:`~fabricflow.filewatch.FileWatcher` with one of
    this module's loaders): a version that does not load leaves the last good one in ``value``, its problem
    in one line in ``last_error``."""

    def __init__(self, path: str | os.PathLike, loader: Callable[[str | os.PathLike], T], check_interval_s: float = 0.0,
                 initial: T | None = None):
        super().__init__(path, loader, check_interval_s, initial, errors=(ConfigFileError, InventoryError, ValueError))


class InventoryWatcher(FileWatcher[Inventory]):
    """Keeps an :class:`Inventory` current with its file (:class:`~fabricflow.filewatch.FileWatcher` with
    :func:`read_inventory`).

    ``maybe_reload(now_s)`` checks the file (at most every ``check_interval_s``) and reloads it when its
    modification time, size or inode changed. A new file that fails validation leaves the previous
    inventory in place; the problem (every line of it) is in ``last_error`` and counted in
    ``errors_total``. The first load (in the constructor) raises :class:`InventoryError` instead.
    """

    def __init__(self, path: str | os.PathLike, check_interval_s: float = 0.0):
        super().__init__(path, read_inventory, check_interval_s, errors=(InventoryError,), describe=str)

    @property
    def inventory(self) -> Inventory:
        return self.value
