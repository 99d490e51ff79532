"""What the browser tests share: skip (or fail) without a browser, and a console app served on a test port."""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager

import pytest
import uvicorn

from devtools.browser import available


def need_browser() -> None:
    """Skip the test without Debian's chromium / chromium-driver, unless FABRICFLOW_REQUIRE_BROWSER=1."""
    why = available()
    if why:
        if os.environ.get("FABRICFLOW_REQUIRE_BROWSER") == "1":
            pytest.fail(why)
        pytest.skip(why)


@contextmanager
def serve(app, port: int):
    """``app`` (an ASGI app) on 127.0.0.1:``port`` in a thread; yields its URL, stops it at exit."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    server.install_signal_handlers = lambda: None
    t = threading.Thread(target=server.run, daemon=True)
    t.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, f"console test server did not start on 127.0.0.1:{port}"
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.should_exit = True
        t.join(10)
