"""End to end: a hostile worker goes for the host through hero itself, which runs outside the
sandbox and must not be its way out.

The attacks of test_e2e_isolation.py go for the user's repository; these go for what hero
reads, writes and holds outside the sandbox, and for the machine: a rules file linked to a
host file, to be read into the next round's prompt; the story file swapped for a link to
the home's ``config.local.yaml``, to be written through; a fork bomb, tmpfs fillers and
a 4 GB file; a 300 MB file committed, for hero to read whole.

Each test runs real hero (`hero run` in-process, or `python -m hero run` / `hero watch` as a
child) against the scripted model over real HTTP, on real git repositories in tmp_path,
with ``sandbox: bwrap``, checks that the attack's commands ran (their output, as the model
received it), and what must hold afterwards: no host text in any request or trace, the file
behind a link unchanged, a tool result naming the limit hit, nothing of a command left
running, hero's own peak memory bounded, the daemon alive.

Tests marked ``xfail(strict=True)`` show holes still open; their reasons say what is wrong.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from conftest import GIT_ENV, git, working_bwrap
from helpers import (
    COMMIT,
    SUB_IMPL,
    VERIFY_SUB,
    backlog,
    is_review,
    load_state,
    story_of,
    task_text,
    verdict,
    watch_command,
    worker_round,
)
from run_support import PlanSpec, policy, run_hero, sub_work

from hero.cli import main
from hero.config.loader import load_config
from hero.llm.scripted import Reply, ScriptedModel, call, text
from hero.sandbox.limits import mechanism

pytestmark = pytest.mark.slow  # end to end: every test here runs hero for real

#: Generous "did not hang" bounds, not speed checks.
RUN_TIMEOUT_S = 180.0

Review = Callable[[int], Reply]


@pytest.fixture(scope="module", autouse=True)
def _bwrap_works() -> None:
    """These attacks are stopped by the sandbox and its limits: without a working bwrap
    there is nothing to test (test_sandbox.py says the same, the same way)."""
    working_bwrap()


# ------------------------------------------------------------------ the worker's script


APPROVE = verdict()
CHANGES = verdict("CHANGES_REQUESTED", "Round 1 is not enough: look again.")


def changes_first(n: int) -> Reply:
    """The reviewer asks for changes in round 1 (so that round 2's prompt is built), then
    approves."""
    return CHANGES if n == 1 else APPROVE


def tool_results(model: ScriptedModel, n: int = 1, story: str = "") -> list[str]:
    """Every tool result the worker (of ``story``, if given) saw in round ``n``, in order."""
    out: list[str] = []
    for r in model.requests:
        if is_review(r.body) or worker_round(r.body) != n:
            continue
        if story and story_of(r.body) != story:
            continue
        out = [str(m["content"]) for m in r.body["messages"] if m.get("role") == "tool"]
    return out


def worker_tasks(model: ScriptedModel, n: int) -> list[str]:
    """The task message of every worker request of round ``n``."""
    return [
        task_text(r.body)
        for r in model.requests
        if not is_review(r.body) and worker_round(r.body) == n
    ]


def knobs(**more: object) -> dict[str, object]:
    return {"sandbox": "bwrap", **more}


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def files_under(root: Path) -> Iterator[Path]:
    """Every regular file under ``root``, no link followed."""
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = Path(dirpath, name)
            if path.is_file() and not path.is_symlink():
                yield path


def holding(root: Path, needle: str, *, skip: Sequence[Path] = ()) -> list[Path]:
    """The files under ``root`` (but ``skip``) whose bytes hold ``needle``."""
    raw = needle.encode()
    return [p for p in files_under(root) if p not in skip and raw in p.read_bytes()]


def requests_holding(model: ScriptedModel, needle: str) -> list[int]:
    """The indexes of the requests whose body (or headers) hold ``needle``."""
    return [
        i
        for i, r in enumerate(model.requests)
        if needle in json.dumps(r.body) or needle in json.dumps(r.headers)
    ]


# ------------------------------------------------------------------ 6. rules linked to the host

#: The worker hides the link from git (as it could in the shared `.git`), then makes it.
HIDE_AND_LINK = (
    "echo {name} >> .git/info/exclude; echo excluded=$?; "
    "mkdir -p {parent}; ln -s {target} {name}; echo linked=$?; ls -l {name}"
)


def link_rules(name: str, target: Path) -> Reply:
    parent = os.path.dirname(name) or "."
    return call(
        "bash",
        command=HIDE_AND_LINK.format(
            name=shlex.quote(name), parent=shlex.quote(parent), target=shlex.quote(str(target))
        ),
    )


@pytest.mark.parametrize("how", ["agents-md", "roo-rule-file", "roo-dir"])
def test_rules_linked_to_host_files_reach_no_request_and_no_trace(
    scripted, make_home, write_story, target_repo: Path, tmp_path: Path, how: str
) -> None:
    marker = f"HOST-SECRET-{uuid.uuid4().hex}"
    host_file = tmp_path / "host-secret.txt"  # as ~/.ssh/id_rsa, ~/.aws/credentials
    host_file.write_text(f"aws_secret_access_key = {marker}\n")
    host_dir = tmp_path / "host-roo"  # as ~/.config/gh, with rules/x.md in it
    (host_dir / "rules").mkdir(parents=True)
    (host_dir / "rules" / "x.md").write_text(f"oauth_token: {marker}\n")
    local_key = f"sk-local-{uuid.uuid4().hex}"  # a key of a provider this home does not call
    local_note = f"LOCAL-NOTE-{uuid.uuid4().hex}"  # text of config.local.yaml no redactor knows
    host_digests = {p: digest(p) for p in (host_file, host_dir / "rules" / "x.md")}

    plans: dict[int, list[Reply]] = {}
    model = scripted(policy(plans, changes_first))
    home = make_home(model, **knobs())
    local = home / "config.local.yaml"
    local.write_text(f"# {local_note}\nkeys:\n  openai: {local_key}\n")
    # the link (the rules file read through it), and what round 2's prompt says of it
    link, name, note = {
        "agents-md": ("AGENTS.md", "AGENTS.md", "[not read: path 'AGENTS.md' is outside"),
        "roo-rule-file": (
            ".roo/rules/x.md",
            ".roo/rules/x.md",
            "[not read: path '.roo/rules/x.md' is outside",
        ),
        "roo-dir": (".roo", ".roo/rules/x.md", "[.roo/rules/ not read: path '.roo/rules' is"),
    }[how]
    made = [link_rules(link, {"agents-md": host_file, "roo-dir": host_dir}.get(how, local))]
    if how == "agents-md":
        made.append(link_rules("CLAUDE.md", host_file))
    plans[1] = [
        *made,
        # and hero's own file tools, which run outside the sandbox, asked for it
        call("read_file", path=name),
        call("grep", pattern="SECRET|oauth|sk-local|LOCAL-NOTE", path="."),
        call("grep", pattern="SECRET|oauth|sk-local|LOCAL-NOTE", path=name),
        call("write_file", path=name, content="# overwritten through the link\n"),
        call("edit_file", path=name, old_string="key", new_string="KEY"),
        *sub_work(),
        text("Done."),
    ]
    plans[2] = [
        call("bash", command="cat AGENTS.md CLAUDE.md .roo/rules/x.md; echo cat=$?"),
        text("Done, again."),
    ]
    local_digest = digest(local)
    story = write_story(home, "s6", verify=VERIFY_SUB)

    assert run_hero(home, story) == 0
    state = load_state(home, "s6")
    assert state["status"] == "passed" and len(state["rounds"]) == 2
    seen = "\n".join(tool_results(model, 1))
    assert "linked=0" in seen  # the link was made ...
    assert "excluded=0" not in seen  # ... though not hidden: .git/info is read-only
    # round 2's prompt was built from the worktree holding the link: hero looked, and said why
    # it did not read it
    (task2, *_) = worker_tasks(model, 2)
    assert "## Repository rules" in task2 and note in task2, task2
    assert seen.count(f"path '{name}' is outside the worktree") == 4  # hero's file tools
    (cat,) = tool_results(model, 2)  # in the sandbox the link leads nowhere
    assert f"cat: {name}: No such file or directory" in cat
    for needle in (marker, local_key, local_note):
        assert requests_holding(model, needle) == [], needle
        assert holding(home / "runs", needle) == [], needle
        assert holding(home, needle, skip=[local]) == [], needle
    for path, was in host_digests.items():
        assert digest(path) == was, path
    assert digest(local) == local_digest
    assert load_config(home).secrets  # the home still loads
    # the link itself went onto the branch, and was there for round 2's prompt
    assert git(target_repo, "ls-tree", "hero/s6", link).startswith("120000 blob")
    assert marker not in git(target_repo, "log", "-p", "--all")


# ------------------------------------------------------------------ hero watch as a child


def wait_for(cond: Callable[[], Any], timeout: float = RUN_TIMEOUT_S) -> Any:
    """Poll ``cond`` until it returns something truthy or ``timeout`` passes; its value."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(0.05)


class Daemon:
    """`python -m hero watch --home HOME --log-format json` with its output in files."""

    def __init__(self, home: Path, log_dir: Path) -> None:
        self.out = log_dir / "watch.out"
        self.err = log_dir / "watch.err"
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.proc = subprocess.Popen(
                watch_command("--home", str(home), "--log-format", "json"),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                cwd=log_dir,
            )

    def output(self) -> str:
        return self.out.read_text(errors="replace") + self.err.read_text(errors="replace")

    def events(self, name: str, **match: Any) -> list[dict[str, Any]]:
        found = []
        for line in self.err.read_text(errors="replace").splitlines():
            try:
                event = json.loads(line) if line.startswith("{") else None
            except ValueError:
                continue  # a line being written
            if event and event.get("event") == name:
                if all(event.get(k) == v for k, v in match.items()):
                    found.append(event)
        return found

    def wait_event(self, name: str, **match: Any) -> dict[str, Any]:
        """The first event ``name`` matching ``match``; fails if the daemon exits first."""

        def seen() -> dict[str, Any] | None:
            events = self.events(name, **match)
            if events:
                return events[0]
            if self.proc.poll() is not None:
                pytest.fail(f"hero watch exited before {name} {match}:\n{self.output()}")
            return None

        event = wait_for(seen)
        if not event:
            pytest.fail(f"no {name} {match} within {RUN_TIMEOUT_S} s:\n{self.output()}")
        return event

    def stop(self) -> int:
        """SIGTERM, and its exit code."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"hero watch did not exit after SIGTERM:\n{self.output()}")


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[Callable[[Path], Daemon]]:
    """Starts `hero watch` on a home; kills what is still running afterwards."""
    started: list[Daemon] = []

    def start(home: Path) -> Daemon:
        daemon = Daemon(home, tmp_path)
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        if daemon.proc.poll() is None:
            daemon.proc.kill()
            daemon.proc.wait()


# ------------------------------------------------------------------ 10. the story file swapped


@pytest.mark.parametrize("swap", ["link-to-config-local", "another-file"])
def test_a_story_file_swapped_while_it_runs_is_not_written_through(
    scripted, make_home, write_story, daemons, tmp_path: Path, capsys, swap: str
) -> None:
    local_key = f"sk-local-{uuid.uuid4().hex}"
    other_text = f"# the user's notes, renamed here by mistake: OTHER-{uuid.uuid4().hex}\n"
    feedback = f"FEEDBACK-{uuid.uuid4().hex}: handle negative numbers too."
    paths: dict[str, Path] = {}

    def swap_then_ask_for_changes(n: int) -> Reply:
        """Runs in this process when round 1's review request arrives: the story file is
        replaced (rename over it: the inbox ignores dot-files) before the verdict."""
        if n == 1:
            story, spare = paths["story"], paths["story"].with_name(".s10.swap")
            if swap == "link-to-config-local":
                spare.symlink_to(paths["local"])
            else:
                spare.write_text(other_text)
            os.replace(spare, story)
            return verdict("CHANGES_REQUESTED", feedback)
        return APPROVE

    worker = {
        1: [*sub_work(), text("Done.")],
        2: [
            call("write_file", path="notes/negatives.md", content="- handled\n"),
            call("bash", command=COMMIT.format(msg="negatives")),
            text("Done, again."),
        ],
    }
    model = scripted(policy(worker, swap_then_ask_for_changes))
    home = make_home(model, **knobs())
    paths["local"] = local = home / "config.local.yaml"
    local.write_text(f"keys:\n  openai: {local_key}\n")
    local_bytes = local.read_bytes()
    paths["story"] = story = backlog(write_story(home, "s10", verify=VERIFY_SUB))

    daemon = daemons(home)
    finished = daemon.wait_event("finished", story="s10")
    assert daemon.proc.poll() is None  # the daemon lives
    assert finished["status"] == "passed" and finished["rounds"] == 2, daemon.output()
    # round 2 ran, with round 1's feedback from hero's record, not from the file
    (task2, *_) = worker_tasks(model, 2)
    assert feedback in task2
    assert daemon.stop() == 0
    said = daemon.output()
    assert "feedback of round 1 not written" in said, said
    assert "Traceback" not in said

    # the file behind the link is as it was, and the home loads
    assert local.read_bytes() == local_bytes and not local.is_symlink()
    assert os.stat(local).st_nlink == 1
    assert load_config(home).secrets
    capsys.readouterr()
    assert main(["status", "--home", str(home)]) == 0
    assert "s10" in capsys.readouterr().out
    assert holding(home, feedback) == holding(home / "runs", feedback)  # in hero's record only
    assert requests_holding(model, local_key) == []
    if swap == "another-file":
        found = [p for p in (story, home / "done" / "s10.md") if os.path.lexists(p)]
        assert [p.read_text() for p in found] == [other_text], found
    # what was swapped in is not the story hero read: it is not moved into done/ as if it were
    assert not os.path.lexists(home / "done" / "s10.md")
    assert not (home / "runs" / "s10" / "error.log").exists()


# ------------------------------------------------------------------ 11. limits

#: Small limits, so that each attack meets one quickly. Where a tmpfs must fill before a file
#: reaches the file size limit, that limit is raised above the tmpfs size (``FILL_TMPFS``).
SMALL = {"limit_processes": 64, "limit_tmpfs_mb": 16, "limit_file_size_mb": 8}
FILL_TMPFS = {**SMALL, "limit_file_size_mb": 64}
SANDBOX_LIMIT = "(sandbox limit: "


def token() -> str:
    """A unique number of seconds to sleep (about 30): what a leftover process is found by."""
    return f"30.{uuid.uuid4().int % 10**9}"


def processes_with(needle: str) -> list[int]:
    """Pids of the processes whose command line holds ``needle``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read()
        except OSError:
            continue
        if needle.encode() in cmdline:
            found.append(int(entry))
    return found


def fork_bombs(mark: str) -> list[Reply]:
    """Two fork bombs: 5000 background sleeps, and the classic ``:(){ :|:& };:`` (under a
    name dash takes) inside `timeout 20`, which waits for the bomb's first complaint, a whole
    line, and reports it with shell builtins only (they need no fork): the command ends once
    the bomb has met the limit, not at a time. The bomb starts in a subshell, the command's
    one fork, made while nothing else runs: started from the command's own shell, the bomb's
    first processes could fill the limit before that shell forked its second, and that shell
    would die of it, saying so only in bomb.err. Both carry ``mark`` in their command lines."""
    bomb = (
        "f(){ f|f& }; (f 2>/tmp/bomb.err); until read -r said < /tmp/bomb.err; do :; done; "
        f'echo "bomb: $said"; exit 3 # {mark}'
    )
    return [
        call("bash", command=f"for i in $(seq 5000); do sleep {mark} & done; wait"),
        call("bash", command=f"timeout 20 sh -c {shlex.quote(bomb)}"),
    ]


TMPFS_FILLERS = [call("bash", command=f"yes > {d}/x") for d in ("/tmp", "/dev/shm", "/var/tmp")]

BIG_FILES = [
    call("bash", command="head -c 4G /dev/zero > big.bin"),
    call("bash", command="fallocate -l 4G big-fallocate.bin"),
    call("bash", command="truncate -s 4G big-truncate.bin"),
    call("bash", command="dd if=/dev/zero of=big-dd.bin bs=1M count=4096 status=none"),
    call("bash", command="dd if=/dev/zero of=big-seek.bin bs=1 count=1 seek=4G status=none"),
]
#: What the worker sees of the files afterwards: none beyond the limit.
LIST_BIG = call("bash", command="stat -c '%n %s' big*.bin; rm -f big*.bin")


def needs_process_limit() -> None:
    if "processes: NOT limited" in mechanism():
        pytest.skip(f"processes cannot be limited here: {mechanism()}")


def limit_results(results: Sequence[str], count: int) -> list[str]:
    """The first ``count`` tool results, each checked to carry a sandbox limit note."""
    picked = list(results[:count])
    assert len(picked) == count, results
    for result in picked:
        assert SANDBOX_LIMIT in result, result
    return picked


def test_fork_bombs_end_at_the_process_limit_and_leave_nothing(
    scripted, make_home, write_story
) -> None:
    needs_process_limit()
    mark = token()
    model = scripted(policy([*fork_bombs(mark), *sub_work(), text("Done.")]))
    home = make_home(model, **knobs(**SMALL))
    story = write_story(home, "s11", verify=VERIFY_SUB)

    assert run_hero(home, story) == 0
    assert processes_with(mark) == []  # nothing of either command is left running
    loop, bomb = limit_results(tool_results(model), 2)
    for result in (loop, bomb):
        assert "limit of 64 processes" in result, result
        assert "limit_processes in config/roles.yaml" in result, result
        assert "timed out" not in result
    assert "Cannot fork" in loop, loop
    assert "bomb: " in bomb and "Cannot fork" in bomb, bomb
    assert load_state(home, "s11")["status"] == "passed"


def test_as_root_without_cgroups_500_background_processes_are_bounded_and_the_story_passes(
    scripted, make_home, write_story
) -> None:
    """sandbox_cgroups: off as root: the commands run as an unprivileged uid, which
    RLIMIT_NPROC holds (uid 0 it does not): 500 background sleeps, plain and setsid, in two
    commands of one round stop at the limit, nothing is left, and the round still writes
    its files, commits and passes its checks."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("the unprivileged uid is for a root hero with setpriv")
    mark = token()
    attacks = [
        call("bash", command=f"for i in $(seq 500); do sleep {mark} & done; wait"),
        call("bash", command=f"for i in $(seq 500); do setsid sleep {mark} & done; wait"),
    ]
    model = scripted(policy([*attacks, *sub_work(), text("Done.")]))
    home = make_home(model, **knobs(**SMALL, sandbox_cgroups="off"))
    story = write_story(home, "s12", verify=VERIFY_SUB)

    assert run_hero(home, story) == 0
    assert processes_with(mark) == []
    for result in limit_results(tool_results(model), 2):
        assert "Cannot fork" in result and "limit_processes" in result, result
    assert load_state(home, "s12")["status"] == "passed"


def test_tmpfs_fillers_end_at_the_tmpfs_size(scripted, make_home, write_story) -> None:
    model = scripted(policy([*TMPFS_FILLERS, *sub_work(), text("Done.")]))
    home = make_home(model, **knobs(**FILL_TMPFS))
    story = write_story(home, "s11", verify=VERIFY_SUB)

    assert run_hero(home, story) == 0
    for result in limit_results(tool_results(model), 3):
        assert result.startswith("exit code: 1"), result
        assert "No space left on device" in result, result
        assert "each holds at most 16 MB" in result, result
        assert "limit_tmpfs_mb in config/roles.yaml" in result, result
    assert load_state(home, "s11")["status"] == "passed"


def test_4gb_files_end_at_the_file_size_limit(
    scripted, make_home, write_story, target_repo: Path
) -> None:
    model = scripted(policy([*BIG_FILES, LIST_BIG, *sub_work(), text("Done.")]))
    home = make_home(model, **knobs(**SMALL))
    story = write_story(home, "s11", verify=VERIFY_SUB)

    assert run_hero(home, story) == 0
    results = tool_results(model)
    for result in limit_results(results, len(BIG_FILES)):
        assert "larger than the sandbox's limit of 8 MB" in result, result
        assert "limit_file_size_mb in config/roles.yaml" in result, result
    sizes = dict(line.split() for line in results[len(BIG_FILES)].splitlines()[1:] if " " in line)
    assert sizes, results[len(BIG_FILES)]
    assert all(int(size) <= 8 << 20 for size in sizes.values()), sizes
    assert load_state(home, "s11")["status"] == "passed"
    assert "big" not in git(target_repo, "ls-tree", "-r", "--name-only", "hero/s11")


def test_hero_watch_outlives_an_attacker_and_runs_a_normal_story_beside_it(
    scripted, make_home, write_story, target_repo: Path, daemons
) -> None:
    needs_process_limit()
    mark = token()
    attacks = [*fork_bombs(mark), *TMPFS_FILLERS, *BIG_FILES[:1], LIST_BIG]
    worker: dict[str, PlanSpec] = {
        "attacker": [*attacks, *sub_work(), text("Done.")],
        "normal": [*sub_work(), text("Done.")],
    }
    model = scripted(policy(worker))
    home = make_home(model, **knobs(max_parallel=2, **FILL_TMPFS))
    backlog(
        write_story(home, "attacker", verify=VERIFY_SUB),
        write_story(home, "normal", verify=VERIFY_SUB),
    )

    daemon = daemons(home)
    attacker = daemon.wait_event("finished", story="attacker")
    assert daemon.proc.poll() is None  # the daemon lives
    normal = daemon.wait_event("finished", story="normal")
    assert daemon.proc.poll() is None
    assert (attacker["status"], normal["status"]) == ("passed", "passed"), daemon.output()
    assert processes_with(mark) == []
    results = tool_results(model, story="attacker")
    notes = limit_results(results, len(attacks) - 1)
    assert "limit_processes" in notes[0] and "limit_processes" in notes[1]
    assert all("limit_tmpfs_mb" in note for note in notes[2:5])
    assert "limit_file_size_mb" in notes[5]
    assert daemon.stop() == 0
    assert "Traceback" not in daemon.output()
    assert git(target_repo, "show", "hero/normal:calc/__init__.py") == SUB_IMPL


# ------------------------------------------------------------------ 12. a big file committed

#: `hero run` in a child that writes its own peak resident memory (VmHWM, in kB) to the file
#: named first: hero's memory alone, not that of the git and the commands it runs.
PEAK_PROBE = """
import sys

from hero.cli import main

out = sys.argv.pop(1)
try:
    code = main(sys.argv[1:])
finally:
    with open("/proc/self/status") as fh:
        peak = next(line.split()[1] for line in fh if line.startswith("VmHWM:"))
    with open(out, "w") as fh:
        fh.write(peak)
sys.exit(code)
"""
#: hero's own peak resident memory while a story commits a 300 MB file: its baseline (about
#: 60 MB) plus what it may hold of git's output (hero.git.ops caps: 64 MB of output, 4 MB of
#: a diff), with room to spare; 85 MB measured (bench/isolation.py). Before hero capped git's
#: output it was 1.6 GB (1.3 GB measured here with this test on hero before the fix).
PEAK_BOUND_MB = 400
BIG_MB = 300


def peak_of_hero_run(home: Path, story: Path, log_dir: Path) -> tuple[int, int, str]:
    """`hero run STORY` in a child: (exit code, hero's peak RSS in MB, its output)."""
    peak_file = log_dir / "peak-kb"
    out = log_dir / "hero-run.out"
    with open(out, "wb") as fh:
        proc = subprocess.run(
            [sys.executable, "-c", PEAK_PROBE, str(peak_file), "run", str(story)]
            + ["--home", str(home)],
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            cwd=log_dir,
            timeout=RUN_TIMEOUT_S,
            env={**os.environ, **GIT_ENV},
        )
    said = out.read_text(errors="replace")
    assert peak_file.is_file(), said
    return proc.returncode, int(peak_file.read_text()) // 1024, said


def test_a_300mb_file_committed_keeps_heros_memory_bounded(
    scripted, make_home, write_story, target_repo: Path, tmp_path: Path
) -> None:
    if shutil.disk_usage(tmp_path).free < 4 * BIG_MB << 20:
        pytest.skip(f"not enough free disk in {tmp_path} for a {BIG_MB} MB file")
    # text, not zeros: its diff is BIG_MB of lines for hero to read (bench/isolation.py
    # measures a sparse file of zeros, and one of 4 GB, as well)
    make = f"yes 'a line of a big file for the diff to show' | head -c {BIG_MB}M > data/big.txt"
    worker = [
        call("bash", command=f"mkdir -p data && {make} && {COMMIT.format(msg='big')}; echo big=$?"),
        *sub_work(),
        text("Done."),
    ]
    model = scripted(policy(worker))
    home = make_home(model, **knobs())
    story = write_story(home, "s12", verify=VERIFY_SUB, scope=["calc/**", "data/**"])

    code, peak_mb, said = peak_of_hero_run(home, story, tmp_path)
    assert "big=0" in tool_results(model)[0]
    assert code == 0, said
    assert load_state(home, "s12")["status"] == "passed"
    size = git(target_repo, "cat-file", "-s", "hero/s12:data/big.txt")
    assert int(size) == BIG_MB << 20
    # the reviewer saw the change, cut to what hero reads of a diff
    (review,) = [r.body for r in model.requests if is_review(r.body)]
    cut = re.search(r"\[(?:diff cut for size|not shown): .*\]", task_text(review))
    assert cut and "data/big.txt" in cut.group(0), task_text(review)
    assert len(json.dumps(review)) < 1 << 20
    assert peak_mb < PEAK_BOUND_MB, f"hero's peak RSS {peak_mb} MB >= {PEAK_BOUND_MB} MB"
