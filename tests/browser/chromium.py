"""Headless Chromium (Debian's /usr/bin/chromium) driven over the DevTools protocol on a pipe.

`--remote-debugging-pipe` makes Chromium read commands from fd 3 and write answers to fd 4, as
NUL-terminated JSON (what Playwright itself uses): no port to pick, no websocket library, no
download of a browser, nothing beyond the standard library. The flags are those this closed
network needs (no background networking, component updates or sync, a fresh profile).
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM = os.environ.get("KT2T_CHROMIUM", "/usr/bin/chromium")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--disable-extensions", "--mute-audio", "--hide-scrollbars")

# Every request leaves through this proxy, where nothing listens: nothing reaches the network, and the
# browser's own background requests (search engine, updates) fail at once instead of waiting on it.
REFUSING_PROXY = ("--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>")


class BrowserError(RuntimeError):
    """Chromium could not be started, or a DevTools command failed or timed out."""


def find_chromium() -> str | None:
    """The Chromium binary, or None when it is not installed (hack/system-packages.sh installs it)."""
    return CHROMIUM if os.access(CHROMIUM, os.X_OK) else shutil.which("chromium")


def _high_fd(fd: int) -> int:
    """A copy of fd numbered 10 or above, so that moving it onto 3 or 4 in the child clobbers nothing."""
    copy = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return copy


@dataclass
class Chromium:
    """One browser process; `page()` opens tabs. Use as a context manager."""

    args: Sequence[str] = ()
    timeout_s: float = 30.0
    process: subprocess.Popen[bytes] | None = None
    _write_fd: int = -1
    _messages: queue.Queue[dict[str, Any]] = field(default_factory=queue.Queue)
    _events: list[dict[str, Any]] = field(default_factory=list)
    _next_id: int = 0
    _profile: str = ""

    def __enter__(self) -> Chromium:
        binary = find_chromium()
        if binary is None:
            raise BrowserError(f"chromium not found at {CHROMIUM} or on PATH: run hack/setup.sh "
                               "(it installs Debian's chromium package)")
        self._profile = tempfile.mkdtemp(prefix="kt2t-chromium-")
        commands_r, commands_w = (_high_fd(fd) for fd in os.pipe())
        answers_r, answers_w = (_high_fd(fd) for fd in os.pipe())
        # bash (dash takes no fd above 9) moves the pipe ends onto fds 3 and 4, then execs Chromium.
        moved = f'exec "$@" 3<&{commands_r} 4>&{answers_w} {commands_r}<&- {answers_w}>&-'
        self.process = subprocess.Popen(
            ["bash", "-c", moved, "bash", binary, *FLAGS, f"--user-data-dir={self._profile}", "--remote-debugging-pipe",
             *self.args],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=(commands_r, answers_w))
        os.close(commands_r)
        os.close(answers_w)
        self._write_fd = commands_w
        threading.Thread(target=self._read, args=(answers_r,), daemon=True).start()
        self.send("Browser.getVersion")
        return self

    def __exit__(self, *_: object) -> None:
        if self.process is not None:
            with contextlib.suppress(BrowserError, OSError):
                self.send("Browser.close", timeout_s=5)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        with contextlib.suppress(OSError):
            os.close(self._write_fd)
        shutil.rmtree(self._profile, ignore_errors=True)

    def _read(self, fd: int) -> None:
        buffer = b""
        with os.fdopen(fd, "rb", buffering=0) as answers:
            while chunk := answers.read(1 << 16):
                buffer += chunk
                *messages, buffer = buffer.split(b"\0")
                for message in messages:
                    self._messages.put(json.loads(message))
        self._messages.put({"closed": True})

    def _take(self, deadline: float) -> dict[str, Any]:
        try:
            message = self._messages.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            raise BrowserError("chromium did not answer in time") from None
        if message.get("closed"):
            raise BrowserError("chromium closed its DevTools pipe (it exited)")
        return message

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
             timeout_s: float | None = None) -> dict[str, Any]:
        """Sends one command; returns its result (events that arrive meanwhile are kept)."""
        self._next_id += 1
        command: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            command["sessionId"] = session
        os.write(self._write_fd, json.dumps(command).encode() + b"\0")
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        while True:
            message = self._take(deadline)
            if message.get("id") == command["id"]:
                if "error" in message:
                    raise BrowserError(f"{method}: {message['error']}")
                return message.get("result", {})
            self._events.append(message)

    def wait_event(self, method: str, session: str | None, timeout_s: float | None = None) -> dict[str, Any]:
        """The first event `method` of `session` not yet consumed, waiting for it if needed."""
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        while True:
            for index, event in enumerate(self._events):
                if event.get("method") == method and event.get("sessionId") == session:
                    return self._events.pop(index).get("params", {})
            self._events.append(self._take(deadline))

    def events(self, method: str, session: str | None) -> list[dict[str, Any]]:
        """Every event `method` of `session` received so far (kept)."""
        return [e.get("params", {}) for e in self._events
                if e.get("method") == method and e.get("sessionId") == session]

    @contextlib.contextmanager
    def page(self, width: int = 1280, height: int = 800, dark: bool = False) -> Iterator[Page]:
        """A new tab of width x height (CSS pixels), optionally preferring the dark colour scheme."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session)
        for domain in ("Page", "Network", "Runtime", "Log"):
            self.send(f"{domain}.enable", session=session)
        self.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1,
                                                          "mobile": False}, session=session)
        if dark:
            self.send("Emulation.setEmulatedMedia",
                      {"features": [{"name": "prefers-color-scheme", "value": "dark"}]}, session=session)
        try:
            yield page
        finally:
            with contextlib.suppress(BrowserError):
                self.send("Target.closeTarget", {"targetId": target})


@dataclass
class Page:
    browser: Chromium
    session: str

    def load(self, url: str) -> None:
        """Navigates and waits for the load event."""
        answer = self.browser.send("Page.navigate", {"url": url}, session=self.session)
        if answer.get("errorText"):
            raise BrowserError(f"navigate to {url}: {answer['errorText']}")
        self.browser.wait_event("Page.loadEventFired", self.session)

    def evaluate(self, expression: str) -> Any:
        """The JSON value of a JavaScript expression (promises awaited)."""
        answer = self.browser.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                         "awaitPromise": True}, session=self.session)
        if "exceptionDetails" in answer:
            raise BrowserError(f"evaluate: {answer['exceptionDetails']}")
        return answer["result"].get("value")

    def screenshot(self, path: Path, full_page: bool = False) -> Path:
        params: dict[str, Any] = {"format": "png", "captureBeyondViewport": full_page}
        if full_page:
            width, height = self.evaluate("[document.documentElement.scrollWidth, "
                                          "document.documentElement.scrollHeight]")
            params["clip"] = {"x": 0, "y": 0, "width": width, "height": height, "scale": 1}
        data = self.browser.send("Page.captureScreenshot", params, session=self.session)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def requested_urls(self) -> list[str]:
        """Every URL the page asked the network stack for, as DevTools saw them."""
        return [e["request"]["url"] for e in self.browser.events("Network.requestWillBeSent", self.session)]

    def log_entries(self) -> list[dict[str, Any]]:
        """Browser log entries (CSP violations, failed loads) of this page."""
        return [e["entry"] for e in self.browser.events("Log.entryAdded", self.session)]

    def dialogs(self) -> list[dict[str, Any]]:
        """alert()/confirm() dialogs the page opened (a script that ran)."""
        return self.browser.events("Page.javascriptDialogOpening", self.session)
