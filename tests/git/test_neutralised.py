"""hero's own git runs none of the programs a worker can plant in the repository, and its file
tools read no file through a hard link.

The worker (or a check) can write the repository's hooks and config: a hook, a filesystem
monitor (``core.fsmonitor``), a filter or diff driver. hero's own git (the rescue commit, its
status, the reviewer's diff, ``worktree add``) must run none of them, nor hand a secret to
one. Each planted program here is a probe that writes a line to a marks file when it runs.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import git
from helpers import (
    SUB_IMPL,
    VERIFY_SUB,
    is_review,
    load_state,
    review_round,
    step_of,
    verdict,
    worker_round,
)

from hero.agent.tools import ToolContext, ToolOutcome, execute_tool
from hero.cli import main
from hero.git.guard import leftovers
from hero.git.ops import (
    DEFAULT_IDENTITY,
    GitError,
    TargetRepo,
    diff_since,
    log_since,
)
from hero.git.ops import git as hero_git
from hero.git.output import commit_all
from hero.git.storyrepo import StoryRepo
from hero.llm.scripted import Reply, call, text
from hero.runner import child_env

#: Hooks git runs on the commands hero runs itself (commit, checkout, worktree add, refs).
HOOKS = (
    "pre-commit",
    "prepare-commit-msg",
    "commit-msg",
    "post-commit",
    "post-checkout",
    "post-index-change",
    "reference-transaction",
    "pre-auto-gc",
)
SECRET = "sk-gitneutral-secret-7c1d2e3f4a5b"
SECRET_TAIL = "7c1d2e3f4a5b"
KEY_ENV = "HERO_GITTEST_KEY"

#: The probe every planted program is: one line per run, naming the program (its file
#: name), whether the caller carried a story's marker (the worker's commands do, hero's own
#: git does not) and whether the provider key or its value was in its environment. As a
#: filesystem monitor it fails (git then looks at every file); as a filter or textconv it
#: passes the content through.
PROBE = """#!/bin/sh
name=$(basename "$0")
echo "$name run=${{HERO_RUN_MARKER:+worker}} key=${{{key}:+present}} secret=$(env | grep -c {tail})" >> {marks}
case "$name" in
  fsmonitor*) exit 1 ;;
  clean*|textconv*) exec cat "$@" ;;
esac
exit 0
"""


def probe_text(marks: Path) -> str:
    return PROBE.format(marks=shlex.quote(str(marks)), key=KEY_ENV, tail=SECRET_TAIL)


def write_probe(path: Path, marks: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(probe_text(marks))
    path.chmod(0o755)
    return path


def runs(marks: Path) -> list[str]:
    return marks.read_text().splitlines() if marks.exists() else []


@pytest.fixture
def marks(tmp_path: Path) -> Path:
    return tmp_path / "marks"


@pytest.fixture
def base(target_repo: Path) -> str:
    return git(target_repo, "rev-parse", "HEAD").strip()


# --------------------------------------------------------------- hero's own git runs none


def test_hero_git_runs_no_hook_and_no_fsmonitor(
    target_repo: Path, base: str, tmp_path: Path, marks: Path
) -> None:
    common = target_repo / ".git"
    for hook in HOOKS:
        write_probe(common / "hooks" / hook, marks)
    fsmonitor = write_probe(tmp_path / "bin" / "fsmonitor-common", marks)
    git(target_repo, "config", "core.fsmonitor", str(fsmonitor))
    # they are live: plain git runs them
    git(target_repo, "status", "--porcelain")
    git(target_repo, "commit", "-q", "--allow-empty", "-m", "hooks are live")
    names = {line.split()[0] for line in runs(marks)}
    assert {"fsmonitor-common", "pre-commit", "post-commit", "reference-transaction"} <= names
    marks.unlink()

    repo = TargetRepo(target_repo)
    wt = tmp_path / "worktrees" / "s1"
    hero_git(target_repo, "worktree", "add", "-b", "hero/s1", str(wt), base)  # checkout, refs
    # a worktree's own config, read by git there once the extension is on
    worktree_fsmonitor = write_probe(tmp_path / "bin" / "fsmonitor-worktree", marks)
    git(wt, "config", "extensions.worktreeConfig", "true")
    git(wt, "config", "--worktree", "core.fsmonitor", str(worktree_fsmonitor))
    git(wt, "status", "--porcelain")  # live there too
    assert "fsmonitor-worktree" in {line.split()[0] for line in runs(marks)}
    marks.unlink()

    (wt / "calc" / "__init__.py").write_text(SUB_IMPL)
    (wt / "notes.txt").write_text("new\n")
    assert leftovers(wt, base).committable  # git status, as the rescue commit starts
    assert commit_all(wt, "hero: rescue", DEFAULT_IDENTITY)  # status, add, commit
    diff, _ = diff_since(wt, base)
    assert "+def sub(a, b):" in diff.text
    assert "hero: rescue" in log_since(wt, base).text
    repo.keep_branch_aside("hero/s1", wt)  # worktree remove, branch rename
    assert runs(marks) == []


def test_review_diff_runs_no_external_diff_or_textconv(
    target_repo: Path, base: str, tmp_path: Path, marks: Path
) -> None:
    bin_dir = tmp_path / "bin"
    git(target_repo, "config", "diff.external", str(write_probe(bin_dir / "external", marks)))
    git(target_repo, "config", "diff.evil.command", str(write_probe(bin_dir / "command", marks)))
    git(target_repo, "config", "diff.evil.textconv", str(write_probe(bin_dir / "textconv", marks)))
    (target_repo / ".git" / "info").mkdir(exist_ok=True)
    (target_repo / ".git" / "info" / "attributes").write_text("* diff=evil\n")
    (target_repo / "calc" / "__init__.py").write_text(SUB_IMPL)
    git(target_repo, "commit", "-q", "-am", "sub")
    subprocess.run(["git", "diff", base, "HEAD"], cwd=target_repo, capture_output=True)
    assert runs(marks), "the drivers are live for plain git"
    marks.unlink()

    diff, stat_text = diff_since(target_repo, base)
    assert runs(marks) == []
    assert diff.text.startswith("diff --git a/calc/__init__.py b/calc/__init__.py")
    assert "+def sub(a, b):" in diff.text
    assert "calc/__init__.py | 4 ++++" in stat_text


def test_a_hook_would_see_no_secret(
    target_repo: Path, tmp_path: Path, marks: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No hook runs under hero's git; if one did (here: the caller turns hooks back on), its
    environment would hold no key of hero's."""
    monkeypatch.setenv(KEY_ENV, SECRET)
    monkeypatch.setenv("SOME_COPY_OF_IT", SECRET)
    hooks = tmp_path / "hooks"
    (hooks / "post-commit").parent.mkdir()
    (hooks / "post-commit").write_text(f"#!/bin/sh\nenv > {shlex.quote(str(marks))}\n")
    (hooks / "post-commit").chmod(0o755)
    hero_git(
        target_repo,
        "-c",
        f"core.hooksPath={hooks}",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "hook on",
        env=DEFAULT_IDENTITY,
    )
    seen = marks.read_text()
    assert "GIT_AUTHOR_NAME=hero" in seen  # the hook ran, and printed its environment
    assert SECRET not in seen and KEY_ENV not in seen and "SOME_COPY_OF_IT" not in seen


def test_search_tools_run_no_fsmonitor(target_repo: Path, tmp_path: Path, marks: Path) -> None:
    """grep and find list files with git ls-files, which hero runs outside any sandbox."""
    fsmonitor = write_probe(tmp_path / "bin" / "fsmonitor", marks)
    git(target_repo, "config", "core.fsmonitor", str(fsmonitor))
    git(target_repo, "ls-files")
    assert runs(marks), "live for plain git ls-files"
    marks.unlink()
    for use_rg in (False, True):
        ctx = ToolContext(root=target_repo.resolve(), env=child_env(), use_ripgrep=use_rg)
        assert "calc/__init__.py" in tool(ctx, "find", {"pattern": "*.py"})
        assert "calc/__init__.py:1:def add" in tool(ctx, "grep", {"pattern": "def add"})
    assert runs(marks) == []


# ----------------------------------------------- what a phase changes is put back, or stops


def test_a_replaced_dot_git_stops_hero(target_repo: Path, base: str, tmp_path: Path) -> None:
    """A story repository's .git replaced by a file pointing at another repository: hero's
    git would read that one's config and hooks, so hero runs no more git on the story."""
    story_repo = StoryRepo(TargetRepo(target_repo), tmp_path / "worktrees" / "s1", "hero/s1")
    story_repo.lay_out(base)
    fake = tmp_path / "fake"
    git(tmp_path, "init", "-q", str(fake))
    git(fake, "config", "filter.evil.clean", "touch pwned")
    shutil.rmtree(story_repo.gitdir)
    story_repo.gitdir.write_text(f"gitdir: {fake / '.git'}\n")
    with pytest.raises(GitError, match="no longer a directory"):
        story_repo.make_safe()
    assert git(fake, "config", "filter.evil.clean").strip() == "touch pwned"  # not touched


def test_make_safe_puts_back_what_hero_owns_of_a_story_repository(
    target_repo: Path, base: str, tmp_path: Path, marks: Path
) -> None:
    """Between commands, before hero's own git: the story repository's config, alternates,
    hooks and info are hero's again, and what would point git elsewhere is gone."""
    repo = TargetRepo(target_repo)
    story_repo = StoryRepo(repo, tmp_path / "worktrees" / "s1", "hero/s1")
    story_repo.lay_out(base)
    gitdir = story_repo.gitdir
    config = (gitdir / "config").read_bytes()
    probe = write_probe(tmp_path / "fsmonitor", marks)
    git(story_repo.path, "config", "core.fsmonitor", str(probe))
    write_probe(gitdir / "hooks" / "post-commit", marks)
    (gitdir / "info" / "attributes").write_text("* filter=evil\n")
    (gitdir / "info" / "exclude").write_text("secret.txt\n")
    (gitdir / "commondir").write_text(str(tmp_path) + "\n")
    (gitdir / "shallow").write_text(base + "\n")
    (gitdir / "objects" / "info" / "alternates").write_text("/etc\n")

    said = story_repo.make_safe()

    assert ".git/config was changed" in said and "alternates" in said
    assert (gitdir / "config").read_bytes() == config
    assert list((gitdir / "hooks").iterdir()) == []
    assert [p.name for p in (gitdir / "info").iterdir()] == ["exclude"]
    assert (gitdir / "info" / "exclude").read_text() == ""
    assert not (gitdir / "commondir").exists() and not (gitdir / "shallow").exists()
    (story_repo.path / "calc" / "__init__.py").write_text(SUB_IMPL)
    assert commit_all(story_repo.path, "hero: rescue", DEFAULT_IDENTITY)
    assert runs(marks) == []
    assert story_repo.make_safe() == ""


# ------------------------------------------------------------- through hero run, end to end


def policy(worker: dict[int, list[Reply]]) -> Callable[[dict], Reply]:
    """The worker's reply by (round, step), the reviewer approves."""

    def handler(body: dict) -> Reply:
        if is_review(body):
            assert review_round(body) >= 1
            return verdict("APPROVED", "All good.")
        plan = worker[worker_round(body)]
        return plan[min(step_of(body), len(plan) - 1)]

    return handler


def plant_command(gitdir: Path, marks: Path) -> str:
    """What a worker runs to plant the probe: as hooks in the shared .git/hooks, as
    core.fsmonitor in .git/config and in its worktree's config.worktree, as a clean filter;
    then it runs git itself, which runs them."""
    fsmonitor, clean = gitdir / "fsmonitor", gitdir / "clean"
    return "\n".join(
        [
            "set -e",
            f"cat > {fsmonitor} <<'EOF'\n{probe_text(marks)}EOF",
            f"chmod +x {fsmonitor}",
            f"cp {fsmonitor} {clean}",
            "common=$(git rev-parse --path-format=absolute --git-common-dir)",
            *[f'cp {fsmonitor} "$common/hooks/{hook}"' for hook in HOOKS],
            f"git config core.fsmonitor {fsmonitor}",
            "git config extensions.worktreeConfig true",
            f"git config --worktree core.fsmonitor {fsmonitor}",
            f"git config filter.evil.clean {clean}",
            'mkdir -p "$common/info" && echo "* filter=evil" >> "$common/info/attributes"',
            # live: the worker's own git runs them (before hero looks, after the command)
            "git status --porcelain && git commit -q --allow-empty -m probe",
        ]
    )


@pytest.mark.slow
def test_programs_a_worker_plants_never_run_under_hero_git(
    scripted, make_home, write_story, target_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker without a sandbox (``sandbox: none``, or where bwrap does not work): the
    sandbox makes the repository's config and hooks read-only, without it they are not."""
    monkeypatch.setenv(KEY_ENV, SECRET)
    marks = target_repo.resolve().parent / "marks"
    worker = {
        1: [
            call("bash", command=plant_command(Path(".git"), marks)),
            # left uncommitted: hero's rescue commit takes it (status, add, commit)
            call("write_file", path="calc/__init__.py", content=SUB_IMPL),
            text("Done."),
        ],
        2: [text("Done: sub is there.")],
    }
    model = scripted(policy(worker))
    home = make_home(model, sandbox="none")
    provider = home / "config" / "providers" / "scripted.yaml"
    provider.write_text(provider.read_text() + f"api_key_env: {KEY_ENV}\n")
    story = write_story(home, "s1", verify=VERIFY_SUB)

    assert main(["run", str(story), "--home", str(home)]) == 0

    lines = runs(marks)
    worker_runs = [line for line in lines if "run=worker" in line]
    hero_runs = [line for line in lines if "run=worker" not in line]
    assert any(line.startswith("fsmonitor ") for line in worker_runs), lines
    assert any(line.startswith("post-commit ") for line in worker_runs), lines
    assert hero_runs == []  # hero's own git ran none of them
    assert all("key= secret=0" in line for line in lines)  # nor did the worker see the key

    state = load_state(home)
    assert state["status"] == "passed"
    # the story's own repository is hero's again; the user's was never in reach
    gitdir = home / "worktrees" / "s1" / ".git"
    assert "fsmonitor" not in (gitdir / "config").read_text()
    assert "filter" not in (gitdir / "config").read_text()
    assert list((gitdir / "hooks").iterdir()) == []
    assert not (gitdir / "info" / "attributes").exists()
    assert git(target_repo, "show", "hero/s1:calc/__init__.py") == SUB_IMPL
    left = subprocess.run(
        ["git", "config", "--get-regexp", "fsmonitor|filter"], cwd=target_repo, capture_output=True
    )
    assert left.stdout == b""
    assert sorted(p.name for p in (target_repo / ".git" / "hooks").iterdir()) == sorted(
        p.name for p in (target_repo / ".git" / "hooks").glob("*.sample")
    )
    for request in model.requests:
        assert SECRET not in json.dumps(request.body)


# ----------------------------------------------------------------- hard links, grep and find


def tool(ctx: ToolContext, name: str, args: dict[str, object]) -> str:
    out = execute_tool(ctx, name, json.dumps(args))
    assert isinstance(out, ToolOutcome) and not out.is_error, out
    return out.content


@pytest.mark.parametrize("use_rg", [False, True], ids=["python", "rg"])
def test_grep_and_find_leave_hard_linked_files_out(tmp_path: Path, use_rg: bool) -> None:
    root = (tmp_path / "wt").resolve()
    root.mkdir()
    git(root, "init", "-q")
    (root / "a.txt").write_text("needle in the worktree\n")
    outside = tmp_path / "home" / "config.local.yaml"
    outside.parent.mkdir()
    outside.write_text("keys:\n  openai: needle-TOPSECRET\n")
    os.link(outside, root / "linked.txt")
    ctx = ToolContext(root=root, env=child_env(), use_ripgrep=use_rg)
    note = "hero's file tools do not follow links out of the worktree)"

    for mode in ("content", "files_with_matches", "count"):
        out = tool(ctx, "grep", {"pattern": "needle", "output_mode": mode})
        assert "TOPSECRET" not in out
        first, last = out.splitlines()[0], out.splitlines()[-1]
        assert first.startswith("a.txt")
        assert last == ("(1 file(s) with more than one hard link not searched: linked.txt; " + note)
    only = tool(ctx, "grep", {"pattern": "TOPSECRET"})
    assert only.splitlines()[0] == "no matches" and "linked.txt" in only
    refused = execute_tool(ctx, "grep", json.dumps({"pattern": "needle", "path": "linked.txt"}))
    assert isinstance(refused, ToolOutcome) and refused.is_error
    assert refused.content == (
        "path 'linked.txt' is a hard link; hero's file tools do not follow links out of the "
        "worktree"
    )
    listed = tool(ctx, "find", {"pattern": "*.txt"}).splitlines()
    assert listed == [
        "a.txt",
        "(1 file(s) with more than one hard link not listed: linked.txt; " + note,
    ]
    assert tool(ctx, "find", {"pattern": "a.*"}) == "a.txt"  # no note when none is left out
