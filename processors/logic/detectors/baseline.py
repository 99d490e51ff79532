"""The shape the one-rule baseline detectors share (congestion, conn_storm, lb_skew, storage_bound).

Each judges a closed window's cells against its own baseline and raises one alert rule through an
:class:`~processors.logic.alerts.AlertManager` that fires at once (the detector counts its own evidence
windows) and resolves after the config's ``resolve_windows``. Pure logic: no clock, no Kafka.
"""

from __future__ import annotations

from collections.abc import Callable

from ..alerts import AlertManager, RuleAlertSettings

__all__ = ["OneRuleDetector", "LinkState", "NodePort"]

LinkState = Callable[[str, int], dict | None]  # (node, time ms) -> the node's switch port as last sampled, or None
NodePort = Callable[[str], str | None]  # node -> the inventory's ``switch/ifN`` of it, or None


def _no_link_state(node: str, now_ms: int) -> None:
    return None


def _no_node_port(node: str) -> None:
    return None


class OneRuleDetector:
    """Config, window size, the port look-ups and a one-rule alert manager (rule ``RULE``).

    ``config`` has ``resolve_windows`` and ``severity``. ``link_state`` is the link-health detector's
    :meth:`~processors.logic.detectors.linkhealth.LinkHealthDetector.node_state`; ``node_port`` the inventory's port
    of a node. Either may be left out (no port is known).
    """

    RULE: str

    def __init__(self, config, window_ms: int = 10_000, link_state: LinkState | None = None,
                 node_port: NodePort | None = None):
        self.config = config
        self.window_ms = int(window_ms)
        self.link_state = link_state or _no_link_state
        self.node_port = node_port or _no_node_port
        self.alerts = AlertManager({self.RULE: RuleAlertSettings(
            for_ms=0, resolve_after_ms=config.resolve_windows * self.window_ms, update_every=6,
            severity=config.severity)}, window_ms=self.window_ms)

    def port_text(self, node: str, now_ms: int) -> str:
        """``switch/ifN`` of the node's port: as last sampled (counters), else from the inventory, else ""."""
        st = self.link_state(node, now_ms)
        return f"{st['switch']}/if{st['if_index']}" if st is not None else (self.node_port(node) or "")
