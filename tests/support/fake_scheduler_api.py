"""A fake Kubernetes / slurmrestd API server on loopback, answering from scripted recorded responses.

``FakeSchedulerAPI()`` serves, in a thread, on 127.0.0.1 (port 0: a free one; ``.url``):

- ``GET /api/v1/pods`` and ``/api/v1/namespaces/<ns>/pods``: with ``watch=1`` the next scripted watch
  (a list of event dicts, streamed one JSON line each, then the response ends); without, the next scripted
  list (the last one again when the script is exhausted). ``fail_next(status, body)`` makes the next request
  of either kind answer an HTTP error instead;
- ``GET /slurm/<version>/jobs``: the scripted slurmrestd document; 401 unless ``X-SLURM-USER-TOKEN`` matches
  ``slurm_token`` (when set).

Every request is kept in ``requests`` as (path, query dict, headers dict) for assertions.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

DATA = Path(__file__).resolve().parents[1] / "data" / "schedulers"


def load(name: str):
    """A recorded response of tests/data/schedulers: a dict (.json) or a list of watch events (.jsonl)."""
    text = (DATA / name).read_text()
    if name.endswith(".jsonl"):
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return json.loads(text)


class FakeSchedulerAPI:
    def __init__(self, port: int = 0, idle_watch_s: float = 0.3):
        self.lists: list[dict] = []
        self.watches: list[list[dict]] = []
        self.slurm_doc: dict | None = None
        self.slurm_token: str | None = None
        self.failures: list[tuple[int, dict]] = []
        self.requests: list[tuple[str, dict, dict]] = []
        self.idle_watch_s = idle_watch_s
        self._lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_a):
                pass

            def do_GET(self):  # noqa: N802 (http.server's name)
                api._handle(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *_exc):
        self.close()

    def fail_next(self, status: int, body: dict | None = None) -> None:
        self.failures.append((status, body or {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                                "status": "Failure", "message": "injected", "code": status}))

    def watch_requests(self) -> list[dict]:
        return [q for p, q, _ in self.requests if p.endswith("/pods") and q.get("watch") in ("1", "true", "True")]

    def list_requests(self) -> list[dict]:
        return [q for p, q, _ in self.requests if p.endswith("/pods") and q.get("watch") not in ("1", "true", "True")]

    # ---- serving

    def _send_json(self, h, status: int, doc) -> None:
        body = json.dumps(doc).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def _handle(self, h) -> None:
        parts = urlsplit(h.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        with self._lock:
            self.requests.append((parts.path, query, dict(h.headers)))
            failure = self.failures.pop(0) if self.failures else None
        if failure is not None:
            self._send_json(h, failure[0], failure[1])
            return
        if parts.path.startswith("/slurm/"):
            self._slurm(h, parts.path)
        elif parts.path == "/api/v1/pods" or (parts.path.startswith("/api/v1/namespaces/") and parts.path.endswith("/pods")):
            self._watch(h) if query.get("watch") in ("1", "true", "True") else self._list(h)
        else:
            self._send_json(h, 404, {"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404})

    def _list(self, h) -> None:
        with self._lock:
            doc = self.lists.pop(0) if len(self.lists) > 1 else (self.lists[0] if self.lists else None)
        if doc is None:
            doc = {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": []}
        self._send_json(h, 200, doc)

    def _watch(self, h) -> None:
        with self._lock:
            events = self.watches.pop(0) if self.watches else None
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        if events is None:  # nothing scripted: an idle watch the server ends after a while
            time.sleep(self.idle_watch_s)
            events = []
        for e in events:
            line = (json.dumps(e) + "\n").encode()
            h.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
            h.wfile.flush()
        h.wfile.write(b"0\r\n\r\n")

    def _slurm(self, h, path: str) -> None:
        if self.slurm_token is not None and h.headers.get("X-SLURM-USER-TOKEN") != self.slurm_token:
            self._send_json(h, 401, {"errors": [{"description": "Authentication failure", "error_number": 1007,
                                                 "error": "Protocol authentication error", "source": "rest_authenticate"}]})
            return
        if not path.rstrip("/").endswith("/jobs") or self.slurm_doc is None:
            self._send_json(h, 404, {"errors": [{"description": "Unable to find requested URL", "error_number": 9002}]})
            return
        self._send_json(h, 200, self.slurm_doc)

    def kubeconfig(self, path: Path, namespace: str = "training") -> Path:
        """A kubeconfig pointing the official client at this server (token auth, plain HTTP on loopback)."""
        import yaml

        cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "fake",
               "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
               "users": [{"name": "fake", "user": {"token": "fake-token"}}],
               "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake", "namespace": namespace}}]}
        path.write_text(yaml.safe_dump(cfg))
        return path
