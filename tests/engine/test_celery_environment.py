"""The project's environment on the Celery engine: each `hero worker` machine makes its own, by
the same key, as it warms up, and keeps it for its stories (real redis-server, real `hero
worker`s)."""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_support import Cluster, Policy
from env_support import CHECK, FIXED, SETUP, make_project
from helpers import backlog

from hero.llm.scripted import call, text
from hero.run.environment import load

pytestmark = pytest.mark.slow


@pytest.fixture
def target_repo(target_repo: Path) -> Path:
    """The project whose tests need its environment, before the remote is cloned from it."""
    make_project(target_repo)
    return target_repo


def test_each_worker_makes_the_environment_once_and_reuses_it(
    cluster: Cluster, scripted, write_story
) -> None:
    from conftest import working_bwrap

    working_bwrap()
    fix = [
        call("write_file", path="calc/__init__.py", content=FIXED),
        call("bash", command="git add calc && git commit -qm fix"),
        text("Fixed."),
    ]
    model = scripted(Policy(plans={sid: {1: fix} for sid in ("e1", "e2")}))
    home = cluster.home(model, setup=SETUP, sandbox="bwrap")
    for sid in ("e1", "e2"):
        backlog(write_story(home, sid, verify=[CHECK]))
    worker = cluster.start_worker()
    coordinator = cluster.start_coordinator("--exit-when-idle")
    assert coordinator.wait_exit() == 0, cluster.outputs()

    records = [worker.state(sid) for sid in ("e1", "e2")]
    assert all(r is not None and r["status"] == "passed" for r in records), cluster.outputs()
    setups = sorted((r["setup"]["reused"], r["setup"]["key"]) for r in records if r)
    # the worker made it as it warmed up, before its first story: both stories reuse it
    assert [reused for reused, _key in setups] == [True, True]
    key = setups[0][1]
    assert f"hero worker warm-up: environment: {key} made" in worker.output()
    assert setups[1][1] == key
    assert (
        load(worker.run_home / "envs" / key) is not None
    )  # in the worker's home, not the coordinator's
    assert not (home / "envs" / key).exists()
    for sid in ("e1", "e2"):
        state = coordinator.state(sid)
        assert state is not None and state["setup"]["key"] == key
