"""`hero doctor` and the pre-flight checks of `hero watch` and `hero worker`: each check
fails when it should and passes when it should, with real parts (real git, real HTTP to
the scripted model and the fake GitHub, a real redis-server when there is one)."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from conftest import git, working_bwrap
from fakegithub import FakeGitHub

from hero.config.loader import load_config
from hero.doctor import FAIL, OK, WARN, Finding, PreflightFailed, preflight, run_all
from hero.doctor.local import (
    free_disk,
    git_version,
    memory,
    rg_finding,
    sandbox,
    target_repository,
)
from hero.doctor.network import PROBE_TOOL
from hero.llm.scripted import HttpError, Reply, ScriptedModel, call, text
from hero.locks import daemon_lock_path, is_held

KEY = "sk-doctor-0123456789abcdefSECRET"
GH_TOKEN = "ghp_doctor0123456789abcdefTOKEN"
ENGINE_KEY = "k" * 40


def probe_ok(body: dict[str, Any]) -> Reply:
    """A model that calls the doctor's tool, as a tool-calling model does."""
    assert [t["function"]["name"] for t in body["tools"]] == [PROBE_TOOL]
    return call(PROBE_TOOL, ok=True)


def findings(
    home: Path, *, quick: bool = False, timeout: float = 60.0, **env: str
) -> list[Finding]:
    return list(run_all(home, quick=quick, model_timeout_s=timeout, env={**os.environ, **env}))


def one(found: Iterable[Finding], what: str) -> Finding:
    """The finding whose ``what`` starts with ``what`` (exactly one)."""
    matching = [f for f in found if f.what.startswith(what)]
    assert len(matching) == 1, [f.line() for f in found]
    return matching[0]


def doctor_cli(home: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-m", "hero", "doctor", "--home", str(home), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=300,
    )
    return done.returncode, done.stdout + done.stderr


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then let go)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fake_program(bin_dir: Path, name: str, script: str) -> Path:
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def keyed_provider(home: Path, base_url: str) -> None:
    """The roles' provider takes its key from $DOCTOR_KEY (as openai.yaml's from
    $OPENAI_API_KEY)."""
    (home / "config" / "providers" / "scripted.yaml").write_text(
        f"name: scripted\nbase_url: {base_url}\ndefault_model: scripted-test\n"
        "api_key_env: DOCTOR_KEY\n"
    )


def add_roles_lines(home: Path, text_: str) -> None:
    roles = home / "config" / "roles.yaml"
    roles.write_text(roles.read_text() + text_)


# ----------------------------------------------------------------------------- configuration


@pytest.mark.slow
def test_a_home_that_is_fine_passes_every_check(scripted: Any, make_home: Any) -> None:
    model = scripted(probe_ok)
    home = make_home(model, sandbox="none")
    rc, out = doctor_cli(home)
    assert rc == 0, out
    assert "FAIL" not in out
    for what in (
        "configuration",
        "git",
        "target repository",
        "sandbox",
        "free disk",
        "memory",
        "model",
    ):
        assert f"ok   {what}" in out, out
    assert out.rstrip().endswith("all checks passed")
    # worker and reviewer share the endpoint and the model: asked once, with one attempt
    assert len(model.requests) == 1


def test_a_configuration_that_does_not_load_is_a_failed_line_and_exit_2(
    scripted: Any, make_home: Any
) -> None:
    home = make_home(scripted(probe_ok))
    add_roles_lines(home, "max_retries: lots\n")
    rc, out = doctor_cli(home)
    assert rc == 2, out  # a configuration error, as for every command
    assert "FAIL configuration: config/roles.yaml: max_retries:" in out
    assert "ok   git" in out  # what needs no configuration is still checked
    assert "1 check(s) failed" in out


def test_a_planner_block_that_is_wrong_fails_and_none_at_all_is_fine(
    scripted: Any, make_home: Any
) -> None:
    home = make_home(scripted(probe_ok), sandbox="none")
    assert one(findings(home, quick=True), "configuration").status == OK
    add_roles_lines(home, "planner:\n  provider: nowhere\n")
    found = findings(home)
    failure = one([f for f in found if f.status == FAIL], "configuration")
    assert "planner.provider" in failure.detail
    assert one(found, "model (worker, reviewer)").status == OK  # the rest is still checked


def test_a_placeholder_key_is_a_warning_naming_the_file(scripted: Any, make_home: Any) -> None:
    model = scripted(probe_ok)
    home = make_home(model, sandbox="none")
    keyed_provider(home, model.base_url)
    (home / "config.local.yaml").write_text("keys:\n  scripted: sk-your-key-here\n")
    found = findings(home, DOCTOR_KEY=KEY)
    warning = one([f for f in found if f.status == WARN], "configuration")
    assert "keys.scripted: holds a placeholder" in warning.detail
    assert one(found, "model").status == OK
    assert {r.headers["authorization"] for r in model.requests} == {f"Bearer {KEY}"}


# ----------------------------------------------------------------------------- models


def test_model_unreachable(make_home: Any, scripted: Any) -> None:
    model = scripted(probe_ok)
    home = make_home(model, sandbox="none")
    keyed_provider(home, f"http://127.0.0.1:{closed_port()}/v1")
    found = one(findings(home, DOCTOR_KEY=KEY), "model")
    assert found.status == FAIL
    assert "endpoint unreachable" in found.detail
    assert "config/providers/scripted.yaml" in found.fix


@pytest.mark.slow
def test_model_key_refused_names_where_the_key_came_from_never_the_key(
    make_home: Any, scripted: Any
) -> None:
    model = scripted(lambda body: HttpError(401, "Incorrect API key provided"))
    home = make_home(model, sandbox="none")
    keyed_provider(home, model.base_url)
    rc, out = doctor_cli(home, env={"DOCTOR_KEY": KEY})
    assert rc == 1, out
    assert "key refused (HTTP 401) with the key from $DOCTOR_KEY" in out
    assert "put a valid key in the environment variable DOCTOR_KEY" in out
    assert KEY not in out
    assert len(model.requests) == 1  # one attempt, not the story's retry policy


def test_model_key_from_the_local_file_is_named_so(make_home: Any, scripted: Any) -> None:
    model = scripted(lambda body: HttpError(403, "forbidden"))
    home = make_home(model, sandbox="none")
    keyed_provider(home, model.base_url)
    (home / "config.local.yaml").write_text(f"keys:\n  scripted: {KEY}\n")
    found = one(findings(home), "model")
    assert found.status == FAIL
    assert "with the key from config.local.yaml: keys.scripted" in found.detail
    assert KEY not in found.line()


def test_model_unknown(make_home: Any, scripted: Any) -> None:
    model = scripted(lambda body: HttpError(404, f"The model '{body['model']}' does not exist"))
    home = make_home(model, sandbox="none")
    found = one(findings(home), "model")
    assert found.status == FAIL
    assert found.detail.startswith("model unknown (HTTP 404)")
    assert "scripted-test" in found.detail and "default_model" in found.fix


def test_a_hostile_error_message_is_one_short_printable_line_without_the_key(
    make_home: Any, scripted: Any
) -> None:
    """What the server says is quoted, but never a terminal escape, a line break, a flood,
    or the key it was sent."""
    hostile = f"\x1b[2J\x1b]0;owned\x07model gone\r\nFAKE ok line {KEY} " + "A" * 100_000
    model = scripted(lambda body: HttpError(400, hostile))
    home = make_home(model, sandbox="none")
    keyed_provider(home, model.base_url)
    found = one(findings(home, DOCTOR_KEY=KEY), "model")
    line = found.line()
    assert found.status == FAIL and "model gone" in line
    assert "\x1b" not in line and "\x07" not in line and "\n" not in line and "\r" not in line
    assert KEY not in line
    assert len(line) < 1000


def test_model_without_tool_calling(make_home: Any, scripted: Any) -> None:
    model = scripted(lambda body: text("pong"))
    home = make_home(model, sandbox="none")
    found = one(findings(home), "model")
    assert found.status == FAIL
    assert "no tool calling" in found.detail


def test_model_cut_short_is_a_warning_not_a_verdict(make_home: Any, scripted: Any) -> None:
    model = scripted(lambda body: Reply(content="Let me think", finish_reason="length"))
    found = one(findings(make_home(model, sandbox="none")), "model")
    assert found.status == WARN and "cut at the output cap" in found.detail


def test_model_server_error_is_tried_once(make_home: Any, scripted: Any) -> None:
    model = scripted(lambda body: HttpError(503, "overloaded"))
    home = make_home(model, sandbox="none", llm_max_attempts=6)
    found = one(findings(home), "model")
    assert found.status == FAIL and "HTTP 503" in found.detail
    assert len(model.requests) == 1


@pytest.mark.slow
def test_model_too_slow_is_a_timeout(make_home: Any, scripted: Any) -> None:
    model = scripted(probe_ok, latency_s=5.0)
    home = make_home(model, sandbox="none")
    found = one(findings(home, timeout=0.5), "model")
    assert found.status == FAIL and "no answer within 0.5 s" in found.detail


def test_each_distinct_role_model_is_probed(make_home: Any, scripted: Any) -> None:
    model = scripted(probe_ok)
    home = make_home(model, sandbox="none")
    add_roles_lines(home, "planner:\n  provider: scripted\n  model: planner-model\n")
    found = [f for f in findings(home) if f.what.startswith("model")]
    assert [f.what.split(":")[0] for f in found] == ["model (worker, reviewer)", "model (planner)"]
    assert all(f.status == OK for f in found)
    assert sorted(r.body["model"] for r in model.requests) == ["planner-model", "scripted-test"]


def test_quick_sends_no_model_request(make_home: Any, scripted: Any) -> None:
    model = scripted(probe_ok)
    home = make_home(model, sandbox="none")
    rc, out = doctor_cli(home, "--quick")
    assert rc == 0, out
    assert "model (" not in out
    assert model.requests == []


def test_a_bad_timeout_is_a_usage_error(make_home: Any, scripted: Any) -> None:
    rc, out = doctor_cli(make_home(scripted(probe_ok)), "--timeout", "0")
    assert rc == 2 and "--timeout" in out


# ----------------------------------------------------------------------------- git, repository


def test_git_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert git_version().status == OK
    fake_program(tmp_path / "old", "git", 'echo "git version 2.20.1"')
    monkeypatch.setenv("PATH", f"{tmp_path / 'old'}{os.pathsep}{os.environ['PATH']}")
    old = git_version()
    assert old.status == FAIL and "2.20.1 is older than 2.38" in old.detail


def test_git_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    found = git_version()
    assert found.status == FAIL and found.what == "git"


def test_target_repository_and_base_ref(make_home: Any, scripted: Any, target_repo: Path) -> None:
    home = make_home(scripted(probe_ok))
    found = target_repository(load_config(home))
    assert found.status == OK and "base HEAD" in found.detail
    add_roles_lines(home, "target_base_ref: no-such-branch\n")
    found = target_repository(load_config(home))
    assert found.status == FAIL
    assert "base ref 'no-such-branch' names no commit" in found.detail


def test_target_repository_without_a_commit(
    tmp_path: Path, make_home: Any, scripted: Any, target_repo: Path
) -> None:
    empty = tmp_path / "empty-repo"
    empty.mkdir()
    git(empty, "init", "-q")
    home = make_home(scripted(probe_ok), target_repo=str(empty))
    found = target_repository(load_config(home))
    assert found.status == FAIL and "has no commit yet" in found.detail


# ----------------------------------------------------------------------------- sandbox, rg, disk


def test_sandbox_that_works(make_home: Any, scripted: Any) -> None:
    working_bwrap()
    home = make_home(scripted(probe_ok), sandbox="bwrap")
    assert sandbox(load_config(home)).status == OK


@pytest.mark.parametrize(("mode", "status"), [("bwrap", FAIL), ("auto", WARN)])
def test_sandbox_that_does_not_work(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    make_home: Any,
    scripted: Any,
    mode: str,
    status: str,
) -> None:
    """A bwrap that cannot make a namespace (as in a container without user namespaces):
    the doctor runs it and says what it said."""
    bin_dir = tmp_path / f"bin-{mode}"
    fake_program(
        bin_dir, "bwrap", 'echo "bwrap: No permissions to create new namespace" >&2; exit 1'
    )
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    home = make_home(scripted(probe_ok), sandbox=mode)
    found = sandbox(load_config(home))
    assert found.status == status
    assert "No permissions to create new namespace" in found.detail
    assert "sandbox: none" in found.fix


def test_sandbox_off_is_fine(make_home: Any, scripted: Any) -> None:
    found = sandbox(load_config(make_home(scripted(probe_ok), sandbox="none")))
    assert found.status == OK and "off" in found.detail


def test_ripgrep() -> None:
    assert rg_finding("/usr/bin/rg") == Finding(OK, "ripgrep", "/usr/bin/rg")
    missing = rg_finding(None)
    assert missing.status == WARN
    assert "hero's own, slower search" in missing.detail and "ripgrep" in missing.fix


def test_memory(make_home: Any, scripted: Any) -> None:
    from hero.memory import store_for
    from hero.memory.facts import Role, Source, Trust, new_fact

    home = make_home(scripted(probe_ok), sandbox="none")
    config = load_config(home)
    found = memory(config)
    assert found.status == OK and found.detail.startswith("empty;")
    store = store_for(config)
    store.add(
        [
            new_fact("command", "Run make test", Source(), redactor=store.redactor),
            new_fact(
                "convention",
                "Snake case",
                Source("s", 1, Role.PERSON),  # always-on: a person's (promoted) convention
                redactor=store.redactor,
                always_on=True,
            ),
            new_fact("failure", "eval", Source(), redactor=store.redactor, trust=Trust.OUTSIDE),
        ]
    )
    found = memory(config)
    assert found.status == OK
    assert found.detail.startswith("3 facts (1 always-on, 1 from outside stories), 0 recent")
    # a file a person broke: a warning naming the line (stories still run), never a failure
    store.path.write_text(store.path.read_text().replace("[command]", "[rule]"))
    found = memory(config)
    assert found.status == WARN and f"{store.path}:" in found.detail
    assert "unknown kind 'rule'" in found.detail and "hero memory edit" in found.fix
    preflight(config, warn=lambda _msg: None, repository=True)  # does not stop a service
    # memory off: said so, the file is not read
    (home / "config" / "roles.yaml").write_text(
        (home / "config" / "roles.yaml").read_text() + "memory_enabled: false\n"
    )
    found = memory(load_config(home))
    assert found.status == OK and found.detail.startswith("off")


def test_free_disk(tmp_path: Path) -> None:
    assert free_disk(tmp_path, 1).status == OK
    assert free_disk(tmp_path, 0).status == OK  # 0: not checked
    low = free_disk(tmp_path, 1 << 40)  # a million TiB: more than any disk has
    assert low.status == FAIL and "below min_free_disk_mb" in low.detail


def test_budgets_a_usd_budget_without_prices_fails_first(make_home: Any, scripted: Any) -> None:
    """What refuses every story at its start (hero.run.start) is a failed line here, and
    stops `hero watch` before it takes a story."""
    model = scripted(probe_ok)
    home = make_home(model, sandbox="none")
    assert one(findings(home, quick=True), "budgets") == Finding(OK, "budgets", "no USD budget set")

    home = make_home(model, sandbox="none", max_story_cost_usd=0.004)
    found = one(findings(home, quick=True), "budgets")
    assert found.status == FAIL
    assert found.detail == (
        "max_story_cost_usd is set, but the worker's and the reviewer's model 'scripted-test' "
        "(provider 'scripted') has no input_usd_per_mtok or output_usd_per_mtok: hero cannot "
        "count the dollars it spends"
    )
    assert found.fix.startswith(
        "set input_usd_per_mtok and output_usd_per_mtok in config/providers/scripted.yaml"
    )
    with pytest.raises(PreflightFailed, match="FAIL budgets: max_story_cost_usd is set"):
        preflight(load_config(home), lambda _msg: None, repository=True)
    assert model.requests == []

    provider = home / "config" / "providers" / "scripted.yaml"
    provider.write_text(provider.read_text() + "input_usd_per_mtok: 0\noutput_usd_per_mtok: 0\n")
    found = one(findings(home, quick=True), "budgets")
    assert found.status == OK and found.detail.startswith("max_story_cost_usd: the models have")


# ----------------------------------------------------------------------------- remotes, GitHub


def github_home(make_home: Any, model: ScriptedModel, fake: FakeGitHub, remote: str) -> Path:
    home = make_home(model, sandbox="none")
    add_roles_lines(home, f"github:\n  repo: acme/app\n  label: hero\n  api_url: {fake.api_url}\n")
    git(Path(load_config(home).target_repo), "remote", "add", "origin", remote)
    return home


def test_push_remote_and_github_token(
    tmp_path: Path, make_home: Any, scripted: Any, target_repo: Path
) -> None:
    bare = tmp_path / "origin.git"
    git(tmp_path, "clone", "-q", "--bare", str(target_repo), str(bare))
    with FakeGitHub(token=GH_TOKEN) as fake:
        fake.add_repo("acme/app")
        fake.scopes = "repo, read:org"
        home = github_home(make_home, scripted(probe_ok), fake, str(bare))
        found = findings(home, GITHUB_TOKEN=GH_TOKEN)
        assert one(found, "push remote 'origin'").status == OK
        token = one(found, "GitHub token")
        assert token.status == OK and "read:org, repo" in token.detail
        assert fake.requests[-1].headers["authorization"] == f"Bearer {GH_TOKEN}"
        assert not any(f.status == FAIL for f in found), [f.line() for f in found]


def test_push_remote_unreachable(tmp_path: Path, make_home: Any, scripted: Any) -> None:
    with FakeGitHub(token=GH_TOKEN) as fake:
        fake.add_repo("acme/app")
        home = github_home(make_home, scripted(probe_ok), fake, str(tmp_path / "gone.git"))
        found = one(findings(home, GITHUB_TOKEN=GH_TOKEN), "push remote")
        assert found.status == FAIL and "ls-remote" in found.detail


@pytest.mark.parametrize(
    ("token", "scopes", "repo", "status", "said"),
    [
        (GH_TOKEN, "read:org", "acme/app", FAIL, "scopes read:org: hero needs repo"),
        (GH_TOKEN, "", "acme/app", FAIL, "scopes none"),
        (GH_TOKEN, None, "acme/app", WARN, "permissions are not reported"),
        (GH_TOKEN, "public_repo", "acme/app", OK, "scopes public_repo"),
        (
            "ghp_wrong0123456789abcdef",
            "repo",
            "acme/app",
            FAIL,
            "refused (HTTP 401), the token from $GITHUB_TOKEN",
        ),
        (GH_TOKEN, "repo", "acme/other", FAIL, "HTTP 404: the repository does not exist"),
    ],
)
def test_github_token_scopes(
    tmp_path: Path,
    make_home: Any,
    scripted: Any,
    token: str,
    scopes: str | None,
    repo: str,
    status: str,
    said: str,
) -> None:
    with FakeGitHub(token=GH_TOKEN) as fake:
        fake.add_repo(repo)
        fake.scopes = scopes
        home = github_home(make_home, scripted(probe_ok), fake, str(tmp_path / "x.git"))
        found = one(findings(home, GITHUB_TOKEN=token), "GitHub token")
    assert found.status == status, found.line()
    assert said in found.detail
    assert token not in found.line()


def test_github_token_unreachable_api(make_home: Any, scripted: Any, tmp_path: Path) -> None:
    home = make_home(scripted(probe_ok), sandbox="none")
    add_roles_lines(
        home,
        f"github:\n  repo: acme/app\n  label: hero\n  api_url: http://127.0.0.1:{closed_port()}\n",
    )
    found = one(findings(home, GITHUB_TOKEN=GH_TOKEN), "GitHub token")
    assert found.status == FAIL and "cannot reach" in found.detail


def test_quick_asks_github_nothing(tmp_path: Path, make_home: Any, scripted: Any) -> None:
    with FakeGitHub(token=GH_TOKEN) as fake:
        fake.add_repo("acme/app")
        home = github_home(make_home, scripted(probe_ok), fake, str(tmp_path / "gone.git"))
        found = findings(home, quick=True, GITHUB_TOKEN=GH_TOKEN)
        assert fake.requests == []
    assert not [f for f in found if f.what.startswith(("push remote", "GitHub"))]


# ----------------------------------------------------------------------------- Celery: Redis


def celery_home(make_home: Any, model: ScriptedModel, broker: str, remote: str) -> Path:
    home = make_home(model, sandbox="none")
    add_roles_lines(home, f"engine: celery\ntarget_remote: {remote!r}\n")
    (home / "config.local.yaml").write_text(f"broker_url: {broker}\nengine_key: {ENGINE_KEY}\n")
    return home


def test_redis_and_target_remote_reachable(
    redis_server: Any, remote: Path, make_home: Any, scripted: Any
) -> None:
    home = celery_home(make_home, scripted(probe_ok), redis_server.url, str(remote))
    found = findings(home)
    assert one(found, "redis").status == OK
    assert one(found, "target_remote").status == OK


def test_a_worker_home_has_no_target_repository_yet(
    tmp_path: Path, make_home: Any, scripted: Any, remote: Path
) -> None:
    home = celery_home(make_home, scripted(probe_ok), "redis://127.0.0.1:1/0", str(remote))
    roles = home / "config" / "roles.yaml"
    roles.write_text(
        "\n".join(x for x in roles.read_text().splitlines() if not x.startswith("target_repo"))
    )
    found = target_repository(load_config(home))
    assert found.status == OK and "hero worker` clones target_remote" in found.detail


def test_redis_unreachable(tmp_path: Path, make_home: Any, scripted: Any, remote: Path) -> None:
    broker = f"redis://:pw-doctor-secret-123@127.0.0.1:{closed_port()}/0"
    home = celery_home(make_home, scripted(probe_ok), broker, str(remote))
    found = one(findings(home), "redis")
    assert found.status == FAIL and "unreachable" in found.detail
    assert "pw-doctor-secret-123" not in found.line()
    assert "redis://:***@127.0.0.1" in found.what


def test_target_remote_unreachable(tmp_path: Path, make_home: Any, scripted: Any) -> None:
    broker = f"redis://127.0.0.1:{closed_port()}/0"
    home = celery_home(make_home, scripted(probe_ok), broker, str(tmp_path / "gone.git"))
    assert one(findings(home), "target_remote").status == FAIL


# ----------------------------------------------------------------------------- at start


def test_preflight_raises_on_a_failure_and_says_warnings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_home: Any, scripted: Any
) -> None:
    home = make_home(scripted(probe_ok), sandbox="none")
    said: list[str] = []
    preflight(load_config(home), said.append, repository=True)
    assert said == []
    fake_program(tmp_path / "bin", "bwrap", "exit 1")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    home = make_home(scripted(probe_ok), sandbox="auto")
    preflight(load_config(home), said.append, repository=True)
    assert len(said) == 1 and said[0].startswith("warn sandbox")
    home = make_home(scripted(probe_ok), sandbox="none", min_free_disk_mb=1 << 40)
    with pytest.raises(PreflightFailed, match="FAIL free disk"):
        preflight(load_config(home), said.append, repository=True)


@pytest.mark.slow
def test_watch_stops_before_taking_a_story_when_a_check_fails(
    make_home: Any, scripted: Any, write_story: Any
) -> None:
    model = scripted(probe_ok)
    home = make_home(model, sandbox="none", min_free_disk_mb=1 << 40)
    write_story(home, "s1", verify=["true"])
    done = subprocess.run(
        [sys.executable, "-m", "hero", "watch", "--home", str(home), "--exit-when-idle"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stderr
    assert "pre-flight check failed, no story taken: FAIL free disk" in done.stderr
    assert "min_free_disk_mb" in done.stderr
    assert (home / "inbox" / "s1.md").exists()
    assert not (home / "runs" / "state" / "s1.json").exists()
    assert model.requests == []


@pytest.mark.slow
def test_watch_says_a_warning_and_goes_on(
    tmp_path: Path, make_home: Any, scripted: Any, write_story: Any
) -> None:
    """sandbox: auto with a bwrap that does not work: a warning, then the story runs."""

    def handler(body: dict[str, Any]) -> Reply:
        if body.get("tools"):
            return text("Nothing to do.")
        return text('{"verdict": "APPROVED", "summary": "ok", "ac_check": [], "comments": []}')

    model = scripted(handler)
    home = make_home(model, sandbox="auto")
    write_story(home, "s1", verify=["true"])
    bin_dir = tmp_path / "bin"
    fake_program(bin_dir, "bwrap", 'echo "bwrap: no namespaces here" >&2; exit 1')
    done = subprocess.run(
        [sys.executable, "-m", "hero", "watch", "--home", str(home), "--exit-when-idle"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"},
    )
    assert done.returncode == 0, done.stderr
    assert "hero: warn sandbox: sandbox: auto, and bwrap does not work here" in done.stderr
    assert model.requests  # the story was taken


@pytest.mark.slow
def test_worker_stops_before_starting_when_a_check_fails(
    make_home: Any, scripted: Any, remote: Path
) -> None:
    pytest.importorskip("celery")
    broker = f"redis://127.0.0.1:{closed_port()}/0"
    home = celery_home(make_home, scripted(probe_ok), broker, str(remote))
    add_roles_lines(home, f"min_free_disk_mb: {1 << 40}\n")
    done = subprocess.run(
        [sys.executable, "-m", "hero", "worker", "--home", str(home)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "pre-flight check failed, no story taken: FAIL free disk" in done.stderr
    assert "hero worker ready" not in done.stdout


def test_a_remote_named_like_an_option_runs_nothing(
    tmp_path: Path, make_home: Any, scripted: Any
) -> None:
    """git ls-remote --upload-pack=CMD would run CMD: the remote is passed after `--`."""
    marker = tmp_path / "ran"
    with FakeGitHub(token=GH_TOKEN) as fake:
        fake.add_repo("acme/app")
        home = make_home(scripted(probe_ok), sandbox="none")
        add_roles_lines(
            home,
            f"github:\n  repo: acme/app\n  label: hero\n  api_url: {fake.api_url}\n"
            f"  remote: '--upload-pack=touch {marker}'\n",
        )
        # with an origin, `git ls-remote --heads --upload-pack=...` would run it there
        bare = tmp_path / "origin.git"
        git(tmp_path, "clone", "-q", "--bare", str(load_config(home).target_repo), str(bare))
        git(load_config(home).target_repo, "remote", "add", "origin", str(bare))
        found = one(findings(home, GITHUB_TOKEN=GH_TOKEN), "push remote")
    assert found.status == FAIL
    assert not marker.exists()


@pytest.mark.slow
def test_two_doctors_at_once_and_beside_a_running_watch(
    make_home: Any, scripted: Any, tmp_path: Path
) -> None:
    """The doctor writes nothing and takes no lock: two at once, with `hero watch` holding
    the home, all answer in full."""
    model = scripted(probe_ok)
    home = make_home(model, sandbox="none")
    watch = subprocess.Popen(
        [sys.executable, "-m", "hero", "watch", "--home", str(home)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        lock = daemon_lock_path(home)
        deadline = time.monotonic() + 120  # a "did not hang" bound, not a speed check
        while not (lock.exists() and is_held(lock)):
            assert watch.poll() is None, watch.stderr.read() if watch.stderr else ""
            assert time.monotonic() < deadline, "hero watch never took the home"
            time.sleep(0.05)
        argv = [sys.executable, "-m", "hero", "doctor", "--home", str(home)]
        doctors = [
            subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for _ in range(2)
        ]
        outs = [d.communicate(timeout=300)[0] for d in doctors]
    finally:
        watch.terminate()
        watch.wait(timeout=60)
    assert watch.returncode == 0
    for doctor, out in zip(doctors, outs, strict=True):
        assert doctor.returncode == 0, out
        assert out.rstrip().endswith("all checks passed")
    assert list((home / "inbox").iterdir()) == []


@pytest.mark.slow
@pytest.mark.parametrize("cgroups", ["auto", "off"])
def test_doctor_says_which_mechanism_holds_the_limits_and_which_tools_are_hidden(
    make_home: Any, scripted: Any, tmp_path: Path, cgroups: str
) -> None:
    from hero.sandbox.limits import holds

    working_bwrap()
    fake_home = tmp_path / "alice"
    (fake_home / "bin").mkdir(parents=True)
    (fake_home / "bin" / "deploy").write_text("#!/bin/sh\n")
    (fake_home / "bin" / "deploy").chmod(0o755)
    home = make_home(scripted(probe_ok), sandbox="bwrap", sandbox_cgroups=cgroups)
    env = {"HOME": str(fake_home), "PATH": f"{fake_home / 'bin'}:{os.environ['PATH']}"}

    _rc, out = doctor_cli(home, "--quick", env=env)

    expected = holds(cgroups=cgroups == "auto")
    line = next(x for x in out.splitlines() if x[5:].startswith("limits:"))
    assert expected in line, out
    if cgroups == "off":
        assert "sandbox_cgroups: off" in line
        if os.geteuid() == 0 and shutil.which("setpriv"):
            assert "unprivileged uid + rlimits" in line and line.startswith("ok"), line
    elif "cgroup" in expected:
        assert "pids" in line
    hidden = next(x for x in out.splitlines() if x[5:].startswith("tools under home:"))
    assert hidden.startswith("warn") and f"deploy ({fake_home / 'bin'})" in hidden, hidden
    assert "toolchain_dirs" in hidden
