"""Any screen (issue 37): headless Chromium shows the board, a story and a plan at 360, 768
and 1440 px wide (and the bench's list and one folder's report), in light and in dark (``prefers-color-scheme`` emulated through the
DevTools protocol), from a real `hero serve` process over a home with a day of work and a
story whose round changed files in a real git repository. On each: the document is no
wider than the window, no element reaches beyond its right edge (but inside a box that
scrolls on its own), no title is squeezed to a few letters a line; dark mode changes the
background. A PNG of each is saved in the test's folder, or in ``HERO_SCREENSHOTS_DIR``
when set (to look at them). Chromium missing: skipped, saying why."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from board_support import record, write_day
from cdp_support import OVERFLOW_JS, Chromium, start_chromium
from conftest import git
from serve_support import url_from

from hero.evals.folders import record_folder
from hero.evals.results import Result, append_line, results_path
from hero.llm.scripted import ScriptedModel

pytestmark = pytest.mark.slow  # a browser and a server, 18 pages

pytest.importorskip("starlette", reason="the serve extra is not installed")

WIDTHS = (360, 768, 1440)
SCHEMES = ("light", "dark")
LONG_TITLE = (
    "Make the login form accept e-mail addresses with plus signs and "
    "Internationalized_Domain_Names_Without_Any_Space_In_Them_At_All_Whatsoever"
)


@pytest.fixture
def chromium(tmp_path: Path) -> Iterator[Chromium]:
    found = start_chromium(tmp_path / "chromium-profile")
    if isinstance(found, str):
        pytest.skip(found)
    yield found
    found.close()


BENCH_CONFIGS = ("baseline", "hero-with-a-long-configuration-name-" + "x" * 40)


def write_bench(home: Path, out: Path) -> str:
    """A `hero bench run` output folder as it writes it (a results line per task and run for
    two configurations, one with a long name), recorded in the home; its name."""
    out.mkdir(parents=True, exist_ok=True)
    for c, config in enumerate(BENCH_CONFIGS):
        for n in range(8):
            result = Result(
                instance_id=f"repo__task_with_a_long_identifier_{n}",
                run=1,
                resolved=(n + c) % 3 != 0,
                rounds=1 + n % 3,
                tokens=1000 + 10 * n,
                cost_usd=0.02 * (1 + c),
                wall_s=20.0 + n,
                status="passed" if (n + c) % 3 else "gave_up",
            )
            append_line(results_path(out, config), result.to_json())
    return record_folder(home, out, BENCH_CONFIGS).name


@pytest.fixture
def served(
    make_home: Any, scripted: Callable[..., ScriptedModel], target_repo: Path
) -> Iterator[str]:
    """`hero serve` over a day of work; login-form's two rounds changed files in the
    target repository (its page shows a coloured diff)."""
    home = make_home(scripted([]), max_story_tokens=5000, max_story_cost_usd=1.5)
    write_day(home)
    base = git(target_repo, "rev-parse", "HEAD").strip()
    (target_repo / "login.py").write_text(
        "def login(address):\n    return '+' in address or address.endswith('.example')\n"
    )
    (target_repo / ("docs-" + "x" * 60 + ".md")).write_text("a " * 400 + "\n")
    git(target_repo, "add", "-A")
    git(target_repo, "commit", "-qm", "login")
    head = git(target_repo, "rev-parse", "HEAD").strip()
    data = record("login-form", title=LONG_TITLE, base_sha=base, head_sha=head)
    data["rounds"][0]["head_sha"] = head
    data["rounds"][1]["head_sha"] = head
    data["rounds"][0]["review"] = {"verdict": "CHANGES_REQUESTED", "summary": "y " * 300}
    data["rounds"][1]["review"] = {"verdict": "APPROVED", "summary": "fine"}
    (home / "runs" / "state" / "login-form.json").write_text(json.dumps(data))
    write_bench(home, target_repo.parent / "bench-out")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    argv = [sys.executable, "-m", "hero", "serve", "--home", str(home)]
    proc = subprocess.Popen(
        [*argv, "--bind", "127.0.0.1:0", "--log-format", "json"],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    logs: list[str] = []
    try:
        url = url_from(proc, logs)
        assert proc.stderr is not None
        threading.Thread(target=logs.extend, args=(proc.stderr,), daemon=True).start()
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert "Traceback" not in "".join(logs), "".join(logs)[-3000:]


def test_every_page_fits_every_screen_in_light_and_dark(
    tmp_path: Path, chromium: Chromium, served: str
) -> None:
    shots = Path(os.environ.get("HERO_SCREENSHOTS_DIR") or tmp_path / "screens")
    shots.mkdir(parents=True, exist_ok=True)
    started = time.time_ns() - 2_000_000_000  # a file system's clock may lag a little
    pages = {
        "board": "/",
        "story": "/stories/login-form",
        "plan": "/plans/pl",
        "bench": "/bench",
        "bench-folder": "/bench/bench-out",
    }
    problems: dict[str, list[str]] = {}
    backgrounds: dict[tuple[str, str], str] = {}
    for name, path in pages.items():
        for width in WIDTHS:
            for scheme in SCHEMES:
                chromium.show(served + path, width, scheme)
                if name == "story":  # the diffs and tool calls open, as a reader opens them
                    chromium.evaluate(
                        "document.querySelectorAll('details').forEach(d => d.open = true)"
                    )
                found = chromium.evaluate(OVERFLOW_JS)
                if name == "board" and width == 360:  # a phone: the wide tables as cards,
                    # nothing to scroll sideways (each fits the window)
                    wide = chromium.evaluate(
                        "[...document.querySelectorAll('table.stack')]"
                        ".filter(t => t.scrollWidth > t.clientWidth + 1"
                        " || t.getBoundingClientRect().right > innerWidth + 1)"
                        ".map(t => t.className)"
                    )
                    found["problems"] = [*found["problems"], *(f"{c} scrolls" for c in wide)]
                # a phone's window grows to fit a page wider than it: that is the failure
                grew = [] if found["width"] == width else [f"the window grew to {found}"]
                if found["problems"] or grew:
                    problems[f"{name} {width} {scheme}"] = grew + found["problems"]
                backgrounds[(name, scheme)] = chromium.evaluate(
                    "getComputedStyle(document.body).backgroundColor"
                )
                shot = chromium.screenshot(shots / f"{name}-{width}-{scheme}.png")
                assert shot.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert not problems, json.dumps(problems, indent=1)
    for name in pages:
        assert backgrounds[(name, "light")] == "rgb(255, 255, 255)"
        assert backgrounds[(name, "dark")] != backgrounds[(name, "light")]
    # every screen's PNG, in HERO_SCREENSHOTS_DIR when it is set (the lead cites them)
    written = {p.name for p in shots.glob("*.png") if p.stat().st_mtime_ns >= started}
    assert written >= {f"{n}-{w}-{s}.png" for n in pages for w in WIDTHS for s in SCHEMES}


def test_the_story_page_colours_its_diff_and_lists_its_files(
    chromium: Chromium, served: str
) -> None:
    chromium.show(served + "/stories/login-form", 1440, "light")
    found = chromium.evaluate(
        "({adds: document.querySelectorAll('.d-add').length,"
        " hunks: document.querySelectorAll('.d-hunk').length,"
        " files: [...document.querySelectorAll('.diff-files a')].map(a => a.textContent),"
        " targets: [...document.querySelectorAll('.diff-files a')]"
        "   .map(a => !!document.getElementById(a.getAttribute('href').slice(1)))})"
    )
    assert found["adds"] >= 2 and found["hunks"] >= 2, found
    assert "login.py" in found["files"], found
    assert found["targets"] and all(found["targets"]), found
