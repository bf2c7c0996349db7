"""`hero report`: a story run for real (two rounds, scripted model over loopback HTTP, real
git), then its Markdown report: what it holds, and that what the model wrote cannot break
its tables, inject HTML or ping anyone."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import git
from export_support import CHECK_SUB, SECRET, Start, two_story_home

from hero.cli import main
from hero.views.report import fenced, md


@pytest.fixture
def ran(scripted: Start, make_home, write_story) -> Path:
    return two_story_home(scripted, make_home, write_story)


def report(home: Path, capsys: pytest.CaptureFixture[str], key: str = "s1") -> str:
    capsys.readouterr()
    assert main(["report", "--home", str(home), key]) == 0
    return capsys.readouterr().out


def rows(text: str, section: str) -> list[str]:
    """The table rows of a section, header and rule left out."""
    part = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    table = [ln for ln in part.splitlines() if ln.startswith("|")]
    return table[2:]


def cells(row: str) -> list[str]:
    """A row's cells, split on the pipes that are not escaped."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", row)[1:-1]]


@pytest.mark.slow
def test_the_report_of_a_two_round_story(
    ran: Path, target_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = report(ran, capsys)
    state = json.loads((ran / "runs" / "state" / "s1.json").read_text())
    assert text.startswith("# Story s1\n")
    head = text.split("## Rounds", 1)[0]
    summary = {cells(r)[0]: cells(r)[1] for r in head.splitlines()[4:] if r.startswith("|")}
    assert summary["status"] == "**passed**"
    assert summary["branch"] == "hero/s1"
    assert summary["base..head"].startswith(f"{state['base_sha'][:12]}..{state['head_sha'][:12]}")
    assert summary["rounds"] == "2"
    usage = state["usage"]
    assert summary["tokens"] == (
        f"{usage['tokens_in']:,} in ({usage['tokens_cached']:,} cached), "
        f"{usage['tokens_out']:,} out"
    )
    assert summary["model calls"] == str(usage["llm_calls"])
    assert summary["cost"] == "not known"  # the scripted model reports none
    assert summary["wall time"].endswith(" s")

    first, second = (cells(r) for r in rows(text, "Rounds"))
    assert first[0] == "1" and first[1] == "3 turns, 2 tool calls (done)"
    assert first[2].startswith("**failed**: ") and "from calc import sub" in first[2]
    assert "(exit 1)" in first[2]
    assert first[3].startswith("**CHANGES\\_REQUESTED**")
    assert second[:3] == ["2", "3 turns, 2 tool calls (done)", "passed (1)"]
    # the reviewer's summary, "Fine | <b>bold</b>\nnext line", on one row, shown as text
    assert second[3] == "**APPROVED**: Fine \\| &lt;b&gt;bold&lt;/b&gt; next line"
    assert "<b>" not in text

    final = text.split("## Final verdict (round 2)\n", 1)[1]
    assert final.lstrip().startswith("**APPROVED**: Fine")
    changes = text.split("## Changes\n", 1)[1]
    stat = git(target_repo, "diff", "--stat=100", f"{state['base_sha']}..hero/s1")
    assert "calc/__init__.py" in changes and stat.strip().splitlines()[-1] in changes
    assert CHECK_SUB.split()[0] not in changes

    out = tmp_path / "r.md"
    assert main(["report", "--home", str(ran), "s1", "-o", str(out)]) == 0
    assert out.read_text().split("_Written by")[0] == text.split("_Written by")[0]


@pytest.mark.slow
def test_model_text_cannot_break_the_report(
    ran: Path,
    target_repo: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hostile = (
        "a | b\n| forged | row |\n<script>alert(1)</script> ![x](http://evil/p.png) "
        f"[link](http://evil) **bold** `code` @someone Fixes #12 \x1b[31m {SECRET}"
    )
    path = ran / "runs" / "state" / "s1.json"
    state = json.loads(path.read_text())
    last = state["rounds"][-1]
    last["review"]["summary"] = hostile
    last["review"]["comments"] = [
        {"file": "a|b.py", "line": 3, "severity": "major\n# heading", "comment": hostile}
    ]
    last["review"]["ac_check"] = [{"ac": hostile, "satisfied": False}]
    last["worker"]["stop_reason"] = "done | x"
    path.write_text(json.dumps(state))
    # a file whose name has backticks, on the story's branch
    work = tmp_path / "side"
    git(target_repo, "worktree", "add", "-q", "--detach", str(work), "hero/s1")
    (work / "x````y.txt").write_text("hi\n")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "odd name")
    git(target_repo, "update-ref", "refs/heads/hero/s1", git(work, "rev-parse", "HEAD").strip())
    # a key the configuration learns after the record was written
    provider = ran / "config" / "providers" / "scripted.yaml"
    provider.write_text(provider.read_text() + "api_key_env: REPORT_TEST_KEY\n")
    monkeypatch.setenv("REPORT_TEST_KEY", SECRET)

    text = report(ran, capsys)
    assert SECRET not in text and "[redacted]" in text
    for bad in ("<script", "![", "[link](http", "**bold**", "`code`", "\x1b", "\n# heading"):
        assert bad not in text, bad
    assert "@someone" not in text and "Fixes #12" not in text  # made inert
    assert len(rows(text, "Rounds")) == 2  # no row forged
    for row in rows(text, "Rounds"):
        assert len(cells(row)) == 4, row
    assert "done \\| x" in rows(text, "Rounds")[1]
    # the diff stat's fence is longer than the backticks in the file name
    changes = text.split("## Changes\n", 1)[1]
    assert "`````\n" in changes and "x````y.txt" in changes


@pytest.mark.slow
def test_a_branch_gone_and_an_unknown_story(
    ran: Path, target_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    git(target_repo, "branch", "-D", "hero/s2")
    text = report(ran, capsys, "s2")
    assert "**gave\\_up**" in text
    assert "The branch hero/s2 is gone" in text
    assert main(["report", "--home", str(ran), "nope"]) == 2
    assert "no story 'nope'" in capsys.readouterr().err


def test_escaping_helpers() -> None:
    assert md("a|b\nc") == "a\\|b c"
    assert md("<i>&") == "&lt;i&gt;&amp;"
    assert md("[x](y) *z* _w_ ~v~") == "\\[x\\](y) \\*z\\* \\_w\\_ \\~v\\~"
    assert md("\x07bell") == "\\\\x07bell"  # shown as \\x07bell
    assert md("x" * 50, limit=10) == "x" * 9 + "…"
    assert fenced("a ``` b") == "````\na ``` b\n````"
    assert fenced("plain") == "```\nplain\n```"
