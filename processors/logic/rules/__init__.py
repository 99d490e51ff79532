"""Policy and security rules, one module per family.

Every rule has the same small interface, used by :class:`.policy.PolicyEngine` (``policy.py``):

- ``names``: the alert rule names it reports;
- ``observe(ctx, now_ms) -> list[Condition]``: vectorised work on one enriched batch;
- ``evaluate(now_ms) -> list[Condition]``: timers (conditions that hold without new data);
- ``snapshot() -> dict`` / ``restore(dict)``: plain-data state.

Pure: no I/O, no clock, no logging.
"""

from .config import (
    CATEGORIES,
    RULE_NAMES,
    UNKNOWN_GROUP,
    AlertSettings,
    AllowRule,
    CheckpointConfig,
    CheckpointJob,
    ComputeInterfaces,
    ExfiltrationConfig,
    ExternalDependencyConfig,
    OffHoursConfig,
    PolicyConfig,
    Schedule,
    SegmentationConfig,
    StorageOnComputeConfig,
    UnregisteredConfig,
    policy_config,
)
from .egress import ExternalDependencyRule
from .exfiltration import ExfiltrationRule, OffHoursRule, off_hours_mask
from .segmentation import CompiledPolicy, SegmentationRule
from .storage import CheckpointRule, StorageOnComputeRule
from .unregistered import UnregisteredHostRule

__all__ = [
    "CATEGORIES", "RULE_NAMES", "UNKNOWN_GROUP", "AlertSettings", "AllowRule", "CheckpointConfig", "CheckpointJob",
    "ComputeInterfaces", "ExfiltrationConfig", "ExternalDependencyConfig", "OffHoursConfig", "PolicyConfig",
    "Schedule", "SegmentationConfig", "StorageOnComputeConfig", "UnregisteredConfig", "policy_config",
    "ExternalDependencyRule", "ExfiltrationRule", "OffHoursRule", "off_hours_mask", "CompiledPolicy",
    "SegmentationRule", "CheckpointRule", "StorageOnComputeRule", "UnregisteredHostRule",
]
