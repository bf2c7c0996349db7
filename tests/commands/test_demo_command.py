"""`hero demo` and `hero init` as a user runs them: real subprocesses, real files."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import git


def hero(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hero", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
        env={**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null"},
    )


@pytest.mark.slow
def test_demo_runs_a_story_through_two_rounds_against_the_scripted_model(tmp_path: Path) -> None:
    where = tmp_path / "demo"
    done = hero("demo", "--dir", str(where))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SCRIPTED" in done.stdout  # it says plainly that the model is not a real one

    home, repo = where / "home", where / "textkit"
    state = json.loads((home / "runs" / "state" / "add-slugify.json").read_text())
    assert state["status"] == "passed"
    assert [r["review"]["verdict"] for r in state["rounds"]] == ["CHANGES_REQUESTED", "APPROVED"]
    assert all(r["verify"]["passed"] for r in state["rounds"])
    assert (home / "done" / "add-slugify.md").is_file()
    assert not (home / "inbox" / "add-slugify.md").exists()
    assert "### Round 1" in (home / "done" / "add-slugify.md").read_text()
    for name in ("round-1.jsonl", "round-2.jsonl", "verify-r1.log", "verify-r2.log"):
        assert (home / "runs" / "add-slugify" / name).is_file(), name

    log = git(repo, "log", "--format=%s", "main..hero/add-slugify").split("\n")
    assert log[:2] == ["Test slugify", "Add textkit.slugify"]
    assert git(repo, "show", "hero/add-slugify:textkit/slug.py").startswith('"""Turning titles')
    # where things are is printed for the user
    for shown in ("hero/add-slugify", "runs/state/add-slugify.json", "round-N.jsonl"):
        assert shown in done.stdout, shown


def test_demo_refuses_a_folder_that_is_not_empty(tmp_path: Path) -> None:
    (tmp_path / "something").write_text("x")
    done = hero("demo", "--dir", str(tmp_path))
    assert done.returncode == 2
    assert "not empty" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["something"]


@pytest.mark.slow
def test_init_scaffolds_the_current_directory_and_run_then_names_the_missing_repo(
    tmp_path: Path,
) -> None:
    made = hero("init", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    for path in (
        "config/roles.yaml",
        "config/providers/local.yaml",
        "config.local.yaml.example",
        "inbox",
        "done",
        "runs",
        "worktrees",
        ".gitignore",
    ):
        assert (tmp_path / path).exists(), path
    assert "config.local.yaml" in (tmp_path / ".gitignore").read_text()

    again = hero("init", cwd=tmp_path)
    assert again.returncode == 0 and "nothing to do" in again.stdout

    story = tmp_path / "inbox" / "s.md"
    story.write_text("---\nid: s\ntitle: S\n---\n## Goal\nx\n")
    run = hero("run", str(story), cwd=tmp_path)
    assert run.returncode == 2
    assert "config/roles.yaml: target_repo:" in run.stderr


def demo_env(temp: Path, **more: str) -> dict[str, str]:
    return {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "TMPDIR": str(temp), **more}


@pytest.mark.slow
def test_demo_removes_its_temporary_folder_unless_kept(tmp_path: Path) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "hero", "demo"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
        env=demo_env(temp),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "result:   passed after 2 rounds" in done.stdout
    assert list(temp.iterdir()) == []
    assert "is removed now: `hero demo --keep` keeps it" in done.stdout

    kept = subprocess.run(
        [sys.executable, "-m", "hero", "demo", "--keep"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
        env=demo_env(temp),
    )
    assert kept.returncode == 0, kept.stdout + kept.stderr
    [folder] = temp.iterdir()
    assert folder.name.startswith("hero-demo-")
    assert f"kept:     {folder}" in kept.stdout
    assert (folder / "home" / "runs" / "state" / "add-slugify.json").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_an_interrupted_demo_removes_its_temporary_folder(tmp_path: Path, how: str) -> None:
    """Stopped mid-way (here while it makes its example repository: a stand-in `git`
    waits there until the signal comes), the demo still leaves nothing behind."""
    temp, bin_dir = tmp_path / "tmp", tmp_path / "bin"
    temp.mkdir()
    bin_dir.mkdir()
    reached = tmp_path / "reached"
    stand_in = bin_dir / "git"
    stand_in.write_text(
        "#!/bin/sh\n"
        'case " $* " in *" commit "*)\n'
        f"  if [ ! -e {reached} ]; then : > {reached}; exec sleep 600; fi;;\n"
        "esac\n"
        f'exec {shutil.which("git")} "$@"\n'
    )
    stand_in.chmod(0o755)
    proc = subprocess.Popen(
        [sys.executable, "-m", "hero", "demo"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,  # a group of its own, as a terminal's foreground job
        env=demo_env(temp, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}"),
    )
    try:
        deadline = time.monotonic() + 120
        while not reached.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the demo never reached its first commit"
            time.sleep(0.05)
        assert len(list(temp.iterdir())) == 1  # the demo's folder, half made
        if how == "ctrl-c":  # the terminal sends SIGINT to the whole foreground group
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):  # the stand-in's sleep, when it outlived hero
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, out + err
    assert "hero: interrupted" in err and "Traceback" not in err, err
    assert list(temp.iterdir()) == [], out + err
