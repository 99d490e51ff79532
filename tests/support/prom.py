"""A real Prometheus for tests: start it on loopback, query it, stop it.

Debian's ``prometheus`` package (scripts/install-system-deps.sh) is the server.
The config is the shipped ``deploy/prometheus/prometheus.yml`` with the
targets, intervals and rule file paths replaced, so the tests exercise the
shipped scrape jobs (``honor_labels`` on the flow-metrics job included) and the
shipped rules.

Use it as a context manager::

    from tests.support.prom import PrometheusServer, prometheus_or_skip

    prometheus_or_skip()                       # skip, or fail when FABRICFLOW_REQUIRE_BROKER=1
    with PrometheusServer(tmp_path, targets="127.0.0.1:9183") as prom:
        prom.wait_for_scrape("fabricflow-metrics")          # first successful scrape
        prom.query("sum(node_to_node_flow_traffic_bytes_total)")   # -> list of result dicts
        prom.value("sum(node_to_node_flow_traffic_bytes_total)")   # -> float or None
        prom.wait_for_alert("FabricLinkSpeedDowngrade", state="firing", timeout=120)

or through the ``prometheus_factory`` fixture (tests/conftest.py makes it
available to every test), which stops every server it made at teardown::

    def test_x(prometheus_factory):
        prom = prometheus_factory(targets={"fabricflow-metrics": ["127.0.0.1:31183"]})

Arguments of :class:`PrometheusServer`:

- ``workdir``: a directory for the config, the rule copies, the TSDB and ``prometheus.log``.
- ``targets``: ``"host:port"``, a list of them (both: the ``fabricflow-metrics``
  job), or ``{job_name: [host:port, ...]}``; job names of the shipped config keep
  their settings, other names become plain jobs. Shipped jobs not named are dropped.
- ``port``: listen port on 127.0.0.1; default ``FABRICFLOW_TEST_PROM_PORT`` (29690).
- ``rule_files``: paths; default the shipped ``deploy/prometheus/rules/*.yml``.
  ``[]`` loads no rules.
- ``scrape_interval`` / ``evaluation_interval``: default ``"1s"``.
- ``for_override``: e.g. ``"0s"`` or ``{"FabricLinkSpeedDowngrade": "10s"}``:
  rewrites alerts' ``for:`` in the rule copies, so an end-to-end test need not
  wait the production durations. The rule *expressions* are never changed.

Query helpers raise :class:`PromQueryError` when Prometheus answers with an
error (bad PromQL, many-to-many matching, ...). Nothing here asserts on time:
``wait_*`` helpers poll until a bound and raise ``TimeoutError`` with the
latest state and the server log's tail.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy" / "prometheus"
SHIPPED_CONFIG = DEPLOY / "prometheus.yml"
METRICS_JOB = "fabricflow-metrics"
DEFAULT_PORT = int(os.environ.get("FABRICFLOW_TEST_PROM_PORT", "29690"))
REQUIRE = os.environ.get("FABRICFLOW_REQUIRE_BROKER") == "1"

__all__ = [
    "PromQueryError", "PrometheusServer", "find_tool", "prometheus_factory", "prometheus_or_skip",
    "promtool_or_skip", "shipped_rule_files",
]


class PromQueryError(RuntimeError):
    """Prometheus answered a query with status=error (the message has errorType and error)."""


def find_tool(name: str) -> str | None:
    """Path of the ``prometheus`` / ``promtool`` binary, or None."""
    return shutil.which(name)


def _missing(what: str):
    msg = f"{what} not installed (Debian package `prometheus`, scripts/install-system-deps.sh)"
    if REQUIRE:
        pytest.fail(f"{msg} (FABRICFLOW_REQUIRE_BROKER=1)")
    pytest.skip(msg)


def prometheus_or_skip() -> str:
    """The prometheus binary; skips the test without it, fails instead when FABRICFLOW_REQUIRE_BROKER=1."""
    return find_tool("prometheus") or _missing("prometheus")


def promtool_or_skip() -> str:
    """The promtool binary; skips or fails like :func:`prometheus_or_skip`."""
    return find_tool("promtool") or _missing("promtool")


def shipped_rule_files() -> list[Path]:
    """The rule files a deployment loads (``deploy/prometheus/rules/*.yml``)."""
    return sorted((DEPLOY / "rules").glob("*.yml"))


def _normalise_targets(targets) -> dict[str, list[str]]:
    if isinstance(targets, str):
        return {METRICS_JOB: [targets]}
    if isinstance(targets, Mapping):
        return {job: [t] if isinstance(t, str) else list(t) for job, t in targets.items()}
    return {METRICS_JOB: list(targets)}


def _copy_rules(rule_files: Iterable[Path], dest: Path, for_override) -> list[str]:
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for i, src in enumerate(rule_files):
        doc = yaml.safe_load(Path(src).read_text())
        if for_override is not None:
            for group in doc.get("groups") or []:
                for rule in group.get("rules") or []:
                    if "alert" not in rule:
                        continue
                    if isinstance(for_override, Mapping):
                        if rule["alert"] in for_override:
                            rule["for"] = for_override[rule["alert"]]
                    else:
                        rule["for"] = for_override
        path = dest / f"{i:02d}-{Path(src).name}"
        path.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
        out.append(str(path))
    return out


class PrometheusServer:
    """One real Prometheus process on 127.0.0.1 (see the module docstring for the arguments)."""

    def __init__(
        self,
        workdir: str | Path,
        targets=(),
        *,
        port: int | None = None,
        rule_files: Iterable[str | Path] | None = None,
        scrape_interval: str = "1s",
        evaluation_interval: str = "1s",
        for_override: str | Mapping[str, str] | None = None,
        ready_timeout: float = 30.0,
    ):
        self.workdir = Path(workdir)
        self.port = port or DEFAULT_PORT
        self.url = f"http://127.0.0.1:{self.port}"
        self.targets = _normalise_targets(targets)
        self.rule_files = [Path(p) for p in (shipped_rule_files() if rule_files is None else rule_files)]
        self.scrape_interval = scrape_interval
        self.evaluation_interval = evaluation_interval
        self.for_override = for_override
        self.ready_timeout = ready_timeout
        self.config_path = self.workdir / "prometheus.yml"
        self.log_path = self.workdir / "prometheus.log"
        self._proc: subprocess.Popen | None = None
        self._log = None

    # ---- lifecycle
    def write_config(self) -> Path:
        """Write the test config derived from the shipped one; returns its path."""
        shipped = yaml.safe_load(SHIPPED_CONFIG.read_text())
        by_name = {j["job_name"]: j for j in shipped["scrape_configs"]}
        jobs = []
        for name, addrs in self.targets.items():
            job = {k: v for k, v in by_name.get(name, {"job_name": name}).items()
                   if k not in ("static_configs", "dns_sd_configs", "file_sd_configs")}
            job["static_configs"] = [{"targets": list(addrs)}]
            jobs.append(job)
        cfg = {
            "global": {"scrape_interval": self.scrape_interval, "evaluation_interval": self.evaluation_interval,
                       "scrape_timeout": self.scrape_interval},
            "rule_files": _copy_rules(self.rule_files, self.workdir / "rules", self.for_override),
            "scrape_configs": jobs,
        }
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        return self.config_path

    def start(self) -> PrometheusServer:
        """Start and wait until /-/ready answers; raises RuntimeError with the log tail otherwise."""
        binary = find_tool("prometheus")
        if binary is None:
            raise RuntimeError("prometheus is not installed (scripts/install-system-deps.sh)")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", self.port)) == 0:
                raise RuntimeError(f"127.0.0.1:{self.port} is in use; pass another port (FABRICFLOW_TEST_PROM_PORT)")
        self.write_config()
        tsdb = self.workdir / "tsdb"
        tsdb.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")
        self._proc = subprocess.Popen(
            [binary, f"--config.file={self.config_path}", f"--web.listen-address=127.0.0.1:{self.port}",
             f"--storage.tsdb.path={tsdb}", "--storage.tsdb.retention.time=1d", "--web.enable-lifecycle"],
            stdout=self._log, stderr=subprocess.STDOUT, cwd=self.workdir,
        )
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self._proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"prometheus not ready after {self.ready_timeout}s:\n{self.log_tail()}")

    def stop(self) -> None:
        """Stop the process (SIGTERM, then SIGKILL after 10 s). Idempotent."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(5)
        self._proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    # ---- HTTP API
    def api(self, path: str, params: Mapping[str, str] | None = None, timeout: float = 30.0):
        """GET /api/v1/<path>; returns ``data``; raises PromQueryError on status=error."""
        url = f"{self.url}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=timeout) as r:
                body = json.loads(r.read())
        except urllib.error.HTTPError as e:  # 400/422 carry the error JSON
            try:
                body = json.loads(e.read())
            except ValueError:
                raise PromQueryError(f"{path}: HTTP {e.code}") from e
        if body.get("status") != "success":
            raise PromQueryError(f"{body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict]:
        """Instant query: the ``result`` list (``[{"metric": {...}, "value": [ts, "v"]}]``;
        a scalar/string result is returned as one item with an empty metric)."""
        params = {"query": expr}
        if at is not None:
            params["time"] = str(at)
        data = self.api("query", params)
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        return data["result"]

    def value(self, expr: str) -> float | None:
        """The single value of an instant query, None when empty; ValueError if several series."""
        res = self.query(expr)
        if not res:
            return None
        if len(res) > 1:
            raise ValueError(f"{expr!r} returned {len(res)} series")
        return float(res[0]["value"][1])

    def alerts(self) -> list[dict]:
        """Active alerts (pending and firing): ``[{"labels", "annotations", "state", "activeAt", "value"}]``."""
        return self.api("alerts")["alerts"]

    def rules(self) -> list[dict]:
        """Rule groups as loaded, with each rule's health and lastError."""
        return self.api("rules")["groups"]

    def targets_health(self) -> list[dict]:
        return self.api("targets")["activeTargets"]

    # ---- waiting
    def wait_until(self, check: Callable[[], object], timeout: float = 60.0, interval: float = 0.5, what: str = ""):
        """Poll ``check()`` until it returns something truthy; returns it. TimeoutError otherwise."""
        deadline = time.monotonic() + timeout
        last = None
        while True:
            last = check()
            if last:
                return last
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{what or check} not reached in {timeout}s (last: {last!r})\n{self.log_tail(10)}")
            time.sleep(interval)

    def wait_for_scrape(self, job: str = METRICS_JOB, timeout: float = 60.0) -> list[dict]:
        """Wait until every target of ``job`` has been scraped successfully (health "up")."""
        def check():
            ts = [t for t in self.targets_health() if t["labels"].get("job") == job]
            return ts if ts and all(t["health"] == "up" for t in ts) else None
        return self.wait_until(check, timeout, what=f"scrape of {job}")

    def wait_for_query(self, expr: str, timeout: float = 60.0) -> list[dict]:
        """Wait until an instant query returns at least one series; returns the result."""
        return self.wait_until(lambda: self.query(expr), timeout, what=f"data for {expr!r}")

    def wait_for_alert(self, name: str, state: str = "firing", labels: Mapping[str, str] | None = None,
                       timeout: float = 120.0) -> dict:
        """Wait until alert ``name`` (with these labels, if given) is in ``state``; returns the alert."""
        want = dict(labels or {})

        def check():
            for a in self.alerts():
                if a["labels"].get("alertname") == name and a["state"] == state and \
                        all(a["labels"].get(k) == v for k, v in want.items()):
                    return a
            return None
        return self.wait_until(check, timeout, what=f"alert {name} {want} {state}")

    def wait_for_rules_evaluated(self, timeout: float = 60.0) -> list[dict]:
        """Wait until every loaded rule has been evaluated at least once; returns the groups."""
        if not self.rule_files:
            return self.rules()

        def check():
            groups = self.rules()
            rules = [r for g in groups for r in g["rules"]]
            # lastEvaluation is Go's zero time (0001-01-01...) until the first evaluation
            done = rules and all(not r.get("lastEvaluation", "0001").startswith("0001") for r in rules)
            return groups if done else None
        return self.wait_until(check, timeout, what="first evaluation of every rule")


@pytest.fixture
def prometheus_factory(tmp_path_factory):
    """Fixture: ``make(targets=..., **kwargs) -> started PrometheusServer``; all are stopped at teardown.

    Skips (or fails with FABRICFLOW_REQUIRE_BROKER=1) when prometheus is missing.
    Each server gets its own temporary workdir; pass ``port=`` when starting
    more than one in a test.
    """
    prometheus_or_skip()
    started: list[PrometheusServer] = []

    def make(targets=(), **kwargs) -> PrometheusServer:
        srv = PrometheusServer(tmp_path_factory.mktemp("prometheus"), targets, **kwargs)
        started.append(srv)
        return srv.start()

    yield make
    for srv in started:
        srv.stop()
