"""Headless Chromium driven through the DevTools protocol over a pipe (`--remote-debugging-pipe`):
what a page requested while it loaded, and a screenshot of one element.

Chromium reads protocol commands on file descriptor 3 and writes its replies and events on 4, each
a JSON message ended by a NUL byte (Chromium's `--remote-debugging-pipe` switch; the messages are
the DevTools protocol's: https://chromedevtools.github.io/devtools-protocol/). No websocket and no
port: nothing outside the machine, and nothing another process could attach to.

`Network.requestWillBeSent` is sent for every request the page makes, `file:` and `data:` URLs
included, before anything goes out: a page that opens offline sends only its own file and its
`data:` URIs.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import select
import subprocess
import time
from pathlib import Path
from typing import Any

LOAD_TIMEOUT_S = 60.0


class Chromium:
    """One headless Chromium with one page (a context manager: the browser is closed on exit)."""

    def __init__(self, chromium: str, profile: Path, *, width: int = 1280, height: int = 1000) -> None:
        to_browser, self._to_browser = os.pipe()
        self._from_browser, from_browser = os.pipe()

        def pipes() -> None:  # in the child: the ends Chromium expects on 3 and 4
            read_end, write_end = os.dup(to_browser), os.dup(from_browser)
            os.dup2(read_end, 3)
            os.dup2(write_end, 4)

        self.proc = subprocess.Popen(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
             "--remote-debugging-pipe", f"--user-data-dir={profile}", f"--window-size={width},{height}", "about:blank"],
            pass_fds=(3, 4), preexec_fn=pipes, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        os.close(to_browser)
        os.close(from_browser)
        self._buffer = b""
        self._next = 0
        self.events: list[dict[str, Any]] = []
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self._session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.call("Network.enable", session=True)
        self.call("Page.enable", session=True)

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError, RuntimeError):  # a browser that is gone is closed
            self.call("Browser.close")
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)

    def _message(self) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            ready, _, _ = select.select([self._from_browser], [], [], LOAD_TIMEOUT_S)
            if not ready:
                raise RuntimeError(f"chromium sent nothing for {LOAD_TIMEOUT_S:.0f} s")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed its DevTools pipe")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        message: dict[str, Any] = json.loads(raw)
        return message

    def call(self, method: str, params: dict[str, Any] | None = None, *, session: bool = False) -> dict[str, Any]:
        """Send one command (to the page with `session`) and return its result; the events that
        arrive meanwhile are kept in `events`. RuntimeError for a protocol error."""
        self._next += 1
        message: dict[str, Any] = {"id": self._next, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self._session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._message()
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            self.events.append(reply)

    def load(self, url: str) -> list[str]:
        """Open `url`, wait for its load event, and return every URL the page requested."""
        self.events.clear()
        self.call("Page.navigate", {"url": url}, session=True)
        deadline = time.monotonic() + LOAD_TIMEOUT_S
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not load within {LOAD_TIMEOUT_S:.0f} s")
            self.events.append(self._message())
        return [e["params"]["request"]["url"] for e in self.events if e.get("method") == "Network.requestWillBeSent"]

    def screenshot(self, selector: str, out: Path) -> Path:
        """A PNG of the element `selector` matches, whole (beyond the window too), written to `out`."""
        script = (
            f"(() => {{ const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect();"
            " return JSON.stringify([r.left + scrollX, r.top + scrollY, r.width, r.height]); })()"
        )
        value = self.call("Runtime.evaluate", {"expression": script, "returnByValue": True}, session=True)
        x, y, width, height = json.loads(value["result"]["value"])
        clip = {"x": x, "y": y, "width": width, "height": height, "scale": 1}
        shot = self.call(
            "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip}, session=True
        )
        out.write_bytes(base64.b64decode(shot["data"]))
        return out
