"""What the status page's tests share: a story run for real with a secret in its output
(:func:`serve_model`, :func:`story_file`), the page's parser (:class:`Page`), and the URL
`hero serve` prints."""

from __future__ import annotations

import json
import re
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from export_support import RIGHT, WRONG
from helpers import is_review, step_of, worker_round

from hero.llm.scripted import Reply, call, text

SECRET = "sk-serve-test-0a1b2c3d4e5f60718293"


DIFF_MARK = '<script>alert("diff")</script>'


SUMMARY_MARK = '<img src=x onerror=alert("summary")>'


COMMENT_MARK = '<script>alert("comment")</script>'


def serve_model(body: dict[str, Any]) -> Reply:
    """Round 1 writes a wrong `sub` (its check fails), round 2 the right one, each with a
    hostile line in the file; the reviewer approves round 2 with a hostile comment."""
    if is_review(body):  # round 2 only: round 1's failed check decides it without a call
        return text(
            json.dumps(
                {
                    "verdict": "APPROVED",
                    "summary": "Fine. <b>bold</b>",
                    "ac_check": [{"ac": "`calc.sub(5, 3) == 2`", "satisfied": True}],
                    "comments": [
                        {
                            "file": "calc/__init__.py",
                            "line": 6,
                            "severity": "nit",
                            "comment": COMMENT_MARK,
                        }
                    ],
                }
            )
        )
    code = (RIGHT if worker_round(body) > 1 else WRONG) + f"# {DIFF_MARK}\n"
    plan = [
        call("write_file", path="calc/__init__.py", content=code),
        call("bash", command=f"git add -A && git commit -q -m sub-{worker_round(body)}"),
        text(f"Wrote sub. {SUMMARY_MARK} (key {SECRET})"),
    ]
    return plan[min(step_of(body), len(plan) - 1)]


def story_file(home: Path, story_id: str, title: str, verify: list[str]) -> Path:
    import yaml

    front = {"id": story_id, "title": title, "verify": verify}
    path = home / "inbox" / f"{story_id}.md"
    path.write_text(
        "---\n" + yaml.safe_dump(front, sort_keys=False) + "---\n\n## Goal\nAdd sub.\n\n"
        "## Acceptance Criteria\n- [ ] `calc.sub(5, 3) == 2`\n"
    )
    return path


class Page(HTMLParser):
    """What a browser would make of a page: its tags with attributes, and its text."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    @property
    def all_text(self) -> str:
        return "".join(self.text)


def wait_line(proc: subprocess.Popen[str], lines: list[str], pattern: str) -> re.Match[str]:
    """The first line of the process's stderr that matches ``pattern`` (lines kept)."""
    assert proc.stderr is not None
    while True:  # readline blocks; the process ends (EOF) if it never says it
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        m = re.search(pattern, line)
        if m:
            return m
    proc.kill()
    raise AssertionError(f"no line matching {pattern!r}:\n" + "".join(lines))


def url_from(proc: subprocess.Popen[str], lines: list[str]) -> str:
    """The URL a server logs (``serving on http://...``), read from its stderr."""
    return wait_line(proc, lines, r"serving on (http://127\.0\.0\.1:\d+)").group(1)
