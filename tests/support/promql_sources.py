"""Every PromQL expression the repository ships, with where it comes from.

- :func:`rule_expressions`: each rule of deploy/prometheus/rules/*.yml and the
  checkpoint schedule example.
- :func:`dashboard_expressions`: each panel target, template variable query and
  annotation of deploy/grafana/dashboards/*.json, with Grafana's variables
  substituted (:func:`substitute`) so Prometheus can run them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
RULES_DIR = REPO / "deploy" / "prometheus" / "rules"
SCHEDULE_EXAMPLE = REPO / "deploy" / "prometheus" / "checkpoint-schedule.example.yml"
DASHBOARD_DIR = REPO / "deploy" / "grafana" / "dashboards"

# Grafana's built-in interval variables -> a PromQL duration.
BUILTIN = {"__rate_interval": "1m", "__interval": "15s", "__range": "1h", "__range_s": "3600", "__interval_ms": "15000"}
_VAR = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(__\w+|[A-Za-z_]\w*)")
_LABEL_VALUES = re.compile(r"^\s*label_values\((?:(.*),\s*)?(\w+)\)\s*$", re.S)


def rule_files(include_example: bool = True) -> list[Path]:
    files = sorted(RULES_DIR.glob("*.yml"))
    return files + [SCHEDULE_EXAMPLE] if include_example else files


def rules(include_example: bool = True) -> list[tuple[str, dict]]:
    """(file name, rule dict) for every rule."""
    out = []
    for f in rule_files(include_example):
        for group in yaml.safe_load(f.read_text())["groups"]:
            for rule in group["rules"]:
                out.append((f.name, rule))
    return out


def rule_expressions() -> list[tuple[str, str]]:
    """(id, expr): id names the file and the alert or recorded series."""
    return [(f"{name}:{r.get('alert') or r.get('record')}", r["expr"]) for name, r in rules()]


def dashboards() -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in sorted(DASHBOARD_DIR.glob("*.json"))}


def substitute(expr: str, variables: set[str]) -> str:
    """Replace Grafana variables by values Prometheus accepts.

    A dashboard variable is used as ``label=~"$var"``, so it becomes ``.+``;
    built-in intervals become durations. ``$1`` (label_replace) is left alone.
    Unknown variables raise KeyError: a panel must not use an undefined one.
    """
    def repl(m: re.Match) -> str:
        name = m.group(1) or m.group(2)
        if name in BUILTIN:
            return BUILTIN[name]
        if name in variables:
            return ".+"
        raise KeyError(f"undefined Grafana variable ${name} in {expr!r}")
    return _VAR.sub(repl, expr)


def variable_query_expr(query: str) -> str:
    """``label_values(metric{...}, label)`` -> ``metric{...}`` (what Grafana asks Prometheus for)."""
    m = _LABEL_VALUES.match(query)
    if not m:
        return query          # a plain query_result(...)-less PromQL query
    return m.group(1) or "up"


def dashboard_expressions(raw: bool = False) -> list[tuple[str, str]]:
    """(id, expr) for every target, variable and annotation; substituted unless ``raw``."""
    out = []
    for fname, d in dashboards().items():
        variables = {v["name"] for v in d.get("templating", {}).get("list", [])}

        def add(where: str, expr: str):
            out.append((f"{fname}:{where}", expr if raw else substitute(expr, variables)))
        for v in d.get("templating", {}).get("list", []):
            if v["type"] == "query":
                q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
                add(f"variable {v['name']}", variable_query_expr(q))
        for a in d.get("annotations", {}).get("list", []):
            if a.get("expr"):
                add(f"annotation {a['name']}", a["expr"])
        for p in panels(d):
            for t in p.get("targets", []):
                add(f"panel {p['id']} {p['title']!r} {t['refId']}", t["expr"])
    return out


def panels(dashboard: dict) -> list[dict]:
    """Every panel, including those inside a collapsed row (Grafana keeps them in the row's ``panels``)."""
    out = []
    for p in dashboard.get("panels", []):
        out.append(p)
        out.extend(p.get("panels", []))
    return out
