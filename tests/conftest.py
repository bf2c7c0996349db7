"""Shared set-up: real git repos, real hero homes, hero's scripted model on loopback."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from hero.git.ops import DEFAULT_IDENTITY
from hero.llm.scripted import ScriptedModel

if TYPE_CHECKING:
    from watch_support import Procs
from hero.sandbox.bwrap import bwrap_problem

# Bytecode, where PYTHONDONTWRITEBYTECODE is set (as in some CI images): the suite starts
# hundreds of hero processes and imports every test module in each pytest worker. Without
# written bytecode each of those processes compiles hero's modules anew (+0.3 s of CPU each),
# and pytest rewrites every test module again in every worker and every run (+20 s each).
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

GIT_ENV = {**DEFAULT_IDENTITY, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}

#: The Celery engine's harness (redis_server, remote, cluster): see engine_support.
pytest_plugins = ["engine_support"]


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, **GIT_ENV},
    ).stdout


#: The signals a test sends to the hero processes it starts (Ctrl-C, a service's stop).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _ignored_or_blocked(signals: tuple[int, ...]) -> list[str]:
    """Which of ``signals`` this process (its main thread) ignores or blocks: what every
    process it starts would inherit, deaf to them."""
    status = Path("/proc/self/status").read_text(encoding="ascii")
    masks = {
        line.split(":")[0]: int(line.split(":")[1], 16)
        for line in status.splitlines()
        if line.startswith(("SigIgn:", "SigBlk:"))
    }
    return [
        f"{signal.Signals(sig).name} {'ignored' if name == 'SigIgn' else 'blocked'}"
        for sig in signals
        for name in ("SigIgn", "SigBlk")
        if masks.get(name, 0) & (1 << (sig - 1))
    ]


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C reaches the processes the tests start, as from a terminal, even when the suite
    itself was started with SIGINT ignored (a shell's background job, `nohup`): they would
    inherit it ignored, and the tests that interrupt hero could not."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """Workers for ``-n auto``: half again as many as cores. Many tests wait on hero's own
    processes (a daemon's settle delay, a lease, a stop's grace), and a third worker keeps
    the cores busy meanwhile."""
    cores = len(os.sched_getaffinity(0))
    return max(2, cores + cores // 2)


@pytest.fixture(autouse=True)
def _the_process_as_found() -> Iterator[None]:
    """A command run in this process (`hero run`, `hero watch`) installs SIGTERM and SIGINT
    handlers of its own and sets up structlog for the test's output: every test gives pytest
    its handlers back, and the next test structlog's defaults (this test's output is closed
    by then). A test that leaves the signals ignored or blocked fails here, since every
    process a later test starts would inherit that (a signal found so, as a shell's
    background job finds SIGINT, is left as found)."""
    saved = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    found = set(_ignored_or_blocked(STOP_SIGNALS))
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    yield
    if "structlog" in sys.modules:
        sys.modules["structlog"].reset_defaults()
    left = [what for what in _ignored_or_blocked(STOP_SIGNALS) if what not in found]
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    for sig, handler in saved.items():
        signal.signal(sig, handler)
    assert not left, f"the test left this process with {', '.join(left)}"


@pytest.fixture(autouse=True)
def _no_global_git_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests run as on a machine where git has no user configured."""
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", "/dev/null")
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.delenv("HERO_HOME", raising=False)


@pytest.fixture
def loopback_server() -> Iterator[int]:
    """A TCP port on 127.0.0.1 that accepts connections (the kernel completes them): what a
    command with the network reaches, and one without cannot."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    yield server.getsockname()[1]
    server.close()


@pytest.fixture
def target_repo(tmp_path: Path, target_repo_template: Path) -> Path:
    """A small Python project with a passing unittest suite, committed on `main`: the
    test's own copy of ``target_repo_template``."""
    repo = tmp_path / "repo"
    shutil.copytree(target_repo_template, repo, symlinks=True)
    return repo


@pytest.fixture(scope="session")
def target_repo_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``target_repo`` as it starts, built once per session; tests use copies, never this."""
    repo = tmp_path_factory.mktemp("template") / "repo"
    (repo / "calc").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "calc" / "__init__.py").write_text("def add(a, b):\n    return a + b\n")
    (repo / "tests" / "__init__.py").write_text("")
    (repo / "tests" / "test_calc.py").write_text(
        "import unittest\n\nfrom calc import add\n\n\n"
        "class AddTest(unittest.TestCase):\n"
        "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n"
    )
    (repo / ".gitignore").write_text("__pycache__/\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "initial")
    return repo


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Procs]:
    """The processes a test starts (``hero watch`` daemons, ``hero run`` children, pids of
    what they start), all ended after it, whatever it did."""
    from watch_support import Procs

    started = Procs(tmp_path)
    yield started
    started.end_all()


HomeFactory = Callable[..., Path]


@pytest.fixture
def make_home(tmp_path: Path, target_repo: Path) -> HomeFactory:
    """make_home(model, **knobs) -> a hero home whose worker and reviewer use ``model``.

    Knobs are written to config/roles.yaml as given (e.g. max_retries=2,
    llm_backoff_base_s=0.01). LLM retries default to fast backoff for tests.
    """

    def factory(model: ScriptedModel, **knobs: object) -> Path:
        home = tmp_path / "home"
        (home / "config" / "providers").mkdir(parents=True, exist_ok=True)
        (home / "inbox").mkdir(exist_ok=True)
        (home / "config" / "providers" / "scripted.yaml").write_text(
            f"name: scripted\nbase_url: {model.base_url}\ndefault_model: scripted-test\n"
        )
        settings: dict[str, object] = {
            "target_repo": str(target_repo),
            "llm_backoff_base_s": 0.01,
            "llm_backoff_max_s": 0.05,
            "llm_max_attempts": 3,
        }
        settings.update(knobs)
        lines = [f"{k}: {v!r}" if isinstance(v, str) else f"{k}: {v}" for k, v in settings.items()]
        lines += ["worker:", "  provider: scripted", "reviewer:", "  provider: scripted"]
        (home / "config" / "roles.yaml").write_text("\n".join(lines) + "\n")
        return home

    return factory


StoryWriter = Callable[..., Path]


@pytest.fixture
def write_story(tmp_path: Path) -> StoryWriter:
    """write_story(home, id, verify=[...], **frontmatter) -> path of inbox/<id>.md."""

    def writer(
        home: Path, story_id: str = "s1", *, verify: object = None, body: str = "", **fm: object
    ) -> Path:
        import yaml

        front: dict[str, object] = {"id": story_id, "title": f"Story {story_id}"}
        if verify is not None:
            front["verify"] = verify
        front.update(fm)
        text = (
            "---\n"
            + yaml.safe_dump(front, sort_keys=False)
            + "---\n\n"
            + textwrap.dedent(
                body
                or """\
            ## Goal
            Add a `sub(a, b)` function to calc.

            ## Acceptance Criteria
            - [ ] `calc.sub(5, 3) == 2`
            """
            )
        )
        path = home / "inbox" / f"{story_id}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    return writer


@pytest.fixture
def scripted() -> Iterator[Callable[..., ScriptedModel]]:
    """scripted(script_or_handler, latency_s=0) -> a started ScriptedModel, stopped after the test."""
    started: list[ScriptedModel] = []

    def start(script: object, **kwargs: object) -> ScriptedModel:
        model = ScriptedModel(script, **kwargs).start()  # type: ignore[arg-type]
        started.append(model)
        return model

    yield start
    for model in started:
        model.stop()


def working_bwrap() -> str:
    """The path of a working bwrap, or the calling test is skipped with the reason (.ci/run
    installs bubblewrap; where it cannot work, the sandbox's tests say why they did not run)."""
    path = shutil.which("bwrap")
    if path is None:
        pytest.skip("bubblewrap is not installed (.ci/run installs it)")
    problem = bwrap_problem(path)
    if problem:
        pytest.skip(f"bubblewrap does not work on this machine: {problem}")
    return path


@pytest.fixture(scope="session")
def bwrap() -> str:
    """The path of a working bwrap, or the test is skipped with the reason."""
    return working_bwrap()
