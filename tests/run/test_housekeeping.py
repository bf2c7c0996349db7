"""Housekeeping: `hero clean` and the automatic policy of `hero watch` (hero.run.housekeeping).

Real git repositories, real story runs against the scripted model on loopback, a real second
process holding a story's lock. Records of stories in states a test needs without running
them (queued, interrupted, finished long ago) are written with hero's own save_state.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import git
from helpers import SUB_IMPL, Log, commit_once, is_review, step_of, task_text, verdict, worker_round

from hero.cli import main
from hero.llm.scripted import HttpError, Reply, call, text
from hero.state import TERMINAL, RunState, Status, load_state, save_state

PY = sys.executable
#: PY as a shell word (a path with a space)
SH_PY = shlex.quote(PY)
#: the stories' check, as a YAML string
CHECK = json.dumps(f"{SH_PY} -m unittest -q")
APPROVE = verdict("APPROVED", "Good.")
TIMEOUT_S = 120.0  # generous "did not hang" bounds, never speed checks
LONG_AGO = 1_000_000.0  # a finish time long past (1970): older than any rule


def clean(home: Path, *args: str) -> int:
    return main(["clean", "--home", str(home), *args])


def write_record(
    home: Path, target: Path, sid: str, status: Status, *, finished_at: float | None = LONG_AGO
) -> RunState:
    """A run record as hero writes it, with a repository and run logs of a few bytes."""
    base = git(target, "rev-parse", "main").strip()
    state = RunState(id=sid, status=status, base_ref="main", base_sha=base, head_sha=base)
    state.finished_at = finished_at if status in TERMINAL else None
    save_state(home, state)
    worktree = home / "worktrees" / sid
    (worktree / "build").mkdir(parents=True)
    (worktree / "build" / "out.bin").write_bytes(b"x" * 20_000)
    logs = home / "runs" / sid
    logs.mkdir(parents=True)
    (logs / "round-1.jsonl").write_text("{}\n")
    return state


def wait_for(cond: Any, timeout: float = TIMEOUT_S) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(0.05)


# --------------------------------------------------------------------------- what is finished


def test_clean_never_touches_an_unfinished_story(
    scripted, make_home, target_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = make_home(scripted([]))
    for sid, status in (
        ("q1", Status.QUEUED),
        ("r1", Status.RUNNING),
        ("i1", Status.INTERRUPTED),
    ):
        write_record(home, target_repo, sid, status)
    write_record(home, target_repo, "p1", Status.PASSED)

    assert clean(home, "--logs-older-than", "0") == 0
    out = capsys.readouterr().out
    for sid in ("q1", "r1", "i1"):
        assert (home / "worktrees" / sid / "build" / "out.bin").is_file(), sid
        assert (home / "runs" / sid / "round-1.jsonl").is_file(), sid
        assert sid not in out
    assert "p1: removed repository" in out and "p1: removed logs" in out
    assert not (home / "worktrees" / "p1").exists()
    assert not (home / "runs" / "p1").exists()
    assert load_state(home, "p1") is not None  # the record stays: status and retry work
    assert clean(home, "q1", "i1", "nope", "p1") == 0
    out = capsys.readouterr().out
    assert "p1: is passed: nothing of it left to clean" in out
    assert "q1: is queued: only a finished story is cleaned; untouched" in out
    assert "i1: is interrupted" in out and "nope: no story 'nope'" in out
    assert (home / "worktrees" / "q1" / "build" / "out.bin").is_file()
    assert main(["status", "--home", str(home)]) == 0


HOLDER = """
import sys
from pathlib import Path
from hero.locks import story_lock
from hero.git.ops import TargetRepo

home, repo, sid, which = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]
if which == "home":
    held = story_lock(home, sid)
else:  # another hero home runs the story on the same repository
    held = TargetRepo(repo).story_lock(sid, home.parent / "other-home")
with held:
    print("held", flush=True)
    sys.stdin.read()
"""


@pytest.mark.slow
@pytest.mark.parametrize("which", ["home", "repository"])
def test_a_story_whose_lock_another_process_holds_is_left_alone(
    scripted, make_home, target_repo: Path, capsys: pytest.CaptureFixture[str], which: str
) -> None:
    """A story starting at the very moment of the clean: its record still says error, but
    a run (a real process) holds its lock: nothing of it goes, until the lock is let go."""
    home = make_home(scripted([]))
    write_record(home, target_repo, "e1", Status.ERROR)
    holder = subprocess.Popen(
        [PY, "-c", HOLDER, str(home), str(target_repo), "e1", which],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert clean(home, "--logs-older-than", "0") == 0
        out = capsys.readouterr().out
        assert "e1: another hero process holds its lock (a run, or another clean): untouched" in out
        assert (home / "worktrees" / "e1" / "build" / "out.bin").is_file()
        assert (home / "runs" / "e1" / "round-1.jsonl").is_file()
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(TIMEOUT_S)
    assert clean(home, "--logs-older-than", "0") == 0
    assert not (home / "runs" / "e1").exists()
    # an error story's repository of no story file it can read is kept, the reason said
    out = capsys.readouterr().out
    assert "e1: repository kept" in out and "story file" in out


def test_dry_run_lists_and_removes_nothing(
    scripted, make_home, target_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = make_home(scripted([]))
    write_record(home, target_repo, "p1", Status.PASSED)
    write_record(home, target_repo, "p2", Status.PASSED, finished_at=time.time())

    assert clean(home, "--dry-run", "--older-than", "1") == 0
    out = capsys.readouterr().out
    assert f"p1: would remove repository {home / 'worktrees' / 'p1'} (" in out
    assert "p2" not in out  # finished just now: younger than --older-than 1
    assert "would free " in out and "(1 repository, the logs of 1 story)" in out
    assert (home / "worktrees" / "p1" / "build" / "out.bin").is_file()

    assert clean(home, "--older-than", "1") == 0
    out = capsys.readouterr().out
    assert "p1: removed repository" in out and "freed " in out
    assert not (home / "worktrees" / "p1").exists()
    assert (home / "worktrees" / "p2").is_dir()
    assert clean(home, "--older-than", "1") == 0
    assert "nothing to clean" in capsys.readouterr().out


def test_bad_arguments_exit_2(scripted, make_home, target_repo: Path) -> None:
    home = make_home(scripted([]))
    for args in (["--older-than", "-1"], ["--older-than", "nan"], ["--branches", "all"]):
        with pytest.raises(SystemExit) as exc:
            clean(home, *args)
        assert exc.value.code == 2, args
    with pytest.raises(SystemExit) as exc:
        clean(home, "../etc")
    assert exc.value.code == 2


# --------------------------------------------------------------------------- hostile trees


def test_links_a_worker_left_are_removed_never_followed(
    scripted, make_home, target_repo: Path, tmp_path: Path
) -> None:
    home = make_home(scripted([]))
    outside = tmp_path / "precious"
    (outside / "deep").mkdir(parents=True)
    (outside / "deep" / "data.txt").write_text("keep me")
    write_record(home, target_repo, "p1", Status.PASSED)
    tree = home / "worktrees" / "p1"
    (tree / "to-precious").symlink_to(outside)
    (tree / "to-root").symlink_to("/")
    (tree / "to-home").symlink_to(home)
    (tree / "to-file").symlink_to(outside / "deep" / "data.txt")
    locked = tree / "locked" / "inner"
    locked.mkdir(parents=True)
    (locked / "x").write_text("x")
    (locked / "back").symlink_to(outside / "deep")
    os.chmod(locked, 0o000)  # a folder the worker made unreadable
    os.chmod(tree / "locked", 0o500)  # and one it made read-only
    # a story repository that is itself a link (to outside the home)
    write_record(home, target_repo, "p2", Status.PASSED)
    import shutil

    shutil.rmtree(home / "worktrees" / "p2")
    (home / "worktrees" / "p2").symlink_to(outside)

    assert clean(home) == 0
    assert not os.path.lexists(tree)
    assert not os.path.lexists(home / "worktrees" / "p2")
    assert (outside / "deep" / "data.txt").read_text() == "keep me"
    assert (home / "config" / "roles.yaml").is_file()
    assert load_state(home, "p1") is not None


def test_a_plan_folder_swapped_for_a_link_is_not_cleaned_through(
    scripted, make_home, target_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """worktrees/plans/<plan> made a link to elsewhere: the story repository named under it
    resolves outside worktrees/, and nothing there is removed."""
    home = make_home(scripted([]))
    base = git(target_repo, "rev-parse", "main").strip()
    save_state(home, RunState(id="s1", plan="p", status=Status.PASSED, base_sha=base))
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "s1").mkdir(parents=True)
    (elsewhere / "s1" / "data.txt").write_text("keep me")
    (home / "worktrees" / "plans").mkdir(parents=True)
    (home / "worktrees" / "plans" / "p").symlink_to(elsewhere)
    assert clean(home) == 0
    assert "p/s1: not cleaned:" in capsys.readouterr().out
    assert (elsewhere / "s1" / "data.txt").read_text() == "keep me"


KILLED_MIDWAY = """
import sys, time
import hero.run.housekeeping as hk
from hero.cli import main

def stuck(path, *args, **kwargs):  # the removal has begun: the test kills us here
    print("removing", flush=True)
    time.sleep(600)

hk.shutil.rmtree = stuck
main(["clean", "--home", sys.argv[1]])
"""


@pytest.mark.slow
def test_a_clean_killed_midway_leaves_no_half_repository(
    scripted, make_home, target_repo: Path
) -> None:
    """kill -9 in the middle of a removal: the story's path is already empty (the folder
    was moved aside in one step), and the next clean removes what was moved aside."""
    home = make_home(scripted([]))
    write_record(home, target_repo, "e1", Status.PASSED)
    proc = subprocess.Popen(
        [PY, "-c", KILLED_MIDWAY, str(home)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "removing"
    finally:
        proc.kill()
        proc.wait(TIMEOUT_S)
    assert not os.path.lexists(home / "worktrees" / "e1")
    trash = home / "worktrees" / ".trash"
    [moved] = list(trash.iterdir())
    assert (moved / "build" / "out.bin").is_file()
    assert clean(home) == 0
    assert list(trash.iterdir()) == []


# --------------------------------------------------------------------------- real runs


def write_story(home: Path, sid: str) -> Path:
    path = home / "inbox" / f"{sid}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"---\nid: {sid}\ntitle: Story {sid}\nverify:\n  - {json.dumps(SH_PY + ' -m unittest -q')}\n---\n\n"
        "## Goal\nAdd sub.\n\n## Acceptance Criteria\n- [ ] sub works\n"
    )
    return path


@pytest.mark.slow
def test_retry_after_clean_goes_on_from_the_branch_with_the_kept_leftovers(
    scripted, make_home, target_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A story that ended in error mid-turn, its work uncommitted: clean commits it on the
    branch first, then removes the repository; a retry lays it out anew from the branch."""
    failing = {"on": True}

    def handler(body: dict[str, Any]) -> Reply | HttpError:
        if is_review(body):
            return APPROVE
        step = step_of(body)
        if step == 0 and failing["on"]:
            return call("write_file", path="calc/__init__.py", content=SUB_IMPL)
        if failing["on"]:
            # a refusal of this story's conversation alone: its error (a bare 400 would
            # pause it as the provider's refusal, see hero.llm.client.ModelRefused)
            return HttpError(400, "maximum context length exceeded")
        if step == 0:
            return call("bash", command="git add -A && git commit -q -m r1 || true")
        return text("Done.")

    model = scripted(handler)
    home = make_home(model)
    story = write_story(home, "s1")
    assert main(["run", str(story), "--home", str(home)]) == 1
    assert load_state(home, "s1").status == Status.ERROR  # type: ignore[union-attr]
    assert "sub" not in git(target_repo, "show", "hero/s1:calc/__init__.py")

    assert clean(home) == 0
    out = capsys.readouterr().out
    assert "s1: removed repository" in out, out
    assert not (home / "worktrees" / "s1").exists()
    # what it left uncommitted is on its branch, in the user's repository
    assert "def sub" in git(target_repo, "show", "hero/s1:calc/__init__.py")
    assert "keep uncommitted work before clean" in git(target_repo, "log", "-1", "hero/s1")

    failing["on"] = False
    assert main(["retry", "--home", str(home), "s1"]) == 0
    assert main(["run", str(story), "--home", str(home)]) == 0
    state = load_state(home, "s1")
    assert state is not None and state.status == Status.PASSED
    assert "def sub" in git(target_repo, "show", "hero/s1:calc/__init__.py")
    assert (home / "worktrees" / "s1" / "calc" / "__init__.py").is_file()


def passing(body: dict[str, Any]) -> Reply:
    if is_review(body):
        return APPROVE
    sid = task_text(body).split("# Story ", 1)[1].split(":", 1)[0]
    n = worker_round(body)
    if step_of(body) == 0:
        return call("bash", command=commit_once(f"{sid}-r{n}"))
    return text("Done.")


@pytest.mark.slow
def test_branches_policy(
    scripted, make_home, target_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = make_home(scripted(passing))
    for sid in ("s1", "s2"):
        assert main(["run", str(write_story(home, sid)), "--home", str(home)]) == 0
    write_record(home, target_repo, "g1", Status.GAVE_UP)
    git(target_repo, "branch", "hero/g1", "main")
    git(target_repo, "merge", "-q", "--no-edit", "hero/s1")  # s1 is merged into main

    def branches() -> set[str]:
        return set(git(target_repo, "branch", "--format=%(refname:short)").split())

    assert clean(home) == 0
    assert {"hero/s1", "hero/s2", "hero/g1"} <= branches()  # none without --branches
    capsys.readouterr()

    assert clean(home, "--branches", "merged") == 0
    out = capsys.readouterr().out
    assert "s1: removed branch hero/s1" in out and "merged into main" in out
    assert "hero/s1" not in branches()
    assert {"hero/s2", "hero/g1"} <= branches()  # s2 is not merged; g1 did not pass

    assert clean(home, "--branches", "passed") == 0
    assert "hero/s2" not in branches()
    assert "hero/g1" in branches()
    state = load_state(home, "s2")
    assert state is not None and state.status == Status.PASSED


# --------------------------------------------------------------------------- the automatic policy


BLOB_BYTES = 200_000
#: Stories the daemon runs one after another under the size cap.
STORIES = 16


def writes_a_blob(body: dict[str, Any]) -> Reply:
    """Each story commits a file and leaves 200 KB of build output (ignored) behind."""
    if is_review(body):
        return APPROVE
    sid = task_text(body).split("# Story ", 1)[1].split(":", 1)[0]
    if step_of(body) == 0:
        return call(
            "bash",
            command=f"{commit_once(sid)} && mkdir -p __pycache__ && "
            f"head -c {BLOB_BYTES} /dev/urandom > __pycache__/blob.bin",
        )
    return text("Done.")


@pytest.mark.slow
def test_watch_keeps_worktrees_under_the_size_cap_over_many_stories(
    scripted, make_home, target_repo: Path
) -> None:
    from hero.config.loader import load_config
    from hero.daemon.dispatcher import Dispatcher
    from hero.llm.client import LlmClient
    from hero.run.housekeeping import _size

    cap = 500_000  # bytes: a fifth of the stories' build output (3.2 MB)
    home = make_home(scripted(writes_a_blob), max_parallel=2)
    with (home / "config" / "roles.yaml").open("a") as fh:
        fh.write(
            f"housekeeping_after_days: null\nhousekeeping_max_worktrees_mb: {cap / (1 << 20)}\n"
        )
    sids = [f"k{n:02d}" for n in range(STORIES)]
    for sid in sids:
        path = home / "inbox" / f"{sid}.md"
        path.write_text(f"---\nid: {sid}\ntitle: Story {sid}\n---\n\n## Goal\nA file.\n")
    config = load_config(home, roles=("worker", "reviewer"))

    def make_models(cancel: threading.Event, story: Any) -> tuple[Any, Any]:
        return (
            LlmClient(story.role("worker"), story.llm, cancel=cancel),
            LlmClient(story.role("reviewer"), story.llm, cancel=cancel),
        )

    log = Log()
    peak = {"bytes": 0}
    stop = threading.Event()

    def sample() -> None:  # worktrees/ as it grows, between two looks of the policy
        while not stop.wait(0.05):
            peak["bytes"] = max(peak["bytes"], _size(home / "worktrees"))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    dispatcher = Dispatcher(config, make_models, log=log, settle_s=0.05)
    runner = threading.Thread(target=dispatcher.serve, kwargs={"exit_when_idle": True})
    runner.start()
    runner.join(TIMEOUT_S * 3)
    stop.set()
    sampler.join(TIMEOUT_S)
    if runner.is_alive():
        dispatcher.stop()
        runner.join(TIMEOUT_S)
        pytest.fail(f"the daemon did not finish: {log.events[-5:]}")

    finished = [e for e in log.events if e["event"] == "finished"]
    assert sorted(e.get("status") for e in finished) == ["passed"] * STORIES, log.events[-5:]
    assert _size(home / "worktrees") <= cap
    # two stories run at once, each with its build output, on top of what the cap allows
    assert peak["bytes"] <= cap + 3 * (BLOB_BYTES + 200_000)
    assert [e for e in log.events if e["event"] == "housekeeping" and "error" in e] == []
    assert sum(1 for e in log.events if e["event"] == "housekeeping") >= 1
    for sid in sids:  # every record and branch stays
        state = load_state(home, sid)
        assert state is not None and state.status == Status.PASSED
        assert git(target_repo, "rev-parse", "--verify", f"hero/{sid}").strip()
    # the longest finished went first: what is left finished last
    remaining = {sid for sid in sids if (home / "worktrees" / sid).exists()}
    order = [e["story"] for e in finished]
    assert 0 < len(remaining) <= 5
    assert remaining <= set(order[-(len(remaining) + 2) :]), (remaining, order)
    assert STORIES * BLOB_BYTES > 5 * cap  # without the policy the cap would be far exceeded


def test_the_automatic_policy_removes_by_age_and_logs_and_keeps_the_young(
    scripted, make_home, target_repo: Path
) -> None:
    from hero.config.loader import load_config
    from hero.git.ops import TargetRepo
    from hero.run.housekeeping import Housekeeper, Rules

    home = make_home(scripted([]), housekeeping_after_days=1, housekeeping_logs_after_days=2)
    now = time.time()
    write_record(home, target_repo, "old", Status.PASSED, finished_at=now - 3 * 86400)
    write_record(home, target_repo, "mid", Status.PASSED, finished_at=now - 1.5 * 86400)
    write_record(home, target_repo, "new", Status.PASSED, finished_at=now - 3600)
    config = load_config(home, roles=())
    outcome = Housekeeper(config, TargetRepo(target_repo)).run(Rules.automatic(config.housekeeping))
    gone = {(r.key, r.what) for r in outcome.removed}
    assert gone == {("old", "repository"), ("old", "logs"), ("mid", "repository")}
    assert (home / "runs" / "mid" / "round-1.jsonl").is_file()
    assert (home / "worktrees" / "new").is_dir()
    assert json.loads((home / "runs" / "state" / "old.json").read_text())["status"] == "passed"


def test_a_passed_github_storys_repository_goes_once_its_pull_request_is_merged(
    scripted, make_home, target_repo: Path
) -> None:
    from fakegithub import FakeGitHub

    from hero.config.loader import load_config
    from hero.git.ops import TargetRepo
    from hero.github.api import GitHub, Retry
    from hero.github.merged import merged_ids, merged_sweep
    from hero.run.housekeeping import Housekeeper, Rules

    home = make_home(scripted([]))
    now = time.time()
    for sid in ("gh-7", "gh-8", "gh-9"):
        write_record(home, target_repo, sid, Status.PASSED, finished_at=now)
    repo = "octo/app"
    with FakeGitHub(token="t0ken") as fake:
        fake.add_repo(repo, default_branch="main")
        merged = fake.add_pull(repo, head="hero/gh-7")
        fake.add_pull(repo, head="hero/gh-8")  # open, not merged
        closed = fake.add_pull(repo, head="hero/gh-9", state="closed")  # closed unmerged
        fake.merge_pull(repo, merged["number"])
        gh = GitHub(fake.api_url, "t0ken", repo, retry=Retry(max_attempts=1), sleep=lambda _s: None)
        merged_sweep(home, gh, Log())
        assert closed["number"] and merged_ids(home) == {"gh-7"}
        merged_sweep(home, gh, Log())  # known: not asked again
    config = load_config(home, roles=())
    outcome = Housekeeper(config, TargetRepo(target_repo)).run(Rules.automatic(config.housekeeping))
    assert [(r.key, r.what, r.why) for r in outcome.removed] == [
        ("gh-7", "repository", "its pull request is merged")
    ]
    assert (home / "worktrees" / "gh-8").is_dir() and (home / "worktrees" / "gh-9").is_dir()
    off = Rules.automatic(config.housekeeping)
    assert (
        not Housekeeper(config, TargetRepo(target_repo))
        .run(Rules(repos_after_s=off.repos_after_s))
        .removed
    )


def test_a_celery_worker_housekeeps_its_own_home_after_each_story(
    scripted, make_home, target_repo: Path, tmp_path: Path
) -> None:
    """``hero worker``'s hook: its home's finished story repositories go by its settings
    (its copies are laid out anew from the remote each time: nothing is kept first)."""
    from hero.config.loader import load_config
    from hero.engine.worker import Fleet, housekeep

    home = make_home(scripted([]), housekeeping_after_days=0)
    workdir = tmp_path / "workdir"
    git(tmp_path, "clone", "-q", str(target_repo), str(workdir / "repo"))
    write_record(workdir / "home", workdir / "repo", "e1", Status.ERROR)
    write_record(workdir / "home", workdir / "repo", "i1", Status.INTERRUPTED)
    config = load_config(home, roles=())
    fleet = Fleet(config, workdir, store=None, name="w1", seal=None)  # type: ignore[arg-type]
    fleet.active = 1  # another story runs on this worker: not now
    housekeep(fleet)
    assert (workdir / "home" / "worktrees" / "e1").is_dir()
    fleet.active = 0
    housekeep(fleet)
    assert not (workdir / "home" / "worktrees" / "e1").exists()
    assert (workdir / "home" / "worktrees" / "i1" / "build" / "out.bin").is_file()


@pytest.mark.slow
def test_a_story_running_beside_the_clean_in_a_real_process_is_untouched(
    scripted, make_home, target_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`hero run` in a child process, its worker's turn held open by the model: a clean
    (with every rule at its widest) leaves its repository, logs and branch alone."""
    turn_started = threading.Event()
    release = threading.Event()

    def handler(body: dict[str, Any]) -> Reply:
        if is_review(body):
            return APPROVE
        if step_of(body) == 0:
            turn_started.set()
            release.wait(TIMEOUT_S)
            return call("bash", command=commit_once("s1"))
        return text("Done.")

    home = make_home(scripted(handler))
    story = write_story(home, "s1")
    proc = subprocess.Popen(
        [PY, "-m", "hero", "run", str(story), "--home", str(home)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        assert turn_started.wait(TIMEOUT_S)
        tree = home / "worktrees" / "s1"
        assert (tree / ".git").is_dir()
        assert clean(home, "--logs-older-than", "0", "--branches", "passed") == 0
        assert "s1" not in capsys.readouterr().out  # running: not even looked at
        assert (tree / ".git").is_dir() and (home / "runs" / "s1").is_dir()
        assert git(target_repo, "rev-parse", "--verify", "hero/s1").strip()
    finally:
        release.set()
        assert proc.wait(TIMEOUT_S) == 0
    state = load_state(home, "s1")
    assert state is not None and state.status == Status.PASSED


@pytest.mark.slow
def test_two_cleans_at_once_remove_everything_once_without_an_error(
    scripted, make_home, target_repo: Path
) -> None:
    home = make_home(scripted([]))
    sids = [f"p{n}" for n in range(12)]
    for sid in sids:
        write_record(home, target_repo, sid, Status.PASSED)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    command = [PY, "-m", "hero", "clean", "--home", str(home), "--logs-older-than", "0"]
    procs = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env) for _ in "ab"]
    outs = [p.communicate(timeout=TIMEOUT_S)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    text_out = "\n".join(outs)
    assert "not cleaned" not in text_out and "not emptied" not in text_out, text_out
    for sid in sids:
        assert not os.path.lexists(home / "worktrees" / sid)
        assert not os.path.lexists(home / "runs" / sid)
        assert load_state(home, sid) is not None
        # each story removed by one of the two, or left to the other while it held the lock
        assert text_out.count(f"{sid}: removed repository") == 1, text_out
    assert list((home / "worktrees" / ".trash").iterdir()) == []


def test_a_pass_with_no_environment_reads_no_record_for_them(
    scripted, make_home, target_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon runs a pass after each story: with no project environment to weigh, the
    records of every story are not read for them."""
    from hero.config.loader import load_config
    from hero.git.ops import TargetRepo
    from hero.run.housekeeping import Housekeeper, Rules

    home = make_home(scripted([]), housekeeping_after_days=1)
    write_record(home, target_repo, "old", Status.PASSED, finished_at=time.time() - 3 * 86400)
    config = load_config(home, roles=())

    def unexpected(self: Housekeeper) -> set[str]:
        raise AssertionError("the records were read for no environment")

    monkeypatch.setattr(Housekeeper, "_environments_in_use", unexpected)
    outcome = Housekeeper(config, TargetRepo(target_repo)).run(Rules.automatic(config.housekeeping))
    assert ("old", "repository") in {(r.key, r.what) for r in outcome.removed}
