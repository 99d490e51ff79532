"""The replay's cores: detector settings with ``--set`` overrides, inventory and policy, checked up front."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from processors.logic.core import CoreConfigError, ProcessorCore, engine_config

from .core import ReplayError


def parse_set(items: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``["incast.min_sources=3", ...]`` -> ``{"incast": {"min_sources": 3}}``; values are YAML scalars
    (``3``, ``0.5``, ``true``, ``[a, b]`` for tuples). Raises :class:`ReplayError` on a malformed item."""
    import yaml

    out: dict[str, dict[str, Any]] = {}
    for item in items or ():
        m = re.fullmatch(r"\s*([A-Za-z_][\w]*)\.([A-Za-z_][\w]*)\s*=(.*)", item, flags=re.S)
        if not m:
            raise ReplayError(f"--set {item!r}: expected DETECTOR.PARAMETER=VALUE, e.g. incast.min_sources=3")
        det, param, raw = m.group(1), m.group(2), m.group(3).strip()
        try:
            value = yaml.safe_load(raw) if raw else ""
        except yaml.YAMLError:
            raise ReplayError(f"--set {item!r}: value {raw!r} is not a YAML scalar") from None
        if isinstance(value, dict):
            raise ReplayError(f"--set {item!r}: value must be a scalar or a list, not a mapping")
        out.setdefault(det, {})[param] = value
    return out


def load_inventory(processors_settings, inventory=None):
    """``inventory`` (an ``Inventory`` or a path), else the settings' file, else an empty one; a bad file raises
    :class:`ReplayError` with its first problem."""
    from processors.config_files import read_inventory
    from processors.logic.enrich.inventory import Inventory, InventoryError

    src = inventory if inventory is not None else processors_settings.inventory
    if src is None:
        return Inventory.empty()
    if isinstance(src, Inventory):
        return src
    try:
        return read_inventory(src)
    except InventoryError as e:
        raise ReplayError(f"inventory: {str(e).splitlines()[0]}") from None


def core_factory_from(
    processors_settings,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    inventory=None,
    policy=None,
) -> Callable[[], ProcessorCore]:
    """A factory of identically configured cores (settings + ``--set`` overrides, inventory, policy, and the
    app-category rules of ``processors.categories``).

    ``inventory``: an ``Inventory``, a path, or None (the settings' file, else empty).
    ``policy``: a path, a dict, or None (the settings' file, else defaults).
    Files are read as the live worker reads them (:mod:`processors.config_files`). Problems raise
    :class:`ReplayError` with one line naming the culprit.
    """
    from processors.config_files import ConfigFileError, load_categories_file, load_policy_file
    from processors.logic.rules.policy import PolicyConfig, policy_config

    try:
        config = engine_config(processors_settings, {k: dict(v) for k, v in (overrides or {}).items()})
    except CoreConfigError as e:
        raise ReplayError(f"bad --set: {e}") from None
    inv = load_inventory(processors_settings, inventory)
    pol_src = policy if policy is not None else processors_settings.policy
    pol: PolicyConfig | None = None
    try:
        if isinstance(pol_src, Mapping):
            pol = policy_config(dict(pol_src))
        elif pol_src is not None:
            pol = load_policy_file(pol_src)
    except ConfigFileError as e:
        raise ReplayError(f"policy file {e}") from None
    except ValueError as e:  # pydantic ValidationError of a dict: one line
        raise ReplayError(f"policy: {' '.join(str(e).splitlines()[:3])}") from None

    rules = None  # app-category rules: the settings' file (processors.categories) as a live worker uses it
    if getattr(processors_settings, "categories", None):
        try:
            rules = load_categories_file(processors_settings.categories)
        except ConfigFileError as e:
            raise ReplayError(f"categories: {e}") from None

    def factory() -> ProcessorCore:
        return ProcessorCore(inv, config, pol, rules=rules, detector_protocols=tuple(processors_settings.detector_protocols),
                             observation=dict(processors_settings.observation_exporters))

    return factory
