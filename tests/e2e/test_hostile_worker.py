"""End to end: a worker (and checks) that do what they should not to the user's repository.

The worker is an adversary with a bash tool in a worktree of the user's repository. Each test
runs `hero run` in-process against the scripted model over real HTTP, on real git
repositories in tmp_path, and checks that the user's repository comes out as it went in:
the user's branches, tags and checkout, the story branch's reviewed history, a remote.
"""

from __future__ import annotations

import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import git
from helpers import (
    COMMIT,
    SUB_IMPL,
    VERIFY_SUB,
    alive,
    commit_once,
    is_ancestor,
    is_review,
    load_state,
    long_command,
    review_round,
    task_text,
    verdict,
    wait_dead,
    worker_round,
)
from run_support import policy, run_hero, sub_work

from hero.llm.scripted import ScriptedModel, call, text

pytestmark = pytest.mark.slow  # end to end: every test here runs hero for real


def worktree_of(home: Path, story_id: str = "s1") -> Path:
    return home / "worktrees" / story_id


APPROVE = verdict()
ASK_MORE = verdict("CHANGES_REQUESTED", "More, please.")


def rounds_of(model: ScriptedModel, *, review: bool) -> list[int]:
    """The rounds in which the reviewer (or the worker) was asked, in order, once each."""
    seen: list[int] = []
    for r in model.requests:
        if is_review(r.body) == review:
            n = review_round(r.body) if review else worker_round(r.body)
            if n not in seen:
                seen.append(n)
    return seen


def worker_task(model: ScriptedModel, n: int) -> str:
    return next(
        task_text(r.body)
        for r in model.requests
        if not is_review(r.body) and worker_round(r.body) == n
    )


def tool_outputs(model: ScriptedModel, n: int) -> str:
    """Every tool result the worker saw in round ``n``."""
    out = []
    for r in model.requests:
        if not is_review(r.body) and worker_round(r.body) == n:
            out = [str(m["content"]) for m in r.body["messages"] if m.get("role") == "tool"]
    return "\n".join(out)


def user_refs(repo: Path) -> dict[str, str]:
    """Every ref that is not hero's (nor the worker's stash)."""
    out = git(repo, "for-each-ref", "--format=%(refname) %(objectname)")
    pairs = (line.split(" ") for line in out.splitlines())
    return {
        name: sha
        for name, sha in pairs
        if not name.startswith(("refs/heads/hero/", "refs/hero/")) and name != "refs/stash"
    }


def strays(repo: Path) -> list[str]:
    names = git(repo, "branch", "--format=%(refname:short)").split()
    return [b for b in names if b.startswith("hero/s1-stray-")]


def checkout_state(repo: Path) -> tuple[str, str, str, str]:
    """The user's own checkout: HEAD, status, staged diff, a file's bytes."""
    return (
        git(repo, "symbolic-ref", "HEAD"),
        git(repo, "status", "--porcelain", "--untracked-files=all"),
        git(repo, "diff", "--cached"),
        (repo / "calc" / "__init__.py").read_text(),
    )


# ------------------------------------------------------------------ 1. the user's refs


@pytest.mark.parametrize(
    ("move", "named"),
    [
        (
            "git checkout -q --ignore-other-worktrees main && echo rogue > rogue.txt && "
            + COMMIT.format(msg="rogue-on-main"),
            "main",
        ),
        ("git update-ref refs/heads/main HEAD", "main"),
        ("git update-ref -d refs/heads/keep", "keep"),
        ("git branch -f keep HEAD", "keep"),
        ("git tag -f v1 HEAD && git tag rogue-tag", "rogue-tag"),
        (
            "git checkout -q -b feature main && echo f > f.txt && " + COMMIT.format(msg="f"),
            "feature",
        ),
    ],
    ids=[
        "commit-on-main",
        "update-ref-main",
        "delete-branch",
        "force-branch",
        "tags",
        "new-branch",
    ],
)
def test_worker_moving_the_users_refs_is_undone(
    scripted, make_home, write_story, target_repo: Path, move: str, named: str
) -> None:
    git(target_repo, "branch", "keep")
    git(target_repo, "tag", "-a", "v1", "-m", "release 1")
    # the user's own checkout has work in progress: staged, unstaged, untracked
    (target_repo / ".gitignore").write_text("__pycache__/\n*.tmp\n")
    git(target_repo, "add", ".gitignore")
    (target_repo / "calc" / "__init__.py").write_text("# user's edit\n")
    (target_repo / "USER-NOTES.txt").write_text("mine\n")
    refs_before, checkout_before = user_refs(target_repo), checkout_state(target_repo)

    worker = {
        1: [*sub_work(), call("bash", command=move), text("Done.")],
        2: [call("bash", command="git status --short"), text("Done.")],
    }
    model = scripted(policy(worker))
    home = make_home(model)
    story = write_story(home, "s1", verify=VERIFY_SUB)

    assert run_hero(home, story) == 0
    assert user_refs(target_repo) == refs_before
    assert checkout_state(target_repo) == checkout_before
    state = load_state(home)
    assert state["status"] == "passed"
    r1 = state["rounds"][0]["review"]
    assert r1["short_circuited"] is True and named in r1["summary"]
    assert rounds_of(model, review=True) == [2]  # round 1 was never reviewed
    assert named in worker_task(model, 2) and "## Feedback on round 1" in worker_task(model, 2)
    assert git(target_repo, "show", "hero/s1:calc/__init__.py") == SUB_IMPL
    assert git(home / "worktrees" / "s1", "symbolic-ref", "--short", "HEAD").strip() == "hero/s1"
    if "rogue-on-main" in move or "feature" in move:  # commits off the story branch are kept
        (stray,) = strays(target_repo)
        assert stray in r1["summary"]
        subject = "rogue-on-main" if "rogue" in move else "f"
        assert subject in git(target_repo, "log", "--format=%s", stray).split()


def test_thousands_of_refs_and_a_replace_ref_are_undone_in_bulk(
    scripted, make_home, write_story, target_repo: Path
) -> None:
    """The worker makes 3,000 tags in one command, at a commit of its own off the story
    branch, and a replace ref that shows that commit in place of the branch's tip: the round
    ends (failed, said once for them all), hero saw the real tip, the refs are gone from
    both repositories, the commit is kept on a stray branch, the user's refs are as they
    were and round 2 passes."""
    git(target_repo, "tag", "-a", "v1", "-m", "release 1")
    refs_before = user_refs(target_repo)
    flood = (
        "git checkout -q --detach && echo x > x.txt && git add x.txt && git commit -qm "
        "stray-work && S=$(git rev-parse HEAD) && git checkout -q hero/s1 && "
        'for i in $(seq 1 3000); do echo "create refs/tags/w$i $S"; done | '
        "git update-ref --stdin && git replace HEAD $S && git for-each-ref | wc -l"
    )
    worker = {
        1: [*sub_work(), call("bash", command=flood), text("Done.")],
        2: [call("bash", command="git tag | wc -l"), text("Done.")],
    }
    model = scripted(policy(worker))
    home = make_home(model)
    story = write_story(home, "s1", verify=VERIFY_SUB)

    assert run_hero(home, story) == 0
    state = load_state(home)
    assert state["status"] == "passed"
    r1 = state["rounds"][0]["review"]
    assert r1["short_circuited"] is True and "3001 refs" in r1["summary"]  # and the replace ref
    assert "refs/replace/" in r1["summary"] and "and 2981 more" in r1["summary"]
    assert len(r1["summary"]) < 8000
    assert user_refs(target_repo) == refs_before
    for repo in (target_repo, worktree_of(home)):
        assert not git(repo, "for-each-ref", "refs/tags/w*", "refs/replace/")
    assert git(target_repo, "show", "hero/s1:calc/__init__.py") == SUB_IMPL
    assert "x.txt" not in git(target_repo, "ls-tree", "--name-only", "hero/s1")
    (stray,) = strays(target_repo)
    assert stray in r1["summary"]
    assert "stray-work" in git(target_repo, "log", "--format=%s", stray).split()


def test_checks_moving_the_users_refs_are_undone(
    scripted, make_home, write_story, target_repo: Path, tmp_path: Path
) -> None:
    git(target_repo, "branch", "keep")
    refs_before = user_refs(target_repo)
    once = tmp_path / "moved-once"
    # once the worker's change is there (the checks run on the starting commit first too)
    sneaky = (
        f"! grep -q 'def sub' calc/__init__.py || test -e {once} || "
        f"{{ touch {once} && git update-ref refs/heads/keep HEAD; }}"
    )
    worker = {1: [*sub_work(), text("Done.")], 2: [text("Done.")]}
    model = scripted(policy(worker))
    home = make_home(model, sandbox="none")
    story = write_story(home, "s1", verify=[*VERIFY_SUB, sneaky])

    assert run_hero(home, story) == 0
    assert once.exists()
    assert user_refs(target_repo) == refs_before
    state = load_state(home)
    r1 = state["rounds"][0]
    assert r1["review"]["short_circuited"] is True
    assert "while the checks ran" in r1["review"]["summary"] and "keep" in r1["review"]["summary"]
    assert r1["verify"]["passed"] is True  # the checks were green, and still the round failed
    assert rounds_of(model, review=True) == [2]
    assert state["status"] == "passed" and len(state["rounds"]) == 2


# ------------------------------------------------------------------ 2. reviewed history


@pytest.mark.parametrize(
    "rewrite",
    [
        "git reset -q --hard HEAD~1 && echo other > other.txt && " + COMMIT.format(msg="rewrite"),
        "git commit -q --amend -m add-sub-amended",
    ],
    ids=["reset", "amend"],
)
def test_rewriting_an_earlier_rounds_commits_is_undone(
    scripted, make_home, write_story, target_repo: Path, rewrite: str
) -> None:
    worker = {
        1: [*sub_work(), text("Added sub.")],
        2: [call("bash", command=rewrite), text("Tidied up.")],
        3: [text("Nothing more to do.")],
    }
    model = scripted(policy(worker, {1: ASK_MORE, 2: APPROVE, 3: APPROVE}))
    home = make_home(model)
    story = write_story(home, "s1")

    assert run_hero(home, story) == 0
    state = load_state(home)
    r1_head = state["rounds"][0]["head_sha"]
    assert is_ancestor(target_repo, r1_head, "hero/s1")  # round 1's reviewed commit is kept
    assert git(target_repo, "show", "hero/s1:calc/__init__.py") == SUB_IMPL
    r2 = state["rounds"][1]
    assert r2["review"]["short_circuited"] is True
    assert "history was rewritten" in r2["review"]["summary"]
    assert r2["head_sha"] == r1_head
    assert rounds_of(model, review=True) == [1, 3]
    (stray,) = strays(target_repo)  # the rewritten commit is not lost
    assert stray in r2["review"]["summary"]
    assert not is_ancestor(target_repo, r1_head, stray)
    assert [r["round"] for r in state["rounds"]] == [1, 2, 3]


# ------------------------------------------------------------------ 3. its own branch


def test_worker_deleting_its_own_branch_is_recovered(
    scripted, make_home, write_story, target_repo: Path
) -> None:
    worker = [
        *sub_work(),
        call("bash", command="git checkout -q --detach && git branch -D hero/s1"),
        text("Done."),
    ]
    model = scripted(policy(worker))
    home = make_home(model)
    story = write_story(home, "s1", verify=VERIFY_SUB)

    assert run_hero(home, story) == 0
    state = load_state(home)
    assert state["status"] == "passed" and len(state["rounds"]) == 1
    assert state["head_sha"] == git(target_repo, "rev-parse", "hero/s1").strip()
    assert git(target_repo, "show", "hero/s1:calc/__init__.py") == SUB_IMPL
    assert git(home / "worktrees" / "s1", "symbolic-ref", "--short", "HEAD").strip() == "hero/s1"


@pytest.mark.parametrize("worktree_gone", [False, True], ids=["detached-worktree", "no-worktree"])
def test_rerun_with_the_branch_deleted_resumes_on_it(
    scripted, make_home, write_story, target_repo: Path, worktree_gone: bool
) -> None:
    worker = {1: [*sub_work(), text("Added sub.")], 2: [text("Nothing more to do.")]}
    model = scripted(policy(worker, {1: ASK_MORE, 2: APPROVE}))
    home = make_home(model)
    story = write_story(home, "s1", verify=VERIFY_SUB, max_retries=1)
    assert run_hero(home, story) == 1
    r1_head = load_state(home)["rounds"][0]["head_sha"]
    # what a worker (or a person) did while no hero ran: the branch is gone
    worktree = home / "worktrees" / "s1"
    git(worktree, "checkout", "-q", "--detach")
    if worktree_gone:
        shutil.rmtree(worktree)
    git(target_repo, "branch", "-D", "hero/s1")

    assert run_hero(home, story) == 0
    state = load_state(home)
    assert state["status"] == "passed"
    assert [r["round"] for r in state["rounds"]] == [1, 2]  # resumed, not started afresh
    assert state["runs"] == 2
    assert is_ancestor(target_repo, r1_head, "hero/s1")
    assert "More, please." in worker_task(model, 2)


# ------------------------------------------------------------------ 4. merge conflicts

#: A real merge conflict in notes.txt, left unresolved (the side branch is gone again).
MAKE_CONFLICT = (
    "git checkout -q -b side && echo theirs > notes.txt && "
    + COMMIT.format(msg="theirs")
    + " && git checkout -q hero/s1 && echo ours > notes.txt && "
    + COMMIT.format(msg="ours")
    + " && git merge side; git branch -D side; true"
)


def test_unresolved_conflicts_are_not_committed_and_wait_for_the_next_round(
    scripted, make_home, write_story, target_repo: Path
) -> None:
    worker = {
        1: [
            call("write_file", path="calc/__init__.py", content=SUB_IMPL),
            call("bash", command=COMMIT.format(msg="add-sub")),
            call("bash", command=MAKE_CONFLICT),
            text("Done."),
        ],
        2: [
            call("bash", command="git status --short; cat notes.txt"),
            call(
                "bash",
                command="printf 'ours\\ntheirs\\n' > notes.txt && " + COMMIT.format(msg="resolve"),
            ),
            text("Resolved."),
        ],
    }
    model = scripted(policy(worker))
    home = make_home(model)
    story = write_story(home, "s1", verify=VERIFY_SUB, max_retries=1)
    worktree = home / "worktrees" / "s1"

    assert run_hero(home, story) == 1
    state = load_state(home)
    r1 = state["rounds"][0]["review"]
    assert r1["short_circuited"] is True and "notes.txt" in r1["summary"]
    assert "conflict" in r1["summary"]
    assert rounds_of(model, review=True) == []
    assert git(target_repo, "show", "hero/s1:notes.txt") == "ours\n"  # no markers committed
    assert "<<<<<<< " in (worktree / "notes.txt").read_text()  # left for the next round
    assert "notes.txt" in git(worktree, "diff", "--name-only", "--diff-filter=U")

    # a rerun (its resume rescue included) keeps the conflict as it is for the worker
    assert run_hero(home, story) == 0
    seen = tool_outputs(model, 2)
    assert "AA notes.txt" in seen and "<<<<<<< " in seen and ">>>>>>> " in seen
    state = load_state(home)
    assert state["status"] == "passed" and [r["round"] for r in state["rounds"]] == [1, 2]
    assert git(target_repo, "show", "hero/s1:notes.txt") == "ours\ntheirs\n"
    assert "<<<<<<<" not in git(target_repo, "diff", "main", "hero/s1")


def test_conflict_markers_the_base_already_had_are_committed(
    scripted, make_home, write_story, target_repo: Path
) -> None:
    sample = "how a conflict looks:\n<<<<<<< ours\na\n=======\nb\n>>>>>>> theirs\n"
    (target_repo / "docs").mkdir()
    (target_repo / "docs" / "merging.md").write_text(sample)
    (target_repo / "README.rst").write_text("Title\n=======\n")
    git(target_repo, "add", "-A")
    git(target_repo, "commit", "-q", "-m", "docs")
    worker = [
        call("write_file", path="calc/__init__.py", content=SUB_IMPL),
        call(
            "bash",
            command="echo more >> docs/merging.md && printf 'Usage\\n=======\\n' > USAGE.rst",
        ),
        text("Done; not committed."),
    ]
    model = scripted(policy(worker))
    home = make_home(model)
    story = write_story(home, "s1", verify=VERIFY_SUB)

    assert run_hero(home, story) == 0
    assert git(target_repo, "show", "hero/s1:docs/merging.md") == sample + "more\n"
    assert git(target_repo, "show", "hero/s1:USAGE.rst") == "Usage\n=======\n"


# ------------------------------------------------------------------ 5. submodules


def test_submodules_are_checked_out_and_writes_inside_them_fail_the_round(
    scripted,
    make_home,
    write_story,
    target_repo: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lib = tmp_path / "lib-origin"
    lib.mkdir()
    (lib / "lib.txt").write_text("LIB-CONTENT-91\n")
    git(lib, "init", "-q", "-b", "main")
    git(lib, "add", "-A")
    git(lib, "commit", "-q", "-m", "lib")
    git(target_repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(lib), "lib")
    git(target_repo, "commit", "-q", "-m", "add lib")
    # local-path submodules need this since git 2.38.1; hero's git inherits GIT_CONFIG_*
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "protocol.file.allow")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "always")

    worker = {
        1: [
            call("bash", command="cat lib/lib.txt"),
            call("bash", command="echo changed >> lib/lib.txt && echo new > lib/new.txt"),
            *sub_work(),
            text("Done."),
        ],
        2: [
            call("bash", command="git -C lib checkout -- . && git -C lib clean -fdq"),
            text("Undone."),
        ],
    }
    model = scripted(policy(worker))
    home = make_home(model)
    story = write_story(home, "s1", verify=VERIFY_SUB)

    assert run_hero(home, story) == 0
    assert "LIB-CONTENT-91" in tool_outputs(model, 1)
    state = load_state(home)
    r1 = state["rounds"][0]["review"]
    assert r1["short_circuited"] is True and "submodule" in r1["summary"] and "lib" in r1["summary"]
    assert rounds_of(model, review=True) == [2]
    assert state["status"] == "passed"
    assert git(lib, "log", "--format=%s").split() == ["lib"]  # the submodule's origin untouched


# ------------------------------------------------------------------ 6. push


@pytest.mark.parametrize("pushurl", [False, True], ids=["url", "pushurl"])
def test_push_is_refused_for_the_worker_and_the_checks(
    scripted, make_home, write_story, target_repo: Path, tmp_path: Path, pushurl: bool
) -> None:
    origin = tmp_path / "origin.git"
    git(tmp_path, "clone", "-q", "--bare", str(target_repo), str(origin))
    git(target_repo, "remote", "add", "origin", str(origin))
    if pushurl:
        git(target_repo, "config", "remote.origin.pushurl", str(origin))
    git(target_repo, "fetch", "-q", "origin")
    origin_before = git(origin, "for-each-ref")
    pushes = [
        "git push origin :main",
        "git push origin HEAD:main",
        "git push --all origin",
        "git push --mirror origin",
        f"git push {origin} HEAD:refs/heads/by-path",
        f"git push file://{origin} HEAD:refs/heads/by-url",
    ]
    worker = [
        *(call("bash", command=f"{p}; echo exit=$?") for p in pushes),
        *sub_work(),
        text("Done."),
    ]
    model = scripted(policy(worker))
    home = make_home(model)
    story = write_story(
        home, "s1", verify=[*VERIFY_SUB, "! git push origin HEAD:refs/heads/from-checks"]
    )

    code = run_hero(home, story)
    assert git(origin, "for-each-ref") == origin_before
    assert code == 0
    seen = tool_outputs(model, 1)
    assert seen.count("exit=0") == 0 and seen.count("exit=128") == len(pushes)
    assert "hero: git push is disabled for the worker and the checks" in seen
    state = load_state(home)
    assert state["status"] == "passed" and len(state["rounds"]) == 1


# ------------------------------------------------------------------ 7. no change


def test_a_round_without_a_commit_does_not_pass(
    scripted, make_home, write_story, target_repo: Path
) -> None:
    worker = {1: [text("Nothing needed, I think.")], 2: [*sub_work(), text("Added sub.")]}
    model = scripted(policy(worker))
    home = make_home(model)
    story = write_story(home, "s1", verify=["true"])

    assert run_hero(home, story) == 0
    state = load_state(home)
    r1 = state["rounds"][0]
    assert r1["review"]["short_circuited"] is True
    assert "no commit was made" in r1["review"]["summary"]
    assert r1["head_sha"] == state["base_sha"]
    assert "no commit was made" in worker_task(model, 2)
    assert rounds_of(model, review=True) == [2]
    assert state["status"] == "passed" and state["head_sha"] != state["base_sha"]


def test_a_story_that_allows_no_change_passes_without_a_commit(
    scripted, make_home, write_story, target_repo: Path
) -> None:
    model = scripted(policy([text("Already true; nothing to change.")]))
    home = make_home(model)
    story = write_story(home, "s1", verify=["true"], allow_empty=True)

    assert run_hero(home, story) == 0
    state = load_state(home)
    assert state["status"] == "passed" and state["head_sha"] == state["base_sha"]
    review = next(task_text(r.body) for r in model.requests if is_review(r.body))
    assert "THE DIFF IS EMPTY" in review
    assert "there is no commit on the branch since the base" in review


def test_the_users_commit_during_a_round_is_left_alone(
    scripted, make_home, write_story, target_repo: Path
) -> None:
    """A commit the user makes in their own checkout while the worker runs is the user's."""
    repo = shlex.quote(str(target_repo))
    user_commit = (
        f"echo by-user > {repo}/user.txt && git -C {repo} add user.txt && "
        f"git -C {repo} commit -q -m by-user"
    )
    worker = [call("bash", command=user_commit), *sub_work(), text("Done.")]
    model = scripted(policy(worker))
    home = make_home(model, sandbox="none")
    story = write_story(home, "s1", verify=VERIFY_SUB)

    assert run_hero(home, story) == 0
    assert git(target_repo, "log", "-1", "--format=%s", "main").strip() == "by-user"
    assert git(target_repo, "status", "--porcelain") == ""
    assert load_state(home)["rounds"][0]["review"]["short_circuited"] is False


# ------------------------------------------------------------------ a stop mid-turn


def test_refs_moved_before_an_interrupt_are_put_back(
    scripted, make_home, write_story, target_repo: Path, tmp_path: Path
) -> None:
    main_before = git(target_repo, "rev-parse", "main").strip()
    plan = [
        call("bash", command=commit_once("work")),
        call("bash", command="git update-ref refs/heads/main HEAD"),
        call("bash", command=long_command("child.pid")),
        text("Done."),
    ]
    model = scripted(policy(plan))
    home = make_home(model, sandbox="none")
    story = write_story(home, "s1")
    pid_file = home / "worktrees" / "s1" / "child.pid"
    with open(tmp_path / "hero.log", "wb") as log:
        hero = subprocess.Popen(
            [sys.executable, "-m", "hero", "run", str(story), "--home", str(home)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while not (pid_file.is_file() and pid_file.read_text().strip().isdigit()):
            assert hero.poll() is None and time.monotonic() < deadline, (
                tmp_path / "hero.log"
            ).read_text()
            time.sleep(0.05)
        child = int(pid_file.read_text())
        # the worker moved main in the story's own repository: the user's is out of its reach
        assert git(worktree_of(home), "rev-parse", "main").strip() != main_before
        assert git(target_repo, "rev-parse", "main").strip() == main_before
        hero.send_signal(signal.SIGINT)
        assert hero.wait(timeout=30) == 130
        assert wait_dead(child)
    finally:
        if hero.poll() is None:
            hero.kill()
            hero.wait()
    assert git(target_repo, "rev-parse", "main").strip() == main_before
    assert load_state(home)["status"] == "interrupted"
    assert not alive(child)
