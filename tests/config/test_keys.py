"""Where a model's key comes from: a placeholder never beats the environment, and a refused
key's error names where it came from, never its value. Real HTTP to the scripted model."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import REPO_ROOT, is_review, step_of, verdict

from hero.config.loader import load_config
from hero.config.sections import LlmSettings
from hero.llm.client import LlmClient, LlmError
from hero.llm.scripted import HttpError, Reply, ScriptedModel, call, text

REPO_ROOT = REPO_ROOT
ENV_KEY = "sk-env-0123456789abcdefENVKEY"
FILE_KEY = "sk-file-9876543210zyxwvuFILEKEY"


def openai_like_home(home: Path, target_repo: Path, model: ScriptedModel) -> Path:
    """A home whose roles use a provider that, like hero init's openai.yaml, takes its key
    from $OPENAI_API_KEY, served by ``model``."""
    (home / "config" / "providers").mkdir(parents=True)
    (home / "inbox").mkdir()
    (home / "config" / "providers" / "openai.yaml").write_text(
        f"name: openai\nbase_url: {model.base_url}\ndefault_model: gpt-test\n"
        "api_key_env: OPENAI_API_KEY\n",
        encoding="utf-8",
    )
    (home / "config" / "roles.yaml").write_text(
        f"target_repo: {str(target_repo)!r}\nllm_max_attempts: 1\n"
        "worker:\n  provider: openai\nreviewer:\n  provider: openai\n",
        encoding="utf-8",
    )
    return home


def copy_example(home: Path) -> None:
    """`cp config.local.yaml.example config.local.yaml`, as the README says."""
    shutil.copyfile(REPO_ROOT / "config.local.yaml.example", home / "config.local.yaml")


def refuse_all(body: dict[str, Any]) -> HttpError:
    return HttpError(401, "bad key")


@pytest.mark.parametrize(
    ("local", "env", "source"),
    [
        (None, {"OPENAI_API_KEY": ENV_KEY}, "$OPENAI_API_KEY"),
        (f"keys:\n  openai: {FILE_KEY}\n", {}, "config.local.yaml: keys.openai"),
        ("keys:\n  openai: sk-your-key-here\n", {"OPENAI_API_KEY": ENV_KEY}, "$OPENAI_API_KEY"),
    ],
)
def test_a_refused_key_is_named_by_where_it_came_from_never_by_value(
    tmp_path: Path,
    target_repo: Path,
    scripted: Any,
    local: str | None,
    env: dict[str, str],
    source: str,
) -> None:
    model = scripted(refuse_all)
    home = openai_like_home(tmp_path / "home", target_repo, model)
    if local is not None:
        (home / "config.local.yaml").write_text(local, encoding="utf-8")
    role = load_config(home, env=env).role("worker")
    client = LlmClient(role, LlmSettings(max_attempts=1, timeout_s=30))
    with pytest.raises(LlmError) as info:
        client.complete([{"role": "user", "content": "hi"}])
    message = str(info.value)
    assert f"HTTP 401 with the key from {source}: bad key" in message
    assert ENV_KEY not in message and FILE_KEY not in message
    sent = model.requests[-1].headers["authorization"]
    assert sent == f"Bearer {FILE_KEY if 'keys.openai' in source else ENV_KEY}"


def test_a_refused_request_without_a_key_says_none_was_sent(
    tmp_path: Path, target_repo: Path, scripted: Any
) -> None:
    model = scripted([HttpError(403, "forbidden")])
    home = openai_like_home(tmp_path / "home", target_repo, model)
    provider = home / "config" / "providers" / "openai.yaml"
    provider.write_text(provider.read_text().replace("api_key_env: OPENAI_API_KEY\n", ""))
    role = load_config(home, env={}).role("worker")
    with pytest.raises(LlmError, match="HTTP 403 with no key sent: forbidden"):
        LlmClient(role, LlmSettings(max_attempts=1, timeout_s=30)).complete([])


def test_other_errors_say_nothing_of_the_key(
    tmp_path: Path, target_repo: Path, scripted: Any
) -> None:
    model = scripted([HttpError(404, "no such model")])
    home = openai_like_home(tmp_path / "home", target_repo, model)
    role = load_config(home, env={"OPENAI_API_KEY": ENV_KEY}).role("worker")
    with pytest.raises(LlmError) as info:
        LlmClient(role, LlmSettings(max_attempts=1, timeout_s=30)).complete([])
    assert "key" not in str(info.value).replace("no such model", "")


@pytest.mark.slow
def test_hero_run_with_the_copied_example_sends_the_environment_key(
    tmp_path: Path, target_repo: Path, scripted: Any, write_story: Any
) -> None:
    """End to end: `cp config.local.yaml.example config.local.yaml` then `hero run` with
    OPENAI_API_KEY set; the server receives that key, and the story passes."""

    def handler(body: dict[str, Any]) -> Reply:
        if is_review(body):
            return verdict("APPROVED")
        if step_of(body) == 0:
            return call("bash", command="echo hi > hi.txt && git add -A && git commit -qm hi")
        return text("Committed hi.txt.")

    model = scripted(handler)
    home = openai_like_home(tmp_path / "home", target_repo, model)
    copy_example(home)
    story = write_story(home, "s1", verify=["test -f hi.txt"])
    env = {**os.environ, "OPENAI_API_KEY": ENV_KEY}
    done = subprocess.run(
        [sys.executable, "-m", "hero", "run", str(story), "--home", str(home)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    bearers = {r.headers.get("authorization") for r in model.requests}
    assert bearers == {f"Bearer {ENV_KEY}"}
    assert "placeholder" not in done.stderr  # the copied example holds none


@pytest.mark.slow
def test_hero_run_with_a_placeholder_left_in_says_so_once_and_uses_the_environment(
    tmp_path: Path, target_repo: Path, scripted: Any, write_story: Any
) -> None:
    """The example as it was before: `openai: sk-your-key-here`. The environment's key is
    sent, and hero says once that the placeholder was ignored."""

    def handler(body: dict[str, Any]) -> Reply:
        if is_review(body):
            return verdict("APPROVED")
        if step_of(body) == 0:
            return call("bash", command="echo hi > hi.txt && git add -A && git commit -qm hi")
        return text("Committed hi.txt.")

    model = scripted(handler)
    home = openai_like_home(tmp_path / "home", target_repo, model)
    (home / "config.local.yaml").write_text("keys:\n  openai: sk-your-key-here\n")
    story = write_story(home, "s1", verify=["test -f hi.txt"])
    done = subprocess.run(
        [sys.executable, "-m", "hero", "run", str(story), "--home", str(home)],
        env={**os.environ, "OPENAI_API_KEY": ENV_KEY},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert {r.headers.get("authorization") for r in model.requests} == {f"Bearer {ENV_KEY}"}
    assert done.stderr.count("keys.openai: holds a placeholder, not a key; ignored") == 1
    assert "sk-your-key-here" not in done.stderr


@pytest.mark.slow
def test_hero_run_refused_says_where_the_key_came_from(
    tmp_path: Path, target_repo: Path, scripted: Any, write_story: Any
) -> None:
    """What the user saw was only `HTTP 401: bad key`; now the error names the variable."""
    model = scripted(refuse_all)
    home = openai_like_home(tmp_path / "home", target_repo, model)
    copy_example(home)
    story = write_story(home, "s1", verify=["true"])
    done = subprocess.run(
        [sys.executable, "-m", "hero", "run", str(story), "--home", str(home)],
        env={**os.environ, "OPENAI_API_KEY": ENV_KEY},
        capture_output=True,
        text=True,
        timeout=300,
    )
    # a refused key pauses the story (exit 2), it does not fail it (see hero.llm.breaker)
    assert done.returncode == 2, done.stdout + done.stderr
    said = done.stdout + done.stderr
    assert "HTTP 401 with the key from $OPENAI_API_KEY: bad key" in said
    assert ENV_KEY not in said
