"""A `hero worker` warms up before its first story: imports, its clone of the remote, the
project's environment (real redis-server, real `hero worker` and `hero watch` processes, a
real bare remote; skipped without redis-server)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import git
from engine_support import Cluster, Policy
from helpers import backlog

pytestmark = pytest.mark.slow

CLONED_BY_STORY = "cloned target_remote (the warm-up had not)"


def warm_lines(output: str) -> dict[str, str]:
    """The worker's warm-up lines: step -> what it said."""
    return dict(re.findall(r"^hero worker warm-up: (\w+): (.*)$", output, re.MULTILINE))


def test_a_worker_warms_up_before_its_first_story_which_then_does_not_clone(
    cluster: Cluster, scripted, write_story, remote: Path
) -> None:
    model = scripted(Policy())
    home = cluster.home(model)
    worker = cluster.start_worker()

    # before any story: the steps said, the clone made, with the remote's objects
    said = warm_lines(worker.output())
    assert said["imports"].endswith(" s") and "modules loaded" in said["imports"], said
    assert said["remote"].startswith("cloned target_remote"), said
    assert said["environment"].startswith("none declared"), said
    # made in the worker's home, not in its work folder: that holds only what a trusted
    # story made (a forged task leaves nothing there: test_trust)
    staged = re.search(r"target_remote into (\S+) \(the first story", said["remote"])
    assert staged is not None, said
    clone = Path(staged.group(1))
    assert worker.home in clone.parents and not (worker.workdir / "repo").exists()
    main = git(remote, "rev-parse", "main").strip()
    assert git(clone, "rev-parse", "refs/hero/origin/main").strip() == main
    assert git(clone, "cat-file", "-t", main).strip() == "commit"
    out = worker.output()
    assert out.index("hero worker warm-up: remote") < out.index("hero worker ready")

    backlog(write_story(home, "warm1", verify=["true"]))
    coordinator = cluster.start_coordinator("--exit-when-idle")
    assert coordinator.wait_exit() == 0, cluster.outputs()
    state = coordinator.state("warm1")
    assert state is not None and state["status"] == "passed", cluster.outputs()
    assert worker.received(), cluster.outputs()
    assert CLONED_BY_STORY not in worker.output()  # the story only fetched
    # the first story moved the warm-up's clone into the work folder, and pushed from it
    assert not clone.exists()
    assert git(worker.workdir / "repo", "rev-parse", "refs/hero/origin/main").strip() == main
    assert git(remote, "rev-parse", "hero/warm1").strip() == state["head_sha"]


def test_a_warm_up_that_fails_is_said_and_the_first_story_does_it(
    cluster: Cluster, scripted, write_story, tmp_path: Path, remote: Path
) -> None:
    """The remote cannot be reached as the worker starts: the warm-up says so, the worker
    starts all the same, and its first story clones the remote (there by then)."""
    model = scripted(Policy())
    home = cluster.home(model)
    later = tmp_path / "later.git"
    worker = cluster.start_worker(target_remote=str(later))

    said = warm_lines(worker.output())
    assert said["remote"].startswith("not warmed (") and str(later) in said["remote"], said
    assert "the first story does it" in said["remote"]
    assert "modules loaded" in said["imports"], said  # the other steps went on
    assert worker.running()

    git(tmp_path, "clone", "-q", "--bare", str(remote), str(later))
    (home / "config" / "roles.yaml").write_text(
        (home / "config" / "roles.yaml")
        .read_text()
        .replace(f"target_remote: {str(remote)!r}", f"target_remote: {str(later)!r}")
    )
    backlog(write_story(home, "warm2", verify=["true"]))
    coordinator = cluster.start_coordinator("--exit-when-idle")
    assert coordinator.wait_exit() == 0, cluster.outputs()
    state = coordinator.state("warm2")
    assert state is not None and state["status"] == "passed", cluster.outputs()
    assert CLONED_BY_STORY in worker.output()
    assert git(later, "rev-parse", "hero/warm2").strip() == state["head_sha"]
