"""The README's Celery steps, taken literally: its blocks appended to homes ``hero init``
made, its commands started as written (in the home, the current directory), on a real
redis-server and a real bare remote. If the README and the code drift apart, this fails.
"""

from __future__ import annotations

import re
import secrets
import shlex
import signal
import sys
from pathlib import Path

import pytest
from engine_support import (
    CLUSTER_MARK,
    Policy,
    Proc,
    RedisServer,
    kill_marked,
    wait_for,
    wait_status,
)
from helpers import REPO_ROOT, backlog

README = REPO_ROOT / "README.md"
#: What the README's blocks name that a test machine has elsewhere.
EXAMPLE_BROKER = "redis://10.0.0.1:6379/0"
EXAMPLE_REMOTE = "ssh://hero@10.0.0.1/srv/git/app.git"
KEY_PLACEHOLDER = "THE-KEY"


def celery_section() -> str:
    text = README.read_text(encoding="utf-8")
    found = re.search(r"^## [^\n]*Celery[^\n]*\n(.*?)(?=^## )", text, re.M | re.S)
    assert found, "README.md has no section about the Celery engine"
    return found.group(1)


def blocks(section: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", section, re.M | re.S)


def commands(block: str) -> dict[str, list[str]]:
    """The README's commands by their program's subcommand (``worker``, ``watch``), each
    with its arguments, comments left out."""
    found = {}
    for line in block.splitlines():
        words = shlex.split(line, comments=True)
        if words and words[0] == "hero":
            found[words[1]] = words[1:]
    return found


def init_home(path: Path, env: dict[str, str], *args: str) -> Path:
    import subprocess

    done = subprocess.run(
        [sys.executable, "-m", "hero", "init", "--home", str(path), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return path


def apply_steps(home: Path, roles_block: str, local_block: str, model_url: str) -> None:
    """The README's steps in a home: its blocks appended; the providers pointed at the
    scripted model (what the first run's `$EDITOR config/roles.yaml` step does)."""
    provider = home / "config" / "providers" / "local.yaml"
    text = provider.read_text(encoding="utf-8")
    provider.write_text(re.sub(r"(?m)^base_url: .*$", f"base_url: {model_url}", text))
    with open(home / "config" / "roles.yaml", "a", encoding="utf-8") as fh:
        fh.write(roles_block)
    with open(home / "config.local.yaml", "a", encoding="utf-8") as fh:
        fh.write(local_block)


@pytest.mark.slow
def test_the_readmes_celery_steps_run_a_story_from_hero_init_homes(
    tmp_path: Path,
    redis_server: RedisServer,
    remote: Path,
    target_repo: Path,
    scripted,
    write_story,
) -> None:
    section = celery_section()
    yaml_blocks = blocks(section, "yaml")
    assert len(yaml_blocks) == 2, "README's Celery section: roles.yaml's block, then the key's"
    roles_block, local_block = yaml_blocks
    assert EXAMPLE_BROKER in roles_block and EXAMPLE_REMOTE in roles_block
    assert KEY_PLACEHOLDER in local_block
    roles_block = roles_block.replace(EXAMPLE_BROKER, redis_server.url).replace(
        EXAMPLE_REMOTE, str(remote)
    )
    local_block = local_block.replace(KEY_PLACEHOLDER, secrets.token_hex(32))
    (sh_block,) = blocks(section, "sh")
    steps = commands(sh_block)
    assert set(steps) == {"worker", "watch"}, steps

    model = scripted(Policy())
    mark = f"readme-{secrets.token_hex(8)}"
    import os

    env = {**os.environ, CLUSTER_MARK: mark, "PYTHONUNBUFFERED": "1"}
    for name in ("HERO_BROKER_URL", "HERO_STATE_URL", "HERO_ENGINE_KEY", "HERO_HOME"):
        env.pop(name, None)
    # the README's words: `hero init --target-repo ...` for the coordinator, `hero init`
    coordinator_home = init_home(tmp_path / "coordinator", env, "--target-repo", str(target_repo))
    worker_home = init_home(tmp_path / "worker", env)
    for home in (coordinator_home, worker_home):
        apply_steps(home, roles_block, local_block, model.base_url)
    backlog(write_story(coordinator_home, "rd1", verify=["test -f rd1-r1.txt"]))

    procs: list[Proc] = []
    try:
        worker = Proc([sys.executable, "-m", "hero", *steps["worker"]], worker_home, "w", env)
        procs.append(worker)
        worker.wait_output(r"\S+@\S+ ready\.")
        watch = Proc([sys.executable, "-m", "hero", *steps["watch"]], coordinator_home, "c", env)
        procs.append(watch)
        state = wait_status(coordinator_home, "rd1", "passed", "error", procs=tuple(procs))
        outputs = "\n".join(f"--- {p.name}\n{p.output()[-6000:]}" for p in procs)
        assert state["status"] == "passed", outputs
        # the record says passed as the coordinator mirrors it; the file moves right after
        done = coordinator_home / "done" / "rd1.md"
        wait_for(done.is_file, "the story's file in done/", procs=tuple(procs))
        assert worker.running() and watch.running(), outputs
        watch.proc.send_signal(signal.SIGTERM)
        assert watch.proc.wait(timeout=60) in (0, 130), watch.output()
    finally:
        for proc in procs:
            proc.kill_group()
        kill_marked(mark)


def test_a_worker_home_hero_init_made_is_not_refused_for_its_placeholder(tmp_path: Path) -> None:
    """`hero init` without --target-repo writes a placeholder; `hero worker` does not read
    target_repo, so it is no error there (a coordinator's home still needs a real one)."""
    from hero.config.loader import load_config
    from hero.config.schema import ConfigError

    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("HERO_")}
    home = init_home(tmp_path / "w", env)
    block = "engine: celery\nbroker_url: redis://127.0.0.1:1/0\ntarget_remote: /nowhere.git\n"
    with open(home / "config" / "roles.yaml", "a", encoding="utf-8") as fh:
        fh.write(block)
    (home / "config.local.yaml").write_text(f"engine_key: {secrets.token_hex(32)}\n")
    config = load_config(home, worker=True)
    assert config.engine.remote
    with pytest.raises(ConfigError) as caught:
        load_config(home)
    assert "target_repo" in str(caught.value)
