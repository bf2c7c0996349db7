"""The worker's sandbox of a round (``hero.sandbox.session``): one bubblewrap for all of a
round's bash commands, each of them as isolated as in a sandbox of its own.

Each test runs real commands through ``run_command`` in a real ``SandboxSession`` built for
a real story repository (as the pipeline builds it), and checks what the command saw and
what is left on the host afterwards. Where bubblewrap does not work they are skipped.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import pytest
from helpers import PY, SUB_IMPL, alive, is_review, step_of, wait_dead
from sandbox_support import agents, processes_with, story_sandbox

from hero.agent.tools import ToolContext
from hero.agent.tools.shell import tool_bash
from hero.cli import main
from hero.git.ops import DEFAULT_IDENTITY
from hero.llm.scripted import call, text
from hero.runner import CommandResult, child_env, run_command
from hero.sandbox.bwrap import SANDBOX_HOME, Sandbox
from hero.sandbox.limits import Limits, mechanism
from hero.sandbox.session import SandboxSession

SECRET = "hero-home-secret-9d2e"
KEY_NAME = "HERO_SESSION_TEST_PROVIDER_KEY"
KEY = "sk-session-test-5b7c1a9e3f"
ENV = child_env(extra=DEFAULT_IDENTITY)
REACHED = "reached the server"


class Round:
    """A story's repository, its sandbox as the pipeline builds it, and a round's session."""

    def __init__(self, home: Path, worktree: Path, box: Sandbox) -> None:
        self.home = home
        self.worktree = worktree
        self.box = box
        self.session = SandboxSession(box, worktree)

    def run(
        self,
        command: str,
        *,
        timeout_s: float = 120,
        env: dict[str, str] | None = None,
        cancel: threading.Event | None = None,
    ) -> CommandResult:
        return run_command(
            command,
            self.worktree,
            timeout_s=timeout_s,
            env=ENV if env is None else env,
            cancel=cancel,
            sandbox=self.session,
        )

    def with_box(self, box: Sandbox) -> Round:
        self.session.close()
        return Round(self.home, self.worktree, box)


def mounted_in_tmp(box: Sandbox) -> set[str]:
    """The names in /tmp that ``box`` mounts something on, or under (``--bind SRC DEST``)."""
    args = box.prefix
    names = set()
    for i, arg in enumerate(args[:-2]):
        if arg in ("--bind", "--ro-bind", "--symlink"):
            dest = PurePosixPath(args[i + 2])
            if dest.parts[1:2] == ("tmp",) and len(dest.parts) > 2:
                names.add(dest.parts[2])
    return names


def make_round(tmp_path: Path, target_repo: Path, limits: Limits | None = None) -> Round:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.local.yaml").write_text(f"keys:\n  scripted: {SECRET}\n")
    worktree, box = story_sandbox(tmp_path, target_repo, limits)
    return Round(home, worktree, box)


@pytest.fixture
def rnd(bwrap: str, tmp_path: Path, target_repo: Path) -> Iterator[Round]:
    made = make_round(tmp_path, target_repo)
    yield made
    made.session.close()


def _our_agent() -> int:
    (pid,) = agents()
    return pid


def _daemon(token: str, fifo: str) -> str:
    """A process that says "up" into ``fifo``, then sleeps 300 s; ``token`` in its argv."""
    code = f"import time; open('{fifo}', 'w').write('up\\n'); time.sleep(300)  # {token}"
    return f"{PY} -c {shlex.quote(code)}"


# ----------------------------------------------------------------------------- processes


def test_detached_processes_are_gone_when_their_command_returns(rnd: Round) -> None:
    token = f"hero-session-detached-{uuid.uuid4().hex}"
    double_fork = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        open('four', 'w').write('up\\n'); time.sleep(300)\n"
        "    os._exit(0)\n"
        f"# {token}"
    )
    command = (
        "mkfifo one two three four five && "
        f"{{ setsid {_daemon(token, 'one')} & }} && read a < one && "
        f"{{ nohup {_daemon(token, 'two')} >/dev/null 2>&1 & }} && read b < two && "
        f"( {_daemon(token, 'three')} & ) && read c < three && "
        f"{PY} -c {shlex.quote(double_fork)} && read d < four && "
        f"{{ {_daemon(token, 'five')} & }} && read e < five && echo $a$b$c$d$e"
    )  # the last one keeps the output pipe open, and nothing waits for it

    result = rnd.run(command)
    after = rnd.run("rm -f one two three four five; ls /proc | grep -c '^[0-9]'")

    assert result.exit_code == 0 and result.output.strip() == "upupupupup", result.output
    assert not result.timed_out
    assert processes_with(token) == []
    # in the sandbox: the agent, sh, ls and grep
    assert int(after.output.strip()) <= 4, after.output
    assert rnd.session.started == 1


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["timeout", "cancel"])
def test_a_stopped_command_ends_with_all_it_started_and_the_next_runs_in_the_same_sandbox(
    rnd: Round, stop: str
) -> None:
    token = f"hero-session-{stop}-{uuid.uuid4().hex}"
    (rnd.worktree / "started").unlink(missing_ok=True)
    os.mkfifo(rnd.worktree / "started")
    command = (
        f"mkfifo up && {{ setsid {_daemon(token, 'up')} & }} && read a < up && echo $a && "
        "echo go > started && exec sleep 300"
    )
    cancel = threading.Event()

    def stop_once_started() -> None:
        with open(rnd.worktree / "started") as fifo:  # until the command opens it to write
            fifo.read()
        if stop == "cancel":
            cancel.set()

    watcher = threading.Thread(target=stop_once_started, daemon=True)
    watcher.start()
    result = rnd.run(command, timeout_s=120 if stop == "cancel" else 3, cancel=cancel)
    watcher.join(10)
    after = rnd.run("rm -f up started; echo next")

    assert "up" in result.output, result.output
    if stop == "cancel":
        assert result.cancelled and result.exit_code == 130
    else:
        assert result.timed_out and result.exit_code == 124
    assert processes_with(token) == []
    assert after.exit_code == 0 and after.output == "next\n", after.output
    assert rnd.session.started == 1


def test_killing_everything_from_inside_leaves_the_sandbox_working(rnd: Round) -> None:
    """PID 1 gets no signal from inside its namespace that it does not handle: a command
    can kill all the rest (``kill -9 -1``) but not the agent."""
    result = rnd.run(
        "sleep 300 & kill -9 -1; kill -9 1; kill -TERM 1; kill -INT 1; kill -HUP 1; echo survived"
    )
    after = rnd.run("echo next; ls /proc | grep -c '^[0-9]'")

    assert result.exit_code == 0 and "survived" in result.output, result.output
    assert result.sandbox_note is None
    assert after.output.splitlines()[0] == "next" and int(after.output.split()[-1]) <= 4
    assert rnd.session.started == 1


def test_when_the_sandbox_dies_under_a_command_the_result_says_so_and_a_fresh_one_follows(
    rnd: Round,
) -> None:
    """Whatever ends the agent (here SIGKILL from outside; inside, the OOM killer could):
    every process in the sandbox ends with it, the command's result says so, and the next
    command runs in a fresh sandbox with an empty /tmp."""
    token = f"hero-session-lost-{uuid.uuid4().hex}"
    rnd.run("echo kept > /tmp/earlier")
    agent = _our_agent()
    (rnd.worktree / "started").unlink(missing_ok=True)
    os.mkfifo(rnd.worktree / "started")

    def kill_agent_once_started() -> None:
        with open(rnd.worktree / "started") as fifo:
            fifo.read()
        os.kill(agent, signal.SIGKILL)

    killer = threading.Thread(target=kill_agent_once_started, daemon=True)
    killer.start()
    result = rnd.run(
        f"mkfifo up && {{ setsid {_daemon(token, 'up')} & }} && read a < up && echo $a && "
        "echo go > started && exec sleep 300"
    )
    killer.join(10)
    after = rnd.run("rm -f up started; cat /tmp/earlier; ls -A $HOME; echo next")

    assert "up" in result.output and result.exit_code == 137, result
    assert not result.timed_out and not result.cancelled
    assert result.sandbox_note and "fresh sandbox" in result.sandbox_note
    assert processes_with(token) == [] and not alive(agent)
    assert after.exit_code == 0, after.output
    assert "No such file or directory" in after.output  # /tmp/earlier went with it
    assert after.output.splitlines()[-1] == "next" and "kept" not in after.output
    assert rnd.session.started == 2


def test_a_sandbox_that_died_between_two_commands_is_replaced_unseen(rnd: Round) -> None:
    rnd.run("true")
    agent = _our_agent()
    os.kill(agent, signal.SIGKILL)
    assert wait_dead(agent)

    result = rnd.run("echo next")

    assert result.exit_code == 0 and result.output == "next\n", result
    assert result.sandbox_note is None
    assert rnd.session.started == 2


def test_the_bash_tool_tells_the_model_that_the_sandbox_ended(rnd: Round) -> None:
    rnd.run("true")
    agent = _our_agent()
    ctx = ToolContext(root=rnd.worktree, env=ENV, sandbox=rnd.session)
    (rnd.worktree / "started").unlink(missing_ok=True)
    os.mkfifo(rnd.worktree / "started")

    def kill_agent_once_started() -> None:
        with open(rnd.worktree / "started") as fifo:
            fifo.read()
        os.kill(agent, signal.SIGKILL)

    killer = threading.Thread(target=kill_agent_once_started, daemon=True)
    killer.start()
    outcome = tool_bash(ctx, "echo go > started; exec sleep 300")
    killer.join(10)

    assert outcome.content.startswith("exit code: 137\n"), outcome.content
    assert "the sandbox ended while the command ran" in outcome.content


def test_a_command_that_changes_what_the_agent_hands_down_retires_the_sandbox(
    rnd: Round,
) -> None:
    """A command of the same user may lower the agent's rlimits (prlimit(2)); the agent sees
    it after the command, and the next command gets a fresh sandbox, limits as set."""
    lower = "import resource; resource.prlimit(1, resource.RLIMIT_NOFILE, (40, 40))"
    first = rnd.run("ulimit -n")

    lowered = rnd.run(f"{PY} -c {shlex.quote(lower)} && echo lowered")
    after = rnd.run("ulimit -n")

    assert lowered.output.strip() == "lowered", lowered.output
    assert after.output == first.output and first.output.strip() != "40", after.output
    assert rnd.session.started == 2


def test_a_commands_system_v_ipc_objects_are_removed_when_it_ends(rnd: Round) -> None:
    if shutil.which("ipcmk") is None or shutil.which("ipcs") is None:
        pytest.skip("ipcmk/ipcs (util-linux) are not installed")
    made = rnd.run("ipcmk -M 65536 && ipcmk -Q && ipcmk -S 2 && ipcs -m -q -s | grep -c 0x")

    after = rnd.run("ipcs -m -q -s | grep -c 0x")

    assert made.output.strip().splitlines()[-1] == "3", made.output
    assert after.output.strip() == "0", after.output


# ----------------------------------------------------------------------------- what a command sees


def test_the_rounds_commands_share_tmp_but_home_holds_nothing_of_heros(rnd: Round) -> None:
    first = rnd.run(
        "echo home=$HOME; ls -A $HOME /var/tmp /dev/shm; ls -A /tmp; "
        "echo mine > /tmp/note && echo rc > $HOME/.rc"
    )
    second = rnd.run("cat /tmp/note $HOME/.rc")
    rnd.session.close()  # the round's end
    next_round = rnd.run("ls -A $HOME; cat /tmp/note")

    lines = first.output.splitlines()
    assert lines[0] == f"home={SANDBOX_HOME}", first.output
    # HOME, /var/tmp and /dev/shm are empty; /tmp holds only HOME, and the directories bwrap
    # made to mount on what lies in /tmp (the worktree, or hero's interpreter in a checkout
    # under /tmp)
    listed = {line for line in lines[1:] if line and not line.endswith(":")}
    assert listed <= {"home", *mounted_in_tmp(rnd.box)} and "home" in listed, first.output
    assert second.output == "mine\nrc\n", second.output
    # a fresh /tmp, and an empty HOME
    assert next_round.output == "cat: /tmp/note: No such file or directory\n", next_round.output
    assert rnd.session.started == 2


def test_a_command_cannot_reach_the_agents_socket_nor_read_any_environment_but_its_own(
    rnd: Round, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_NAME, KEY)  # a provider key in hero's environment
    env = child_env(drop_names=[KEY_NAME], secret_values=[KEY], extra=DEFAULT_IDENTITY)

    result = rnd.run(
        "ls /proc/self/fd; echo ---; ls -l /proc/1/fd; cat /proc/1/environ; "
        "cat /proc/[0-9]*/environ | tr '\\0' '\\n' | grep -c . ; "
        f"cat /proc/{os.getpid()}/environ; "
        "tr '\\0' '\\n' < /proc/self/environ | grep -c HERO_SESSION; echo done",
        env={**env, "OWN": "mine"},
    )
    own = rnd.run("echo $OWN; env | grep -c '^HERO_SESSION' ; echo $HOME $TMPDIR", env=env)
    agent = _our_agent()

    fds, _, rest = result.output.partition("---\n")
    assert fds.split() == ["0", "1", "2", "3"], result.output  # 3: ls's own directory
    assert KEY not in result.output and "OWN=" not in result.output.replace("\n", "")
    assert rest.count("Permission denied") >= 2, result.output  # the agent's fds, environ
    assert f"/proc/{os.getpid()}/environ: No such file or directory" in result.output
    assert own.output.splitlines() == ["", "0", f"{SANDBOX_HOME} /tmp"], own.output
    try:  # as root, or with ptrace rights on it: the agent's own environment is bare
        agent_env = Path(f"/proc/{agent}/environ").read_bytes().decode()
    except PermissionError:
        return
    names = {item.split("=", 1)[0] for item in agent_env.split("\0") if item}
    assert KEY not in agent_env
    assert names <= {"PATH", "PWD", "HOME", "TMPDIR", *DEFAULT_IDENTITY}, names


def test_the_mounts_are_the_sandboxs(rnd: Round, target_repo: Path) -> None:
    """The same mounts as a sandbox of its own: the hero home is not there, the user's git
    directory and the story's git settings are read-only, the worktree is writable."""
    common = (target_repo / ".git").resolve()
    config = (common / "config").read_bytes()
    result = rnd.run(
        f"cat {rnd.home}/config.local.yaml; echo x >> {common}/config; "
        f"touch {common}/objects/planted; echo x >> .git/config; "
        "echo made > made.txt && echo wrote"
    )

    assert SECRET not in result.output
    assert "No such file or directory" in result.output
    assert result.output.count("Read-only file system") == 2, result.output
    assert (common / "config").read_bytes() == config
    assert not (common / "objects" / "planted").exists()
    assert "wrote" in result.output and (rnd.worktree / "made.txt").read_text() == "made\n"


def connect_command(port: int) -> str:
    code = (
        f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=10); "
        f"print('{REACHED[:4]}' + '{REACHED[4:]}')"
    )
    return f"{PY} -c {shlex.quote(code)}"


def test_worker_commands_have_no_network_unless_it_is_allowed(
    rnd: Round, loopback_server: int
) -> None:
    closed = rnd.run(connect_command(loopback_server))
    online = rnd.with_box(rnd.box.with_network(True))
    try:
        opened = online.run(connect_command(loopback_server))
    finally:
        online.session.close()

    assert closed.exit_code != 0 and REACHED not in closed.output
    assert "Connection refused" in closed.output or "unreachable" in closed.output
    assert opened.exit_code == 0 and REACHED in opened.output, opened.output


# ----------------------------------------------------------------------------- limits


def test_the_limits_hold_for_each_command(bwrap: str, tmp_path: Path, target_repo: Path) -> None:
    limited = make_round(tmp_path, target_repo, Limits(processes=16, file_size_mb=1, memory_mb=64))
    how = mechanism()
    hog = f"{PY} -c 'x = bytearray(300 << 20); print(len(x))'"
    try:
        big = limited.run("head -c 2M /dev/zero > big")
        many = limited.run("for i in $(seq 40); do sleep 30 & done; wait")
        fine = limited.run("echo fine")
        again = limited.run("rm big; head -c 2M /dev/zero > big")
        memory = limited.run(hog)
        after = limited.run("ulimit -f; echo fine")
    finally:
        limited.session.close()

    assert big.limit_note and "limit_file_size_mb" in big.limit_note, big
    assert (limited.worktree / "big").stat().st_size == 1 << 20
    if "processes: cgroup" in how:  # RLIMIT_NPROC does not hold for root; a pids cgroup does
        assert many.limit_note and "limit_processes" in many.limit_note, many
    assert fine.exit_code == 0 and fine.limit_note is None, fine  # hits are per command
    assert again.limit_note and "limit_file_size_mb" in again.limit_note, again
    assert limited.session.started == 1
    if "memory: cgroup" in how:  # the OOM killer ends the command, not the sandbox
        assert memory.limit_note and "limit_memory_mb" in memory.limit_note, memory
        assert after.output == "2048\nfine\n" and after.limit_note is None, after
        assert limited.session.started == 1


def test_the_limits_hold_in_a_fresh_sandbox_after_a_lost_one(
    bwrap: str, tmp_path: Path, target_repo: Path
) -> None:
    limited = make_round(tmp_path, target_repo, Limits(file_size_mb=1))
    try:
        limited.run("true")
        agent = _our_agent()
        os.kill(agent, signal.SIGKILL)
        assert wait_dead(agent)
        big = limited.run("head -c 2M /dev/zero > big")
    finally:
        limited.session.close()

    assert limited.session.started == 2
    assert big.limit_note and "limit_file_size_mb" in big.limit_note, big
    assert (limited.worktree / "big").stat().st_size == 1 << 20


def test_without_python_in_reach_each_command_gets_a_sandbox_of_its_own(
    rnd: Round, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "executable", "/nonexistent/python3")

    first = rnd.run("echo $HOME; echo mine > /tmp/note")
    second = rnd.run("cat /tmp/note")

    assert rnd.session.problem, "the round's sandbox should not have started"
    assert first.exit_code == 0 and first.output == f"{SANDBOX_HOME}\n", first.output
    assert "No such file or directory" in second.output  # each in a sandbox of its own
    assert rnd.session.started == 0


def test_closing_the_session_ends_its_sandbox(rnd: Round) -> None:
    rnd.run("true")
    agent = _our_agent()

    rnd.session.close()

    assert not alive(agent)
    assert agents() == []


# ----------------------------------------------------------------------------- the pipeline


APPROVE = text('{"verdict": "APPROVED", "summary": "ok", "ac_check": [], "comments": []}')


@pytest.mark.slow
def test_a_rounds_bash_calls_share_one_sandbox_that_ends_with_the_round(
    bwrap: str, scripted, make_home, write_story, capsys: pytest.CaptureFixture[str]
) -> None:
    token = f"hero-session-round-{uuid.uuid4().hex}"
    plan = [
        call(
            "bash",
            command=f"echo note > /tmp/note; mkfifo /tmp/up; "
            f"{{ setsid {_daemon(token, '/tmp/up')} & }}; read a < /tmp/up; echo $a",
        ),
        call("bash", command="cat /tmp/note; ls /proc | grep -c '^[0-9]'"),
        call("write_file", path="calc/__init__.py", content=SUB_IMPL),
        call("bash", command="git add -A && git commit -q -m add-sub"),
        text("Done."),
    ]
    model = scripted(lambda body: APPROVE if is_review(body) else plan[step_of(body)])
    home = make_home(model, sandbox="bwrap")
    story = write_story(home, "s1", verify=["cat /tmp/note 2>&1 || echo no-note"])

    code = main(["run", str(story), "--home", str(home), "-v"])

    assert code == 0, capsys.readouterr().err
    worker = [r.body for r in model.requests if not is_review(r.body)][-1]
    results = [str(m["content"]) for m in worker["messages"] if m.get("role") == "tool"]
    assert results[0].splitlines()[-1] == "up", results[0]
    # the second call saw the first's /tmp, and none of its processes
    assert results[1].splitlines()[-2:] == ["note", "4"], results[1]
    assert processes_with(token) == []
    assert agents() == []  # ended with the worker's turn
    log = (home / "runs" / "s1" / "verify-r1.log").read_text()
    assert "no-note" in log  # the checks run in sandboxes of their own
