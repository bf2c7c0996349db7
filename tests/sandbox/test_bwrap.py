"""The sandbox of the worker's and the checks' commands: bubblewrap, as a command sees it.

Each confinement test runs a real command through ``run_command`` inside the sandbox built
for a real worktree of a real repository, and checks both what the command saw and what
is left on the host. Where bubblewrap does not work they are skipped, saying why; the tests
of the setting itself (``auto``, ``bwrap``, ``none``) use a stand-in ``bwrap`` and run
everywhere.
"""

from __future__ import annotations

import json
import os
import shlex
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import git
from helpers import PY, SUB_IMPL, is_review, step_of
from sandbox_support import processes_with

from hero.cli import main
from hero.git.ops import DEFAULT_IDENTITY, TargetRepo
from hero.git.storyrepo import StoryRepo
from hero.llm.scripted import Reply, call, text
from hero.runner import CommandResult, child_env, run_command
from hero.sandbox.bwrap import (
    SANDBOX_HOME,
    Sandbox,
    SandboxUnavailable,
    build,
    bwrap_problem,
    resolve,
)

SECRET = "hero-home-secret-4f1c"
#: What a command prints once it has reached the test's loopback server.
REACHED = "reached the server"
#: The commands' environment, as the pipeline builds it where git has no identity.
ENV = child_env(extra=DEFAULT_IDENTITY)


@dataclass
class Story:
    """A hero home with a story's worktree of ``repo``, and its sandbox."""

    home: Path
    repo: Path
    common: Path
    worktree: Path
    box: Sandbox
    story_repo: StoryRepo

    def run(self, command: str, *, network: bool = False) -> CommandResult:
        return run_command(
            command,
            self.worktree,
            timeout_s=120,
            env=ENV,
            sandbox=self.box.with_network(network),
        )


@pytest.fixture
def story(bwrap: str, tmp_path: Path, target_repo: Path) -> Story:
    home = tmp_path / "home"
    (home / "worktrees").mkdir(parents=True)
    (home / "config.local.yaml").write_text(f"keys:\n  scripted: {SECRET}\n")
    worktree = home / "worktrees" / "s1"
    target = TargetRepo(target_repo)
    git(target_repo, "branch", "hero/s1")
    repo = StoryRepo(target, worktree, "hero/s1")
    repo.lay_out(target.rev_parse("hero/s1"))
    common = (target_repo / ".git").resolve()
    box = resolve(
        "bwrap",
        worktree=worktree,
        objects=repo.objects_dir(),
        guarded=repo.guarded(),
        hide=(home, target_repo),
    )
    assert box is not None
    return Story(home, target_repo, common, worktree, box, repo)


# ----------------------------------------------------------------------------- what is writable


def test_the_story_repository_is_writable_and_hero_brings_its_commits_back(
    story: Story,
) -> None:
    before = git(story.repo, "rev-parse", "refs/heads/hero/s1").strip()
    result = story.run(
        "echo made > made.txt && git add made.txt && git commit -q -m sandboxed && "
        "git rev-parse HEAD"
    )

    assert result.exit_code == 0, result.output
    sha = result.output.strip().splitlines()[-1]
    assert (story.worktree / "made.txt").read_text() == "made\n"
    # the user's repository is untouched until hero brings the commit there itself
    assert git(story.repo, "rev-parse", "refs/heads/hero/s1").strip() == before
    assert story.story_repo.bring_back() == sha
    assert git(story.repo, "rev-parse", "refs/heads/hero/s1").strip() == sha
    assert git(story.repo, "log", "-1", "--format=%s", sha).strip() == "sandboxed"
    assert "error" not in git(story.repo, "fsck", "--full").lower()


def test_the_users_git_directory_is_out_of_reach(story: Story) -> None:
    """Objects, refs, packed-refs, hooks, config, info, shallow and the user's HEAD of the
    target cannot be written, nor its pack files removed; its objects can be read."""
    common = story.common
    git(story.repo, "gc", "-q")
    packs = sorted(p.name for p in (common / "objects" / "pack").iterdir())
    config = (common / "config").read_bytes()
    result = story.run(
        f"rm -f {common}/objects/pack/*; "
        f"printf 'garbage\\n' > {common}/packed-refs; "
        f"git rev-parse main > {common}/shallow; "
        f"echo 'touch /tmp/pwned' > {common}/hooks/post-checkout; "
        f"echo '[core] fsmonitor = evil' >> {common}/config; "
        f"echo 'ref: refs/heads/x' > {common}/HEAD; "
        f"git -C {story.repo} log -1 --format=%s main; "
        "git cat-file -t main; echo done"
    )

    assert "done" in result.output, result.output
    assert "commit" in result.output  # the borrowed objects are readable
    assert sorted(p.name for p in (common / "objects" / "pack").iterdir()) == packs
    assert not (common / "shallow").exists()
    assert not (common / "hooks" / "post-checkout").exists()
    assert (common / "config").read_bytes() == config
    assert git(story.repo, "symbolic-ref", "HEAD").strip() == "refs/heads/main"
    assert "error" not in git(story.repo, "fsck", "--full").lower()


def test_the_story_repositorys_git_settings_and_hooks_cannot_be_written(story: Story) -> None:
    gitdir = story.worktree / ".git"
    config = (gitdir / "config").read_bytes()
    alternates = (gitdir / "objects" / "info" / "alternates").read_bytes()

    result = story.run(
        "echo 'touch /tmp/pwned' > .git/hooks/post-commit; chmod +x .git/hooks/post-commit; "
        "git config core.hooksPath /tmp; "
        "echo '[core] fsmonitor = evil' >> .git/config; "
        "echo secret.txt >> .git/info/exclude; "
        "echo /etc > .git/objects/info/alternates; "
        "mv .git .git-moved; "
        "git commit -q --allow-empty -m still-works && echo committed"
    )

    assert "committed" in result.output, result.output  # git itself still works
    assert not (gitdir / "hooks" / "post-commit").exists()
    assert (gitdir / "config").read_bytes() == config
    assert (gitdir / "info" / "exclude").read_text() == ""
    assert (gitdir / "objects" / "info" / "alternates").read_bytes() == alternates
    assert gitdir.is_dir() and not (story.worktree / ".git-moved").exists()
    assert result.output.count("Read-only file system") >= 4, result.output


# ----------------------------------------------------------------------------- what is hidden


def test_the_hero_home_is_not_reachable_by_path_link_or_hard_link(story: Story) -> None:
    secret_file = story.home / "config.local.yaml"
    (story.worktree / "link").symlink_to(secret_file)

    result = story.run(
        f"cat {secret_file}; cat link; ln {secret_file} stolen; ls {story.home}; echo done"
    )

    assert SECRET not in result.output
    assert result.output.count("No such file or directory") >= 3, result.output
    assert not (story.worktree / "stolen").exists()
    assert "config.local.yaml" not in result.output.splitlines()  # not listed in the home


def test_home_is_private_and_the_real_home_is_out_of_reach(
    story: Story, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_home = tmp_path / "realhome"
    (real_home / ".ssh").mkdir(parents=True)
    (real_home / ".ssh" / "authorized_keys").write_text("the user's key\n")
    monkeypatch.setenv("HOME", str(real_home))
    box = resolve(
        "bwrap",
        worktree=story.worktree,
        objects=story.story_repo.objects_dir(),
        guarded=story.story_repo.guarded(),
        hide=(story.home,),
    )
    assert box is not None

    result = run_command(
        "echo $HOME; mkdir -p ~/.ssh && echo planted >> ~/.ssh/authorized_keys && "
        f"cat ~/.ssh/authorized_keys; echo planted >> {real_home}/.ssh/authorized_keys; "
        f"cat {real_home}/.ssh/authorized_keys",
        story.worktree,
        timeout_s=120,
        env=child_env(),  # HOME is the real home here
        sandbox=box,
    )

    assert result.output.splitlines()[:2] == [SANDBOX_HOME, "planted"], result.output
    assert "the user's key" not in result.output
    assert (real_home / ".ssh" / "authorized_keys").read_text() == "the user's key\n"


def test_a_command_cannot_see_hero_process_or_read_its_environment(story: Story) -> None:
    pid = os.getpid()

    result = story.run(f"cat /proc/{pid}/environ; ls /proc | grep -c '^[0-9]'")

    assert "PATH=" not in result.output
    assert "No such file or directory" in result.output, result.output
    # only the command's own processes are there: bwrap's init, sh, ls and grep
    assert int(result.output.strip().splitlines()[-1]) <= 5, result.output


# ----------------------------------------------------------------------------- processes, network


def test_a_detached_process_does_not_outlive_its_command(story: Story) -> None:
    token = f"hero-sandbox-detached-{uuid.uuid4().hex}"

    def daemon(fifo: str) -> str:
        code = f"import time; open('{fifo}', 'w').write('up\\n'); time.sleep(300)  # {token}"
        return f"{PY} -c {shlex.quote(code)}"

    # Each one writes its own fifo once it is up: the command ends only after all three are.
    command = (
        "mkfifo one two three && "
        f"{{ setsid {daemon('one')} & }} && read a < one && "
        f"{{ nohup {daemon('two')} >/dev/null 2>&1 & }} && read b < two && "
        f"( {daemon('three')} & ) && read c < three && echo $a$b$c"
    )

    result = story.run(command)

    assert result.output.strip() == "upupup", result.output
    assert processes_with(token) == []


def test_detached_processes_are_gone_when_their_command_returns(story: Story) -> None:
    """bwrap returns once the command exits, while the init of its PID namespace (in a
    session of its own) is still killing what is left there: run_command waits for the
    namespace to be empty. Many processes, none holding the output pipe (whose end of file
    run_command waits for), make that teardown take long."""
    token = f"hero-sandbox-tree-{uuid.uuid4().hex}"
    code = (
        "import os, time\n"
        "for _ in range(50):\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(300)\n"
        "        os._exit(0)\n"
        f"open('up', 'w').write('up\\n'); time.sleep(300)  # {token}"
    )
    command = (
        f"mkfifo up && {{ setsid {PY} -c {shlex.quote(code)} >/dev/null 2>&1 & }} && "
        "read a < up && echo $a"
    )

    result = story.run(command)

    assert result.output.strip() == "up", result.output
    assert processes_with(token) == []


def connect_command(port: int) -> str:
    code = (
        f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=10); "
        f"print('{REACHED[:4]}' + '{REACHED[4:]}')"  # the command's text does not hold REACHED
    )
    return f"{PY} -c {shlex.quote(code)}"


def test_worker_commands_have_no_network_unless_it_is_allowed(
    story: Story, loopback_server: int
) -> None:
    closed = story.run(connect_command(loopback_server))
    opened = story.run(connect_command(loopback_server), network=True)

    assert closed.exit_code != 0 and REACHED not in closed.output
    assert "Connection refused" in closed.output or "unreachable" in closed.output
    assert opened.exit_code == 0 and REACHED in opened.output, opened.output


# ----------------------------------------------------------------------------- the pipeline


APPROVE = text('{"verdict": "APPROVED", "summary": "ok", "ac_check": [], "comments": []}')


def _worker(port: int) -> list[Reply]:
    return [
        call("bash", command=f"echo home=$HOME; {connect_command(port)}"),
        call("write_file", path="calc/__init__.py", content=SUB_IMPL),
        call("bash", command="git add -A && git commit -q -m add-sub"),
        text("Done."),
    ]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("knobs", "worker_online", "checks_online"),
    [
        ({}, False, False),
        ({"sandbox_network": True, "verify_network": True}, True, True),
        ({"verify_network": True}, False, True),
    ],
    ids=["default", "both-online", "checks-online"],
)
def test_a_story_runs_its_worker_and_its_checks_in_the_sandbox_with_their_network_settings(
    bwrap: str,
    scripted,
    make_home,
    write_story,
    loopback_server: int,
    capsys: pytest.CaptureFixture[str],
    knobs: dict[str, bool],
    worker_online: bool,
    checks_online: bool,
) -> None:
    plan = _worker(loopback_server)
    model = scripted(lambda body: APPROVE if is_review(body) else plan[step_of(body)])
    home = make_home(model, **knobs)
    check = f"{connect_command(loopback_server)} 2>&1 | tail -n 1; echo checks-home=$HOME"
    story = write_story(home, "s1", verify=[check])

    code = main(["run", str(story), "--home", str(home), "-v"])

    assert code == 0, capsys.readouterr().err
    worker_bodies = [r.body for r in model.requests if not is_review(r.body)]
    first_tool_result = next(
        str(m["content"]) for m in worker_bodies[-1]["messages"] if m.get("role") == "tool"
    )
    log = (home / "runs" / "s1" / "verify-r1.log").read_text()
    assert f"home={SANDBOX_HOME}" in first_tool_result
    assert f"checks-home={SANDBOX_HOME}" in log
    assert (REACHED in first_tool_result) == worker_online, first_tool_result
    assert (REACHED in log) == checks_online, log
    assert "WITHOUT a sandbox" not in capsys.readouterr().err


# ----------------------------------------------------------------------------- the setting


def fake_bwrap(directory: Path, body: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "bwrap"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def test_a_broken_bwrap_is_found_once_and_its_words_are_the_reason(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    fake = fake_bwrap(
        tmp_path / "bin",
        f"echo run >> {calls}\n"
        "echo 'bwrap: Creating new namespace failed: Operation not permitted' >&2\nexit 1",
    )

    first = bwrap_problem(str(fake))
    second = bwrap_problem(str(fake))

    assert first == second
    assert first is not None
    assert "Creating new namespace failed: Operation not permitted" in first
    assert calls.read_text() == "run\n"  # asked once per process


def test_the_sandbox_setting_without_a_working_bwrap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_bwrap(tmp_path / "bin", "echo 'bwrap: No permissions to create new namespace' >&2; exit 1")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    where = {"worktree": tmp_path, "objects": None}
    warnings: list[str] = []

    with pytest.raises(SandboxUnavailable) as refused:
        resolve("bwrap", **where)  # type: ignore[arg-type]
    auto = resolve("auto", warn=warnings.append, **where)  # type: ignore[arg-type]
    none = resolve("none", **where)  # type: ignore[arg-type]

    assert "sandbox: bwrap" in str(refused.value)
    assert "config/roles.yaml" in str(refused.value)
    assert "No permissions to create new namespace" in str(refused.value)
    assert auto is None and none is None
    assert len(warnings) == 1 and "WITHOUT a sandbox" in warnings[0]
    assert "No permissions to create new namespace" in warnings[0]


def test_without_bwrap_installed_auto_warns_and_bwrap_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    warnings: list[str] = []

    with pytest.raises(SandboxUnavailable, match="not installed"):
        resolve("bwrap", worktree=tmp_path, objects=None)
    assert resolve("auto", worktree=tmp_path, objects=None, warn=warnings.append) is None
    assert len(warnings) == 1 and "not installed" in warnings[0]


def _story_with_broken_bwrap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scripted, make_home, write_story, mode: str
) -> tuple[Path, Path]:
    fake_bwrap(tmp_path / "bin", "echo 'bwrap: setting up uid map: Permission denied' >&2; exit 1")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    worker = [
        call("write_file", path="calc/__init__.py", content=SUB_IMPL),
        call("bash", command="git add -A && git commit -q -m add-sub"),
        text("Done."),
    ]
    model = scripted(lambda body: APPROVE if is_review(body) else worker[step_of(body)])
    home = make_home(model, sandbox=mode)
    verify = [f"{PY} -c 'from calc import sub; assert sub(5, 3) == 2'"]
    return home, write_story(home, "s1", verify=verify)


def test_sandbox_bwrap_without_a_working_bwrap_ends_the_story_in_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scripted, make_home, write_story, capsys
) -> None:
    home, story = _story_with_broken_bwrap(
        tmp_path, monkeypatch, scripted, make_home, write_story, "bwrap"
    )

    code = main(["run", str(story), "--home", str(home), "-v"])

    state = json.loads((home / "runs" / "state" / "s1.json").read_text())
    assert code == 1
    assert state["status"] == "error"
    assert state["error"].startswith("sandbox: bwrap is set in config/roles.yaml, but bwrap")
    assert "uid map" in state["error"]
    assert state["rounds"] == []  # no command ran unconfined
    assert not (home / "runs" / "s1" / "error.log").exists()  # a reason, not a crash


def test_sandbox_auto_without_a_working_bwrap_warns_once_and_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scripted, make_home, write_story, capsys
) -> None:
    home, story = _story_with_broken_bwrap(
        tmp_path, monkeypatch, scripted, make_home, write_story, "auto"
    )

    code = main(["run", str(story), "--home", str(home), "-v"])

    err = capsys.readouterr().err
    assert code == 0, err
    assert err.count("WITHOUT a sandbox") == 1, err
    assert "uid map" in err


# ----------------------------------------------------------------------------- the argv


def test_the_sandbox_never_binds_a_directory_that_holds_a_hidden_one(tmp_path: Path) -> None:
    """A tool directory that holds the hero home (or a home) is left out; one inside a
    hidden directory is bound, the hidden directory itself is not."""
    hero_home = tmp_path / "tools" / "home"
    (hero_home / "worktrees" / "s1").mkdir(parents=True)
    venv = hero_home / "venv"
    (venv / "bin").mkdir(parents=True)

    box = build(
        hero_home / "worktrees" / "s1",
        None,
        hide=(hero_home,),
        tool_dirs=[str(tmp_path / "tools"), str(venv / "bin"), "relative/bin", "/"],
        identity=False,
    )

    binds = {
        (box.prefix[i + 1], box.prefix[i + 2])
        for i, a in enumerate(box.prefix)
        if a in ("--ro-bind", "--bind")
    }
    sources = {src for src, _ in binds}
    assert str(venv / "bin") in sources
    assert str(tmp_path / "tools") not in sources
    assert str(hero_home) not in sources
    assert "/" not in sources and "relative/bin" not in sources
    offline, online = box.wrap(["true"], tmp_path), box.with_network(True).wrap(["true"], tmp_path)
    assert offline[-2:] == online[-2:] == ["--", "true"]
    assert "--unshare-net" in offline and "--unshare-net" not in online


def test_a_stopped_command_ends_every_process_in_its_sandbox(story: Story) -> None:
    """Cancel (as a timeout does) ends the whole sandbox, detached processes included."""
    token = f"hero-sandbox-cancel-{uuid.uuid4().hex}"
    daemon = f"import time; open('up', 'w').write('up\\n'); time.sleep(300)  # {token}"
    started = story.worktree / "started"
    os.mkfifo(started)
    command = (
        f"mkfifo up && {{ setsid {PY} -c {shlex.quote(daemon)} & }} && read a < up && "
        "echo $a && echo go > started && exec sleep 300"
    )
    cancel = threading.Event()

    def cancel_once_started() -> None:
        with open(started) as fifo:  # blocks until the command opens it to write
            fifo.read()
        cancel.set()

    watcher = threading.Thread(target=cancel_once_started, daemon=True)
    watcher.start()
    result = run_command(
        command, story.worktree, timeout_s=120, env=ENV, cancel=cancel, sandbox=story.box
    )
    watcher.join(10)

    assert result.cancelled and "up" in result.output, result.output
    assert processes_with(token) == []


def test_a_system_file_that_links_outside_the_system_is_bound_where_it_points(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """/etc/resolv.conf -> /run/systemd/resolve/stub-resolv.conf: DNS works for the checks."""
    target = tmp_path / "run" / "stub-resolv.conf"
    target.parent.mkdir()
    target.write_text("nameserver 127.0.0.53\n")
    link = tmp_path / "resolv.conf"
    link.symlink_to(target)
    monkeypatch.setattr("hero.sandbox.bwrap.LINKED_FILES", (str(link),))

    box = build(tmp_path / "worktree", None, tool_dirs=[], identity=False)

    i = box.prefix.index(str(target)) - 1
    assert box.prefix[i : i + 3] == ("--ro-bind", str(target), str(target))
