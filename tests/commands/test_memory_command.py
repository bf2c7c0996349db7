"""`hero memory list|show|add|promote|forget|edit|export` end to end: the real CLI in a subprocess, a
real home and repository, and an editor that is a small Python script."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hero.config.loader import load_config
from hero.memory import store_for
from hero.memory.facts import Kind, Role, Source, Trust, new_fact
from hero.memory.store import MemoryStore, Recap

TIMEOUT_S = 120.0  # a "did not hang" bound, not a speed check
SECRET = "ghs-local-secret-0123456789"

#: The editor: replaces $OLD with $NEW in the file (a replacement that must apply), or
#: exits 3 when $FAIL is set.
EDITOR = textwrap.dedent(
    """\
    import os, sys
    if os.environ.get("FAIL"):
        sys.exit(3)
    path = sys.argv[1]
    text = open(path).read()
    old, new = os.environ["OLD"], os.environ["NEW"]
    assert old in text, (old, text)
    open(path, "w").write(text.replace(old, new, 1))
    """
)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home, repo = tmp_path / "home", tmp_path / "repo"
    (home / "config").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (home / "config" / "roles.yaml").write_text(f"target_repo: {repo}\n")
    (home / "config.local.yaml").write_text(f"github_token: {SECRET}\n")
    return home


def memory_of(home: Path) -> MemoryStore:
    return store_for(load_config(home, roles=(), env={}))


def seed(home: Path) -> MemoryStore:
    s = memory_of(home)
    r = s.redactor
    s.add(
        [
            new_fact(  # a command's text: trust model, whatever the caller says
                "command", "Run APP_ENV=test pytest -q", Source("s1", 2, Role.VERIFIER), redactor=r
            ),
            new_fact(
                "convention",
                "Name test functions test_<unit>_<behaviour> " + "and more words " * 10,
                Source("gh-7", 1, Role.REVIEWER),
                redactor=r,
                trust=Trust.OUTSIDE,
            ),
            new_fact("convention", "Use snake_case", Source("s2"), redactor=r, always_on=True),
        ]
    )
    s.add_recap(Recap("s1", "passed", 2, changed="src/app.py", failed="pytest without APP_ENV"))
    return s


def hero(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **env}
    full.pop("VISUAL", None)
    if "EDITOR" not in env:
        full.pop("EDITOR", None)
    return subprocess.run(
        [sys.executable, "-m", "hero", "memory", *args, "--home", str(home)],
        capture_output=True,
        text=True,
        env=full,
        timeout=TIMEOUT_S,
    )


def editor(tmp_path: Path, old: str, new: str) -> dict[str, str]:
    script = tmp_path / "editor.py"
    script.write_text(EDITOR)
    return {
        "EDITOR": f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}",
        "OLD": old,
        "NEW": new,
    }


@pytest.mark.slow
def test_list_and_json(home: Path) -> None:
    empty = hero(home, "list")
    assert empty.returncode == 0 and "no facts in" in empty.stdout
    s = seed(home)
    out = hero(home, "list")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["ID", "KIND", "TRUST", "TOLD", "ALWAYS-ON", "SOURCE", "TEXT"]
    assert len(lines) == 4 and all(len(line) < 160 for line in lines)
    row = next(line for line in lines if "Use snake_case" in line)
    assert row.split()[1:5] == ["convention", "user", "yes", "yes"]
    assert "person (promoted from s2)" in row
    outside = next(line for line in lines if "gh-7 round 1 reviewer" in line)
    assert outside.split()[1:4] == ["convention", "outside", "no"]  # no evidence: not told
    command = next(line for line in lines if "APP_ENV" in line)
    assert command.split()[1:4] == ["command", "model", "no"]
    only = hero(home, "list", "--kind", "command", "--json")
    records = [json.loads(line) for line in only.stdout.splitlines()]
    assert [r["text"] for r in records] == ["Run APP_ENV=test pytest -q"]
    assert records[0] | {"at": 0} == {
        "id": s.facts()[0].id,
        "kind": "command",
        "text": "Run APP_ENV=test pytest -q",
        "trust": "model",
        "evidence": None,
        "recalled": False,
        "always_on": False,
        "story": "s1",
        "round": 2,
        "role": "verifier",
        "at": 0,
        "seen": 1,
    }
    bad = hero(home, "list", "--kind", "rule")
    assert bad.returncode == 2 and "invalid choice" in bad.stderr


@pytest.mark.slow
def test_show_and_forget(home: Path) -> None:
    s = seed(home)
    target = next(f for f in s.facts() if f.kind is Kind.COMMAND)
    shown = hero(home, "show", target.id[:5])
    assert shown.returncode == 0, shown.stderr
    assert "text:      Run APP_ENV=test pytest -q" in shown.stdout
    assert "round:     2" in shown.stdout and "always_on: no" in shown.stdout
    gone = hero(home, "forget", target.id[:6])
    assert gone.returncode == 0 and gone.stdout.startswith(f"forgot {target.id} [command] Run")
    assert target.id not in {f.id for f in memory_of(home).facts()}
    again = hero(home, "forget", target.id)
    assert again.returncode == 2 and "no fact with id" in again.stderr
    none = hero(home)
    assert none.returncode == 2 and "expected a command" in none.stderr


@pytest.mark.slow
def test_export_markdown(home: Path, tmp_path: Path) -> None:
    seed(home)
    out = hero(home, "export")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert text.startswith("# What hero remembers of repo\n")
    assert "## Conventions" in text and "## Commands" in text and "## Recent stories" in text
    assert "data, not an instruction" in text  # the outside fact is marked
    assert "test_‹unit›_‹behaviour›" in text  # its HTML-like text made inert
    assert "**s1**: passed after 2 rounds" in text and "Failed: pytest without APP_ENV." in text
    target = tmp_path / "out.md"
    written = hero(home, "export", "-o", str(target))
    assert written.returncode == 0 and target.read_text() == text


def test_edit_saves_a_valid_edit(home: Path, tmp_path: Path) -> None:
    s = seed(home)
    env = editor(
        tmp_path,
        "- [command] Run APP_ENV=test pytest -q",
        f"- [convention, always-on] Commit messages say why {SECRET}\n"
        "- [command] Run APP_ENV=test pytest -q -x",
    )
    out = hero(home, "edit", **env)
    assert out.returncode == 0, out.stderr
    assert "saved" in out.stdout and "4 facts, 1 recent stories" in out.stdout
    # the old wording is gone from the file: forgotten, so no story learns it again
    assert re.search(
        r"^forgot [0-9a-f]{12} \[command\] Run APP_ENV=test pytest -q$", out.stdout, re.M
    )
    assert len(s.read().forgotten) == 1
    texts = {f.text: f for f in s.facts()}
    assert "Run APP_ENV=test pytest -q -x" in texts
    mine = texts["Commit messages say why [redacted]"]
    assert mine.always_on and mine.trust is Trust.USER and mine.source.role is Role.PERSON
    assert SECRET not in s.path.read_text()


def test_edit_refuses_a_broken_edit_and_keeps_the_text(home: Path, tmp_path: Path) -> None:
    s = seed(home)
    before = s.path.read_text()
    env = editor(tmp_path, "- [command] Run", "- [comand] Run")
    out = hero(home, "edit", **env)
    assert out.returncode == 2
    assert "unknown kind 'comand'" in out.stderr and "nothing was written" in out.stderr
    kept = Path(out.stderr.rsplit("your text is kept in ", 1)[1].strip())
    assert f"{kept}:" in out.stderr  # the error names the copy and its line
    assert "- [comand] Run" in kept.read_text()
    assert s.path.read_text() == before


@pytest.mark.slow
def test_edit_unchanged_failed_or_without_editor(home: Path, tmp_path: Path) -> None:
    s = seed(home)
    before = s.path.read_text()
    same = hero(home, "edit", **editor(tmp_path, "Run", "Run"))
    assert same.returncode == 0 and "unchanged; nothing written" in same.stdout
    failed = hero(home, "edit", **editor(tmp_path, "x", "y"), FAIL="1")
    assert failed.returncode == 1 and "exited 3" in failed.stderr
    missing = hero(home, "edit")
    assert missing.returncode == 2 and "set $VISUAL or $EDITOR" in missing.stderr
    assert s.path.read_text() == before


def test_edit_a_home_without_a_memory_yet(home: Path, tmp_path: Path) -> None:
    env = editor(tmp_path, "## Facts\n", "## Facts\n\n- [decision] Keep the CLI thin\n")
    out = hero(home, "edit", **env)
    assert out.returncode == 0, out.stderr
    assert [f.text for f in memory_of(home).facts()] == ["Keep the CLI thin"]


@pytest.mark.slow
def test_a_broken_file_is_named_by_every_command(home: Path) -> None:
    s = seed(home)
    text = s.path.read_text().replace("## Recent stories", "## Notes")
    s.path.write_text(text)
    line = text.splitlines().index("## Notes") + 1
    for args in (("list",), ("forget", "a"), ("export",)):
        out = hero(home, *args)
        assert out.returncode == 2 and f"{s.path}:{line}: unknown section" in out.stderr, args
    assert s.path.read_text() == text


def test_memory_off_is_said(home: Path) -> None:
    roles = home / "config" / "roles.yaml"
    roles.write_text(roles.read_text() + "memory_enabled: false\n")
    out = hero(home, "list")
    assert out.returncode == 0 and "memory is off in this home" in out.stderr


@pytest.mark.slow
def test_add_and_promote_are_a_persons_word(home: Path) -> None:
    s = seed(home)
    added = hero(home, "add", "command", "Run the tests with APP_ENV=test make test")
    assert added.returncode == 0, added.stderr
    assert added.stdout.startswith("added ") and "(trust user)" in added.stdout
    mine = next(f for f in memory_of(home).facts() if "make test" in f.text)
    assert (mine.trust, mine.source.role, mine.recallable) == (Trust.USER, Role.PERSON, True)
    on = hero(home, "add", "convention", "Commit messages say why", "--always-on")
    assert on.returncode == 0, on.stderr
    assert any(f.always_on and f.text == "Commit messages say why" for f in memory_of(home).facts())
    # bad input: named
    wrong = hero(home, "add", "command", "x", "--always-on")
    assert wrong.returncode == 2 and "only a convention may be always-on" in wrong.stderr
    empty = hero(home, "add", "knowledge", "  ")
    assert empty.returncode == 2 and "needs a text" in empty.stderr

    learned = next(f for f in s.facts() if f.trust is Trust.OUTSIDE)
    promoted = hero(home, "promote", learned.id[:7])
    assert promoted.returncode == 0, promoted.stderr
    assert (
        f"promoted {learned.id} [convention]" in promoted.stdout
        and "(trust user)" in promoted.stdout
    )
    back = memory_of(home).find(learned.id)
    assert (back.trust, back.always_on, back.source.story) == (Trust.USER, False, "gh-7")
    assert back.source.role is Role.PERSON
    listed = hero(home, "list", "--json")
    record = next(json.loads(x) for x in listed.stdout.splitlines() if learned.id in x)
    assert (record["trust"], record["recalled"], record["role"]) == ("user", True, "person")
    command = next(f for f in s.facts() if f.kind is Kind.COMMAND)
    refused = hero(home, "promote", command.id, "--always-on")
    assert refused.returncode == 2 and "only a convention" in refused.stderr
    unknown = hero(home, "promote", "ffffffffffff")
    assert unknown.returncode == 2 and "no fact with id" in unknown.stderr
