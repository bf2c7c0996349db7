"""`hero serve` in a real browser: a story with a hostile title runs with the scripted model
(real `hero run`, real git, loopback HTTP) while `hero serve` is up in its own process;
headless Chromium loads the board while the story runs and again after it passed, then the
story's page, and the test reads the DOM Chromium made (after the page's script ran): the
story, its status, its two verdicts, the hostile title as text, and nothing the title
carried ran. A screenshot of each page is saved in the test's temporary folder.

Chromium is a system package (Debian's `chromium`; `.ci/run` installs it when missing);
where none starts, the test is skipped, saying why."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from export_support import CHECK_SUB
from helpers import is_review, step_of, worker_round
from serve_support import SECRET, Page, serve_model, story_file, url_from

from hero.llm.scripted import Reply, ScriptedModel

pytestmark = pytest.mark.slow  # end to end: every test here runs hero for real

pytest.importorskip("starlette", reason="the serve extra is not installed")


# If either piece ran, the page's title would read PWNED or its body would have the id
# "owned": neither word appears in the title itself, so finding one in the DOM means it ran.
HOSTILE_TITLE = (
    "<script>document.title='PW'+'NED'</script>"
    "<img src=x onerror=\"document.body.id='own'+'ed'\"> & co"
)
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
BROWSER_TIMEOUT_S = 180  # one page load; generous, for a loaded 2-core machine


class Browser:
    """Headless Chromium driven from its command line: ``dom(url)`` is the DOM after the
    page loaded and its scripts ran (``--dump-dom``), ``screenshot(url, path)`` a PNG."""

    def __init__(self, binary: str, profile: Path) -> None:
        self.binary = binary
        self.profile = profile

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        argv = [
            self.binary,
            "--headless",
            # Chromium's sandbox refuses to start as root (CI runs as root, in a container
            # that is itself the isolation); the pages it loads are hero's, from loopback.
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            "--disable-background-networking",  # no request but the page's
            f"--user-data-dir={self.profile}",  # a throwaway profile, never the user's
            *args,
        ]
        return subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=BROWSER_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )

    def dom(self, url: str) -> str:
        done = self._run("--dump-dom", url)
        assert done.returncode == 0, f"chromium --dump-dom {url}: {done.stderr[-2000:]}"
        return done.stdout

    def screenshot(self, url: str, path: Path) -> Path:
        done = self._run(f"--screenshot={path}", "--window-size=1280,900", url)
        assert done.returncode == 0, f"chromium --screenshot {url}: {done.stderr[-2000:]}"
        return path


def find_chromium(profile: Path) -> Browser | str:
    """A Chromium that starts (it loads about:blank), or why there is none."""
    tried = []
    for name in CHROMIUM_NAMES:
        binary = shutil.which(name)
        if binary is None:
            continue
        browser = Browser(binary, profile)
        try:
            done = browser._run("--dump-dom", "about:blank")
        except (OSError, subprocess.TimeoutExpired) as exc:
            tried.append(f"{binary}: {exc}")
            continue
        if done.returncode == 0 and "<body" in done.stdout:
            return browser
        tried.append(f"{binary}: exit {done.returncode}: {done.stderr.strip()[-300:]}")
    if not tried:
        return (
            f"no headless browser: none of {', '.join(CHROMIUM_NAMES)} is on PATH "
            "(.ci/run installs Debian's chromium; `apt-get install chromium`)"
        )
    return "no Chromium starts here: " + "; ".join(tried)


@pytest.fixture
def browser(tmp_path: Path) -> Browser:
    found = find_chromium(tmp_path / "chromium-profile")
    if isinstance(found, str):
        pytest.skip(found)
    return found


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[[Path], str]]:
    """serve(home) -> the base URL of `hero serve --bind 127.0.0.1:0` on that home, a real
    process, stopped with SIGTERM after the test: it exits 0 and logged no traceback."""
    procs: list[subprocess.Popen[str]] = []
    logs: list[str] = []

    def start(home: Path) -> str:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        argv = [sys.executable, "-m", "hero", "serve", "--home", str(home)]
        proc = subprocess.Popen(
            [*argv, "--bind", "127.0.0.1:0", "--log-format", "json"],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        procs.append(proc)
        url = url_from(proc, logs)
        # Its log (a line a request) is read as it comes: a full pipe would stall it.
        assert proc.stderr is not None
        threading.Thread(target=logs.extend, args=(proc.stderr,), daemon=True).start()
        return url

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                assert proc.wait(timeout=60) == 0
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    assert "Traceback" not in "".join(logs), "".join(logs)[-3000:]


def story_row(dom: str, key: str) -> Page:
    """The board's row of one story, as a browser would read it."""
    m = re.search(rf'<tr class="story" data-key="{re.escape(key)}">(.*?)</tr>', dom, re.S)
    assert m, f"no row for {key} on the board:\n{dom[:3000]}"
    return Page(m.group(1))


def assert_nothing_ran(dom: str) -> Page:
    """The hostile title is text: the DOM holds it escaped, no element it carried exists,
    and what its script and handler would have done did not happen."""
    page = Page(dom)
    assert HOSTILE_TITLE in page.all_text
    assert "&lt;script&gt;document.title=" in dom and "&lt;img src=x onerror=" in dom
    scripts = [a.get("src") or "" for t, a in page.tags if t == "script"]
    assert scripts and all(src.startswith("/static/") for src in scripts), scripts
    assert not [a for t, a in page.tags if t == "img"]
    assert "PWNED" not in dom and 'id="owned"' not in dom
    return page


def test_the_board_and_the_story_page_in_a_browser(
    tmp_path: Path,
    browser: Browser,
    serve: Callable[[Path], str],
    make_home: Any,
    scripted: Callable[..., ScriptedModel],
) -> None:
    # The worker's first request of round 1 is held until the board was seen with the story
    # running: no timing, the model answers when the test says so.
    reached, release = threading.Event(), threading.Event()

    def held(body: dict[str, Any]) -> Reply:
        if not is_review(body) and worker_round(body) == 1 and step_of(body) == 0:
            reached.set()
            release.wait(600)
        return serve_model(body)

    home = make_home(scripted(held), sandbox="none")
    (home / "config.local.yaml").write_text(f"keys:\n  scripted: {SECRET}\n")
    story = story_file(home, "s1", HOSTILE_TITLE, [CHECK_SUB])
    url = serve(home)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    run = subprocess.Popen(
        [sys.executable, "-m", "hero", "run", str(story), "--home", str(home)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        assert reached.wait(300), "the worker never called the model"
        live = browser.dom(url + "/")
        row = story_row(live, "s1")
        assert "running" in row.all_text and "worker" in row.all_text
        assert_nothing_ran(live)
        running = browser.dom(url + "/stories/s1")
        assert "in progress" in Page(running).all_text
        browser.screenshot(url + "/", tmp_path / "board-running.png")
    finally:
        release.set()
        try:
            out, _ = run.communicate(timeout=600)
        finally:
            if run.poll() is None:
                run.kill()
                run.wait()
    assert run.returncode == 0, out

    board = browser.dom(url + "/")
    row = story_row(board, "s1")
    assert "passed" in row.all_text and HOSTILE_TITLE in row.all_text
    assert re.search(r'<a href="/stories/s1">s1</a>', board)
    assert_nothing_ran(board)
    assert SECRET not in board

    page = browser.dom(url + "/stories/s1")
    text = assert_nothing_ran(page).all_text
    assert SECRET not in page
    verdicts = [
        Page(m.group(1)).all_text
        for m in re.finditer(r'<p class="verdict[^"]*">(.*?)</p>', page, re.S)
    ]
    assert [v.split()[0] for v in verdicts] == ["CHANGES_REQUESTED", "APPROVED"], verdicts
    assert "passed" in text and "round 2" in text.lower()
    record = json.loads((home / "runs" / "state" / "s1.json").read_text())
    assert [r["review"]["verdict"] for r in record["rounds"]] == [
        "CHANGES_REQUESTED",
        "APPROVED",
    ]

    for name, path in (("board", "/"), ("story", "/stories/s1")):
        shot = browser.screenshot(url + path, tmp_path / f"{name}.png")
        data = shot.read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 1000, name
    assert (tmp_path / "board-running.png").read_bytes().startswith(b"\x89PNG")
