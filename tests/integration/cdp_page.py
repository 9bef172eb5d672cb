"""A small DevTools-protocol client for tests: headless Chromium on a pipe (``--remote-debugging-pipe``: fds 3
and 4, no port), one page, its console errors and every request it makes recorded.

Not :class:`nest_experiments.dash.players.browser.Cdp` (which keeps replies only): a test of a page needs its events.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nest_experiments.dash.players.browser import Cdp

TIMEOUT_S = 30.0


class Page(Cdp):
    """One page target of a Chromium started by :func:`chromium`, on the player's DevTools client
    (:class:`nest_experiments.dash.players.browser.Cdp`) with every event of its session kept."""

    def __init__(self, write_fd: int, read_fd: int) -> None:
        super().__init__(write_fd, read_fd, keep_events=True)
        self.session = ""

    def call(self, method: str, params: dict[str, Any] | None = None, *, browser: bool = False,  # type: ignore[override]
             timeout_s: float = TIMEOUT_S) -> dict[str, Any]:
        """A call to the page's session (``browser``: to the browser itself)."""
        return super().call(method, params, session=None if browser else self.session or None, timeout_s=timeout_s)

    def clear(self) -> None:
        with self._cond:
            self.events.clear()

    def open(self, url: str) -> None:
        """Navigate to ``url`` and wait for its load event (the events before it are dropped)."""
        self.clear()
        self.call("Page.navigate", {"url": url})
        self.wait_event("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True})
        if "exceptionDetails" in result:
            raise AssertionError(f"page: {expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", {"format": "png"})["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def console_errors(self) -> list[str]:
        """Console messages of level error/assert, uncaught exceptions and Log domain errors (CSP, loading)."""
        out = []
        for e in self.events:
            p, m = e.get("params", {}), e.get("method")
            if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(f"console.{p['type']}: {[a.get('value', a.get('description')) for a in p.get('args', [])]}")
            elif m == "Runtime.exceptionThrown":
                out.append(f"exception: {p.get('exceptionDetails', {}).get('text')}")
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append(f"log: {p['entry'].get('source')}: {p['entry'].get('text')} {p['entry'].get('url', '')}")
        return out

    def requests(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.events if e.get("method") == "Network.requestWillBeSent"]


@contextlib.contextmanager
def chromium(binary: str, profile: Path, *, width: int = 1280, height: int = 1000) -> Iterator[Page]:
    """Headless Chromium with no outside contact (every host name unresolvable, no proxy, no background
    networking), one blank page attached with Runtime, Log, Network and Page enabled; all of it gone on exit."""
    argv = [binary, "--headless", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
            "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-extensions",
            "--disable-breakpad", "--disable-default-apps", "--no-proxy-server", "--no-pings",
            "--host-resolver-rules=MAP * ~NOTFOUND", "--disable-dev-shm-usage", "--hide-scrollbars",
            f"--user-data-dir={profile}", "--remote-debugging-pipe"]
    if os.geteuid() == 0:
        argv.append("--no-sandbox")
    to_r, to_w = os.pipe()
    from_r, from_w = os.pipe()

    def fds() -> None:
        os.dup2(to_r, 3)
        os.dup2(from_w, 4)

    profile.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=fds, pass_fds=(3, 4), start_new_session=True)
    os.close(to_r)
    os.close(from_w)
    page = Page(to_w, from_r)
    try:
        target = page.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        page.session = page.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Network", "Page"):
            page.call(f"{domain}.enable")
        page.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1,
                                                         "mobile": False})
        yield page
    finally:
        with contextlib.suppress(OSError):
            os.write(to_w, json.dumps({"id": 10**9, "method": "Browser.close"}).encode() + b"\0")
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)
        with contextlib.suppress(ProcessLookupError):  # the zygote and renderers share its process group
            os.killpg(proc.pid, signal.SIGKILL)
        for fd in (to_w, from_r):
            with contextlib.suppress(OSError):
                os.close(fd)
        shutil.rmtree(profile, ignore_errors=True)
