"""Tests for hero.runner: real subprocesses, real process groups."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest

from hero.runner import CommandResult, child_env, run_command, run_process, truncate_middle

HANG_BOUND_S = 10.0  # generous: only proves that nothing hung


def _alive(pid: int) -> bool:
    """A zombie counts as dead (some container inits never reap orphans)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


def _wait_dead(pid: int, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.02)
    return not _alive(pid)


def _read_pid(path: Path, within_s: float = 5.0) -> int:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        text = path.read_text().strip() if path.exists() else ""
        if text:
            return int(text)
        time.sleep(0.01)
    raise AssertionError(f"{path} was never written")


def run(command: str, cwd: Path, **kwargs) -> CommandResult:
    kwargs.setdefault("timeout_s", 30)
    return run_command(command, cwd, **kwargs)


# --- basics ------------------------------------------------------------------------------------


def test_output_and_exit_code(tmp_path: Path) -> None:
    r = run("echo hello; exit 3", tmp_path)
    assert r.exit_code == 3
    assert r.output == "hello\n"
    assert r.command == "echo hello; exit 3"
    assert not r.timed_out and not r.cancelled
    assert r.output_truncated_bytes == 0
    assert r.duration_s >= 0


def test_stdout_and_stderr_interleaved_in_order(tmp_path: Path) -> None:
    r = run("echo one; echo two >&2; echo three", tmp_path)
    assert r.exit_code == 0
    assert r.output == "one\ntwo\nthree\n"


@pytest.mark.parametrize(("sig", "code"), [("KILL", 137), ("TERM", 143)])
def test_killed_by_signal_gives_128_plus_n(tmp_path: Path, sig: str, code: int) -> None:
    r = run(f"echo before; kill -{sig} $$", tmp_path)
    assert r.exit_code == code
    assert "before" in r.output
    assert not r.timed_out


def test_runs_in_cwd_with_given_env(tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"], "HERO_TEST_VAR": "xyz"}
    r = run('pwd; echo "var=$HERO_TEST_VAR"; echo "home=${HOME:-unset}"', tmp_path, env=env)
    lines = r.output.splitlines()
    assert Path(lines[0]).resolve() == tmp_path.resolve()
    assert lines[1] == "var=xyz"
    assert lines[2] == "home=unset"


def test_env_none_inherits_process_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERO_INHERIT_ME", "yes")
    r = run('echo "$HERO_INHERIT_ME"', tmp_path)
    assert r.output == "yes\n"


def test_invalid_utf8_is_replaced(tmp_path: Path) -> None:
    r = run(r"printf 'ok \377\376 end\n'", tmp_path)
    assert r.output.startswith("ok ")
    assert "\ufffd" in r.output
    assert r.output.endswith(" end\n")


def test_missing_cwd_raises_oserror(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        run("true", tmp_path / "does-not-exist")


def test_stdin_is_devnull(tmp_path: Path) -> None:
    start = time.monotonic()
    r = run("cat; echo cat-done", tmp_path)
    assert r.exit_code == 0
    assert r.output == "cat-done\n"
    r = run('read line; echo "read-rc=$?"', tmp_path)
    assert r.output == "read-rc=1\n"
    assert time.monotonic() - start < HANG_BOUND_S


def test_no_fd_leak_over_many_runs(tmp_path: Path) -> None:
    run("true", tmp_path)  # warm up lazily created fds
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(30):
        run("echo x; sleep 5 &", tmp_path)
    assert len(os.listdir("/proc/self/fd")) == before


# --- process group handling --------------------------------------------------------------------


@pytest.mark.slow
def test_timeout_kills_grandchild(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    start = time.monotonic()
    r = run(f"echo started; sleep 60 & echo $! > {pidfile}; wait", tmp_path, timeout_s=1.5)
    assert time.monotonic() - start < HANG_BOUND_S
    assert r.exit_code == 124
    assert r.timed_out and not r.cancelled
    assert r.output == "started\n"  # output before the timeout is kept
    assert _wait_dead(_read_pid(pidfile))


@pytest.mark.slow
def test_timeout_sigkills_a_group_that_ignores_sigterm(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    start = time.monotonic()
    r = run(f"trap '' TERM; sleep 60 & echo $! > {pidfile}; wait", tmp_path, timeout_s=1.0)
    assert time.monotonic() - start < HANG_BOUND_S
    assert r.exit_code == 124 and r.timed_out
    assert _wait_dead(_read_pid(pidfile))


def test_background_child_does_not_hang_and_is_killed(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    start = time.monotonic()
    # the background sleep inherits stdout (the pipe) and would keep it open for 60 s
    r = run(f"sleep 60 & echo $! > {pidfile}; echo done", tmp_path)
    assert time.monotonic() - start < HANG_BOUND_S
    assert r.exit_code == 0
    assert r.output == "done\n"
    assert _wait_dead(_read_pid(pidfile))


def test_orphaned_grandchild_is_killed(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    start = time.monotonic()
    r = run(f"sh -c 'sleep 60 & echo $! > {pidfile}'; echo parent-done; exit 5", tmp_path)
    assert time.monotonic() - start < HANG_BOUND_S
    assert r.exit_code == 5
    assert r.output == "parent-done\n"
    assert _wait_dead(_read_pid(pidfile))


def test_cancel_from_another_thread(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    cancel = threading.Event()

    def cancel_once_started() -> None:
        _read_pid(pidfile)
        cancel.set()

    setter = threading.Thread(target=cancel_once_started, daemon=True)
    setter.start()
    start = time.monotonic()
    r = run(
        f"echo working; sleep 60 & echo $! > {pidfile}; wait",
        tmp_path,
        timeout_s=60,
        cancel=cancel,
    )
    setter.join(5)
    assert time.monotonic() - start < HANG_BOUND_S
    assert r.exit_code == 130
    assert r.cancelled and not r.timed_out
    assert r.output == "working\n"
    assert _wait_dead(_read_pid(pidfile))


def test_cancel_already_set_stops_at_once(tmp_path: Path) -> None:
    cancel = threading.Event()
    cancel.set()
    start = time.monotonic()
    r = run("sleep 60", tmp_path, timeout_s=60, cancel=cancel)
    assert time.monotonic() - start < HANG_BOUND_S
    assert r.exit_code == 130 and r.cancelled


def test_unset_cancel_event_does_not_disturb_normal_run(tmp_path: Path) -> None:
    r = run("echo fine", tmp_path, cancel=threading.Event())
    assert r.exit_code == 0 and r.output == "fine\n" and not r.cancelled


def test_keyboard_interrupt_kills_group_and_reraises(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"

    def on_alarm(signum: int, frame: object) -> None:
        if pidfile.exists() and pidfile.read_text().strip():
            raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, 0.1, 0.05)
    try:
        start = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            run(f"sleep 60 & echo $! > {pidfile}; wait", tmp_path, timeout_s=60)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert time.monotonic() - start < HANG_BOUND_S
    assert _wait_dead(_read_pid(pidfile))


# --- output capture limits ---------------------------------------------------------------------


def test_output_over_limit_keeps_head_and_tail(tmp_path: Path) -> None:
    full = "".join(f"{i}\n" for i in range(1, 100_001))
    r = run("seq 1 100000", tmp_path, max_output_bytes=1000)
    assert r.exit_code == 0
    assert r.output.startswith("1\n2\n3\n")
    assert r.output.endswith("99999\n100000\n")
    assert r.output_truncated_bytes == len(full) - 1000
    assert f"[... {r.output_truncated_bytes} bytes cut from the middle ...]" in r.output
    head, _, tail = r.output.partition("\n[... ")
    assert full.startswith(head)
    assert full.endswith(tail.split(" ...]\n", 1)[1])


def test_output_under_limit_is_complete(tmp_path: Path) -> None:
    r = run("seq 1 1000", tmp_path, max_output_bytes=1_000_000)
    assert r.output == "".join(f"{i}\n" for i in range(1, 1001))
    assert r.output_truncated_bytes == 0


def test_truncation_does_not_split_utf8_in_tail(tmp_path: Path) -> None:
    # 3-byte characters; the tail window starts at an arbitrary byte
    r = run(
        "i=0; while [ $i -lt 2000 ]; do printf '\\342\\202\\254'; i=$((i+1)); done",
        tmp_path,
        max_output_bytes=101,
    )
    assert r.output_truncated_bytes > 0
    tail = r.output.split(" ...]\n", 1)[1]
    assert tail and set(tail) == {"€"}


# --- child_env ---------------------------------------------------------------------------------


def test_child_env_drops_names_and_secret_values() -> None:
    base = {
        "PATH": "/bin",
        "OPENAI_API_KEY": "sk-1",
        "COPY_OF_KEY": "sk-1",
        "OTHER_SECRET": "hunter2",
        "EMPTY": "",
        "KEEP": "ok",
    }
    env = child_env(base, drop_names=["OPENAI_API_KEY"], secret_values=["hunter2", "sk-1", ""])
    assert "OPENAI_API_KEY" not in env
    assert "COPY_OF_KEY" not in env
    assert "OTHER_SECRET" not in env
    assert env["EMPTY"] == ""  # an empty secret never matches
    assert env["KEEP"] == "ok" and env["PATH"] == "/bin"
    assert "sk-1" not in env.values() and "hunter2" not in env.values()
    assert base["OPENAI_API_KEY"] == "sk-1"  # base is not modified


def test_child_env_sets_non_interactive_defaults() -> None:
    env = child_env({"PAGER": "less", "EDITOR": "vim", "GIT_PAGER": "less"})
    assert env["PAGER"] == "cat"
    assert env["GIT_PAGER"] == "cat"
    assert env["GIT_TERMINAL_PROMPT"] == "0"
    assert env["CI"] == "1"
    assert env["GIT_EDITOR"] == "true"
    assert env["EDITOR"] == "true"


def test_child_env_extra_wins() -> None:
    env = child_env({"A": "1"}, extra={"A": "2", "PAGER": "more"}, drop_names=["A"])
    assert env["A"] == "2"
    assert env["PAGER"] == "more"


def test_child_env_defaults_to_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HERO_CHILD_ENV_TEST", "present")
    monkeypatch.setenv("HERO_CHILD_ENV_DROP", "gone")
    env = child_env(drop_names=("HERO_CHILD_ENV_DROP",))
    assert env["HERO_CHILD_ENV_TEST"] == "present"
    assert "HERO_CHILD_ENV_DROP" not in env
    assert os.environ["HERO_CHILD_ENV_DROP"] == "gone"


def test_child_env_reaches_the_command(tmp_path: Path) -> None:
    base = {"PATH": os.environ["PATH"], "TOKEN": "s3cret", "NAME": "x"}
    env = child_env(base, secret_values=["s3cret"])
    r = run('echo "t=${TOKEN:-none} n=$NAME p=$PAGER"', tmp_path, env=env)
    assert r.output == "t=none n=x p=cat\n"


# --- run_process (argv, stdout and stderr apart: hero's own git) -----------------------------


def test_run_process_keeps_stdout_and_stderr_apart(tmp_path: Path) -> None:
    r = run_process(
        ["sh", "-c", "echo out; echo err >&2; exit 5"], tmp_path, timeout_s=30, env=None
    )
    assert (r.stdout, r.stderr, r.exit_code, r.timed_out) == ("out\n", "err\n", 5, False)
    assert r.argv == ("sh", "-c", "echo out; echo err >&2; exit 5")


def test_run_process_passes_arguments_without_a_shell(tmp_path: Path) -> None:
    r = run_process(["printf", "%s|", "a b", "$HOME", "*"], tmp_path, timeout_s=30)
    assert r.stdout == "a b|$HOME|*|"


def test_run_process_keeps_all_output(tmp_path: Path) -> None:
    r = run_process(["head", "-c", "9000000", "/dev/zero"], tmp_path, timeout_s=30)
    assert len(r.stdout) == 9_000_000  # more than run_command's default budget: callers parse it


@pytest.mark.slow
def test_run_process_timeout_kills_the_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    started = time.monotonic()
    r = run_process(
        ["sh", "-c", f"sleep 30 & echo $! > {pid_file}; echo partial; wait"],
        tmp_path,
        timeout_s=0.5,
    )
    assert time.monotonic() - started < HANG_BOUND_S
    assert (r.timed_out, r.exit_code, r.stdout) == (True, 124, "partial\n")
    assert _wait_dead(_read_pid(pid_file))


def test_run_process_that_cannot_start_raises_oserror(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        run_process(["true"], tmp_path / "missing", timeout_s=30)
    with pytest.raises(OSError):
        run_process(["hero-no-such-program"], tmp_path, timeout_s=30)


# --- truncate_middle ---------------------------------------------------------------------------

_MARK = re.compile(r"\[\.\.\. (\d+) characters cut from the middle \.\.\.\]\n")


def _split(result: str) -> tuple[str, int, str]:
    m = _MARK.search(result)
    assert m, result
    return result[: m.start()], int(m.group(1)), result[m.end() :]


def test_truncate_middle_short_text_unchanged() -> None:
    assert truncate_middle("abc", 3) == "abc"
    assert truncate_middle("abc", 100) == "abc"
    assert truncate_middle("", 0) == ""


def test_truncate_middle_keeps_head_and_tail_and_states_cut() -> None:
    text = "".join(chr(ord("a") + i % 26) for i in range(10_000))  # no newlines
    out = truncate_middle(text, 1000)
    head, cut, tail = _split(out)
    assert head.endswith("\n")
    head = head[:-1]
    assert text.startswith(head) and text.endswith(tail)
    assert len(head) + cut + len(tail) == len(text)
    assert 0 < len(head) < len(tail)  # ~40% head, ~60% tail
    assert len(out) <= 1001


def test_truncate_middle_prefers_line_boundaries() -> None:
    text = "".join(f"line {i:05d}\n" for i in range(2000))
    out = truncate_middle(text, 2000)
    head, cut, tail = _split(out)
    assert head.endswith("\n") and text.startswith(head)
    assert tail.startswith("line ") and text.endswith(tail)
    assert len(head) + cut + len(tail) == len(text)
    assert len(out) <= 2000


def test_truncate_middle_tiny_limit_still_reports() -> None:
    out = truncate_middle("x" * 500, 5)
    _, cut, _ = _split(out)
    assert cut == 500


# -- a stop signal while the child is being started ---------------------------------------


def _interrupted_in_popen(monkeypatch: pytest.MonkeyPatch, pid_file: Path) -> None:
    """Make the next Popen receive SIGINT after its child runs and before Popen returns, as
    on a loaded machine where the parent is not scheduled for a while after the fork."""
    import subprocess

    real = subprocess.Popen._execute_child  # type: ignore[attr-defined]

    def execute_child(self: subprocess.Popen[bytes], *args: object, **kwargs: object) -> None:
        real(self, *args, **kwargs)
        deadline = time.monotonic() + HANG_BOUND_S
        while not pid_file.is_file() or not pid_file.read_text().strip():
            assert time.monotonic() < deadline, "the child never wrote its pid"
            time.sleep(0.01)
        signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(subprocess.Popen, "_execute_child", execute_child)


def test_ctrl_c_while_popen_starts_the_command_leaves_nothing_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert threading.current_thread() is threading.main_thread()
    pid_file = tmp_path / "pid"
    _interrupted_in_popen(monkeypatch, pid_file)
    with pytest.raises(KeyboardInterrupt):
        run_command(
            f"sleep 30 & echo $! > {pid_file}.tmp; mv {pid_file}.tmp {pid_file}; wait",
            tmp_path,
            timeout_s=60,
        )
    assert _wait_dead(int(pid_file.read_text())), "the command's child outlived the interrupt"


def test_ctrl_c_while_popen_starts_a_program_leaves_nothing_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pid_file = tmp_path / "pid"
    _interrupted_in_popen(monkeypatch, pid_file)
    with pytest.raises(KeyboardInterrupt):
        run_process(["sh", "-c", f"echo $$ > {pid_file}; exec sleep 30"], tmp_path, timeout_s=60)
    assert _wait_dead(int(pid_file.read_text())), "the program outlived the interrupt"


def test_a_stop_signal_whose_handler_returns_lets_the_command_finish(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A daemon's handler only notes the stop: the command it held off runs on, and the
    handler is told once, after Popen."""
    seen: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda n, _f: seen.append(n))
    try:
        pid_file = tmp_path / "pid"
        _interrupted_in_popen(monkeypatch, pid_file)
        result = run_command(f"echo $$ > {pid_file}; echo done", tmp_path, timeout_s=60)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert result.exit_code == 0 and "done" in result.output
    assert seen == [signal.SIGINT]
    assert signal.getsignal(signal.SIGINT) is previous
