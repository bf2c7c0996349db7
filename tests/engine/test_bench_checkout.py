"""A `hero bench` task-run on a worker (hero.engine.checkout): the ``bench`` part of a task
checked, and the configuration's overrides applied over the worker's own settings for that
story only, or refused naming the story and the setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from hero.config.loader import load_config
from hero.engine.checkout import BenchRun, bench_config, bench_of, sync_clone
from hero.engine.trust import Untrusted
from hero.errors import UsageError
from hero.git.ops import git


def worker_home(tmp_path: Path) -> Path:
    home = tmp_path / "worker home"
    (home / "config" / "providers").mkdir(parents=True)
    (home / "config" / "providers" / "scripted.yaml").write_text(
        "name: scripted\nbase_url: http://127.0.0.1:9/v1\ndefault_model: scripted-test\n"
    )
    (home / "config" / "roles.yaml").write_text(
        "max_retries: 3\nworker:\n  provider: scripted\n  model: m0\nreviewer:\n"
        "  provider: scripted\n"
    )
    return home


def test_a_story_of_hero_watch_has_no_bench_part() -> None:
    assert bench_of({"key": "s1"}) is None


@pytest.mark.parametrize(
    "bench",
    [
        "x",
        {"remote": ""},
        {"remote": 3},
        {"remote": "--upload-pack=touch /tmp/x"},
        {"remote": "/r.git\n"},
        {"remote": "/r.git", "overrides": ["max_retries", 1]},
    ],
)
def test_a_malformed_bench_part_is_refused(bench: object) -> None:
    with pytest.raises(Untrusted, match="bench"):
        bench_of({"bench": bench})


def test_overrides_apply_over_the_workers_own_settings_for_one_story(tmp_path: Path) -> None:
    home = worker_home(tmp_path)
    config = load_config(home, worker=True)
    run = BenchRun("/r.git", {"worker": {"model": "fixer"}, "max_retries": 1})
    applied = bench_config(config, run, tmp_path / "s1" / "settings", "s1")
    assert applied.roles["worker"].model == "fixer"
    assert applied.roles["worker"].provider.name == "scripted"  # merged, not replaced
    assert applied.max_retries == 1
    assert applied.home == config.home and applied.engine == config.engine
    # the worker's own home is left as it was
    assert load_config(home, worker=True).roles["worker"].model == "m0"


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"max_retriez": 1}, "max_retriez"),
        ({"max_retries": "many"}, "max_retries"),
        # what keeps the worker's machine safe is the worker's own choice, not the sender's
        ({"sandbox": "none"}, "sandbox: a worker keeps its own safety settings"),
        ({"verify_network": True}, "verify_network: a worker keeps"),
        ({"pass_env": ["HOME"]}, "pass_env: a worker keeps"),
        ({"mcp_servers": {"x": {"command": ["sh"]}}}, "mcp_servers: a worker keeps"),
    ],
)
def test_overrides_the_worker_cannot_apply_name_story_and_key(
    tmp_path: Path, overrides: dict[str, object], named: str
) -> None:
    config = load_config(worker_home(tmp_path), worker=True)
    with pytest.raises(UsageError) as caught:
        bench_config(config, BenchRun("/r.git", overrides), tmp_path / "d", "bench-a-s1")
    assert "bench story bench-a-s1" in str(caught.value) and named in str(caught.value)


def test_a_fresh_clone_borrows_and_links_nothing(tmp_path: Path) -> None:
    src = tmp_path / "src.git"
    git(tmp_path, "init", "-q", "--bare", str(src))
    work = tmp_path / "w"
    git(tmp_path, "init", "-q", "-b", "bench", str(work))
    (work / "f").write_text("x\n")
    git(work, "add", "f")
    git(work, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    git(src, "fetch", "-q", str(work), "bench:bench")
    clone = tmp_path / "clone"
    (clone / "stale").mkdir(parents=True)
    sync_clone(str(src), clone, fresh=True)
    assert not (clone / "stale").exists()
    assert not (clone / ".git" / "objects" / "info" / "alternates").exists()
    assert git(clone, "rev-parse", "refs/hero/origin/bench").strip()
    for path in (clone / ".git" / "objects").rglob("*"):
        if path.is_file():
            assert path.stat().st_nlink == 1, path
