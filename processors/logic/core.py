"""The processor core: raw flow batches -> enrichment -> detectors -> policy, for one shard.

Used unchanged by the Faust workers (``processors/worker/``) and by replay
(``fabricflow replay``), so a replay of the same input reproduces the live
outputs. Pure: no clock (time comes in as ``tick(now_ms)``), no Kafka.

Outputs are :class:`Output` ``(kind, key, value)`` with kind in ``matrix
incast straggler link pattern alert``; values are dicts matching the kind's
Avro schema (docs/detectors.md).
"""

from __future__ import annotations

import dataclasses
import math
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from schemas.codec import Coded, coded_rows
from schemas.columns import PROTO_IPFIX, PROTO_NETFLOW5, PROTO_NETFLOW9, PROTO_SFLOW5, addr16

from .detectors.congestion import CongestionConfig
from .detectors.connstorm import ConnStormConfig
from .detectors.drops import dropped_jobs
from .detectors.fabric import FabricBalanceConfig
from .detectors.incast import IncastConfig
from .detectors.jobspread import JobSpreadConfig
from .detectors.visibility import VisibilityConfig
from .detectors.lbskew import LbSkewConfig
from .detectors.linkhealth import LinkHealthConfig
from .detectors.pattern import PatternConfig
from .detectors.storagebound import StorageBoundConfig
from .detectors.straggler import StragglerConfig
from .detectors.timeline import TimelineConfig
from .diagnosis.catalog import DiagnosisConfig
from .engine import Engine, EngineConfig, Output
from .enrich.categories import CategoryRules
from .enrich.enricher import Enricher, LabeledFlows
from .enrich.inventory import Inventory
from .params import ParamsError, build_params
from .rules.policy import PolicyEngine, policy_config
from .windows.matrix import MatrixConfig
from .windows.tumbling import WindowConfig
from .windows.watermark import ExporterWatermark

CORE_SNAPSHOT_VERSION = 1

_SECTIONS = {
    "incast": IncastConfig,
    "straggler": StragglerConfig,
    "matrix": MatrixConfig,
    "link": LinkHealthConfig,
    "pattern": PatternConfig,
    "lb_skew": LbSkewConfig,
    "storage_bound": StorageBoundConfig,
    "timeline": TimelineConfig,
    "congestion": CongestionConfig,
    "conn_storm": ConnStormConfig,
    "diagnosis": DiagnosisConfig,
    "fabric_balance": FabricBalanceConfig,
    "job_spread": JobSpreadConfig,
    "visibility": VisibilityConfig,
}


class CoreConfigError(ValueError):
    """Bad detector overrides; the message names the detector and parameter."""


#: Detector name in ``processors.detectors`` -> its parameter class (defaults and descriptions beside its code).
DETECTORS = _SECTIONS


def detector_params(processors_settings, overrides: dict[str, dict] | None = None) -> dict[str, object]:
    """Validated parameters of every detector: defaults, ``processors.detectors`` and ``overrides`` on top."""
    det = {k: dict(v) for k, v in (processors_settings.detectors or {}).items()}
    for name, params in (overrides or {}).items():
        det.setdefault(name, {}).update(params)
    unknown = set(det) - set(_SECTIONS)
    if unknown:
        raise CoreConfigError(f"processors.detectors.{sorted(unknown)[0]}: unknown detector (known: {', '.join(_SECTIONS)})")
    try:
        return {name: build_params(cls, det.get(name, {}), f"processors.detectors.{name}") for name, cls in _SECTIONS.items()}
    except ParamsError as e:
        raise CoreConfigError(str(e)) from None


def engine_config(processors_settings, overrides: dict[str, dict] | None = None) -> EngineConfig:
    """EngineConfig from ``processors`` settings plus per-detector overrides (replay: ``--set incast.min_sources=3``)."""
    p = processors_settings
    det = {k: dict(v) for k, v in (p.detectors or {}).items()}
    for name, params in (overrides or {}).items():
        det.setdefault(name, {}).update(params)
    window = WindowConfig(
        size_ms=int(p.window_s * 1000), lateness_ms=int(p.allowed_lateness_s * 1000), idle_close_s=float(p.idle_close_s)
    )
    parts = detector_params(p, overrides)
    if "default_capacity_bps" not in det.get("incast", {}):
        parts["incast"] = dataclasses.replace(parts["incast"], default_capacity_bps=p.default_capacity_bps)
    if "window_ms" not in det.get("incast", {}):
        parts["incast"] = dataclasses.replace(parts["incast"], window_ms=max(1, int(p.incast_window_s * 1000)))
    if "close_after_windows" not in det.get("incast", {}):
        quiet = max(1, math.ceil(p.incast_close_after_s * 1000 / parts["incast"].window_ms))
        parts["incast"] = dataclasses.replace(parts["incast"], close_after_windows=quiet)
    return EngineConfig(window=window, **parts)


@dataclass
class CoreStats:
    raw_records: int = 0
    counter_samples: int = 0
    discard_notifications: int = 0
    unknown_addresses: int = 0
    outputs: int = 0


class ProcessorCore:
    def __init__(
        self,
        inventory: Inventory | None = None,
        config: EngineConfig | None = None,
        policy=None,
        rules: CategoryRules | None = None,
        detector_protocols: tuple[str, ...] | list[str] | None = None,
        observation: dict[str, str] | None = None,
    ):
        self.inventory = inventory or Inventory.empty()
        self.enricher = Enricher(self.inventory, rules, observation)
        self.config = config or EngineConfig()
        caps = self.inventory.node_capacities()
        self.engine = Engine(self.config, capacity_bps=caps, switch_name=self.inventory.switch_name,
                             port_info=_port_info(self.inventory), node_job=_node_job(self.inventory),
                             node_port=self.inventory.node_ports().get)
        self.engine.set_inventory(self.inventory)
        self.policy = PolicyEngine(policy_config(policy) if policy is not None else None, self.inventory.cluster_ranges)
        self.rules = rules
        self.watermark_ms = 0  # the policy's: robust to one exporter's clock running ahead (windows/watermark.py)
        self._watermark = ExporterWatermark()
        self.stats = CoreStats()
        codes = {"sflow5": PROTO_SFLOW5, "netflow5": PROTO_NETFLOW5, "netflow9": PROTO_NETFLOW9, "ipfix": PROTO_IPFIX}
        wanted = set(detector_protocols) if detector_protocols is not None else set(codes)
        self._detector_codes = None if wanted >= set(codes) else np.array(sorted(codes[p] for p in wanted), dtype=np.int32)

    def set_inventory(self, inventory: Inventory) -> None:
        """Inventory reloaded: new lookups from now on; detector state is kept."""
        self.inventory = inventory
        self.enricher.set_inventory(inventory)
        self.engine.set_capacity(inventory.node_capacities())
        self.engine.link.switch_name = inventory.switch_name
        self.engine.link.node_job = _node_job(inventory)
        self.engine.link.set_port_info(_port_info(inventory))
        self.engine.congestion.node_port = self.engine.conn_storm.node_port = inventory.node_ports().get
        self.engine.set_inventory(inventory)

    def unregistered_sources(self, enriched) -> np.ndarray | None:
        """Rows (bool) whose source address is inside the cluster ranges but not in the inventory: the sources
        the unregistered-host rule reports; None when there is none (or no cluster ranges). For :func:`shard_of`."""
        inv = self.inventory
        if not inv.cluster_ranges or len(enriched) == 0:
            return None
        unknown = self.enricher.last_unknown_rows
        cand = np.flatnonzero(unknown) if len(unknown) == len(enriched) else np.arange(len(enriched))
        if not len(cand):
            return None
        src = np.ascontiguousarray(enriched["src_addr"][cand])
        idx = inv.lookup(src)
        hit = (idx < 0) & inv.in_cluster(src, idx)
        if not hit.any():
            return None
        mask = np.zeros(len(enriched), dtype=bool)
        mask[cand[hit]] = True
        return mask

    def set_policy(self, policy) -> None:
        """Policy reloaded (a PolicyConfig, dict or YAML text): new rules from now on, alert and rule state
        carried over where the new rules can take it (else they start fresh)."""
        engine = PolicyEngine(policy_config(policy), self.inventory.cluster_ranges)
        try:
            engine.restore(self.policy.snapshot())
        except (KeyError, TypeError, ValueError):
            engine = PolicyEngine(policy_config(policy), self.inventory.cluster_ranges)
        self.policy = engine

    def set_rules(self, rules: CategoryRules | None) -> None:
        """App-category rules reloaded: flows enriched from now on get categories by ``rules``."""
        self.rules = rules
        self.enricher.rules = rules if rules is not None else CategoryRules()

    # ------------------------------------------------------------------ data

    def enrich(self, flows: np.ndarray) -> np.ndarray:
        """The ``flow_enriched`` array of ``flows`` (counted in the stats)."""
        return self._counted(self.enricher.enrich, flows)

    def enrich_labels(self, flows: np.ndarray) -> LabeledFlows:
        """Same enrichment as :meth:`enrich`, as :class:`LabeledFlows` (no string objects gathered yet)."""
        return self._counted(self.enricher.enrich_labels, flows)

    def _counted(self, enrich, flows: np.ndarray):
        before = self.enricher.unknown_total
        out = enrich(flows)
        self.stats.unknown_addresses += self.enricher.unknown_total - before
        self.stats.raw_records += len(flows)
        return out

    def process_enriched(self, enriched: np.ndarray, labels: Coded | None = None) -> list[Output]:
        """Detectors and policy on an enriched batch. ``labels``: its ``Enricher.label_codes`` when another
        enricher made it (this core's own enricher is asked otherwise); they spare the detectors reading
        the string columns."""
        if len(enriched) == 0:
            return []
        interned = None
        if labels is None:
            labels = self.enricher.label_codes(enriched)
        # the traffic detectors see each packet once: counted records (observation policy) of the wanted protocols
        keep = ~np.asarray(enriched["duplicate"], dtype=bool)
        if self._detector_codes is not None:
            keep = keep & np.isin(enriched["export_protocol"], self._detector_codes)
        if keep.all():
            out = self.engine.process_flows(enriched, labels)
            if self.engine.last_codes is not None:  # policy reuses the engine's string codes of this very batch
                interned = (self.engine.last_codes, self.engine.interner.strings, self.engine.interner.index)
        else:
            out = self.engine.process_flows(enriched[keep], coded_rows(labels, keep))
        self.watermark_ms = self._watermark.observe(enriched[self.config.time_field], enriched["exporter_addr"])
        out.extend(Output("alert", a["dedup_key"], a) for a in self.policy.process(enriched, self.watermark_ms, interned))
        self.stats.outputs += len(out)
        return out

    def process_raw(self, flows: np.ndarray) -> tuple[LabeledFlows, list[Output]]:
        """Enrich and detect; the enrichment comes back as :class:`LabeledFlows` (``to_array()`` for records)."""
        enriched = self.enrich_labels(flows)
        return enriched, self.process_enriched(enriched)

    def adopt_enriched(self, enriched: np.ndarray | LabeledFlows, unknown_addresses: int) -> np.ndarray | LabeledFlows:
        """Stand-in for :meth:`enrich` when another core already enriched these raw records with the same inventory.

        ``unknown_addresses``: what that enrichment counted for exactly these records; the stats (part of the
        snapshot) then equal those of ``enrich`` on the raw records.
        """
        self.stats.unknown_addresses += int(unknown_addresses)
        self.stats.raw_records += len(enriched)
        return enriched

    def process_counters(self, counters: np.ndarray, message: np.ndarray | None = None, emit: bool = True) -> list[Output]:
        """Counter samples -> link health outputs; ``message``: the message number of each row when several
        counter messages come in one array (the same outputs as processing them one after the other).
        ``emit=False``: counters another shard owns (and reports): only the port state is updated, which
        storage_bound, the straggler / incast cause links and the live incast capacity read."""
        if not emit:
            self.engine.process_counters(counters, message, emit=False)
            return []
        self.stats.counter_samples += len(counters)
        out = self.engine.process_counters(counters, message)
        self.stats.outputs += len(out)
        return out

    def process_discards(self, discards: np.ndarray) -> int:
        """sFlow dropped-packet notifications (DISCARD_DTYPE) -> the drop reasons of their ports, which the link
        events of those ports carry (no output of their own); returns how many were attributed to a port. The
        exporter's shard applies them (the one that reports its link health)."""
        self.stats.discard_notifications += len(discards)
        if len(discards) == 0:
            return 0
        return self.engine.process_discards(discards, dropped_jobs(self.inventory, discards))

    def tick(self, now_ms: int) -> list[Output]:
        out = self.engine.tick(now_ms)
        if self.watermark_ms:
            out.extend(Output("alert", a["dedup_key"], a) for a in self.policy.tick(self.watermark_ms))
        self.stats.outputs += len(out)
        return out

    def flush(self) -> list[Output]:
        """End of a bounded input (replay): close every window."""
        out = self.engine.flush()
        if self.watermark_ms:
            out.extend(Output("alert", a["dedup_key"], a) for a in self.policy.tick(self.watermark_ms))
        return out

    # ------------------------------------------------------------------ state

    def snapshot(self) -> dict:
        return {
            "version": CORE_SNAPSHOT_VERSION,
            "engine": self.engine.snapshot(),
            "policy": self.policy.snapshot(),
            "watermark_ms": self.watermark_ms,
            "exporter_watermarks": self._watermark.snapshot(),
            "stats": dataclasses.asdict(self.stats),
        }

    def restore(self, snap: dict) -> None:
        if snap.get("version") != CORE_SNAPSHOT_VERSION:
            raise ValueError(f"unsupported core snapshot version {snap.get('version')!r}")
        self.engine.restore(snap["engine"])
        self.policy.restore(snap["policy"])
        self.watermark_ms = int(snap["watermark_ms"])
        self._watermark = ExporterWatermark()
        self._watermark.restore(snap.get("exporter_watermarks", {"value": self.watermark_ms}))
        self.stats = CoreStats(**snap["stats"])


def _port_info(inventory: Inventory):
    """(exporter text, ifIndex) -> (node behind the port, configured speed bit/s or NaN), from ``switches:``."""
    names = set(inventory.node_names)

    def info(exporter: str, if_index: int) -> tuple[str, float]:
        try:
            addr16(exporter)
        except ValueError:
            return "", math.nan
        peer, speed = inventory.port_info(np.frombuffer(addr16(exporter), np.uint8).reshape(1, 16),
                                          np.array([if_index], dtype=np.int64))
        p = str(peer[0] or "")
        return (p if p in names else ""), float(speed[0])
    return info


class _NodeJob:
    """(node, time ms) -> the node's job then ("" when none); :meth:`many` for many rows in one lookup."""

    __slots__ = ("inventory", "ids")

    def __init__(self, inventory: Inventory):
        self.inventory = inventory
        self.ids = {n: i for i, n in enumerate(inventory.node_names)}

    def __call__(self, node: str, t_ms: int) -> str:
        return self.many([node], [t_ms])[0]

    def many(self, nodes: list[str], t_ms) -> list[str]:
        if not len(nodes):
            return []
        get = self.ids.get
        nid = np.array([get(n, -1) if n else -1 for n in nodes], dtype=np.int64)
        jobs = self.inventory.jobs_at(nid, np.asarray(t_ms, dtype=np.int64))
        return [str(j or "") for j in jobs.tolist()]


def _node_job(inventory: Inventory) -> _NodeJob:
    """(node, time ms) -> the node's job then ("" when none)."""
    return _NodeJob(inventory)


def shard_of(enriched: np.ndarray | LabeledFlows, partitions: int, labels=None, by_src: np.ndarray | None = None
             ) -> np.ndarray:
    """Shard (partition) per enriched flow so each shard sees whole detector inputs.

    Key: the destination's job, else the destination node, else the destination
    address. Then every flow into one destination (incast), every intra-job
    flow (straggler, pattern: collectives stay inside a job) and every
    (src, dst) pair (matrix cells, segmentation) lands in one shard. Stable
    across processes (CRC32 of the key text, not Python's salted hash).
    Vectorised: one CRC32 per distinct key. ``labels``: the enricher's label
    codes of exactly these rows (``Enricher.label_codes``); the keys are then
    looked up per code instead of read from the string columns (a
    ``LabeledFlows`` brings its own).

    ``by_src`` (:meth:`ProcessorCore.unregistered_sources`): rows whose source
    is an unregistered in-cluster address go to that address's shard, the one
    its incoming flows go to: every sighting of an unregistered host is in one
    shard and its alert fires once, not once per shard (a flow between two
    unregistered hosts follows its source).
    """
    out = _shard_of(enriched, partitions, labels)
    if by_src is not None and partitions > 1 and len(out):
        rows = np.flatnonzero(by_src)
        if len(rows):
            out[rows] = _addr_shards(enriched["src_addr"][rows], partitions)
    return out


def _shard_of(enriched, partitions: int, labels=None) -> np.ndarray:
    n = len(enriched)
    if n == 0 or partitions <= 1:
        return np.zeros(n, dtype=np.int64)
    if labels is None and isinstance(enriched, LabeledFlows):
        labels = enriched.label_codes()
    if labels is not None and "dst_job" in labels and "dst_node" in labels:
        return _coded_shards(enriched, partitions, labels["dst_job"], labels["dst_node"])
    job = enriched["dst_job"]
    node = enriched["dst_node"]
    try:
        out, job_ok, job_null = _text_shards(job, partitions)
        by_node = np.flatnonzero(~job_ok & ~job_null)
        if len(by_node):
            node_h, node_ok, _ = _text_shards(node[by_node], partitions)
            out[by_node] = node_h
            job_ok[by_node] = node_ok  # now: row has a job or node key
    except (TypeError, ValueError, pa.ArrowException):  # not all str: the general path
        return _shard_of_objects(enriched, partitions)
    # no key (and a job of None: no key at all, as in the general path): the address decides
    missing = np.flatnonzero(~job_ok)
    if len(missing):
        out[missing] = _addr_shards(enriched["dst_addr"][missing], partitions)
    return out


def _text_shards(col: np.ndarray, partitions: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(CRC32 shard per row, row has a non-empty key, row is None) of a string column."""
    enc = pa.array(col, type=pa.string()).dictionary_encode()
    idx = enc.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    names = enc.dictionary.to_pylist()
    lut = np.array([zlib.crc32(u.encode()) % partitions for u in names] + [0], dtype=np.int64)
    valid = np.array([u != "" for u in names] + [False], dtype=bool)
    return lut[idx], valid[idx], idx < 0


_TABLE_SHARDS: dict[int, tuple] = {}  # id(label table) -> (table, partitions, shard / has-key / is-None per code)


def _table_shards(table, partitions: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(CRC32 shard, non-empty key, is None) per code of a label table (``StringTable``), cached per table."""
    hit = _TABLE_SHARDS.get(id(table))
    if hit is not None and hit[0] is table and hit[1] == partitions:
        return hit[2]
    names = table.strings.tolist()
    luts = (
        np.array([zlib.crc32(str(u).encode()) % partitions if u is not None else 0 for u in names], dtype=np.int64),
        np.array([u is not None and u != "" for u in names], dtype=bool),
        np.array([u is None for u in names], dtype=bool),
    )
    if len(_TABLE_SHARDS) >= 16:  # tables live as long as their inventory: a few at a time
        _TABLE_SHARDS.clear()
    _TABLE_SHARDS[id(table)] = (table, partitions, luts)
    return luts


def _coded_shards(enriched: np.ndarray, partitions: int, job: tuple, node: tuple) -> np.ndarray:
    """``shard_of`` from the label codes of the dst_job and dst_node columns."""
    (jc, jt), (nc, nt) = job, node
    j_shard, j_ok, j_null = (lut.take(jc) for lut in _table_shards(jt, partitions))
    n_shard, n_ok, _ = (lut.take(nc) for lut in _table_shards(nt, partitions))
    by_node = ~j_ok & ~j_null & n_ok
    out = np.where(by_node, n_shard, j_shard)
    missing = np.flatnonzero(~j_ok & ~by_node)
    if len(missing):
        out[missing] = _addr_shards(enriched["dst_addr"][missing], partitions)
    return out


def _addr_shards(addr: np.ndarray, partitions: int) -> np.ndarray:
    """CRC32 shard of each 16-byte address (one CRC per distinct address)."""
    rows = np.ascontiguousarray(addr, dtype=np.uint8).reshape(-1, 16)
    uniq, inv = np.unique(rows.view(np.dtype((np.void, 16))).ravel(), return_inverse=True)
    h = np.array([zlib.crc32(u.tobytes()) for u in uniq], dtype=np.int64) % partitions
    return h[inv.reshape(-1)]


def _shard_of_objects(enriched: np.ndarray, partitions: int) -> np.ndarray:
    """``shard_of`` for key columns holding other objects than str (compared and hashed as text)."""
    n = len(enriched)
    job = enriched["dst_job"]
    node = enriched["dst_node"]
    keys = np.where(job != "", job, np.where(node != "", node, None))
    out = np.empty(n, dtype=np.int64)
    missing = np.flatnonzero(keys == None)  # noqa: E711 (object array comparison)
    if len(missing):
        out[missing] = _addr_shards(enriched["dst_addr"][missing], partitions)
    have = np.flatnonzero(keys != None)  # noqa: E711
    if len(have):
        uniq, inv = np.unique(keys[have].astype(str), return_inverse=True)
        h = np.array([zlib.crc32(u.encode()) % partitions for u in uniq], dtype=np.int64)
        out[have] = h[inv]
    return out
