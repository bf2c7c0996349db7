"""A story branch is brought up to date with a target that moved on before the story passes
(`keep_up`): merged or rebased, then verified and reviewed again; a conflict gets one worker
round, and a conflict it does not resolve ends the story clearly, its branch as it was.

The target moves while the story runs: the scripted reviewer commits on `main` in the user's
repository as it is first asked, so the branch, made before, misses that commit when the
review passes."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import git
from helpers import SUB_IMPL, VERIFY_SUB, is_review, load_state, review_round
from run_support import APPROVE, policy, review_requests, run_hero, sub_work

from hero.llm.scripted import Reply, call, text
from hero.run.events import schema

DOC = '"""Small sums."""\n\n'  # main's change at the top of the file: merges with the story's
MUL = "\n\ndef mul(a, b):\n    return a * b\n"  # main's change at its end: conflicts with it
RESOLVED = SUB_IMPL + MUL


def main_moves_at_first_review(
    repo: Path, change: Callable[[str], str], reviewer: Any = APPROVE
) -> Callable[[dict], Any]:
    """The reviewer's answer, after a commit on ``main`` that ``change``s calc/__init__.py,
    made once, as round 1 is reviewed."""
    once = threading.Lock()
    done: list[str] = []

    def answer(n: int) -> Any:
        with once:
            if not done:
                path = repo / "calc" / "__init__.py"
                path.write_text(change(path.read_text()))
                git(repo, "commit", "-qam", "main: moved on")
                done.append(git(repo, "rev-parse", "main").strip())
        return reviewer(n) if callable(reviewer) else reviewer

    answer.main_sha = done  # type: ignore[attr-defined]
    return answer


def shown(repo: Path, rev: str, path: str = "calc/__init__.py") -> str:
    return git(repo, "show", f"{rev}:{path}")


def holds(repo: Path, older: str, newer: str = "hero/s1") -> bool:
    import subprocess

    return (
        subprocess.run(
            ["git", "merge-base", "--is-ancestor", older, newer], cwd=repo, check=False
        ).returncode
        == 0
    )


def events_of(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


@pytest.mark.slow  # end to end: runs hero for real
def test_a_target_that_moved_on_is_merged_in_then_checked_again(
    make_home, write_story, scripted, target_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reviewer = main_moves_at_first_review(target_repo, lambda t: DOC + t)
    model = scripted(policy([*sub_work(), text("Added calc.sub.")], reviewer))
    home = make_home(model)
    story = write_story(home, verify=VERIFY_SUB)

    assert run_hero(home, story, "--events") == 0

    state = load_state(home)
    assert state["status"] == "passed"
    main_sha = reviewer.main_sha[0]  # type: ignore[attr-defined]
    assert holds(target_repo, main_sha)  # the branch holds main's commit ...
    assert shown(target_repo, "hero/s1") == DOC + SUB_IMPL  # ... and both changes
    first, second = state["rounds"]
    assert "update" not in first
    assert second["worker"]["stop_reason"] == "updated_to_base"
    assert second["worker"]["turns"] == 0
    assert second["update"]["mode"] == "merge"
    assert second["update"]["targets"] == ["main"]
    assert second["update"]["from"] == first["head_sha"]
    assert (
        second["head_sha"]
        == second["update"]["to"]
        == git(target_repo, "rev-parse", "hero/s1").strip()
    )
    assert state["base_sha"] == main_sha  # what the story's change is now measured from
    # verify and review ran again on the merge
    assert second["verify"]["passed"] is True
    assert (home / "runs" / "s1" / "verify-r2.log").is_file()
    reviews = review_requests(model)
    assert [review_round(r) for r in reviews] == [1, 2]
    # no worker ran in round 2
    assert all("This is round 2" not in json.dumps(r.body) for r in model.requests)
    events = events_of(capsys.readouterr().out)
    updated = [e for e in events if e["type"] == "updated_to_base"]
    assert len(updated) == 1 and updated[0]["targets"] == ["main"]
    assert updated[0]["head_after"] == second["head_sha"]
    import jsonschema

    for event in events:
        jsonschema.validate(event, schema())


@pytest.mark.slow  # end to end: runs hero for real
def test_keep_up_off_reports_the_branch_as_it_is(
    make_home, write_story, scripted, target_repo: Path
) -> None:
    reviewer = main_moves_at_first_review(target_repo, lambda t: DOC + t)
    model = scripted(policy([*sub_work(), text("Added calc.sub.")], reviewer))
    home = make_home(model, keep_up="off")
    story = write_story(home, verify=VERIFY_SUB)

    assert run_hero(home, story) == 0

    state = load_state(home)
    assert state["status"] == "passed"
    assert len(state["rounds"]) == 1
    assert not holds(target_repo, reviewer.main_sha[0])  # type: ignore[attr-defined]
    assert shown(target_repo, "hero/s1") == SUB_IMPL


@pytest.mark.slow  # end to end: runs hero for real
def test_rebase_mode_replays_the_story_on_the_target(
    make_home, write_story, scripted, target_repo: Path
) -> None:
    reviewer = main_moves_at_first_review(target_repo, lambda t: DOC + t)
    model = scripted(policy([*sub_work(), text("Added calc.sub.")], reviewer))
    home = make_home(model, keep_up="rebase")
    story = write_story(home, verify=VERIFY_SUB)

    assert run_hero(home, story) == 0

    state = load_state(home)
    main_sha = reviewer.main_sha[0]  # type: ignore[attr-defined]
    assert state["status"] == "passed"
    assert state["rounds"][1]["update"]["mode"] == "rebase"
    assert shown(target_repo, "hero/s1") == DOC + SUB_IMPL
    # linear: main's commit, then the story's own, replayed; no merge commit
    assert git(target_repo, "rev-list", "--merges", "main..hero/s1").strip() == ""
    assert git(target_repo, "rev-parse", "hero/s1^").strip() == main_sha
    assert git(target_repo, "log", "-1", "--format=%s", "hero/s1").strip() == "add-sub"
    assert not holds(target_repo, state["rounds"][0]["head_sha"])  # the old commit replaced


def resolve_work() -> list[Reply]:
    """The conflict's round: the file as both sides want it, the merge concluded."""
    return [
        call("write_file", path="calc/__init__.py", content=RESOLVED),
        call("bash", command="git add -A && git commit -q --no-edit"),
        text("Resolved the conflict."),
    ]


@pytest.mark.slow  # end to end: runs hero for real
@pytest.mark.parametrize("mode", ["merge", "rebase"])  # rebase: resolved as a merge
def test_a_conflict_resolved_in_one_round_passes(
    make_home,
    write_story,
    scripted,
    target_repo: Path,
    capsys: pytest.CaptureFixture[str],
    mode: str,
) -> None:
    reviewer = main_moves_at_first_review(target_repo, lambda t: t + MUL)
    worker = {1: [*sub_work(), text("Added calc.sub.")], 2: resolve_work()}
    model = scripted(policy(worker, reviewer))
    home = make_home(model, keep_up=mode)
    story = write_story(home, verify=VERIFY_SUB)

    assert run_hero(home, story, "--events") == 0

    state = load_state(home)
    assert state["status"] == "passed"
    assert shown(target_repo, "hero/s1") == RESOLVED
    assert holds(target_repo, reviewer.main_sha[0])  # type: ignore[attr-defined]
    second = state["rounds"][1]
    assert second["update"]["conflict"] == "main"
    assert second["update"]["files"] == ["calc/__init__.py"]
    assert second["update"]["resolved"] is True
    # the worker was told the files and main's change
    task = next(
        json.dumps(r.body)
        for r in model.requests
        if not is_review(r.body) and "round 2" in json.dumps(r.body)
    )
    assert "calc/__init__.py" in task and "def mul" in task and "conflict" in task
    events = events_of(capsys.readouterr().out)
    kinds = [e["type"] for e in events]
    assert kinds.index("conflict") < kinds.index("updated_to_base")
    conflict = next(e for e in events if e["type"] == "conflict")
    assert conflict["files"] == ["calc/__init__.py"] and conflict["target"] == "main"


@pytest.mark.slow  # end to end: runs hero for real
def test_a_conflict_not_resolved_ends_clearly_with_the_branch_as_it_was(
    make_home, write_story, scripted, target_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reviewer = main_moves_at_first_review(target_repo, lambda t: t + MUL)
    worker = {1: [*sub_work(), text("Added calc.sub.")], 2: [text("I cannot do that.")]}
    model = scripted(policy(worker, reviewer))
    home = make_home(model)
    story = write_story(home, verify=VERIFY_SUB)

    assert run_hero(home, story, "--events") == 1

    state = load_state(home)
    head = state["rounds"][0]["head_sha"]
    assert state["status"] == "error"
    assert state["conflict"]["files"] == ["calc/__init__.py"]
    assert state["conflict"]["target"] == "main"
    assert "calc/__init__.py" in state["error"] and state["error"].startswith("conflict:")
    # the branch as it was, in both repositories; no merge left in progress
    assert git(target_repo, "rev-parse", "hero/s1").strip() == head
    worktree = home / "worktrees" / "s1"
    assert git(worktree, "rev-parse", "HEAD").strip() == head
    assert not (worktree / ".git" / "MERGE_HEAD").exists()
    assert git(worktree, "status", "--porcelain").strip() == ""
    assert state["head_sha"] == head
    assert (home / "inbox" / "s1.md").exists()  # not moved to done/
    stop = [e for e in events_of(capsys.readouterr().out) if e["type"] == "stop"]
    assert stop[-1]["reason"] == "conflict" and "calc/__init__.py" in stop[-1]["detail"]


def commit_on(repo: Path, branch: str, path: str, content: str, message: str) -> str:
    """A commit on ``branch`` (not checked out) setting ``path`` to ``content``."""
    import os
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        env = {**os.environ, "GIT_INDEX_FILE": str(Path(scratch) / "index")}

        def run(*args: str, stdin: str | None = None) -> str:
            return subprocess.run(
                ["git", *args],
                cwd=repo,
                env=env,
                input=stdin,
                text=True,
                check=True,
                capture_output=True,
            ).stdout.strip()

        run("read-tree", branch)
        blob = run("hash-object", "-w", "--stdin", stdin=content)
        run("update-index", "--add", "--cacheinfo", f"100644,{blob},{path}")
        tree = run("write-tree")
        sha = run(
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit-tree",
            tree,
            "-p",
            branch,
            "-m",
            message,
        )
        run("update-ref", f"refs/heads/{branch}", sha)
    return sha


@pytest.mark.slow  # end to end: runs hero for real
def test_a_story_is_brought_up_to_date_with_its_dependencys_final_head(
    make_home, write_story, scripted, target_repo: Path
) -> None:
    from hero.state import load_state as load_record
    from hero.state import save_state

    moved: list[str] = []

    def reviewer(n: int) -> Any:
        return APPROVE

    worker = {
        "a": [*sub_work("add-sub"), text("Added calc.sub.")],
        "b": [
            call("write_file", path="b.txt", content="b\n"),
            call("bash", command="git add -A && git commit -q -m add-b"),
            text("Added b.txt."),
        ],
    }
    inner = policy(worker, reviewer)
    home_box: list[Path] = []

    def handler(body: dict) -> Any:
        if is_review(body) and "# Story b:" in json.dumps(body) and not moved:
            # a ran again meanwhile (a revision, say): its final head is a newer commit
            home = home_box[0]
            sha = commit_on(target_repo, "hero/a", "a-later.txt", "later\n", "a: later")
            record = load_record(home, "a")
            assert record is not None
            record.head_sha = sha
            save_state(home, record)
            moved.append(sha)
        return inner(body)

    model = scripted(handler)
    home = make_home(model)
    home_box.append(home)
    assert run_hero(home, write_story(home, "a", verify=VERIFY_SUB)) == 0
    story_b = write_story(home, "b", verify=["test -f b.txt"], depends_on=["a"])

    assert run_hero(home, story_b) == 0

    state = load_state(home, "b")
    assert state["status"] == "passed"
    assert moved and holds(target_repo, moved[0], "hero/b")
    assert git(target_repo, "show", "hero/b:a-later.txt") == "later\n"
    assert git(target_repo, "show", "hero/b:b.txt") == "b\n"
    second = state["rounds"][1]
    assert second["update"]["targets"] == ["hero/a"]
    assert second["worker"]["stop_reason"] == "updated_to_base"
    assert state["base_sha"] == moved[0]


PLUS = "def plus(a, b):\n    return a + b\n"  # main renames add: merges, but breaks the story
VERIFY_ADD = [*VERIFY_SUB, f"{VERIFY_SUB[0].split(' -m ')[0]} -c 'from calc import add'"]


@pytest.mark.slow  # end to end: runs hero for real
def test_a_red_check_after_the_update_is_a_round_like_any_and_the_next_round_fixes_it(
    make_home, write_story, scripted, target_repo: Path
) -> None:
    reviewer = main_moves_at_first_review(target_repo, lambda t: t.replace("def add", "def plus"))
    fixed = PLUS + "\n\nadd = plus\n\n\ndef sub(a, b):\n    return a - b\n"
    worker = {
        1: [*sub_work(), text("Added calc.sub.")],
        3: [
            call("write_file", path="calc/__init__.py", content=fixed),
            call("bash", command="git add -A && git commit -q -m keep-add"),
            text("Kept add as an alias."),
        ],
    }
    model = scripted(policy(worker, reviewer))
    home = make_home(model, max_retries=2)
    story = write_story(home, verify=VERIFY_ADD)

    assert run_hero(home, story) == 0

    state = load_state(home)
    first, update, third = state["rounds"]
    assert update["update"]["mode"] == "merge"
    assert update["verify"]["passed"] is False  # add is gone on main
    assert update["review"]["short_circuited"] is True  # the reviewer is not asked on red
    assert "from calc import add" in update["feedback"]  # what round 3's worker reads
    round3 = [r.body for r in model.requests if "This is round 3 of" in json.dumps(r.body)]
    assert round3 and "from calc import add" in json.dumps(round3[0])
    assert "update" not in third and third["worker"]["turns"] == 3
    assert state["status"] == "passed"
    assert shown(target_repo, "hero/s1") == fixed
    assert holds(target_repo, reviewer.main_sha[0])  # type: ignore[attr-defined]


@pytest.mark.slow  # end to end: runs hero for real
def test_a_red_check_after_the_update_with_no_rounds_left_gives_up(
    make_home, write_story, scripted, target_repo: Path
) -> None:
    reviewer = main_moves_at_first_review(target_repo, lambda t: t.replace("def add", "def plus"))
    model = scripted(policy([*sub_work(), text("Added calc.sub.")], reviewer))
    home = make_home(model, max_retries=1)
    story = write_story(home, verify=VERIFY_ADD)

    assert run_hero(home, story) == 1

    state = load_state(home)
    assert state["status"] == "gave_up"
    assert [r["review"]["verdict"] for r in state["rounds"]] == ["APPROVED", "CHANGES_REQUESTED"]
    assert state["rounds"][1]["update"]["targets"] == ["main"]
    assert (home / "inbox" / "s1.md").exists()  # not reported


def test_update_rounds_are_outside_the_budget_and_left_out_of_records_without_one() -> None:
    from hero.run.keepup import update_rounds
    from hero.state import ReviewRecord, Round, RunState

    plain = Round(round=1, review=ReviewRecord("APPROVED"))
    checked = Round(round=2, review=ReviewRecord("APPROVED"), update={"mode": "merge"})
    state = RunState(id="s1", rounds=[plain, checked, plain])
    assert update_rounds(state) == 1
    state.round_offset = 2  # a fresh budget after giving up: those before are in the offset
    assert update_rounds(state) == 0

    data = state.to_dict()
    assert "update" not in data["rounds"][0] and data["rounds"][1]["update"] == {"mode": "merge"}
    assert "conflict" not in data
    state.conflict = {"target": "main", "files": ["a.py"]}
    again = RunState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert again.conflict == state.conflict and again.rounds[1].update == {"mode": "merge"}
    with pytest.raises(TypeError, match="update"):
        Round.from_dict({"round": 1, "update": ["not", "an", "object"]})


@pytest.mark.slow  # end to end: runs hero for real
def test_a_tag_as_base_ref_never_moves(make_home, write_story, scripted, target_repo: Path) -> None:
    git(target_repo, "tag", "v1")
    reviewer = main_moves_at_first_review(target_repo, lambda t: DOC + t)
    model = scripted(policy([*sub_work(), text("Added calc.sub.")], reviewer))
    home = make_home(model)
    story = write_story(home, verify=VERIFY_SUB, base_ref="v1")

    assert run_hero(home, story) == 0

    assert len(load_state(home)["rounds"]) == 1
    assert shown(target_repo, "hero/s1") == SUB_IMPL


@pytest.mark.slow  # end to end: runs hero for real
def test_a_remote_tracking_target_is_kept_up_with_as_last_fetched(
    make_home, write_story, scripted, target_repo: Path
) -> None:
    git(target_repo, "update-ref", "refs/remotes/origin/main", "main")

    once: list[str] = []

    def reviewer(n: int) -> Any:  # as if `git fetch` brought a commit pushed elsewhere
        if not once:
            git(target_repo, "branch", "-q", "elsewhere", "main")
            sha = commit_on(target_repo, "elsewhere", "NOTES.md", "notes\n", "pushed elsewhere")
            git(target_repo, "update-ref", "refs/remotes/origin/main", sha)
            once.append(sha)
        return APPROVE

    model = scripted(policy([*sub_work(), text("Added calc.sub.")], reviewer))
    home = make_home(model, target_base_ref="origin/main")
    story = write_story(home, verify=VERIFY_SUB)

    assert run_hero(home, story) == 0

    state = load_state(home)
    assert state["rounds"][1]["update"]["targets"] == ["origin/main"]
    assert holds(target_repo, once[0])
    assert git(target_repo, "show", "hero/s1:NOTES.md") == "notes\n"


@pytest.mark.slow  # end to end: runs hero for real
def test_a_retry_after_a_conflict_begins_the_merge_again_for_a_new_round(
    make_home, write_story, scripted, target_repo: Path
) -> None:
    from hero.cli import main

    reviewer = main_moves_at_first_review(target_repo, lambda t: t + MUL)
    worker = {1: [*sub_work(), text("Added calc.sub.")], 2: [text("No.")], 3: resolve_work()}
    model = scripted(policy(worker, reviewer))
    home = make_home(model)
    story = write_story(home, verify=VERIFY_SUB)
    assert run_hero(home, story) == 1
    assert load_state(home)["conflict"]["files"] == ["calc/__init__.py"]

    assert main(["retry", "s1", "--home", str(home)]) == 0
    assert run_hero(home, story) == 0

    state = load_state(home)
    assert state["status"] == "passed" and "conflict" not in state
    assert [bool(r.get("update")) for r in state["rounds"]] == [False, True, True]
    assert state["rounds"][2]["update"]["resolved"] is True  # no worker round in between
    assert shown(target_repo, "hero/s1") == RESOLVED
