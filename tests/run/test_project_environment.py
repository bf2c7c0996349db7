"""The project's environment (hero.run.environment): real `hero run`s against the scripted model
over real HTTP, a real project whose tests need a package hero does not have (installed by pip
from a wheel in the repository, offline), real bubblewrap sandboxes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import working_bwrap
from env_support import CHECK, FIXED, SETUP, make_project
from helpers import COMMIT, task_text
from run_support import policy, run_hero, sub_work, worker_requests

from hero.cli import main
from hero.llm.scripted import ScriptedModel, call, text
from hero.run.environment import envs_dir, load

pytestmark = pytest.mark.slow


def fix_work(msg: str = "fix-sub") -> list:
    return [
        call("write_file", path="calc/__init__.py", content=FIXED),
        call("bash", command=COMMIT.format(msg=msg)),
        text("Fixed calc.sub."),
    ]


def fix_sub() -> list:
    """The worker adds calc.sub to the plain target repository and commits it."""
    return [*sub_work(), text("Added sub.")]


def state_of(home: Path, story: str) -> dict:
    return json.loads((home / "runs" / "state" / f"{story}.json").read_text())


def made(home: Path) -> list[Path]:
    return [p for p in envs_dir(home).iterdir() if p.is_dir() and load(p) is not None]


@pytest.fixture
def project(target_repo: Path) -> Path:
    working_bwrap()
    make_project(target_repo)
    return target_repo


def test_a_story_passes_in_the_projects_environment_and_the_next_reuses_it(
    project: Path, make_home, write_story, scripted: Callable[..., ScriptedModel]
) -> None:
    # hero's own interpreter has no tinydep: the check can pass only in the project's environment
    assert subprocess.run([sys.executable, "-c", "import tinydep"], capture_output=True).returncode
    model = scripted(policy(fix_work()))
    home = make_home(model, setup=SETUP, sandbox="bwrap")
    checks = [CHECK, "! python -c 'import hero'"]  # hero's packages are not there
    assert run_hero(home, write_story(home, "s1", verify=checks)) == 0

    first = state_of(home, "s1")
    assert first["status"] == "passed" and len(first["rounds"]) == 1
    assert first["setup"]["reused"] is False and first["setup"]["seconds"] > 0
    (env,) = made(home)
    assert first["setup"]["key"] == env.name
    assert "pip install" in Path(first["setup"]["log"]).read_text()
    # the baseline: the planted bug made the project's tests fail before any change
    base = {c["command"]: c for c in first["baseline"]["checks"]}
    assert base[CHECK]["passed"] is False and base[checks[1]]["passed"] is True
    assert "already fail" in task_text(worker_requests(model)[0])
    # nothing the setup made is on the branch
    files = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", "hero/s1"],
        cwd=project,
        capture_output=True,
        text=True,
    ).stdout.split()
    assert not [f for f in files if f.startswith(".venv") or "egg-info" in f or f.endswith(".pth")]

    # the second story: the environment is reused, its setup log says no setup ran
    assert run_hero(home, write_story(home, "s2", verify=checks)) == 0
    second = state_of(home, "s2")
    assert second["status"] == "passed" and second["setup"]["reused"] is True
    assert second["setup"]["key"] == first["setup"]["key"] and len(made(home)) == 1
    assert "no setup ran" in Path(second["setup"]["log"]).read_text()
    assert second["baseline"]["cached"] is True  # the same commit, environment and checks


def test_a_changed_lock_file_makes_a_new_environment(
    project: Path, make_home, write_story, scripted: Callable[..., ScriptedModel]
) -> None:
    model = scripted(policy(fix_work()))
    home = make_home(model, setup=SETUP, sandbox="bwrap")
    assert run_hero(home, write_story(home, "s1", verify=[CHECK])) == 0
    (project / "requirements.txt").write_text("tinydep==1.0\n")
    subprocess.run(["git", "add", "-A"], cwd=project, check=True)
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "pin"],
        cwd=project,
        check=True,
    )
    assert run_hero(home, write_story(home, "s2", verify=[CHECK])) == 0
    assert state_of(home, "s2")["setup"]["reused"] is False
    assert len(made(home)) == 2


def test_a_failed_setup_ends_the_story_before_any_model_call(
    project: Path, make_home, write_story, scripted: Callable[..., ScriptedModel]
) -> None:
    model = scripted(policy(fix_work()))
    home = make_home(model, setup=["echo installing", "exit 7"], sandbox="bwrap")
    assert run_hero(home, write_story(home, "s1", verify=[CHECK])) == 1
    state = state_of(home, "s1")
    assert state["status"] == "error" and state["rounds"] == []
    assert "setup failed: `exit 7` exited 7" in state["error"]
    log = home / "runs" / "s1" / "setup.log"
    assert "installing" in log.read_text() and str(log) in state["error"]
    assert model.requests == []
    assert made(home) == []  # nothing of a failed setup is kept
    assert [p.name for p in envs_dir(home).iterdir() if p.is_dir()] == []


def test_two_stories_at_once_make_one_environment(
    project: Path, make_home, write_story, scripted: Callable[..., ScriptedModel]
) -> None:
    model = scripted(policy(fix_work()))
    home = make_home(model, setup=["sleep 1", *SETUP], sandbox="bwrap")
    stories = [write_story(home, f"s{n}", verify=[CHECK]) for n in (1, 2)]
    codes: dict[str, int] = {}
    procs = [
        subprocess.Popen([sys.executable, "-m", "hero", "run", str(s), "--home", str(home)])
        for s in stories
    ]
    for story, proc in zip(stories, procs, strict=True):
        codes[story.stem] = proc.wait(timeout=240)
    assert codes == {"s1": 0, "s2": 0}
    reused = sorted(state_of(home, s)["setup"]["reused"] for s in ("s1", "s2"))
    assert reused == [False, True] and len(made(home)) == 1


def test_without_a_sandbox_setup_runs_in_the_storys_repository(
    project: Path, make_home, write_story, scripted: Callable[..., ScriptedModel]
) -> None:
    # the worker adds everything it sees: the environment's directories are not its to commit
    model = scripted(policy(fix_work()))
    home = make_home(model, setup=SETUP, sandbox="none")
    assert run_hero(home, write_story(home, "s1", verify=[CHECK])) == 0
    state = state_of(home, "s1")
    assert state["status"] == "passed" and state["setup"]["path"] == ""
    files = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", "hero/s1"],
        cwd=project,
        capture_output=True,
        text=True,
    ).stdout.split()
    assert not [f for f in files if f.startswith(".venv")]


def test_a_story_adds_its_own_setup_to_the_homes(
    project: Path, make_home, write_story, scripted: Callable[..., ScriptedModel]
) -> None:
    model = scripted(policy(fix_work()))
    home = make_home(model, setup=SETUP[:1], sandbox="bwrap")
    story = write_story(home, "s1", verify=[CHECK], setup=SETUP[1:])
    assert run_hero(home, story) == 0
    log = Path(state_of(home, "s1")["setup"]["log"]).read_text()
    assert log.index("-m venv") < log.index("pip install")


def test_the_json_result_and_events_carry_setup_and_baseline(
    project: Path, make_home, write_story, scripted: Callable[..., ScriptedModel], capsys
) -> None:
    model = scripted(policy(fix_work()))
    home = make_home(model, setup=SETUP, sandbox="bwrap")
    story = write_story(home, "s1", verify=[CHECK])
    assert main(["run", str(story), "--home", str(home), "--events"]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    kinds = [e["type"] for e in events]
    assert kinds.index("setup") < kinds.index("baseline") < kinds.index("round_start")
    result = events[-1]["result"]
    assert result["setup"]["reused"] is False
    assert [c["passed"] for c in result["baseline"]["checks"]] == [False]


def test_a_story_waiting_for_anothers_setup_can_be_stopped(tmp_path: Path) -> None:
    from hero.errors import Interrupted
    from hero.run.environment import key_lock

    stop = threading.Event()
    with key_lock(tmp_path, "k", None):
        stop.set()
        with pytest.raises(Interrupted), key_lock(tmp_path, "k", stop):
            pass


# --------------------------------------------------------------------------- the home's


def fake_environment(home: Path, key: str, *, age_s: float = 3600.0) -> Path:
    """An environment folder as a setup leaves it, last used ``age_s`` ago."""
    path = envs_dir(home) / key
    (path / "tree" / ".venv").mkdir(parents=True)
    (path / "tree" / ".venv" / "big").write_bytes(b"x" * 200_000)
    record = {"layout": 1, "key": key, "dirs": [".venv"], "home_entries": [], "bins": []}
    (path / "env.json").write_text(json.dumps(record))
    then = time.time() - age_s
    os.utime(path / "env.json", (then, then))
    return path


def test_hero_clean_removes_the_environments_no_story_uses(
    make_home, scripted: Callable[..., ScriptedModel], capsys
) -> None:
    from hero.state import RunState, Status, save_state

    home = make_home(scripted([]))
    unused = fake_environment(home, "a" * 24)
    paused = fake_environment(home, "b" * 24)
    fresh = fake_environment(home, "c" * 24, age_s=5)  # taken a moment ago: its record may lag
    left = envs_dir(home) / f".make-{'d' * 24}-999999999-00000000"  # a killed setup's
    left.mkdir()
    state = RunState(id="p1", status=Status.INTERRUPTED, setup={"key": paused.name})
    save_state(home, state)
    # a read-only tree, as Go's module cache is: removed all the same
    (unused / "tree" / ".venv").chmod(0o500)

    assert main(["clean", "--home", str(home)]) == 0
    out = capsys.readouterr().out
    assert not unused.exists() and not left.exists()
    assert paused.exists() and fresh.exists()
    assert f"envs/{unused.name}: removed environment" in out and "no story uses it" in out
    assert "project environment" in out


def test_the_size_cap_counts_the_environments(
    make_home, scripted: Callable[..., ScriptedModel]
) -> None:
    from hero.config.loader import load_config
    from hero.git.ops import TargetRepo
    from hero.run.housekeeping import Housekeeper, Rules

    home = make_home(scripted([]), housekeeping_max_worktrees_mb=0.1)
    old = fake_environment(home, "a" * 24)
    config = load_config(home, roles=())
    keeper = Housekeeper(config, TargetRepo(config.target_repo))
    outcome = keeper.run(Rules.automatic(config.housekeeping))
    assert not old.exists()
    (removed,) = outcome.removed
    assert removed.what == "environment" and "over housekeeping_max_worktrees_mb" in removed.why


def test_doctor_makes_the_environment_and_runs_the_default_checks_on_the_base(
    project: Path, make_home, scripted: Callable[..., ScriptedModel], capsys
) -> None:
    home = make_home(scripted([]), setup=SETUP, sandbox="bwrap", default_verify=[CHECK])
    main(["doctor", "--quick", "--home", str(home)])
    quick = capsys.readouterr().out
    assert "project environment" in quick and "not made yet" in quick
    from hero.doctor import run_all

    found = {f.what: f for f in run_all(home, quick=True)}
    assert found["project environment"].status == "warn"
    found = {f.what: f for f in _doctor_local(home)}
    assert found["project environment"].status == "ok"
    checks = found["checks on the base commit"]
    assert (
        checks.status == "FAIL" and "1 of 1 default checks fail before any change" in checks.detail
    )
    assert f"`{CHECK}` exited 1" in checks.detail and "sub" in checks.detail
    found = {f.what: f for f in run_all(home, quick=True)}
    assert found["project environment"].status == "ok"  # made by the doctor: stories reuse it
    assert [p.name for p in envs_dir(home).iterdir() if p.name.startswith(".doctor")] == []


def _doctor_local(home: Path):
    """The full doctor's project findings, without its model requests."""
    from hero.config.loader import load_config
    from hero.doctor.project import project as project_findings

    return list(project_findings(load_config(home, roles=()), quick=False))


def test_status_and_the_dry_run_show_setup_and_baseline(
    project: Path, make_home, write_story, scripted: Callable[..., ScriptedModel], capsys
) -> None:
    model = scripted(policy(fix_work()))
    home = make_home(model, setup=SETUP, sandbox="bwrap")
    story = write_story(home, "s1", verify=[CHECK])
    assert main(["run", str(story), "--home", str(home), "--dry-run"]) == 0
    dry = capsys.readouterr().out
    assert "setup (the project's environment:" in dry and "not made yet" in dry
    assert "the baseline" in dry
    assert run_hero(home, story) == 0
    capsys.readouterr()
    assert main(["status", "--home", str(home)]) == 0
    out = capsys.readouterr().out
    assert f"baseline: 1 of 1 checks already failing before any change: `{CHECK}`" in out
    assert main(["status", "--home", str(home), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["stories"]
    assert row["setup"]["reused"] is False and row["baseline"]["checks"][0]["passed"] is False


def test_a_worker_cannot_change_the_shared_environment(
    project: Path, make_home, write_story, scripted: Callable[..., ScriptedModel]
) -> None:
    model = scripted(
        policy([call("bash", command="rm -rf .venv/bin; touch .venv/evil; ls .venv"), *fix_work()])
    )
    home = make_home(model, setup=SETUP, sandbox="bwrap")
    assert run_hero(home, write_story(home, "s1", verify=[CHECK])) == 0
    (env,) = made(home)
    assert (env / "tree" / ".venv" / "bin" / "python").exists()
    assert not (env / "tree" / ".venv" / "evil").exists()
    said = [m for r in worker_requests(model) for m in r["messages"] if m["role"] == "tool"]
    assert "Read-only file system" in said[0]["content"]


def test_what_the_checks_do_before_round_1_is_undone_and_the_worker_starts_clean(
    target_repo: Path, make_home, write_story, scripted: Callable[..., ScriptedModel]
) -> None:
    """The baseline's checks run under a round's checks' guard: a commit on the story branch
    and a moved ref are undone, a changed tracked file put back, before the worker starts."""
    sneaky = (
        "grep -q 'def sub' calc/__init__.py || { echo '# mine' >> calc/__init__.py; "
        "git commit -qam sneaky; git update-ref refs/heads/main HEAD; echo x >> tests/__init__.py; exit 1; }"
    )
    model = scripted(
        policy([call("bash", command="git log --oneline | wc -l; git status --short"), *fix_sub()])
    )
    home = make_home(model)
    assert run_hero(home, write_story(home, "s1", verify=[sneaky])) == 0
    state = state_of(home, "s1")
    assert [c["passed"] for c in state["baseline"]["checks"]] == [False]
    first_tool = [m for m in worker_requests(model)[1]["messages"] if m["role"] == "tool"][0]
    # the story starts on the base commit alone, its files as committed
    assert re.search(r"^\s*1\s*$", first_tool["content"], re.MULTILINE), first_tool["content"]
    assert "tests/__init__.py" not in first_tool["content"]
    log = subprocess.run(
        ["git", "log", "--format=%s", "hero/s1"], cwd=target_repo, capture_output=True, text=True
    ).stdout
    assert "sneaky" not in log
    main_sha = subprocess.run(
        ["git", "rev-parse", "main"], cwd=target_repo, capture_output=True, text=True
    ).stdout.strip()
    assert main_sha == state["base_sha"]


def test_a_red_tier_skips_the_later_ones_before_round_1_too(
    target_repo: Path, make_home, write_story, scripted: Callable[..., ScriptedModel]
) -> None:
    model = scripted(policy(fix_sub()))
    home = make_home(model)
    tiers = {"unit": ["grep -q 'def sub' calc/__init__.py"], "slow": ["touch slow-ran"]}
    assert run_hero(home, write_story(home, "s1", verify=tiers)) == 0
    checks = state_of(home, "s1")["baseline"]["checks"]
    assert [(c["tier"], c["passed"]) for c in checks] == [("unit", False), ("slow", None)]


def test_baseline_false_runs_no_check_before_round_1(
    target_repo: Path, make_home, write_story, scripted: Callable[..., ScriptedModel]
) -> None:
    model = scripted(policy(fix_sub()))
    home = make_home(model, baseline=False)
    assert (
        run_hero(home, write_story(home, "s1", verify=["grep -q 'def sub' calc/__init__.py"])) == 0
    )
    assert "baseline" not in state_of(home, "s1")
    assert "already fail" not in task_text(worker_requests(model)[0])
