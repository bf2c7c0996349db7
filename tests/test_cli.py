"""hero's command line when stdout's reader leaves early (`hero ... | head -1`): every
command ends quietly, exit 0, with no traceback, as the one handler in hero.cli.main says."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from hero.state import RunState, save_state
from hero.trace import Trace

WAIT_S = 60.0  # a generous "did not hang" bound, not a speed check


def hero_command(*args: str) -> str:
    return shlex.join([sys.executable, "-m", "hero", *args])


def story_with_a_long_trace(home: Path) -> None:
    """A finished story whose `hero logs` output is far more than a pipe buffer holds."""
    save_state(home, RunState(id="s1", title="S1", status="passed"))
    with Trace(home / "runs" / "s1" / "round-1.jsonl") as trace:
        for i in range(3000):
            trace.event("tool_result", name="bash", content=f"line {i}")


@pytest.mark.slow
@pytest.mark.parametrize("args", [("logs", "s1"), ("status",), ("demo",)], ids=" ".join)
def test_piping_into_head_ends_quietly(tmp_path: Path, args: tuple[str, ...]) -> None:
    story_with_a_long_trace(tmp_path)
    for i in range(400):  # `hero status`: a row each, far more than a pipe buffer
        save_state(tmp_path, RunState(id=f"story-{i:04d}", title="x" * 60, status="gave_up"))
    temp = tmp_path / "tmp"  # where `hero demo` makes its folder
    temp.mkdir()
    # pipefail: the pipeline's status is hero's own, not head's
    done = subprocess.run(
        [
            "bash",
            "-c",
            f"set -o pipefail; {hero_command('--home', str(tmp_path), *args)} | head -1",
        ],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        env={**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "TMPDIR": str(temp)},
    )
    assert done.stderr == ""
    assert done.returncode == 0
    assert len(done.stdout.splitlines()) == 1
    assert list(temp.iterdir()) == []  # the demo cleaned up after itself all the same


@pytest.mark.parametrize(
    "args", [("init",), ("--help",), ("--version",), ("status", "--json")], ids=" ".join
)
def test_a_reader_gone_before_hero_writes_is_no_error(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    """The reader has left before hero writes a byte: what hero buffered fails at its last
    flush, which hero.cli.main makes, not the interpreter's exit."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "hero", *args],
            cwd=tmp_path,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=WAIT_S,
        )
    finally:
        os.close(write_end)
    assert done.stderr == ""
    assert done.returncode == 0


def test_a_broken_pipe_elsewhere_is_still_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only stdout's reader leaving is quiet: a broken pipe to something else hero writes
    to (a child process) goes on up."""
    from hero import cli
    from hero.commands import status

    def broken(args: object) -> int:
        raise BrokenPipeError("to a child")

    monkeypatch.setattr(status, "run", broken)
    with pytest.raises(BrokenPipeError):
        cli.main(["status"])


def test_hero_help_builds_every_command_without_the_heavy_modules() -> None:
    """`hero --help` (and the parsing of any command line) builds every command's parser:
    none of them may import the records, the story reader, YAML or the model client to do
    it. That is what keeps `hero --help` and a refused command line quick."""
    heavy = (
        "hero.state",
        "hero.story.format",
        "hero.story.fields",
        "hero.config.loader",
        "hero.config.home",
        "hero.config.sections",
        "hero.run.pipeline",
        "hero.run.adhoc",  # `hero run --task`'s story: imported by the run, not the parser
        "openai",
        # the standard library's heavier modules, imported by the commands that use them
        "dataclasses",
        "inspect",
        "subprocess",
        "tempfile",
        "json",
        "yaml",
        # `hero serve`'s web stack (the optional extra serve), and its pages
        "hero.web.app",
        "starlette",
        "uvicorn",
        "jinja2",
    )
    code = (
        "import sys; from hero.cli import build_parser; build_parser(); "
        f"print([m for m in {heavy!r} if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    assert out.strip() == "[]"
