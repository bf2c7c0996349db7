"""Limits on every sandboxed command: what a command that goes too far meets, and says.

The sandbox tests run real commands through ``run_command`` in a real bubblewrap sandbox
with small limits, and check the command's result (exit code, output, the note for the
worker) and what is left on the host. Where bubblewrap does not work they are skipped,
saying why. The rlimit fallback (no writable cgroup) is tested on a real process held
before it runs its command, as bwrap's init is. The settings are tested through
``load_config`` and the ``hero init`` template.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from helpers import PY, alive

from hero.config.loader import load_config
from hero.config.scaffold import init_home
from hero.config.schema import ConfigError
from hero.runner import CommandResult, child_env, run_command
from hero.sandbox import limits as limits_module
from hero.sandbox.bwrap import Sandbox, build
from hero.sandbox.limits import (
    SETTINGS,
    TMPFS_DIRS,
    Limits,
    confine,
    explain,
    mechanism,
    tmpfs_args,
)

#: Small limits, so that each test reaches one quickly.
SMALL = Limits(tmpfs_mb=16, processes=64, memory_mb=256, file_size_mb=8, cpu_s=1, open_files=64)


@dataclass(frozen=True)
class Limited:
    """A sandbox whose commands get ``limits``: its tmpfs sized, and ``limits`` for the
    runner to put on each command (as ``hero.sandbox.bwrap.Sandbox`` will carry them)."""

    box: Sandbox
    limits: Limits

    def wrap(
        self,
        argv: Sequence[str],
        cwd: Path,
        *,
        info_fd: int | None = None,
        block_fd: int | None = None,
    ) -> list[str]:
        return self.box.wrap(argv, cwd, info_fd=info_fd, block_fd=block_fd)


def limited(bwrap: str, worktree: Path, limits: Limits) -> Limited:
    """The sandbox ``hero.sandbox.bwrap.build`` makes for ``worktree``, with each of its tmpfs
    in TMPFS_DIRS mounted by ``tmpfs_args`` instead."""
    prefix = list(build(worktree, None, bwrap=bwrap).prefix)
    args: list[str] = []
    i = 0
    while i < len(prefix):
        if prefix[i] == "--size":  # a size already given is replaced
            i += 2
        elif prefix[i] == "--tmpfs" and prefix[i + 1] in TMPFS_DIRS:
            args += tmpfs_args(limits, [prefix[i + 1]])
            i += 2
        else:
            args.append(prefix[i])
            i += 1
    box = Sandbox(tuple(args))
    return Limited(box, limits)


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    path = tmp_path / "worktree"
    path.mkdir()
    return path


def run(bwrap: str, worktree: Path, command: str, limits: Limits = SMALL) -> CommandResult:
    return run_command(
        command,
        worktree,
        timeout_s=120,
        env=child_env(),
        sandbox=limited(bwrap, worktree, limits),
    )


def processes_with(token: str) -> list[int]:
    """Pids of the processes whose command line holds ``token``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read()
        except OSError:
            continue
        if token.encode() in cmdline:
            found.append(int(entry))
    return found


# ----------------------------------------------------------------------------- in the sandbox


def test_each_tmpfs_is_full_at_its_size_and_the_worker_is_told(bwrap: str, worktree: Path) -> None:
    limits = dataclasses.replace(SMALL, file_size_mb=1024)
    result = run(
        bwrap,
        worktree,
        "for d in /tmp /var/tmp /dev/shm; do head -c 64M /dev/zero > $d/x; "
        "echo $d $(stat -c %s $d/x); done; exit 1",
        limits,
    )

    assert result.output.count("No space left on device") == 3, result.output
    for d in TMPFS_DIRS:
        assert f"{d} {16 << 20}\n" in result.output, result.output
    assert result.limit_note is not None
    assert "limit_tmpfs_mb in config/roles.yaml" in result.limit_note
    assert "16 MB" in result.limit_note


def test_a_file_beyond_the_file_size_limit_is_refused(bwrap: str, worktree: Path) -> None:
    result = run(bwrap, worktree, "head -c 64M /dev/zero > big")

    assert result.exit_code == 128 + signal.SIGXFSZ, result.output  # the shell's child
    assert (worktree / "big").stat().st_size == 8 << 20
    assert result.limit_note is not None
    assert "larger than the sandbox's limit of 8 MB" in result.limit_note
    assert "limit_file_size_mb" in result.limit_note

    # A program that ignores SIGXFSZ (Python does) gets "File too large" instead.
    python = run(bwrap, worktree, f"{PY} -c \"open('big2', 'wb').write(bytes(64 << 20))\"")
    assert "File too large" in python.output, python.output
    assert python.exit_code == 1
    assert python.limit_note is not None and "limit_file_size_mb" in python.limit_note


def test_a_fork_bomb_ends_at_the_process_limit_and_leaves_nothing(
    bwrap: str, worktree: Path
) -> None:
    if "processes: NOT limited" in mechanism():
        pytest.skip(f"processes cannot be limited here: {mechanism()}")
    token = f"7.{uuid.uuid4().int % 10**9}"

    result = run(bwrap, worktree, f"for i in $(seq 2000); do sleep {token} & done; wait")

    assert not result.timed_out
    assert result.exit_code != 0
    assert "fork" in result.output.lower(), result.output
    assert result.limit_note is not None
    assert "limit of 64 processes" in result.limit_note
    assert "limit_processes in config/roles.yaml" in result.limit_note
    assert processes_with(token) == []


def test_a_memory_hog_fails_and_the_worker_is_told(bwrap: str, worktree: Path) -> None:
    result = run(bwrap, worktree, f"{PY} -c \"b = b'x' * (512 << 20); print('allocated')\"")

    assert result.exit_code != 0
    assert "allocated" not in result.output
    assert result.limit_note is not None
    assert "256 MB" in result.limit_note and "limit_memory_mb" in result.limit_note


@pytest.mark.slow
def test_a_process_past_its_cpu_time_is_stopped(bwrap: str, worktree: Path) -> None:
    result = run(bwrap, worktree, f'{PY} -c "while True: pass"')

    assert result.exit_code == 128 + signal.SIGXCPU, result.output
    assert result.limit_note is not None
    assert "its 1 CPU seconds" in result.limit_note and "limit_cpu_s" in result.limit_note


def test_open_files_are_limited(bwrap: str, worktree: Path) -> None:
    result = run(
        bwrap,
        worktree,
        f"ulimit -n; ulimit -Hn; {PY} -c \"fs = [open('/dev/null') for _ in range(100)]\"",
    )

    assert result.output.splitlines()[:2] == ["64", "64"], result.output
    assert "Too many open files" in result.output
    assert result.limit_note is not None and "limit_open_files" in result.limit_note


def test_ordinary_commands_run_under_the_default_limits_without_a_note(
    bwrap: str, worktree: Path
) -> None:
    result = run(
        bwrap,
        worktree,
        f"{PY} -c \"import threading; b = bytearray(64 << 20); print('ok')\" && "
        "head -c 1M /dev/zero > /tmp/x && echo a | tr a b && ls /tmp/x",
        Limits(),
    )

    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == ["ok", "b", "/tmp/x"]
    assert result.limit_note is None


def test_no_cgroup_of_a_command_is_left(bwrap: str, worktree: Path) -> None:
    """Each command's cgroups are removed after it, whatever it did."""
    run(bwrap, worktree, "for i in $(seq 200); do sleep 60 & done; wait")
    run(bwrap, worktree, "sleep 60 & exit 0")
    parents = {c.parent for c in limits_module._probe().controllers}

    left = [
        name
        for parent in parents
        for name in os.listdir(parent)
        if name.startswith(limits_module._own_prefix())
    ]
    assert left == []


# ----------------------------------------------------------------------------- confine itself


Start = Callable[..., subprocess.Popen[bytes]]


@pytest.fixture
def held() -> Iterator[Start]:
    """A shell that waits for a line on stdin before it runs its script (as bwrap's init
    waits on its block fd); killed with its process group afterwards."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(script: str) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            ["sh", "-c", f"read go; {script}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def finish(proc: subprocess.Popen[bytes]) -> tuple[int, str]:
    out, _ = proc.communicate(b"go\n", timeout=120)
    return proc.returncode, out.decode(errors="replace")


def test_confine_moves_the_process_into_cgroups_it_removes_after(held: Start) -> None:
    controllers = limits_module._probe().controllers
    if not controllers:
        pytest.skip(f"no cgroup controller is writable here: {mechanism()}")
    proc = held("cat /proc/self/cgroup")

    confinement = confine(SMALL, proc.pid)
    code, out = finish(proc)
    paths = [path for _, path in confinement.cgroups]
    assert code == 0
    assert [c for c, _ in confinement.cgroups] == list(controllers)
    for path in paths:  # the command ran in them
        assert any(line.endswith(f"/{path.name}") for line in out.splitlines()), out
        assert path.is_dir()
    confinement.end()
    assert not any(path.exists() for path in paths)
    assert confinement.hit == set()


CRASHING_HERO = """
import os, signal, subprocess, sys
from hero.sandbox.limits import Limits, confine
command = subprocess.Popen(
    ["sleep", sys.argv[1]], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    start_new_session=True,
)
confinement = confine(Limits(), command.pid)
print(command.pid, *(path for _, path in confinement.cgroups), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_cgroups_a_killed_hero_left_are_removed_by_the_next(tmp_path: Path) -> None:
    if not limits_module._probe().controllers:
        pytest.skip(f"no cgroup controller is writable here: {mechanism()}")
    crashed = subprocess.run(
        [sys.executable, "-c", CRASHING_HERO, "300"], capture_output=True, text=True, timeout=60
    )
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    pid, *paths = crashed.stdout.split()
    assert paths and all(Path(p).is_dir() for p in paths)
    assert alive(int(pid))  # its command is still there, in its cgroups

    subprocess.run(
        [sys.executable, "-c", "from hero.sandbox.limits import mechanism; mechanism()"],
        check=True,
        timeout=60,
    )

    assert not any(Path(p).exists() for p in paths)
    assert not alive(int(pid))


def test_without_cgroups_memory_is_held_per_process_by_rlimit_data(held: Start) -> None:
    proc = held(f"{PY} -c \"b = b'x' * (512 << 20); print('allocated')\"")

    confinement = confine(SMALL, proc.pid, cgroups=False)
    code, out = finish(proc)
    confinement.end()

    assert code == 1 and "MemoryError" in out, out
    note = confinement.note(code, out)
    assert note is not None and "may have hit the sandbox's memory limit: 256 MB" in note


def test_without_cgroups_processes_are_held_by_rlimit_nproc_for_a_user(held: Start) -> None:
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        pytest.skip("needs root and setpriv to run the command as another user")
    token = f"7.{uuid.uuid4().int % 10**9}"
    as_nobody = f"exec {setpriv} --reuid 65534 --regid 65534 --clear-groups sh -c"
    loop = f"for i in $(seq 300); do sleep {token} >/dev/null 2>&1 & done"
    proc = held(f"{as_nobody} {shlex.quote(loop)}")  # the limits go with it

    confine(dataclasses.replace(SMALL, processes=32), proc.pid, cgroups=False)
    code, out = finish(proc)

    assert code != 0 and "Cannot fork" in out, out
    note = explain(SMALL, code, out)
    assert note is not None and "limit_processes" in note


# ----------------------------------------------------------------------------- explain


@pytest.mark.parametrize(
    ("exit_code", "output", "hit", "says"),
    [
        (2, "sh: 1: Cannot fork\n", (), "limit of 64 processes and threads"),
        (0, "", ("processes",), "limit of 64 processes and threads"),
        (137, "Killed\n", ("memory_mb",), "ran out of memory"),
        (152, "", (), "its 1 CPU seconds"),
        (153, "File size limit exceeded\n", (), "larger than the sandbox's limit of 8 MB"),
        (1, "OSError: [Errno 28] No space left on device\n", (), "each holds at most 16 MB"),
        (1, "OSError: [Errno 24] Too many open files\n", (), "64 open files"),
    ],
)
def test_explain_names_the_limit_and_its_setting(
    exit_code: int, output: str, hit: tuple[str, ...], says: str
) -> None:
    note = explain(SMALL, exit_code, output, hit=hit)

    assert note is not None and says in note, note
    assert "in config/roles.yaml" in note
    assert note[0].isupper() and note.endswith(".") and "\n" not in note


@pytest.mark.parametrize(
    ("exit_code", "output"),
    [(0, "ok\n"), (1, "AssertionError\n"), (137, "Killed\n"), (0, "No space left on device")],
)
def test_explain_says_nothing_when_no_limit_was_hit(exit_code: int, output: str) -> None:
    assert explain(SMALL, exit_code, output) is None


def test_a_cgroup_s_count_is_believed_over_what_the_output_says() -> None:
    counted = ("processes", "memory_mb")
    output = "sh: 1: Cannot fork\nFATAL ERROR: JavaScript heap out of memory\n"

    assert explain(SMALL, 1, output, counted=counted) is None
    assert explain(SMALL, 1, output) is not None  # without a count, the output is all


def test_mechanism_says_how_processes_and_memory_are_held() -> None:
    said = mechanism()
    assert "processes:" in said and "memory:" in said
    assert "file size, CPU time, open files: rlimits" in said
    fallback = mechanism(cgroups=False)
    assert "memory: RLIMIT_DATA (per process)" in fallback
    assert "processes: RLIMIT_NPROC" in fallback or "processes: NOT limited" in fallback
    if os.geteuid() == 0 and shutil.which("setpriv"):  # as root: an unprivileged uid
        assert "commands run as an unprivileged uid" in fallback


# ----------------------------------------------------------------------------- settings


def home_with(tmp_path: Path, settings: str) -> Path:
    home = tmp_path / "home"
    (home / "config" / "providers").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(home / "repo")], check=True)
    (home / "config" / "roles.yaml").write_text(f"target_repo: repo\n{settings}")
    return home


def test_the_limits_are_read_from_roles_yaml(tmp_path: Path) -> None:
    home = home_with(
        tmp_path,
        "limit_tmpfs_mb: 64\nlimit_processes: 200\nlimit_memory_mb: 1024\n"
        "limit_file_size_mb: 10\nlimit_cpu_s: 30\nlimit_open_files: 256\n",
    )

    config = load_config(home, ())

    assert config.safety.limits == Limits(
        tmpfs_mb=64, processes=200, memory_mb=1024, file_size_mb=10, cpu_s=30, open_files=256
    )


def test_absent_limits_are_the_defaults(tmp_path: Path) -> None:
    assert load_config(home_with(tmp_path, ""), ()).safety.limits == Limits()


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("limit_processes", "0", "expected a whole number from 16 to 4194304 (default 1024)"),
        ("limit_processes", "8", "found the number 8"),
        ("limit_memory_mb", "1.5", "expected a whole number from 64 to"),
        ("limit_tmpfs_mb", "true", "found the boolean true"),
        ("limit_cpu_s", "lots", "expected a whole number from 1 to"),
        ("limit_open_files", "2000000", "from 32 to 1048576"),
        ("limit_file_size_mb", "-1", "from 1 to"),
    ],
)
def test_a_bad_limit_is_refused_naming_the_file_and_key(
    tmp_path: Path, key: str, value: str, says: str
) -> None:
    home = home_with(tmp_path, f"{key}: {value}\n")

    with pytest.raises(ConfigError) as info:
        load_config(home, ())

    assert (info.value.file, info.value.key) == ("config/roles.yaml", key)
    assert says in info.value.message


def test_a_misspelt_limit_is_refused_with_a_suggestion(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(home_with(tmp_path, "limit_proceses: 100\n"), ())

    assert info.value.key == "limit_proceses"
    assert "did you mean 'limit_processes'?" in info.value.message


def test_hero_init_documents_every_limit_with_its_default(tmp_path: Path) -> None:
    init_home(tmp_path, target_repo="../repo")
    text = (tmp_path / "config" / "roles.yaml").read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    lines = text.splitlines()

    documented = {key: data[key] for key in data if key.startswith("limit_")}
    defaults = dataclasses.asdict(Limits())
    assert documented == {f"limit_{name}": value for name, value in defaults.items()}
    assert tuple(documented) == SETTINGS
    for key in SETTINGS:  # each preceded by its comment, which says the default
        index = lines.index(f"{key}: {data[key]}")
        assert lines[index - 1].startswith("#") and f"Default {data[key]}." in lines[index - 1]
