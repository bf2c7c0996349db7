"""Headless Chromium driven through the DevTools protocol over a pipe
(``--remote-debugging-pipe``: commands in on fd 3, answers out on fd 4, each a JSON text
ended by a NUL byte). No Python package is needed, nothing listens on a port; the test
sets the window's width, emulates ``prefers-color-scheme``, loads a page, reads its DOM
measurements with ``Runtime.evaluate`` and takes a PNG."""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
#: One protocol answer; generous, for a loaded 2-core machine. Not an assertion on speed.
ANSWER_TIMEOUT_S = 180.0

#: What no element may do: be wider than the viewport, or reach beyond its right edge
#: (outside a box that scrolls on its own); and a title column narrower than a few letters.
OVERFLOW_JS = r"""
(() => {
  const W = window.innerWidth;
  const out = [];
  const doc = document.documentElement.scrollWidth;
  if (doc > W) out.push(`document scrollWidth ${doc} > innerWidth ${W}`);
  const boxed = (el) => {
    for (let p = el.parentElement; p; p = p.parentElement) {
      const o = getComputedStyle(p).overflowX;
      if (o === "auto" || o === "scroll" || o === "hidden") return true;
    }
    return false;
  };
  for (const el of document.querySelectorAll("body *")) {
    const r = el.getBoundingClientRect();
    if (!r.width || !r.height) continue;
    if (r.right > W + 0.5 && !boxed(el)) {
      out.push(`${el.tagName.toLowerCase()}.${el.className} right ${Math.round(r.right)} > ${W}`);
    }
  }
  for (const el of document.querySelectorAll("td.title, .story-title")) {
    const r = el.getBoundingClientRect();
    if (r.width && el.textContent.trim().length > 8 && r.width < 80) {
      out.push(`${el.tagName.toLowerCase()}.${el.className} only ${Math.round(r.width)} px wide`);
    }
  }
  return {problems: out.slice(0, 30), width: W, scrollWidth: doc};
})()
"""


class CdpError(AssertionError):
    pass


class Chromium:
    """One headless Chromium and one page in it."""

    def __init__(self, binary: str, profile: Path) -> None:
        to_r, self._to = os.pipe()
        self._from, from_w = os.pipe()

        def fds() -> None:  # in the child: its fd 3 reads our commands, fd 4 answers
            os.dup2(to_r, 3)
            os.dup2(from_w, 4)

        self.proc = subprocess.Popen(
            [
                binary,
                "--headless",
                "--no-sandbox",  # CI runs as root, in a container; pages from loopback
                "--disable-gpu",
                "--no-first-run",
                "--disable-extensions",
                "--disable-background-networking",
                "--hide-scrollbars",
                "--remote-debugging-pipe",
                f"--user-data-dir={profile}",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=fds,
            # not close_fds: it would close fds 3 and 4 after fds() made them. Python's
            # own descriptors are not inheritable (PEP 446): only these two pass.
            close_fds=False,
        )
        os.close(to_r)
        os.close(from_w)
        self._buf = b""
        self._id = 0
        self.events: list[dict[str, Any]] = []
        self.session = ""

    def close(self) -> None:
        for fd in (self._to, self._from):
            try:
                os.close(fd)
            except OSError:
                pass
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def _message(self) -> dict[str, Any]:
        deadline = time.monotonic() + ANSWER_TIMEOUT_S
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from], [], [], left)[0]:
                raise CdpError("chromium did not answer")
            chunk = os.read(self._from, 1 << 20)
            if not chunk:
                raise CdpError(f"chromium closed the pipe (exit {self.proc.poll()})")
            self._buf += chunk
        text, _, self._buf = self._buf.partition(b"\0")
        return dict(json.loads(text))

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        self._id += 1
        message: dict[str, Any] = {"id": self._id, "method": method, "params": params}
        if self.session and not method.startswith("Target."):
            message["sessionId"] = self.session
        os.write(self._to, json.dumps(message).encode() + b"\0")
        while True:
            got = self._message()
            if got.get("id") == self._id:
                if "error" in got:
                    raise CdpError(f"{method}: {got['error']}")
                return dict(got.get("result") or {})
            self.events.append(got)

    def wait_event(self, method: str) -> dict[str, Any]:
        while True:
            for i, event in enumerate(self.events):
                if event.get("method") == method:
                    return self.events.pop(i)
            self.events.append(self._message())

    def open_page(self) -> None:
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.send("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        self.send("Page.enable")
        self.send("Page.setBypassCSP", enabled=True)  # so that Runtime.evaluate may measure

    def show(self, url: str, width: int, scheme: str) -> None:
        """Load ``url`` in a window ``width`` px wide, the system's scheme ``scheme``."""
        self.send(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=900,
            deviceScaleFactor=1,
            mobile=width < 700,
        )
        self.send(
            "Emulation.setEmulatedMedia",
            features=[{"name": "prefers-color-scheme", "value": scheme}],
        )
        self.events.clear()
        self.send("Page.navigate", url=url)
        self.wait_event("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        found = self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in found:
            raise CdpError(f"{expression[:80]}: {found['exceptionDetails']}")
        return found["result"].get("value")

    def screenshot(self, path: Path) -> Path:
        data = self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.write_bytes(base64.b64decode(data["data"]))
        return path


def start_chromium(profile: Path) -> Chromium | str:
    """A Chromium that answers the protocol, or why there is none."""
    tried = []
    for name in CHROMIUM_NAMES:
        binary = shutil.which(name)
        if binary is None:
            continue
        browser = Chromium(binary, profile)
        try:
            browser.send("Browser.getVersion")
            browser.open_page()
            return browser
        except (CdpError, OSError) as exc:
            browser.close()
            tried.append(f"{binary}: {exc}")
    if not tried:
        return (
            f"no headless browser: none of {', '.join(CHROMIUM_NAMES)} is on PATH "
            "(.ci/run installs Debian's chromium; `apt-get install chromium`)"
        )
    return "no Chromium answers the DevTools protocol here: " + "; ".join(tried)
