"""Flow enrichment: flow records -> ``flow_enriched`` records (inventory labels, job, app category).

Whole batches at a time: one longest-prefix match per address column gives an
inventory entry index, and every label is a ``take`` from per-entry arrays.
Jobs are resolved at each flow's ``time_start_ms``. Addresses not in the
inventory are kept and labelled (node "", group "unknown", rack/switch/job "")
and counted. No I/O, no clock.

The enricher also keeps, for its last batch, the codes every label column was
gathered with (entry indexes, job rows, category codes): :meth:`Enricher.label_codes`
hands them with the tables to the codec, which then encodes each distinct
label once instead of every record's string.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping

import numpy as np

from schemas.codec import StringTable
from schemas.columns import FLOW_DTYPE, dtype_for

from .categories import CategoryRules, categorize, category_table
from .inventory import Inventory
from .observation import ObservationPolicy

__all__ = ["Enricher", "ENRICHED_DTYPE", "LabeledFlows"]

ENRICHED_DTYPE = dtype_for("flow_enriched")
CHUNK = 8192  # records per internal slice
_FLOW_NAMES = list(FLOW_DTYPE.names)  # the flow fields of ENRICHED_DTYPE
# Rows of the per-batch code array: source and destination inventory entry (lookup + 1), their job rows, category.
_SRC, _DST, _SRC_JOB, _DST_JOB, _CATEGORY = _CODE_ROWS = range(5)
# label column -> (code row, table it is gathered from)
_LABEL_CODES = {
    "src_node": (_SRC, "node"), "dst_node": (_DST, "node"),
    "src_group": (_SRC, "group"), "dst_group": (_DST, "group"),
    "src_rack": (_SRC, "rack"), "dst_rack": (_DST, "rack"),
    "src_switch": (_SRC, "switch"), "dst_switch": (_DST, "switch"),
    "src_job": (_SRC_JOB, "job"), "dst_job": (_DST_JOB, "job"),
    "category": (_CATEGORY, "category"),
}  # fmt: skip


def label_tables(inv: Inventory) -> dict[str, np.ndarray]:
    """The object arrays the label columns are gathered from (names as in ``_LABEL_CODES``)."""
    return {"node": inv.entry_node, "group": inv.entry_group, "rack": inv.entry_rack, "switch": inv.entry_switch,
            "job": inv.job_table, "category": category_table()}  # fmt: skip


def _coded(codes: np.ndarray, tables: dict[str, StringTable]) -> dict[str, tuple[np.ndarray, StringTable]]:
    return {col: (codes[row], tables[name]) for col, (row, name) in _LABEL_CODES.items()}


class LabeledFlows:
    """Enriched flow records without string objects: the flow records, and the codes every label column is
    gathered with (:meth:`Enricher.enrich_labels`).

    Copying ``flow_enriched`` records is slow because of their 11 object fields
    (190 - 270 ns per record, against ~25 ns for a 208-byte flow record, now 252 bytes), so
    the worker's hot path passes these instead. They read like a
    ``flow_enriched`` array where the detectors, the policy and the codec read
    one: ``batch["field"]`` (a label column is gathered from its table on
    first use and kept), ``len``, ``dtype``, and a slice, boolean mask or index
    array gives the selected rows as another ``LabeledFlows``.
    :meth:`to_array` makes the structured array; :meth:`label_codes` gives the
    codes to ``schemas.codec.encode_batch`` and the detectors.
    """

    __slots__ = ("flows", "codes", "duplicate", "inventory", "tables", "_columns")
    dtype = ENRICHED_DTYPE

    def __init__(self, flows: np.ndarray, codes: np.ndarray, inventory: Inventory, tables: dict[str, StringTable],
                 duplicate: np.ndarray | None = None):
        if flows.dtype != FLOW_DTYPE or codes.shape != (len(_CODE_ROWS), len(flows)):
            raise ValueError("LabeledFlows needs flow_record rows and one code per row and code column")
        self.flows = flows  # flow_record rows
        self.codes = codes  # (5, n) intp: the rows of _CODE_ROWS
        # another observation point counts these packets (observation policy, processors/logic/enrich/observation.py)
        self.duplicate = duplicate if duplicate is not None else np.zeros(len(flows), dtype=bool)
        self.inventory = inventory  # the inventory the codes index
        self.tables = tables  # table name (as in _LABEL_CODES) -> StringTable
        self._columns: dict[str, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.flows)

    @property
    def shape(self) -> tuple[int]:
        return (len(self.flows),)

    def __getitem__(self, key):
        if isinstance(key, str):
            label = _LABEL_CODES.get(key)
            if label is None:
                return self.duplicate if key == "duplicate" else self.flows[key]
            col = self._columns.get(key)
            if col is None:
                row, name = label
                col = self._columns[key] = self.tables[name].strings.take(self.codes[row])
            return col
        if isinstance(key, slice):
            flows, codes, dup = self.flows[key], self.codes[:, key], self.duplicate[key]
        else:
            key = np.asarray(key)
            if key.dtype == bool:
                if key.shape != (len(self.flows),):
                    raise IndexError(f"boolean index of {key.shape} for {len(self.flows)} rows")
                flows, codes, dup = self.flows.compress(key), self.codes.compress(key, axis=1), self.duplicate.compress(key)
            elif key.dtype.kind in "iu" and key.ndim == 1:
                flows, codes, dup = self.flows.take(key), self.codes.take(key, axis=1), self.duplicate.take(key)
            else:
                raise IndexError(f"LabeledFlows rows are selected by a slice, a boolean mask or indices, not {key.dtype}")
        return LabeledFlows(flows, codes, self.inventory, self.tables, dup)

    def label_codes(self) -> dict[str, tuple[np.ndarray, StringTable]]:
        """Label column -> (codes, table) with ``self[column] == table.strings[codes]``."""
        return _coded(self.codes, self.tables)

    def to_array(self) -> np.ndarray:
        """The ``flow_enriched`` structured array of these rows."""
        n = len(self.flows)
        out = np.zeros(n, dtype=ENRICHED_DTYPE)  # much faster than np.empty with object fields
        # Column-at-a-time work on 296-byte records is cache-bound: go in cache-sized slices.
        for a in range(0, n, CHUNK):
            part = out[a:a + CHUNK]
            part[_FLOW_NAMES] = self.flows[a:a + CHUNK]  # one structured copy (by field position)
            for col, (row, name) in _LABEL_CODES.items():
                part[col] = self.tables[name].strings.take(self.codes[row, a:a + CHUNK])
        out["duplicate"] = self.duplicate
        return out


class Enricher:
    """Enriches flow batches with one inventory and one set of category rules.

    Counters: ``records_total``, ``unknown_src_total``, ``unknown_dst_total``,
    ``unknown_total`` (their sum, addresses of IP flows not in the inventory),
    and ``last_unknown`` for the most recent ``enrich`` call. Non-IP flows
    (``ip_version`` 0) are labelled unknown but not counted.
    """

    def __init__(self, inventory: Inventory | None = None, rules: CategoryRules | None = None,
                 observation: Mapping[str, str] | None = None):
        self.inventory = inventory if inventory is not None else Inventory.empty()
        self.rules = rules if rules is not None else CategoryRules()
        self.observation_roles = dict(observation or {})  # exporter address -> primary | secondary | ignore
        self._policy: ObservationPolicy | None = None
        self.records_total = 0
        self.unknown_src_total = 0
        self.unknown_dst_total = 0
        self.last_unknown = 0
        self.last_unknown_rows = np.zeros(0, dtype=np.uint8)  # per record of the last batch: unknown endpoints (0-2)
        # last batch: (weak reference to the array enrich returned, its label codes, the inventory used)
        self._last_codes: tuple[weakref.ref, np.ndarray, Inventory] | None = None
        self._tables: tuple[Inventory, dict[str, StringTable]] | None = None  # StringTables of one inventory

    @property
    def unknown_total(self) -> int:
        return self.unknown_src_total + self.unknown_dst_total

    def set_inventory(self, inventory: Inventory) -> None:
        """Switch to a new inventory (after a reload); counters carry on."""
        self.inventory = inventory

    def enrich(self, flows: np.ndarray) -> np.ndarray:
        """A ``flow_enriched`` array: every flow field copied, labels and category filled."""
        labeled = self.enrich_labels(flows)
        out = labeled.to_array()
        self._last_codes = (weakref.ref(out), labeled.codes, labeled.inventory)
        return out

    def enrich_labels(self, flows: np.ndarray) -> LabeledFlows:
        """The enrichment of ``flows`` without string objects (:class:`LabeledFlows`): what :meth:`enrich`
        computes, before the label strings are gathered into records. Counters as for :meth:`enrich`."""
        missing = [f for f in FLOW_DTYPE.names if flows.dtype.names is None or f not in flows.dtype.names]
        if missing:
            raise ValueError(f"flows lack fields {missing[:3]}{'...' if len(missing) > 3 else ''}")
        n = len(flows)
        rows = np.zeros(n, dtype=np.uint8)
        codes = np.empty((len(_CODE_ROWS), n), dtype=np.intp)
        inv = self.inventory
        unknown = 0
        for a in range(0, n, CHUNK):  # cache-sized slices: several passes over the same columns
            unknown += self._codes_into(flows[a:a + CHUNK], rows[a:a + CHUNK], codes[:, a:a + CHUNK])
        self.last_unknown_rows = rows
        self.last_unknown = unknown
        self.records_total += n
        if flows.dtype != FLOW_DTYPE:  # other field order or extra fields
            plain = np.empty(n, dtype=FLOW_DTYPE)
            for name in FLOW_DTYPE.names:
                plain[name] = flows[name]
            flows = plain
        duplicate = ~self._observation(inv).counted(flows, codes[_SRC], codes[_DST])
        return LabeledFlows(flows, codes, inv, self._string_tables(inv), duplicate)

    def _observation(self, inv: Inventory) -> ObservationPolicy:
        """The observation policy of ``inv``, compiled once per inventory."""
        if self._policy is None or self._policy.inventory is not inv:
            self._policy = ObservationPolicy(inv, self.observation_roles)
        return self._policy

    def label_codes(self, rows) -> dict[str, tuple[np.ndarray, StringTable]] | None:
        """Label column -> (codes, table) with ``rows[column] == table.strings[codes]``, or None.

        For a :class:`LabeledFlows`, its own codes. For a structured array, only
        when it is the very array the last :meth:`enrich` returned (its label
        columns must not have been changed since); None for any other array.
        """
        if isinstance(rows, LabeledFlows):
            return rows.label_codes()
        last = self._last_codes
        if last is None or last[0]() is not rows:
            return None
        _ref, codes, inv = last
        return _coded(codes, self._string_tables(inv))

    def _string_tables(self, inv: Inventory) -> dict[str, StringTable]:
        """StringTables of ``inv``'s label tables, made once per inventory."""
        if self._tables is None or self._tables[0] is not inv:
            self._tables = (inv, {name: StringTable(t) for name, t in label_tables(inv).items()})
        return self._tables[1]

    def _codes_into(self, flows: np.ndarray, unknown_rows: np.ndarray, codes: np.ndarray) -> int:
        """Fill ``codes`` (rows ``_CODE_ROWS``) and ``unknown_rows`` for ``flows``; return the unknown addresses."""
        inv = self.inventory
        src_addr = flows["src_addr"]
        dst_addr = flows["dst_addr"]
        src_idx = inv.lookup(src_addr)
        dst_idx = inv.lookup(dst_addr)
        s1 = np.add(src_idx, 1, out=codes[_SRC])  # entry table rows (0: unknown)
        d1 = np.add(dst_idx, 1, out=codes[_DST])
        t = flows["time_start_ms"]
        codes[_SRC_JOB] = inv.job_codes_at(inv.entry_node_id[s1], t)
        codes[_DST_JOB] = inv.job_codes_at(inv.entry_node_id[d1], t)

        is_ip = flows["ip_version"] != 0
        codes[_CATEGORY] = categorize(
            flows["ip_protocol"],
            flows["src_port"],
            flows["dst_port"],
            inv.entry_group_id[s1],
            inv.entry_group_id[d1],
            inv.groups,
            inv.in_cluster(src_addr, src_idx),
            inv.in_cluster(dst_addr, dst_idx),
            self.rules,
            is_ip,
        )

        u_src = is_ip & (src_idx < 0)
        u_dst = is_ip & (dst_idx < 0)
        unknown_rows += u_src
        unknown_rows += u_dst
        us = int(np.count_nonzero(u_src))
        ud = int(np.count_nonzero(u_dst))
        self.unknown_src_total += us
        self.unknown_dst_total += ud
        return us + ud

    # ---- helpers for detectors and link health

    def node_capacity_bps(self, names: Iterable[str] | np.ndarray) -> np.ndarray:
        """float64 NIC link capacity (bits/s) per node name; NaN when unknown."""
        return self.inventory.node_capacity_bps(names)

    @property
    def agent_switch(self) -> dict[bytes, str]:
        """16-byte sFlow agent address -> switch name."""
        return self.inventory.agent_switch

    def switch_for_agents(self, agent_addrs: np.ndarray) -> np.ndarray:
        """Object array of switch names for an (n, 16) agent address column ("" when unknown)."""
        return self.inventory.switch_for_agents(agent_addrs)

    def port_info(self, agent_addrs: np.ndarray, if_index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(peer names, configured speed bps or NaN) per (agent address, ifIndex)."""
        return self.inventory.port_info(agent_addrs, if_index)
