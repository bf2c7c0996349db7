"""`hero doctor` in a `hero worker`'s home: made as docs/celery.md says (`hero init` without
--target-repo, the engine block appended to config/roles.yaml, the key in config.local.yaml),
it checks what a worker needs and nothing else. Real `hero` processes, a real redis-server
(skipped without one), a real bare remote, the scripted model over HTTP."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import git

from hero.doctor import FAIL, OK, WARN, Finding, run_all
from hero.doctor.network import PROBE_TOOL
from hero.llm.scripted import Reply, call

ENGINE_KEY = "e" * 64
#: What a worker's doctor never checks: the coordinator's business, or made per story.
NOT_A_WORKERS = ("target repository", "memory", "GitHub", "push remote", "planner", "setup")


def probe_ok(body: dict[str, Any]) -> Reply:
    assert [t["function"]["name"] for t in body["tools"]] == [PROBE_TOOL]
    return call(PROBE_TOOL, ok=True)


def hero(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERO_")}
    return subprocess.run(
        [sys.executable, "-m", "hero", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=300,
        env={**env, "GIT_CONFIG_GLOBAL": "/dev/null"},
    )


def worker_home(tmp_path: Path, model_url: str, broker: str, remote: str) -> Path:
    """A worker's home as docs/celery.md makes one: plain `hero init`, its engine block
    appended to config/roles.yaml, engine_key in config.local.yaml; the local provider
    pointed at the model (the user's `$EDITOR config/roles.yaml` step)."""
    home = tmp_path / "worker home"
    made = hero(tmp_path, "init", "--home", str(home))
    assert made.returncode == 0, made.stdout + made.stderr
    provider = home / "config" / "providers" / "local.yaml"
    text = provider.read_text(encoding="utf-8")
    provider.write_text(re.sub(r"(?m)^base_url: .*$", f"base_url: {model_url}", text))
    with open(home / "config" / "roles.yaml", "a", encoding="utf-8") as fh:
        fh.write(
            f"engine: celery\nbroker_url: {broker}\ntarget_remote: {remote}\nmax_parallel: 4\n"
        )
    (home / "config.local.yaml").write_text(f"engine_key: {ENGINE_KEY}\n")
    return home


def lines_of(out: str) -> dict[str, str]:
    """Each finding line's check (``ok   redis redis://...: answers PING`` -> ``redis
    redis://...``) to its line: the check is what comes before the first ``: `` (a URL
    holds colons, never colon-space)."""
    found = {}
    for line in out.splitlines():
        match = re.match(r"^(?:ok|warn|FAIL) +(.+?): ", line)
        if match:
            found[match.group(1)] = line
    return found


@pytest.mark.slow
def test_doctor_in_a_worker_home_made_as_the_docs_say_checks_what_a_worker_needs(
    tmp_path: Path, redis_server: Any, remote: Path, scripted: Any
) -> None:
    model = scripted(probe_ok)
    home = worker_home(tmp_path, model.base_url, redis_server.url, str(remote))
    done = hero(home, "doctor")  # in the home, as the docs run `hero worker`
    out = done.stdout + done.stderr
    # before: "FAIL configuration: config/roles.yaml: target_repo: expected an existing git
    # repository; .../my-project does not exist", exit 2
    assert done.returncode == 0, out
    checks = lines_of(done.stdout)
    assert "loads as a `hero worker`'s home" in checks["configuration"]
    assert "roles worker, reviewer" in checks["configuration"]
    for needed in ("celery", "git", "ripgrep", "free disk", "budgets", "sandbox"):
        assert needed in checks, out
    assert checks["celery"].startswith("ok")
    assert any(
        k.startswith("model (worker, reviewer)") and v.startswith("ok") for k, v in checks.items()
    )
    assert checks[f"target_remote {remote}"].startswith("ok"), out
    assert checks[f"redis {redis_server.url}"].startswith("ok"), out
    assert not [k for k in checks if k.startswith(NOT_A_WORKERS)], out
    assert "FAIL" not in done.stdout


@pytest.mark.slow
def test_doctor_quick_in_a_worker_home_needs_no_redis_and_no_target_repo(tmp_path: Path) -> None:
    home = worker_home(tmp_path, "http://127.0.0.1:1/v1", "redis://127.0.0.1:1/0", "/nowhere.git")
    done = hero(home, "doctor", "--quick")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    checks = lines_of(done.stdout)
    assert checks["configuration"].startswith("ok") and "celery" in checks
    assert not [k for k in checks if k.startswith(("model", "redis", "target_remote"))], out
    assert not [k for k in checks if k.startswith(NOT_A_WORKERS)], out


def findings(home: Path, **kwargs: Any) -> list[Finding]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERO_")}
    return list(run_all(home, model_timeout_s=30, env=env, **kwargs))


def test_what_only_a_coordinator_needs_is_not_checked_on_a_worker(tmp_path: Path) -> None:
    """A github block, a planner whose provider is missing, default_verify that would fail,
    a USD-free home: none of it is a worker's, so none of it fails its doctor."""
    home = worker_home(tmp_path, "http://127.0.0.1:1/v1", "redis://127.0.0.1:1/0", "/nowhere.git")
    with open(home / "config" / "roles.yaml", "a", encoding="utf-8") as fh:
        fh.write("github: {repo: octo/app, label: hero}\n")
    roles = home / "config" / "roles.yaml"
    text = roles.read_text(encoding="utf-8")
    roles.write_text(text.replace("planner:\n  provider: local", "planner:\n  provider: gone", 1))
    found = findings(home, quick=True)
    assert not [f.line() for f in found if f.status == FAIL]
    assert not [f for f in found if f.what.startswith(NOT_A_WORKERS)]
    assert found[0].status == OK and "hero worker" in found[0].detail


def test_a_worker_home_that_does_not_load_is_a_configuration_failure(tmp_path: Path) -> None:
    home = worker_home(tmp_path, "http://127.0.0.1:1/v1", "redis://127.0.0.1:1/0", "/nowhere.git")
    (home / "config.local.yaml").write_text("")  # no engine_key: a worker cannot run
    done = hero(home, "doctor", "--quick")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "FAIL configuration: config.local.yaml: engine_key: required" in done.stdout


def test_worker_flag_on_a_local_engine_home_says_it_needs_celery(
    make_home: Any, scripted: Any
) -> None:
    home = make_home(scripted(probe_ok), sandbox="none")
    done = hero(home, "doctor", "--quick", "--worker")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "FAIL configuration: engine: local" in done.stdout
    assert "set `engine: celery`" in done.stdout


def test_a_coordinator_home_keeps_the_coordinators_checks(
    tmp_path: Path, make_home: Any, scripted: Any, remote: Path
) -> None:
    """engine: celery with a real target_repo: the coordinator's home, checked as before."""
    home = make_home(scripted(probe_ok), sandbox="none")
    with open(home / "config" / "roles.yaml", "a", encoding="utf-8") as fh:
        fh.write(f"engine: celery\nbroker_url: redis://127.0.0.1:1/0\ntarget_remote: {remote}\n")
    (home / "config.local.yaml").write_text(f"engine_key: {ENGINE_KEY}\n")
    found = findings(home, quick=True)
    assert [f for f in found if f.what == "target repository" and f.status == OK]
    assert not [f for f in found if f.what == "celery"]


def test_an_empty_target_remote_is_a_warning(tmp_path: Path, make_home: Any, scripted: Any) -> None:
    empty = tmp_path / "empty.git"
    git(tmp_path, "init", "-q", "--bare", str(empty))
    home = worker_home(tmp_path, scripted(probe_ok).base_url, "redis://127.0.0.1:1/0", str(empty))
    (found,) = [f for f in findings(home) if f.what.startswith("target_remote")]
    assert found.status == WARN and "no branch yet" in found.detail
    assert "push the base branch" in found.fix
