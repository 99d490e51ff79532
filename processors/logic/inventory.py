"""Cluster inventory: addresses -> node, rack, ToR switch, group, jobs over time, switches.

Loads a YAML or CSV file (format in ``docs/inventory.md``), validates it with
pydantic models plus cross-checks (duplicate prefixes, unknown job nodes,
overlapping job memberships), and compiles it into numpy tables for the
vectorised lookups the enricher and detectors use. Problems are reported as
one :class:`InventoryError` listing every problem as ``<file>: <where>: <what>``.

:class:`InventoryWatcher` reloads the file when it changes; a bad new file is
reported and the previous inventory stays in use. File reads are the only I/O;
time comes in as an argument.
"""

from __future__ import annotations

import csv
import io
import ipaddress
import math
import os
import re
from collections.abc import Iterable, Sequence
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import yaml
from pydantic import AliasChoices, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from schemas.columns import addr16, addr_str

from .lpm import PrefixTable, parse_prefix, prefix_str

__all__ = [
    "Inventory",
    "InventoryError",
    "InventorySpec",
    "InventoryWatcher",
    "NodeSpec",
    "NetworkSpec",
    "JobSpec",
    "SwitchSpec",
    "PortSpec",
    "parse_bps",
    "UNKNOWN_GROUP",
    "EXTERNAL_AUTHORIZED_GROUP",
    "CSV_COLUMNS",
    "CSV_KINDS",
]

UNKNOWN_GROUP = "unknown"
EXTERNAL_AUTHORIZED_GROUP = "external-authorized"

# Job validity times are clipped to [0, 2**43) ms (1970 .. year 2248) so that
# (node id, time) fits one int64 search key.
_TIME_BITS = 43
_TIME_MAX = (1 << _TIME_BITS) - 1
_MAX_NODES = 1 << 20


class InventoryError(ValueError):
    """An inventory file or dict is invalid; ``problems`` lists each problem (without the source prefix)."""

    def __init__(self, source: str, problems: Sequence[str]):
        self.source = source
        self.problems = list(problems)
        super().__init__("\n".join(f"{source}: {p}" for p in self.problems))


# ---------------------------------------------------------------- value parsers

_BPS_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)\s*(bps|b/s|bit/s|bits/s)?\s*$", re.IGNORECASE)
_BPS_UNIT = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}


def parse_bps(value: Any) -> int:
    """Bits per second from an int or a string like ``25G``, ``100Gbps``, ``400G``, ``10 Mb/s`` (SI units)."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a link speed")
    if isinstance(value, int):
        bps = value
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} is not a link speed")
        bps = int(round(value))
    elif isinstance(value, str):
        m = _BPS_RE.match(value)
        if not m:
            raise ValueError(f"{value!r} is not a link speed (use bits/s or e.g. 25G, 100Gbps, 400G)")
        bps = int(round(float(m.group(1)) * _BPS_UNIT[m.group(2).lower()]))
    else:
        raise ValueError(f"{value!r} is not a link speed")
    if bps <= 0:
        raise ValueError(f"link speed must be positive, got {value!r}")
    return bps


def _prefix(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not an IP address or CIDR (must be a string)")
    text = value.strip()
    try:
        net = ipaddress.ip_network(text, strict=False)
    except ValueError:
        raise ValueError(f"{value!r} is not an IP address or CIDR") from None
    if int(net.network_address) != int(ipaddress.ip_interface(text).ip):
        raise ValueError(f"{value!r} has host bits set (network is {net})")
    return str(net)


def _host(value: Any) -> str:
    text = _prefix(value)
    net = ipaddress.ip_network(text)
    if net.num_addresses != 1:
        raise ValueError(f"{value!r} is a network; expected a single IP address")
    return text


def _name(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.strip() or any(c.isspace() for c in value.strip()):
        raise ValueError(f"{value!r} is not a valid name (non-empty, no spaces)")
    return value.strip()


def _label(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a string")
    return value.strip()


_GROUP_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


def _group(value: Any) -> str:
    if not isinstance(value, str) or not _GROUP_RE.match(value.strip()):
        raise ValueError(f"{value!r} is not a valid group name (lower-case letters, digits, '.', '_', '-')")
    if value.strip() == UNKNOWN_GROUP:
        raise ValueError(f"group {UNKNOWN_GROUP!r} is reserved for addresses not in the inventory")
    return value.strip()


def _timestamp(value: Any) -> datetime:
    if isinstance(value, datetime):
        dt = value
    elif isinstance(value, date):
        dt = datetime(value.year, value.month, value.day)
    elif isinstance(value, str):
        try:
            dt = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValueError(f"{value!r} is not an ISO 8601 timestamp") from None
    else:
        raise ValueError(f"{value!r} is not an ISO 8601 timestamp")
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt


def _one_or_list(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


def _ports_by_index(value: Any) -> Any:
    """Ports as a list of ``{if_index, peer|node, speed}`` -> mapping ifIndex -> port."""
    if not isinstance(value, list):
        return value
    out: dict[Any, Any] = {}
    for i, item in enumerate(value):
        if not isinstance(item, dict) or "if_index" not in item:
            raise ValueError(f"list item {i} has no if_index")
        key = item["if_index"]
        if key in out:
            raise ValueError(f"list item {i} repeats if_index {key!r}")
        out[key] = {k: v for k, v in item.items() if k != "if_index"}
    return out


Prefix = Annotated[str, BeforeValidator(_prefix)]
HostAddr = Annotated[str, BeforeValidator(_host)]
Name = Annotated[str, BeforeValidator(_name)]
Label = Annotated[str, BeforeValidator(_label)]
Group = Annotated[str, BeforeValidator(_group)]
Bps = Annotated[int, BeforeValidator(parse_bps)]
Timestamp = Annotated[datetime, BeforeValidator(_timestamp)]


# ---------------------------------------------------------------- models

_CFG = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class NodeSpec(BaseModel):
    """A named host: its addresses (IPs or CIDRs), group, rack, ToR switch and NIC link capacity."""

    model_config = _CFG
    name: Name
    addresses: Annotated[
        list[Prefix],
        BeforeValidator(_one_or_list),
        Field(min_length=1, validation_alias=AliasChoices("addresses", "ips")),
    ]
    group: Group
    rack: Label = ""
    switch: Label = ""
    capacity: Bps | None = None


class NetworkSpec(BaseModel):
    """An address range without a node name (e.g. a storage subnet)."""

    model_config = _CFG
    prefix: Prefix
    group: Group
    rack: Label = ""
    switch: Label = ""
    capacity: Bps | None = None


class JobSpec(BaseModel):
    """A named set of nodes, valid from ``from`` (inclusive) until ``until`` (exclusive); open ends allowed."""

    model_config = _CFG
    name: Name
    nodes: Annotated[list[Name], BeforeValidator(_one_or_list), Field(min_length=1)]
    from_: Timestamp | None = Field(default=None, alias="from")
    until: Timestamp | None = None


class PortSpec(BaseModel):
    """One switch port: the peer on the other end and the configured speed."""

    model_config = _CFG
    peer: Annotated[Label, Field(validation_alias=AliasChoices("peer", "node"))] = ""
    speed: Bps | None = None


class SwitchSpec(BaseModel):
    """A switch: sFlow agent / management addresses and optional ports by ifIndex."""

    model_config = _CFG
    name: Name
    agents: Annotated[
        list[HostAddr], BeforeValidator(_one_or_list), Field(validation_alias=AliasChoices("agents", "agent"))
    ] = []
    rack: Label = ""
    ports: Annotated[dict[Annotated[int, Field(ge=0, le=0xFFFFFFFF)], PortSpec], BeforeValidator(_ports_by_index)] = {}


class InventorySpec(BaseModel):
    """The whole inventory file."""

    model_config = _CFG
    version: Literal[1] = 1
    cluster_ranges: Annotated[list[Prefix], BeforeValidator(_one_or_list)] = []
    external_authorized: Annotated[list[Prefix], BeforeValidator(_one_or_list)] = []
    nodes: list[NodeSpec] = []
    networks: list[NetworkSpec] = []
    jobs: list[JobSpec] = []
    switches: list[SwitchSpec] = []
    simulation: Any = Field(default=None, description="ignored: simulator scenario files double as inventories")


# ---------------------------------------------------------------- error locations

_NAMED_SECTIONS = {"nodes": "name", "jobs": "name", "switches": "name", "networks": "prefix"}
_CSV_COLUMN_OF = {
    "nodes": {"name": "node", "addresses": "address"},
    "networks": {"prefix": "address"},
    "jobs": {"name": "job", "nodes": "node"},
    "switches": {"name": "switch", "agents": "address", "peer": "node"},
    "cluster_ranges": {},
    "external_authorized": {},
}


class _Locator:
    """Renders a pydantic-style location tuple.

    YAML/dict: ``nodes[2] (gpu-03).group``; CSV: ``line 7: column 'group'``.
    """

    def __init__(self, data: Any, csv_lines: dict[tuple, int] | None = None):
        self.data = data
        self.csv_lines = csv_lines

    def __call__(self, loc: tuple) -> str:
        if self.csv_lines is not None:
            return self._csv(loc)
        out = ""
        for i, part in enumerate(loc):
            if isinstance(part, int):
                out += f"[{part}]"
                if i == 1 and loc[0] in _NAMED_SECTIONS:
                    label = self._label(loc[0], part)
                    if label:
                        out += f" ({label})"
            else:
                out += ("." if out else "") + str(part)
        return out

    def _label(self, section: str, index: int) -> str:
        try:
            v = self.data[section][index].get(_NAMED_SECTIONS[section])
        except Exception:
            return ""
        return v if isinstance(v, str) else ""

    def _csv(self, loc: tuple) -> str:
        line = None
        for k in range(len(loc), 0, -1):
            line = self.csv_lines.get(tuple(loc[:k]))
            if line is not None:
                break
        where = f"line {line}" if line is not None else "file"
        section = loc[0] if loc else ""
        names = [p for p in loc[1:] if isinstance(p, str)]
        if section in ("cluster_ranges", "external_authorized"):
            col = "address"
        elif section == "switches" and len(loc) >= 4 and loc[2] == "ports":
            col = "if_index" if len(loc) == 4 else _CSV_COLUMN_OF["switches"].get(str(loc[4]), str(loc[4]))
        elif names:
            col = _CSV_COLUMN_OF.get(section, {}).get(names[-1], names[-1])
        else:
            col = ""
        return f"{where}: column {col!r}" if col else where


def _by_line(problems: list[str]) -> list[str]:
    """CSV problems in file order (stable; problems without a line number last)."""

    def key(p: str) -> int:
        m = re.match(r"line (\d+)", p)
        return int(m.group(1)) if m else 1 << 62

    return sorted(problems, key=key)


def _pydantic_problems(err: ValidationError, locate: _Locator, is_csv: bool) -> list[str]:
    out = []
    for e in err.errors():
        loc = tuple(e["loc"])
        kind = e["type"]
        if kind == "missing":
            msg = "required value missing" if is_csv else "required key missing"
        elif kind == "extra_forbidden":
            msg = "unknown key"
        elif kind == "value_error" and "error" in e.get("ctx", {}):
            msg = str(e["ctx"]["error"])
        elif loc and loc[-1] == "[key]":
            loc = loc[:-1]
            msg = f"port key {e['input']!r} is not an ifIndex (integer 0..4294967295)"
        elif kind == "literal_error" and loc == ("version",):
            msg = f"unsupported version {e['input']!r} (expected 1)"
        else:
            msg = f"{e['msg']} (got {e['input']!r})"
        where = locate(loc)
        out.append(f"{where}: {msg}" if where else msg)
    return out


# ---------------------------------------------------------------- file readers

CSV_COLUMNS = (
    "kind", "address", "node", "group", "rack", "switch", "capacity", "job", "from", "until", "if_index", "speed",
)
CSV_KINDS = {
    "host": {"address", "node", "group", "rack", "switch", "capacity"},
    "cluster_range": {"address"},
    "external_authorized": {"address"},
    "job": {"job", "node", "from", "until"},
    "switch_agent": {"switch", "address", "rack"},
    "switch_port": {"switch", "if_index", "node", "speed"},
}


def _read_yaml(text: str, source: str) -> Any:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise InventoryError(source, [f"{where}YAML syntax error: {problem}"]) from None
    if data is None:
        raise InventoryError(source, ["file is empty"])
    if not isinstance(data, dict):
        raise InventoryError(source, [f"top level must be a mapping, got {type(data).__name__}"])
    return data


def _read_csv(text: str, source: str) -> tuple[dict, dict[tuple, int]]:
    """CSV rows -> the same dict shape as the YAML file, plus dict location -> line number."""
    if not text.strip():
        raise InventoryError(source, ["file is empty (expected a header line)"])
    lines = [("\n" if ln.lstrip().startswith("#") else ln) for ln in io.StringIO(text)]
    reader = csv.reader(lines)
    problems: list[str] = []
    header: list[str] | None = None
    for row in reader:
        if row:
            header = [h.strip().lower() for h in row]
            header_line = reader.line_num
            break
    if header is None:
        raise InventoryError(source, ["file is empty (expected a header line)"])
    for h in header:
        if h not in CSV_COLUMNS:
            problems.append(f"line {header_line}: unknown column {h!r} (known columns: {', '.join(CSV_COLUMNS)})")
    if len(set(header)) != len(header):
        problems.append(f"line {header_line}: repeated column name in header")
    if problems:
        raise InventoryError(source, problems)

    data: dict[str, Any] = {}
    at: dict[tuple, int] = {}
    node_pos: dict[str, int] = {}
    job_pos: dict[tuple, int] = {}
    switch_pos: dict[str, int] = {}

    def switch_entry(name: str, line: int) -> int:
        if name not in switch_pos:
            sw = data.setdefault("switches", [])
            switch_pos[name] = len(sw)
            sw.append({"name": name, "agents": [], "ports": {}})
            at[("switches", switch_pos[name])] = line
        return switch_pos[name]

    for row in reader:
        if not row or all(not c.strip() for c in row):
            continue
        line = reader.line_num
        if len(row) > len(header):
            problems.append(f"line {line}: {len(row)} cells but the header has {len(header)} columns")
            continue
        cells = {h: (row[i].strip() if i < len(row) else "") for i, h in enumerate(header)}
        kind = cells.get("kind", "") or "host"
        if kind not in CSV_KINDS:
            problems.append(
                f"line {line}: column 'kind': unknown kind {kind!r} (expected one of {', '.join(CSV_KINDS)})"
            )
            continue
        extra = [h for h, v in cells.items() if v and h != "kind" and h not in CSV_KINDS[kind]]
        if extra:
            problems.append(f"line {line}: column {extra[0]!r} does not apply to kind {kind!r}")
            continue
        c = {h: v for h, v in cells.items() if v}
        if kind == "host":
            if "node" in c:
                name = c["node"]
                if name not in node_pos:
                    nodes = data.setdefault("nodes", [])
                    node_pos[name] = len(nodes)
                    nodes.append({"name": name, "addresses": []})
                    at[("nodes", node_pos[name])] = line
                i = node_pos[name]
                node = data["nodes"][i]
                bad = False
                for col in ("group", "rack", "switch", "capacity"):
                    if col in c:
                        if col in node and node[col] != c[col]:
                            problems.append(
                                f"line {line}: column {col!r}: {c[col]!r} conflicts with {node[col]!r} "
                                f"given for node {name!r} on line {at[('nodes', i, col)]}"
                            )
                            bad = True
                        elif col not in node:
                            node[col] = c[col]
                            at[("nodes", i, col)] = line
                if bad:
                    continue
                if "address" in c:
                    at[("nodes", i, "addresses", len(node["addresses"]))] = line
                    node["addresses"].append(c["address"])
                else:
                    problems.append(f"line {line}: column 'address': required value missing")
            else:
                nets = data.setdefault("networks", [])
                at[("networks", len(nets))] = line
                nets.append({("prefix" if k == "address" else k): v for k, v in c.items() if k != "kind"})
        elif kind in ("cluster_range", "external_authorized"):
            key = "cluster_ranges" if kind == "cluster_range" else "external_authorized"
            lst = data.setdefault(key, [])
            if "address" not in c:
                problems.append(f"line {line}: column 'address': required value missing")
                continue
            at[(key, len(lst))] = line
            lst.append(c["address"])
        elif kind == "job":
            jkey = (c.get("job", ""), c.get("from", ""), c.get("until", ""))
            if jkey not in job_pos:
                jobs = data.setdefault("jobs", [])
                job_pos[jkey] = len(jobs)
                job = {"nodes": []}
                for col, field in (("job", "name"), ("from", "from"), ("until", "until")):
                    if col in c:
                        job[field] = c[col]
                jobs.append(job)
                at[("jobs", job_pos[jkey])] = line
            j = job_pos[jkey]
            if "node" not in c:
                problems.append(f"line {line}: column 'node': required value missing")
                continue
            at[("jobs", j, "nodes", len(data["jobs"][j]["nodes"]))] = line
            data["jobs"][j]["nodes"].append(c["node"])
        else:
            if "switch" not in c:
                problems.append(f"line {line}: column 'switch': required value missing")
                continue
            s = switch_entry(c["switch"], line)
            sw = data["switches"][s]
            if kind == "switch_agent":
                if "rack" in c:
                    if sw.get("rack", c["rack"]) != c["rack"]:
                        problems.append(
                            f"line {line}: column 'rack': {c['rack']!r} conflicts with {sw['rack']!r} "
                            f"given for switch {c['switch']!r} on line {at[('switches', s, 'rack')]}"
                        )
                        continue
                    if "rack" not in sw:
                        sw["rack"] = c["rack"]
                        at[("switches", s, "rack")] = line
                if "address" not in c:
                    problems.append(f"line {line}: column 'address': required value missing")
                    continue
                at[("switches", s, "agents", len(sw["agents"]))] = line
                sw["agents"].append(c["address"])
            else:
                if "if_index" not in c:
                    problems.append(f"line {line}: column 'if_index': required value missing")
                    continue
                key = c["if_index"]
                norm = str(int(key)) if key.isdigit() else key
                if any((str(int(k)) if k.isdigit() else k) == norm for k in sw["ports"]):
                    problems.append(
                        f"line {line}: column 'if_index': port {key} of switch {c['switch']!r} "
                        f"already given on line {at[('switches', s, 'ports', norm)]}"
                    )
                    continue
                at[("switches", s, "ports", key)] = line
                at[("switches", s, "ports", norm)] = line
                if key.isdigit():
                    at[("switches", s, "ports", int(key))] = line
                sw["ports"][key] = {k: v for k, v in (("peer", c.get("node")), ("speed", c.get("speed"))) if v}
    if problems:
        raise InventoryError(source, problems)
    return data, at


# ---------------------------------------------------------------- compiled inventory


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _to_ms(dt: datetime | None, default: int) -> int:
    if dt is None:
        return default
    ms = (dt - _EPOCH) // timedelta(milliseconds=1)
    return min(max(ms, 0), _TIME_MAX + 1)


class Inventory:
    """A validated inventory compiled into lookup tables.

    Entry tables (``entry_*``) have one row per address/prefix plus a leading
    "unknown" row, so ``table[lookup(addrs) + 1]`` labels unknown addresses.
    """

    def __init__(self, spec: InventorySpec, source: str = "<dict>", _locate: _Locator | None = None):
        locate = _locate or _Locator(spec.model_dump(by_alias=True))
        problems: list[str] = []
        self.spec = spec
        self.source = source

        # nodes
        self.node_names: list[str] = [n.name for n in spec.nodes]
        seen: dict[str, int] = {}
        for i, n in enumerate(spec.nodes):
            if n.name in seen:
                problems.append(f"{locate(('nodes', i, 'name'))}: duplicate node name {n.name!r} "
                                f"(also at {locate(('nodes', seen[n.name]))})")
            else:
                seen[n.name] = i
        if len(spec.nodes) >= _MAX_NODES:
            problems.append(f"too many nodes ({len(spec.nodes)}, limit {_MAX_NODES - 1})")
        node_id = seen

        # address entries: nodes, networks, external_authorized
        prefixes: list[tuple[int, int]] = []
        rows: list[tuple[str, str, str, str, int, float]] = []
        where: dict[tuple[int, int], tuple] = {}

        def add(loc: tuple, text: str, row: tuple) -> None:
            p = parse_prefix(text)
            if p in where:
                problems.append(f"{locate(loc)}: prefix {prefix_str(*p)} is already used at {locate(where[p])}")
                return
            where[p] = loc
            prefixes.append(p)
            rows.append(row)

        for i, n in enumerate(spec.nodes):
            cap = float(n.capacity) if n.capacity else math.nan
            for j, a in enumerate(n.addresses):
                add(("nodes", i, "addresses", j), a, (n.name, n.group, n.rack, n.switch, node_id.get(n.name, -1), cap))
        for i, net in enumerate(spec.networks):
            cap = float(net.capacity) if net.capacity else math.nan
            add(("networks", i, "prefix"), net.prefix, ("", net.group, net.rack, net.switch, -1, cap))
        for i, a in enumerate(spec.external_authorized):
            add(("external_authorized", i), a, ("", EXTERNAL_AUTHORIZED_GROUP, "", "", -1, math.nan))

        # jobs
        memberships: dict[int, list[tuple[int, int, str, int]]] = {}
        for i, job in enumerate(spec.jobs):
            t0 = min(_to_ms(job.from_, 0), _TIME_MAX)
            t1 = _to_ms(job.until, _TIME_MAX + 1)
            valid = True
            if job.from_ is not None and job.until is not None and job.until <= job.from_:
                problems.append(f"{locate(('jobs', i, 'until'))}: until ({job.until.isoformat()}) "
                                f"is not after from ({job.from_.isoformat()})")
                valid = False
            for name in dict.fromkeys(job.nodes):
                if name not in node_id:
                    problems.append(f"{locate(('jobs', i, 'nodes', job.nodes.index(name)))}: unknown node {name!r}")
                elif valid:
                    memberships.setdefault(node_id[name], []).append((t0, t1, job.name, i))
        mem_rows = []
        for nid, lst in memberships.items():
            lst.sort()
            for (_, a1, _, ai), (b0, _, _, bi) in zip(lst, lst[1:]):
                if b0 < a1:
                    problems.append(
                        f"{locate(('jobs', bi))}: node {self.node_names[nid]!r} is also in "
                        f"{locate(('jobs', ai))} at an overlapping time"
                    )
            mem_rows.extend((nid, t0, t1, name) for t0, t1, name, _ in lst)

        # switches
        sw_seen: dict[str, int] = {}
        agent_rows: list[tuple[int, int]] = []
        agent_switch: list[int] = []
        agent_where: dict[tuple[int, int], tuple] = {}
        for i, sw in enumerate(spec.switches):
            if sw.name in sw_seen:
                problems.append(f"{locate(('switches', i, 'name'))}: duplicate switch name {sw.name!r} "
                                f"(also at {locate(('switches', sw_seen[sw.name]))})")
                continue
            sw_seen[sw.name] = i
            for j, a in enumerate(sw.agents):
                p = parse_prefix(a)
                loc = ("switches", i, "agents", j)
                if p in agent_where:
                    problems.append(f"{locate(loc)}: agent address {prefix_str(*p)} is already used at "
                                    f"{locate(agent_where[p])}")
                    continue
                agent_where[p] = loc
                agent_rows.append(p)
                agent_switch.append(len(sw_seen) - 1)

        if problems:
            raise InventoryError(source, _by_line(problems) if locate.csv_lines is not None else problems)

        # ---- compile
        self.lpm = PrefixTable(prefixes)
        self.entry_prefixes = [prefix_str(*p) for p in prefixes]
        self.entry_node = np.array([""] + [r[0] for r in rows], dtype=object)
        self.entry_group = np.array([UNKNOWN_GROUP] + [r[1] for r in rows], dtype=object)
        self.entry_rack = np.array([""] + [r[2] for r in rows], dtype=object)
        self.entry_switch = np.array([""] + [r[3] for r in rows], dtype=object)
        self.entry_node_id = np.array([-1] + [r[4] for r in rows], dtype=np.int32)
        self.entry_capacity_bps = np.array([math.nan] + [r[5] for r in rows], dtype=np.float64)
        self.groups: list[str] = [UNKNOWN_GROUP] + sorted({r[1] for r in rows})
        gid = {g: i for i, g in enumerate(self.groups)}
        self.entry_group_id = np.array([gid[g] for g in self.entry_group], dtype=np.int32)

        ranges = list(dict.fromkeys(parse_prefix(c) for c in spec.cluster_ranges))
        self.cluster_ranges = [prefix_str(*p) for p in ranges]
        self._cluster = PrefixTable(ranges) if ranges else None
        # per entry: 1 = wholly inside a cluster range, 0 = wholly outside, -1 = partly (look up per address)
        status = [-1]
        for v, L in prefixes:
            st = 0
            for rv, rl in ranges:
                if rl <= L and (v >> (128 - rl)) == (rv >> (128 - rl)):
                    st = 1
                    break
                if rl > L and (rv >> (128 - L)) == (v >> (128 - L)):
                    st = -1
            status.append(st)
        self._entry_inside = np.array(status, dtype=np.int8)

        # nodes by name (sorted, for vectorised name lookups)
        node_caps = {}
        for n in spec.nodes:
            node_caps.setdefault(n.name, float(n.capacity) if n.capacity else math.nan)
        order = sorted(node_caps)
        self._node_sorted = np.array(order, dtype=object)
        self._node_sorted_cap = np.array([node_caps[k] for k in order], dtype=np.float64)

        # job memberships keyed by (node id << 43 | from_ms)
        mem_rows.sort(key=lambda r: (r[0], r[1]))
        self._job_keys = np.array([(nid << _TIME_BITS) | t0 for nid, t0, _, _ in mem_rows], dtype=np.int64)
        self._job_node = np.array([r[0] for r in mem_rows], dtype=np.int64)
        self._job_until = np.array([r[2] for r in mem_rows], dtype=np.int64)
        self._job_name = np.array([r[3] for r in mem_rows] + [""], dtype=object)
        self._job_from = self._job_keys & _TIME_MAX
        # node id -> its only membership row; -1 none, -2 several (looked up by time)
        only = np.full(len(self.node_names), -1, dtype=np.int64)
        if len(mem_rows):
            nodes, first, count = np.unique(self._job_node, return_index=True, return_counts=True)
            only[nodes] = np.where(count == 1, first, -2)
        self._job_only = only
        self.job_names: list[str] = sorted({j.name for j in spec.jobs})

        # switches: agent address -> switch, (switch, ifIndex) -> port
        self.switch_names: list[str] = list(sw_seen)
        self._agents = PrefixTable(agent_rows)
        self._agent_switch = np.array(agent_switch, dtype=np.int32)
        self._switch_tab = np.array(self.switch_names + [""], dtype=object)
        self.agent_switch: dict[bytes, str] = {
            (v).to_bytes(16, "big"): self.switch_names[s] for (v, _), s in zip(agent_rows, agent_switch)
        }
        port_rows = []
        for s, name in enumerate(self.switch_names):
            for if_index, port in spec.switches[sw_seen[name]].ports.items():
                port_rows.append(((s << 32) | if_index, port.peer, float(port.speed) if port.speed else math.nan))
        port_rows.sort(key=lambda r: r[0])
        self._port_keys = np.array([r[0] for r in port_rows], dtype=np.int64)
        self._port_peer = np.array([r[1] for r in port_rows] + [""], dtype=object)
        self._port_speed = np.array([r[2] for r in port_rows] + [math.nan], dtype=np.float64)

    # ---- construction

    @classmethod
    def from_dict(cls, data: Any, source: str = "<dict>", _csv_lines: dict[tuple, int] | None = None) -> Inventory:
        """Validate a dict of the YAML shape; raises :class:`InventoryError`."""
        if not isinstance(data, dict):
            raise InventoryError(source, [f"top level must be a mapping, got {type(data).__name__}"])
        locate = _Locator(data, _csv_lines)
        try:
            spec = InventorySpec.model_validate(data)
        except ValidationError as err:
            problems = _pydantic_problems(err, locate, _csv_lines is not None)
            raise InventoryError(source, _by_line(problems) if _csv_lines is not None else problems) from None
        return cls(spec, source, locate)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Inventory:
        """Load a ``.yaml``/``.yml`` or ``.csv`` inventory file; raises :class:`InventoryError`."""
        source = str(path)
        suffix = Path(path).suffix.lower()
        if suffix not in (".yaml", ".yml", ".csv"):
            problem = f"unsupported inventory format {suffix or '(none)'!r} (use .yaml, .yml or .csv)"
            raise InventoryError(source, [problem])
        try:
            raw = Path(path).read_bytes()
        except OSError as exc:
            raise InventoryError(source, [f"cannot read file: {exc.strerror or exc}"]) from None
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise InventoryError(source, [f"not UTF-8 text (byte offset {exc.start})"]) from None
        if suffix == ".csv":
            data, lines = _read_csv(text, source)
            return cls.from_dict(data, source, lines)
        return cls.from_dict(_read_yaml(text, source), source)

    @classmethod
    def empty(cls) -> Inventory:
        """An inventory with nothing in it: every address is unknown."""
        return cls(InventorySpec(), "<empty>")

    # ---- lookups (all vectorised)

    @property
    def n_entries(self) -> int:
        """Number of address entries (node addresses, networks, external_authorized ranges)."""
        return len(self.entry_prefixes)

    def node_capacities(self) -> dict[str, float]:
        """Node name -> NIC capacity in bits/s, for nodes that have one."""
        return {n.name: float(n.capacity) for n in self.spec.nodes if n.capacity}

    def switch_name(self, agent: str | bytes) -> str:
        """Switch name of one agent address (text, 4 or 16 bytes); the address text when unknown."""
        key = addr16(agent)
        return self.agent_switch.get(key) or addr_str(key)

    def lookup(self, addrs: np.ndarray) -> np.ndarray:
        """int32 entry index per address of an (n, 16) column; -1 when not in the inventory."""
        return self.lpm.lookup(addrs)

    def in_cluster(self, addrs: np.ndarray, entry_index: np.ndarray | None = None) -> np.ndarray:
        """Whether each address is inside the cluster.

        With ``cluster_ranges`` set: inside one of them. Without: known to the
        inventory (a node or network entry, not an ``external_authorized`` one).
        """
        idx = self.lookup(addrs) if entry_index is None else entry_index
        if self._cluster is not None:
            status = self._entry_inside[idx + 1]
            inside = status == 1
            need = np.flatnonzero(status < 0)
            if need.size:
                inside[need] = self._cluster.lookup(np.asarray(addrs).reshape(-1, 16)[need]) >= 0
            return inside
        return (idx >= 0) & (self.entry_group[idx + 1] != EXTERNAL_AUTHORIZED_GROUP)

    def jobs_at(self, node_ids: np.ndarray, time_ms: np.ndarray) -> np.ndarray:
        """Object array of the job each node id is in at each time ("" when none or node id -1)."""
        return self.job_table[self.job_codes_at(node_ids, time_ms)]

    @property
    def job_table(self) -> np.ndarray:
        """Object array of job names indexed by :meth:`job_codes_at` (one row per membership, "" last)."""
        return self._job_name

    def job_codes_at(self, node_ids: np.ndarray, time_ms: np.ndarray) -> np.ndarray:
        """Row of ``job_table`` for the job each node id is in at each time (the "" row when none or node id -1)."""
        nid = np.asarray(node_ids, dtype=np.int64)
        out_none = len(self._job_name) - 1
        if len(self._job_keys) == 0:
            return np.full(len(nid), out_none, dtype=np.intp)
        t = np.clip(np.asarray(time_ms, dtype=np.int64), 0, _TIME_MAX)
        # A node in one job (the usual case) is a table lookup; nodes in several jobs over time, a binary search.
        only = self._job_only
        row = only.take(nid, mode="clip")
        row[(nid < 0) | (nid >= len(only))] = -1  # not a node id (-1: an address without a node)
        several = np.flatnonzero(row == -2)
        if len(several):
            row[several] = self._job_row_search(nid[several], t[several])
        rc = np.maximum(row, 0)
        ok = (row >= 0) & (t >= self._job_from[rc]) & (t < self._job_until[rc])
        return np.where(ok, rc, out_none)

    def _job_row_search(self, nid: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Membership row of node ``nid`` (all >= 0) that started last at or before ``t`` (-1 when none)."""
        i = np.searchsorted(self._job_keys, (nid << _TIME_BITS) | t, side="right") - 1
        ic = np.maximum(i, 0)
        return np.where((i >= 0) & (self._job_node[ic] == nid), ic, -1)

    def node_capacity_bps(self, names: Iterable[str] | np.ndarray) -> np.ndarray:
        """float64 NIC link capacity (bits/s) per node name; NaN for unknown nodes or no capacity given."""
        q = np.asarray(names if isinstance(names, np.ndarray) else list(names), dtype=object).reshape(-1)
        if len(self._node_sorted) == 0 or len(q) == 0:
            return np.full(len(q), math.nan)
        pos = np.minimum(np.searchsorted(self._node_sorted, q), len(self._node_sorted) - 1)
        ok = self._node_sorted[pos] == q
        return np.where(ok, self._node_sorted_cap[pos], math.nan)

    def switch_for_agents(self, agent_addrs: np.ndarray) -> np.ndarray:
        """Object array of switch names for an (n, 16) column of sFlow agent addresses ("" when unknown)."""
        idx = self._agents.lookup(agent_addrs)
        sw = np.where(idx >= 0, self._agent_switch[np.maximum(idx, 0)] if len(self._agent_switch) else -1, -1)
        return self._switch_tab[np.where(sw >= 0, sw, len(self.switch_names))]

    def port_info(self, agent_addrs: np.ndarray, if_index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(peer names, configured speed bps as float64, NaN when unknown) per (agent, ifIndex)."""
        idx = self._agents.lookup(agent_addrs)
        n_none = len(self._port_keys)
        if n_none == 0:
            return self._port_peer[np.full(len(idx), 0)], np.full(len(idx), math.nan)
        sw = np.where(idx >= 0, self._agent_switch[np.maximum(idx, 0)], -1).astype(np.int64)
        ifx = np.asarray(if_index, dtype=np.int64)
        key = (np.maximum(sw, 0) << 32) | (ifx & 0xFFFFFFFF)
        pos = np.minimum(np.searchsorted(self._port_keys, key), n_none - 1)
        ok = (sw >= 0) & (ifx >= 0) & (ifx <= 0xFFFFFFFF) & (self._port_keys[pos] == key)
        pick = np.where(ok, pos, n_none)
        return self._port_peer[pick], self._port_speed[pick]


class InventoryWatcher:
    """Keeps an :class:`Inventory` current with its file.

    ``maybe_reload(now_s)`` checks the file (at most every ``check_interval_s``)
    and reloads it when its modification time, size or inode changed. A new
    file that fails validation leaves the previous inventory in place; the
    problem is in ``last_error`` and counted in ``errors_total``. The first
    load (in the constructor) raises :class:`InventoryError` instead.
    """

    def __init__(self, path: str | os.PathLike, check_interval_s: float = 0.0):
        self.path = Path(path)
        self.check_interval_s = check_interval_s
        sig = self._signature()
        self.inventory = Inventory.load(self.path)
        self._sig = sig
        self._next_check = -math.inf
        self.last_error: str | None = None
        self.reloads_total = 0
        self.errors_total = 0

    def _signature(self) -> tuple:
        try:
            st = os.stat(self.path)
        except OSError as exc:
            return ("unreadable", exc.errno)
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def maybe_reload(self, now_s: float) -> bool:
        """Reload when the file changed; True when a new inventory is now in use."""
        if now_s < self._next_check:
            return False
        self._next_check = now_s + self.check_interval_s
        sig = self._signature()
        if sig == self._sig:
            return False
        self._sig = sig
        try:
            inv = Inventory.load(self.path)
        except InventoryError as exc:
            self.last_error = str(exc)
            self.errors_total += 1
            return False
        self.inventory = inv
        self.last_error = None
        self.reloads_total += 1
        return True
