"""Headless Debian Chromium driven by selenium: the console's browser tests, screenshots and paint timing.

Needs the Debian packages ``chromium`` and ``chromium-driver`` (scripts/install-system-deps.sh).
Each browser gets a fresh profile directory and every background feature that would reach the
network turned off; :func:`available` says why it cannot start when it cannot.
"""

from __future__ import annotations

import shutil
import tempfile
from contextlib import contextmanager

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--hide-scrollbars"]


def available() -> str | None:
    """None when a browser can be started, else the reason."""
    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        return "Debian chromium / chromium-driver not installed (scripts/install-system-deps.sh)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium not installed (pip install -e '.[dev]')"
    return None


@contextmanager
def browser(width: int = 1500, height: int = 1000, driver_port: int = 0):
    """A selenium Chrome driver on the system Chromium with browser-console logging on."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="fabricflow-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium")
    for f in CHROMIUM_FLAGS:
        opts.add_argument(f)
    opts.add_argument(f"--user-data-dir={profile}")
    opts.add_argument(f"--window-size={width},{height}")
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=shutil.which("chromedriver"), port=driver_port)
    drv = webdriver.Chrome(options=opts, service=service)
    try:
        yield drv
    finally:
        drv.quit()
        shutil.rmtree(profile, ignore_errors=True)


def console_errors(drv) -> list[str]:
    """Browser-console entries of level SEVERE since the last call."""
    return [e["message"] for e in drv.get_log("browser") if e.get("level") == "SEVERE"]


def wait_rendered(drv, view: str, timeout: float = 20.0) -> str:
    """Wait until the page has drawn ``view`` (body[data-rendered]); returns the final marker."""
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(drv, timeout).until(lambda d: (d.find_element("tag name", "body").get_attribute("data-rendered")
                                                 or "").startswith(view))
    return drv.find_element("tag name", "body").get_attribute("data-rendered")


def click(drv, css: str, where=None, timeout: float = 10.0) -> None:
    """Click the first element matching ``css`` (and ``where(element)``), retrying when a live refresh
    re-drew the page between finding and clicking it."""
    import time

    from selenium.common.exceptions import StaleElementReferenceException

    deadline = time.monotonic() + timeout
    while True:
        try:
            for e in drv.find_elements("css selector", css):
                if where is None or where(e):
                    e.click()
                    return
        except StaleElementReferenceException:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"nothing to click at {css!r}")
        time.sleep(0.2)
