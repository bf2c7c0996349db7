"""What bench/run.py and bench/daemon.py share: the report table, the environment line,
running the sections, and the throw-away target repo, hero home and story they set up.

The scripts import it as `report` (bench/ is on sys.path as the script's folder). The
scripted server process imports daemon.py, and with it this module, so its top level
imports only the standard library; hero is imported where it is used.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import statistics
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

#: Keeps the user's and the system's git config out of the bench's repos and hero runs.
GIT_ISOLATION = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}


# --------------------------------------------------------------------------- the table


@dataclass
class Row:
    metric: str
    value: str
    target: str = "-"
    ok: str = "info"


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, metric: str, value: str, target: str = "-", ok: bool | None = None) -> None:
        self.rows.append(
            Row(metric, value, target, "info" if ok is None else ("yes" if ok else "NO"))
        )

    def section(self, title: str) -> None:
        self.rows.append(Row(f"[{title}]", "", "", ""))

    def render(self) -> str:
        head = Row("metric", "value", "target", "ok?")
        cols = [head, *self.rows]
        body = [r for r in cols if not (r.metric.startswith("[") and not r.value)]
        w = [max(len(getattr(r, a)) for r in body) for a in ("metric", "value", "target", "ok")]
        lines = []
        for i, r in enumerate(cols):
            if r.metric.startswith("[") and not r.value:
                lines.append(r.metric)
                continue
            lines.append(
                f"{r.metric:<{w[0]}} | {r.value:>{w[1]}} | {r.target:>{w[2]}} | {r.ok}".rstrip()
            )
            if i == 0:
                lines.append(f"{'-' * w[0]}-+-{'-' * w[1]}-+-{'-' * w[2]}-+-{'-' * w[3]}")
        return "\n".join(lines)


def run_sections(
    report: Report,
    sections: Sequence[tuple[str, Callable[[], object]]],
    after_each: Callable[[], object] | None = None,
) -> None:
    """Run each section; one that raises gets a FAILED row and its traceback as a note,
    and the next one still runs (a report, not a test)."""
    for name, fn in sections:
        print(f"... {name}", flush=True)
        try:
            fn()
        except Exception:  # noqa: BLE001 - a report: show what failed, go on
            report.add(f"{name}: could not measure", "FAILED", "", False)
            report.notes.append(f"{name} failed:\n{traceback.format_exc()}")
        finally:
            if after_each is not None:
                after_each()


def print_report(report: Report, started: float) -> None:
    """The table, the notes, and the load average at the end."""
    print()
    print(report.render())
    print()
    for note in report.notes:
        print(note)
    print(
        f"load average at the end {load_average()}; "
        f"benchmark took {time.monotonic() - started:.1f} s"
    )


def median(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def env_line(*packages: str) -> str:
    """Python, CPU count, the given packages' versions, the system, the load average."""
    versions = ", ".join(f"{p} {version(p)}" for p in packages)
    return (
        f"environment: python {platform.python_version()} ({platform.python_implementation()}), "
        f"{os.cpu_count()} cpus, {versions}, {platform.system()} {platform.machine()}, "
        f"load average {load_average()}"
    )


# --------------------------------------------------------------------------- repo, home, story


def hero_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a hero subprocess runs in: no HERO_HOME (the bench passes --home),
    no user or system git config."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if k != "HERO_HOME"}
    env.update(GIT_ISOLATION)
    return env


def make_repo(path: Path) -> Path:
    """A tiny committed git repo on `main` (like tests/conftest.py's target_repo)."""
    from hero.git.ops import DEFAULT_IDENTITY, git

    (path / "calc").mkdir(parents=True)
    (path / "calc" / "__init__.py").write_text("def add(a, b):\n    return a + b\n")
    (path / ".gitignore").write_text("__pycache__/\n")
    env = {**GIT_ISOLATION, **DEFAULT_IDENTITY}
    git(path, "init", "-q", "-b", "main", env=env)
    git(path, "add", "-A", env=env)
    git(path, "commit", "-q", "-m", "initial", env=env)
    return path


def make_home(
    base: Path, base_url: str, roles: str = "", repo_maker: Callable[[Path], Path] | None = None
) -> Path:
    """`base/repo` (``repo_maker``, default make_repo) and a hero home `base/home` whose
    worker and reviewer use the scripted model at ``base_url`` with one attempt per LLM
    call; ``roles`` is more roles.yaml. Returns the home (its inbox/ exists)."""
    repo = (repo_maker or make_repo)(base / "repo")
    home = base / "home"
    (home / "config" / "providers").mkdir(parents=True)
    (home / "inbox").mkdir()
    (home / "config" / "providers" / "scripted.yaml").write_text(
        f"name: scripted\nbase_url: {base_url}\ndefault_model: scripted-bench\n"
    )
    (home / "config" / "roles.yaml").write_text(
        f"target_repo: {json.dumps(str(repo))}\nllm_max_attempts: 1\n{roles}"
        "worker:\n  provider: scripted\nreviewer:\n  provider: scripted\n"
    )
    return home


def story_text(story_id: str, title: str, goal: str) -> str:
    """A story that verifies with `true` and may pass without a commit (the benchmarks measure
    the harness, not the change)."""
    return (
        f"---\nid: {story_id}\ntitle: {title}\nallow_empty: true\nverify:\n  - 'true'\n---\n\n"
        f"## Goal\n{goal}\n\n## Acceptance Criteria\n- [ ] it runs\n"
    )
