"""Reading an inventory file's text: YAML or CSV -> the dict of the YAML shape -> a validated spec.

CSV rows are folded into the YAML shape, remembering the line of every value,
so that every problem is reported as ``<file>: <where>: <what>`` with a YAML
path (``nodes[2] (gpu-03).group``) or a CSV line and column; all problems of a
file are reported at once in one :class:`InventoryError`.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import PurePath
from typing import Any

import yaml
from pydantic import ValidationError

from .models import InventoryError, InventorySpec

__all__ = ["CSV_COLUMNS", "CSV_KINDS", "Locator", "by_line", "inventory_format", "parse_text", "read_csv", "read_spec",
           "read_yaml"]

_NAMED_SECTIONS = {"nodes": "name", "jobs": "name", "switches": "name", "networks": "prefix"}
_CSV_COLUMN_OF = {
    "nodes": {"name": "node", "addresses": "address"},
    "networks": {"prefix": "address"},
    "jobs": {"name": "job", "nodes": "node"},
    "switches": {"name": "switch", "agents": "address", "peer": "node"},
    "cluster_ranges": {},
    "external_authorized": {},
}


class Locator:
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
        elif section == "nodes" and "nics" in names and names[-1] != "nics":
            col = {"name": "nic", "port": "if_index", "addresses": "address"}.get(names[-1], names[-1])
        elif section == "links" and len(names) >= 2 and names[0] in ("a", "b"):
            col = ("peer_" if names[0] == "b" else "") + ("if_index" if names[1] == "port" else names[1])
        elif names:
            col = _CSV_COLUMN_OF.get(section, {}).get(names[-1], names[-1])
        else:
            col = ""
        return f"{where}: column {col!r}" if col else where


def by_line(problems: list[str]) -> list[str]:
    """CSV problems in file order (stable; problems without a line number last)."""

    def key(p: str) -> int:
        m = re.match(r"line (\d+)", p)
        return int(m.group(1)) if m else 1 << 62

    return sorted(problems, key=key)


def _pydantic_problems(err: ValidationError, locate: Locator, is_csv: bool) -> list[str]:
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


# ---------------------------------------------------------------- YAML and CSV text

CSV_COLUMNS = (
    "kind", "address", "node", "group", "rack", "switch", "capacity", "job", "from", "until", "if_index", "speed",
    "nic", "rail", "role", "peer_switch", "peer_if_index",
)
CSV_KINDS = {
    "host": {"address", "node", "group", "rack", "switch", "capacity"},
    "cluster_range": {"address"},
    "external_authorized": {"address"},
    "job": {"job", "node", "from", "until"},
    "switch_agent": {"switch", "address", "rack"},
    "switch_port": {"switch", "if_index", "node", "speed"},
    "nic": {"node", "nic", "address", "group", "rack", "capacity", "switch", "if_index", "rail", "speed"},
    "switch": {"switch", "role", "rail", "rack", "address"},
    "link": {"switch", "if_index", "peer_switch", "peer_if_index", "speed"},
}


def read_yaml(text: str, source: str) -> Any:
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


def read_csv(text: str, source: str) -> tuple[dict, dict[tuple, int]]:
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

    fold = _CsvFold(problems)
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
        fold.row(kind, {h: v for h, v in cells.items() if v}, line)
    if problems:
        raise InventoryError(source, problems)
    return fold.data, fold.at


class _CsvFold:
    """Folds CSV rows (non-empty cells by column) into the YAML shape, remembering the line of every value
    (``at``); problems go to the list it is given."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        self.data: dict[str, Any] = {}
        self.at: dict[tuple, int] = {}
        self.node_pos: dict[str, int] = {}
        self.job_pos: dict[tuple, int] = {}
        self.switch_pos: dict[str, int] = {}

    def row(self, kind: str, c: dict[str, str], line: int) -> None:
        if kind == "host":
            self.host(c, line)
        elif kind in ("cluster_range", "external_authorized"):
            key = "cluster_ranges" if kind == "cluster_range" else "external_authorized"
            lst = self.data.setdefault(key, [])
            if "address" not in c:
                self.problems.append(f"line {line}: column 'address': required value missing")
                return
            self.at[(key, len(lst))] = line
            lst.append(c["address"])
        elif kind == "job":
            self.job(c, line)
        elif kind == "nic":
            self.nic(c, line)
        elif "switch" not in c:
            self.problems.append(f"line {line}: column 'switch': required value missing")
        elif kind in ("switch_agent", "switch"):
            self.switch_agent(c, line, kind)
        elif kind == "link":
            self.link(c, line)
        else:
            self.switch_port(c, line)

    def host(self, c: dict[str, str], line: int) -> None:
        data, at = self.data, self.at
        if "node" not in c:
            nets = data.setdefault("networks", [])
            at[("networks", len(nets))] = line
            nets.append({("prefix" if k == "address" else k): v for k, v in c.items() if k != "kind"})
            return
        i = self._node(c, line, ("group", "rack", "switch", "capacity"))
        if i is None:
            return
        node = data["nodes"][i]
        if "address" in c:
            at[("nodes", i, "addresses", len(node["addresses"]))] = line
            node["addresses"].append(c["address"])
        else:
            self.problems.append(f"line {line}: column 'address': required value missing")

    def _node(self, c: dict[str, str], line: int, cols: tuple[str, ...]) -> int | None:
        """Position of node ``c["node"]`` (created on first sight) after merging its ``cols`` from this row;
        None when a value conflicts with an earlier row's."""
        data, at = self.data, self.at
        name = c["node"]
        if name not in self.node_pos:
            nodes = data.setdefault("nodes", [])
            self.node_pos[name] = len(nodes)
            nodes.append({"name": name, "addresses": []})
            at[("nodes", self.node_pos[name])] = line
        i = self.node_pos[name]
        node = data["nodes"][i]
        bad = False
        for col in cols:
            if col in c:
                if col in node and node[col] != c[col]:
                    self.problems.append(
                        f"line {line}: column {col!r}: {c[col]!r} conflicts with {node[col]!r} "
                        f"given for node {name!r} on line {at[('nodes', i, col)]}"
                    )
                    bad = True
                elif col not in node:
                    node[col] = c[col]
                    at[("nodes", i, col)] = line
        return None if bad else i

    def nic(self, c: dict[str, str], line: int) -> None:
        """A ``nic`` row: one address of one NIC of a node (rows of one NIC are merged like host rows)."""
        at, problems = self.at, self.problems
        for col in ("node", "nic", "address"):
            if col not in c:
                problems.append(f"line {line}: column {col!r}: required value missing")
                return
        i = self._node(c, line, ("group", "rack", "capacity"))
        if i is None:
            return
        nics = self.data["nodes"][i].setdefault("nics", [])
        j = next((k for k, n in enumerate(nics) if n["name"] == c["nic"]), None)
        if j is None:
            j = len(nics)
            nics.append({"name": c["nic"], "addresses": []})
            at[("nodes", i, "nics", j)] = line
        nic = nics[j]
        for col, key in (("switch", "switch"), ("if_index", "port"), ("rail", "rail"), ("speed", "speed")):
            if col in c:
                if key in nic and nic[key] != c[col]:
                    first = at[("nodes", i, "nics", j, key)]
                    problems.append(f"line {line}: column {col!r}: {c[col]!r} conflicts with {nic[key]!r} given for "
                                    f"NIC {c['nic']!r} of node {c['node']!r} on line {first}")
                    return
                nic[key] = c[col]
                at[("nodes", i, "nics", j, key)] = line
        at[("nodes", i, "nics", j, "addresses", len(nic["addresses"]))] = line
        nic["addresses"].append(c["address"])

    def link(self, c: dict[str, str], line: int) -> None:
        """A ``link`` row: one switch-to-switch link."""
        for col in ("if_index", "peer_switch", "peer_if_index"):
            if col not in c:
                self.problems.append(f"line {line}: column {col!r}: required value missing")
                return
        links = self.data.setdefault("links", [])
        self.at[("links", len(links))] = line
        link: dict[str, Any] = {"a": {"switch": c["switch"], "port": c["if_index"]},
                                "b": {"switch": c["peer_switch"], "port": c["peer_if_index"]}}
        if "speed" in c:
            link["speed"] = c["speed"]
        links.append(link)

    def job(self, c: dict[str, str], line: int) -> None:
        data = self.data
        jkey = (c.get("job", ""), c.get("from", ""), c.get("until", ""))
        if jkey not in self.job_pos:
            jobs = data.setdefault("jobs", [])
            self.job_pos[jkey] = len(jobs)
            job = {"nodes": []}
            for col, field in (("job", "name"), ("from", "from"), ("until", "until")):
                if col in c:
                    job[field] = c[col]
            jobs.append(job)
            self.at[("jobs", self.job_pos[jkey])] = line
        j = self.job_pos[jkey]
        if "node" not in c:
            self.problems.append(f"line {line}: column 'node': required value missing")
            return
        self.at[("jobs", j, "nodes", len(data["jobs"][j]["nodes"]))] = line
        data["jobs"][j]["nodes"].append(c["node"])

    def _switch(self, name: str, line: int) -> int:
        if name not in self.switch_pos:
            sw = self.data.setdefault("switches", [])
            self.switch_pos[name] = len(sw)
            sw.append({"name": name, "agents": [], "ports": {}})
            self.at[("switches", self.switch_pos[name])] = line
        return self.switch_pos[name]

    def switch_agent(self, c: dict[str, str], line: int, kind: str = "switch_agent") -> None:
        """A ``switch_agent`` row (one agent address) or a ``switch`` row (role, rail, rack, optional agent)."""
        at, problems = self.at, self.problems
        s = self._switch(c["switch"], line)
        sw = self.data["switches"][s]
        for col in ("rack", "role", "rail"):
            if col not in c:
                continue
            if sw.get(col, c[col]) != c[col]:
                problems.append(
                    f"line {line}: column {col!r}: {c[col]!r} conflicts with {sw[col]!r} "
                    f"given for switch {c['switch']!r} on line {at[('switches', s, col)]}"
                )
                return
            if col not in sw:
                sw[col] = c[col]
                at[("switches", s, col)] = line
        if "address" not in c:
            if kind == "switch_agent":
                problems.append(f"line {line}: column 'address': required value missing")
            return
        at[("switches", s, "agents", len(sw["agents"]))] = line
        sw["agents"].append(c["address"])

    def switch_port(self, c: dict[str, str], line: int) -> None:
        at, problems = self.at, self.problems
        s = self._switch(c["switch"], line)
        sw = self.data["switches"][s]
        if "if_index" not in c:
            problems.append(f"line {line}: column 'if_index': required value missing")
            return
        key = c["if_index"]
        norm = str(int(key)) if key.isdigit() else key
        if any((str(int(k)) if k.isdigit() else k) == norm for k in sw["ports"]):
            problems.append(
                f"line {line}: column 'if_index': port {key} of switch {c['switch']!r} "
                f"already given on line {at[('switches', s, 'ports', norm)]}"
            )
            return
        at[("switches", s, "ports", key)] = line
        at[("switches", s, "ports", norm)] = line
        if key.isdigit():
            at[("switches", s, "ports", int(key))] = line
        sw["ports"][key] = {k: v for k, v in (("peer", c.get("node")), ("speed", c.get("speed"))) if v}


def inventory_format(source: str) -> str:
    """``"yaml"`` or ``"csv"`` from the file name's suffix; raises :class:`InventoryError` for any other."""
    suffix = PurePath(source).suffix.lower()
    if suffix not in (".yaml", ".yml", ".csv"):
        problem = f"unsupported inventory format {suffix or '(none)'!r} (use .yaml, .yml or .csv)"
        raise InventoryError(source, [problem])
    return "csv" if suffix == ".csv" else "yaml"


def parse_text(text: str, source: str, fmt: str) -> tuple[Any, dict[tuple, int] | None]:
    """(data of the YAML shape, CSV line of each location or None) of a file's text in format ``fmt``
    (:func:`inventory_format`); raises :class:`InventoryError`."""
    if fmt not in ("yaml", "csv"):
        raise ValueError(f"inventory format {fmt!r}: expected 'yaml' or 'csv'")
    if fmt == "csv":
        return read_csv(text, source)
    return read_yaml(text, source), None


def read_spec(data: Any, source: str, csv_lines: dict[tuple, int] | None = None) -> tuple[InventorySpec, Locator]:
    """Validate a dict of the YAML shape: (the spec, its :class:`Locator`); raises :class:`InventoryError`."""
    if not isinstance(data, dict):
        raise InventoryError(source, [f"top level must be a mapping, got {type(data).__name__}"])
    locate = Locator(data, csv_lines)
    try:
        spec = InventorySpec.model_validate(data)
    except ValidationError as err:
        problems = _pydantic_problems(err, locate, csv_lines is not None)
        raise InventoryError(source, by_line(problems) if csv_lines is not None else problems) from None
    return spec, locate
