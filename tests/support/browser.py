"""A headless Chromium driven over the W3C WebDriver protocol, for the tests that look at the Prefect UI and the
review page as a person would."""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, NamedTuple

from tests.support.prefect_server import free_port, wait_for


class BrowserBinaries(NamedTuple):
    chromium: str
    chromedriver: str


def find_browser() -> BrowserBinaries | None:
    """Chromium and chromedriver on PATH (Debian's `chromium` and `chromium-driver`), or None."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return BrowserBinaries(chromium, driver) if chromium and driver else None


class Browser:
    """Just enough of the W3C WebDriver protocol (chromedriver over HTTP) to click and read a page."""

    def __init__(self, tmp: Path, binaries: BrowserBinaries) -> None:
        self.port, self.tmp, self.binaries = free_port(), tmp, binaries
        self.session = ""

    def __enter__(self) -> Browser:
        self.driver = subprocess.Popen([self.binaries.chromedriver, f"--port={self.port}"], stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL, start_new_session=True)
        options = {"binary": self.binaries.chromium, "args": [
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-dev-shm-usage", f"--user-data-dir={self.tmp / 'chromium-profile'}", "--window-size=1400,1000"]}
        try:
            wait_for(self._ready, 30, "chromedriver", every=0.2)
            self.session = self._call("POST", "/session", {"capabilities": {"alwaysMatch": {
                "browserName": "chrome", "goog:chromeOptions": options}}}, session=False)["sessionId"]
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the browser, then kill chromedriver's whole process group (Chromium children included)."""
        try:
            if self.session:
                self._call("DELETE", "")
        except OSError:
            pass  # the kill below cleans up either way
        finally:
            os.killpg(self.driver.pid, signal.SIGKILL)
            self.driver.wait(timeout=10)

    def _ready(self) -> bool:
        try:
            return bool(self._call("GET", "/status", session=False)["ready"])
        except OSError:
            return False

    def _call(self, method: str, path: str, body: dict | None = None, session: bool = True) -> Any:
        url = f"http://127.0.0.1:{self.port}{f'/session/{self.session}' if session else ''}{path}"
        request = urllib.request.Request(url, method=method, headers={"Content-Type": "application/json"},
                                         data=None if body is None else json.dumps(body).encode())
        with urllib.request.urlopen(request, timeout=120) as response:
            return json.load(response)["value"]

    def open(self, url: str) -> None:
        self._call("POST", "/url", {"url": url})

    def wait_for_element(self, using: str, value: str) -> dict:
        def find() -> dict | None:
            try:
                return self._call("POST", "/element", {"using": using, "value": value})
            except urllib.error.HTTPError:  # "no such element" yet: the page is still loading
                return None

        return wait_for(find, 60, f"element {value}", every=0.5)

    def click(self, element: dict) -> None:
        self._call("POST", f"/element/{next(iter(element.values()))}/click", {})

    def script(self, source: str, *args: Any) -> Any:
        return self._call("POST", "/execute/sync", {"script": source, "args": list(args)})

    def text(self) -> str:
        return self.script("return document.body.innerText")

    def screenshot(self, path: Path) -> None:
        path.write_bytes(base64.b64decode(self._call("GET", "/screenshot")))
        assert path.stat().st_size > 10_000, f"blank screenshot {path}"
