"""`hero new [ID]`: the story template in a real editor process, on a real terminal (a pty).

The editor is a small Python script (EDITOR) that edits the file as a person would, one
step per call; hero runs as a child process with a pseudo-terminal for stdin and stdout.
"""

from __future__ import annotations

import json
import os
import pty
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hero.cli import main
from hero.commands.new import ERROR_PREFIX, NEW_COMMENT, PLACEHOLDER_ID
from hero.config.scaffold import story_template
from hero.story.format import parse_story

TIMEOUT_S = 60.0  # a generous "did not hang" bound, not a speed check

#: The editor: each call does the next step of STEPS (a JSON list in $STEPS), counting
#: calls in $STEPS.n. A step is [old, new] (a replacement that must apply), "empty",
#: "same" (save unchanged), "fail" (exit 3), or ["expect", text] then a replacement.
EDITOR = textwrap.dedent(
    """\
    import json, os, sys
    path = sys.argv[1]
    steps = json.loads(os.environ["STEPS"])
    count_file = os.environ["STEPS_FILE"]
    n = int(open(count_file).read()) if os.path.exists(count_file) else 0
    open(count_file, "w").write(str(n + 1))
    step = steps[n]
    text = open(path).read()
    if step == "fail":
        sys.exit(3)
    if step == "empty":
        text = ""
    elif step != "same":
        if step[0] == "expect":
            assert step[1] in text, text
            step = step[2:]
        old, new = step
        assert old in text, (old, text)
        text = text.replace(old, new, 1)
    open(path, "w").write(text)
    """
)


def make_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    (home / "inbox").mkdir(parents=True)
    return home


def hero_new(
    tmp_path: Path, home: Path, args: list[str], steps: list[object], answers: str = ""
) -> tuple[int, str, int]:
    """Run `hero new ARGS` on a pty with the scripted editor; (exit code, what the terminal
    showed, how many times the editor ran). ``answers`` is typed in beforehand."""
    editor = tmp_path / "editor.py"
    editor.write_text(EDITOR)
    count = tmp_path / "steps.n"
    count.unlink(missing_ok=True)
    env = {
        **os.environ,
        "EDITOR": f"{shlex.quote(sys.executable)} {shlex.quote(str(editor))}",
        "STEPS": json.dumps(steps),
        "STEPS_FILE": str(count),
    }
    env.pop("VISUAL", None)
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "hero", "new", *args, "--home", str(home)],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            cwd=tmp_path,
        )
        os.close(slave)
        if answers:
            os.write(master, answers.encode())
        shown = _read_all(master, proc)
    finally:
        os.close(master)
    runs = int(count.read_text()) if count.exists() else 0
    return proc.returncode, shown.replace("\r\n", "\n"), runs


def _read_all(master: int, proc: subprocess.Popen[bytes]) -> str:
    """Everything the child wrote to the terminal until it exited."""
    import select
    import time

    chunks: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.1)
        if ready:
            try:
                data = os.read(master, 4096)
            except OSError:  # EIO: the child's end is closed
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    else:
        proc.kill()
    proc.wait(timeout=TIMEOUT_S)
    return b"".join(chunks).decode("utf-8", "replace")


def test_valid_story_goes_to_the_inbox(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    step = ["title: Describe the repository in HERO-NOTES.md", "title: Fix the parser"]
    code, shown, runs = hero_new(tmp_path, home, ["fix-parser"], [step])
    assert code == 0, shown
    assert runs == 1
    target = home / "inbox" / "fix-parser.md"
    assert "created" in shown and str(target) in shown
    story = parse_story(target)
    assert story.id == "fix-parser" and story.title == "Fix the parser"
    assert story.scope == ("HERO-NOTES.md",)
    text = target.read_text()
    assert text.startswith("---\nid: fix-parser\ntitle: Fix the parser\n")
    assert "# A new story" not in text  # the template's comments stay in the editor


def test_invalid_then_fixed(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    steps = [
        ["title: Describe the repository in HERO-NOTES.md", "title: Something"],  # id left
        ["expect", f"{ERROR_PREFIX}id: ", f"id: {PLACEHOLDER_ID}", "id: fixed-one"],
    ]
    code, shown, runs = hero_new(tmp_path, home, [], steps, answers="y\n")
    assert code == 0, shown
    assert runs == 2
    assert f"invalid story: id: still {PLACEHOLDER_ID}: give the story its id" in shown
    assert "edit again? [Y/n]" in shown
    story = parse_story(home / "inbox" / "fixed-one.md")
    assert story.title == "Something"
    assert ERROR_PREFIX not in (home / "inbox" / "fixed-one.md").read_text()


def test_invalid_and_no_more_edits_writes_nothing(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    steps = [["verify:", "verify: {bad"]]
    code, shown, runs = hero_new(tmp_path, home, ["x1"], steps, answers="n\n")
    assert code == 1, shown
    assert runs == 1
    assert "nothing written (your text is kept in" in shown
    assert list((home / "inbox").iterdir()) == []


@pytest.mark.parametrize(
    ("step", "says"),
    [("same", "saved unchanged"), ("empty", "emptied"), ("fail", "exited 3")],
)
def test_unchanged_emptied_or_failed_editor_aborts(tmp_path: Path, step: str, says: str) -> None:
    home = make_home(tmp_path)
    code, shown, runs = hero_new(tmp_path, home, ["s1"], [step])
    assert code == 1, shown
    assert says in shown and "nothing written" in shown
    assert list((home / "inbox").iterdir()) == []


@pytest.mark.slow
def test_never_overwrites_a_story(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    existing = home / "inbox" / "taken.md"
    existing.write_text("mine\n")
    # named on the command line: refused before the editor opens
    code, shown, runs = hero_new(tmp_path, home, ["taken"], ["same"])
    assert code == 2 and runs == 0, shown
    assert "already exists" in shown
    # set in the editor: refused after, and the text kept
    code, shown, runs = hero_new(tmp_path, home, ["other"], [["id: other", "id: taken"]])
    assert code == 2 and runs == 1, shown
    assert "already exists" in shown and "your story is kept in" in shown
    assert existing.read_text() == "mine\n"


def test_no_terminal_prints_the_template(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    env = {**os.environ, "EDITOR": "false"}
    proc = subprocess.run(
        [sys.executable, "-m", "hero", "new", "s9", "--home", str(home)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        timeout=TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == story_template("s9", NEW_COMMENT)
    assert list((home / "inbox").iterdir()) == []


def test_print_and_no_editor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.delenv("EDITOR", raising=False)
    assert main(["new", "--print"]) == 0
    assert capsys.readouterr().out == story_template(PLACEHOLDER_ID, NEW_COMMENT)
    assert main(["new", "../x"]) == 2
    assert "ID: " in capsys.readouterr().err


def test_editor_command(monkeypatch: pytest.MonkeyPatch) -> None:
    from hero.commands.new import editor_command
    from hero.errors import UsageError

    monkeypatch.setenv("EDITOR", "vi")
    monkeypatch.setenv("VISUAL", "code --wait 'a b'")
    assert editor_command() == ["code", "--wait", "a b"]  # VISUAL first, split as sh would
    monkeypatch.setenv("VISUAL", "  ")
    assert editor_command() == ["vi"]
    monkeypatch.setenv("EDITOR", "vi 'unclosed")
    with pytest.raises(UsageError, match=r"\$EDITOR .*cannot be split"):
        editor_command()
