#!/usr/bin/env python
"""hero benchmark: what the settings' declaration costs at start-up.

    python bench/config_load.py                  # this checkout, about 5 s on 2 cores
    python bench/config_load.py --against HEAD~1 # and another commit's src/, taking turns

Every setting is declared once (``hero.config.settings``: a record on each dataclass field) and the
loader, the ``hero init`` template and docs/settings.md derive from it. What that costs is
paid where configuration is read: ``import hero.config.loader`` and the first ``load_config`` of a
process (``hero run``, ``hero status``, ``hero watch``). ``hero --help`` imports neither (a row
says so). Each launch is a fresh interpreter on a ``hero init`` home with hero's bytecode
compiled first (``compileall``), as a user's second run has it.

Rows: ``import hero.config.loader`` and ``import hero.story.format`` (the story fields' declaration); the
first ``load_config`` (the declaration's derived tables are built on first use) and a warm
one (median of 200 in the same process). With ``--against REF``, the same rows for
``git archive REF src`` (extracted to a temporary directory), launches of the two trees
taking turns so that a noisy neighbour slows both alike.

A report, not a test: it prints a table and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from report import GIT_ISOLATION, Report, env_line, median, print_report, run_sections

SRC = Path(__file__).resolve().parents[1] / "src"
#: Runs in a fresh interpreter with the tree under test first on sys.path; argv[1]: a
#: scratch directory. Prints the times as JSON.
_PROBE = r"""
import json, subprocess, sys, time
from pathlib import Path
t0 = time.perf_counter()
import hero.story.format
t1 = time.perf_counter()
import hero.config.loader
t2 = time.perf_counter()
from hero.config.scaffold import init_home
base = Path(sys.argv[1])
subprocess.run(["git", "init", "-q", str(base / "repo")], check=True)
init_home(base / "home", target_repo=str(base / "repo"))
t3 = time.perf_counter()
hero.config.loader.load_config(base / "home", env={})
t4 = time.perf_counter()
warm = []
for _ in range(200):
    a = time.perf_counter()
    hero.config.loader.load_config(base / "home", env={})
    warm.append(time.perf_counter() - a)
warm.sort()
print(json.dumps({"story": t1 - t0, "config": t2 - t1, "first": t4 - t3,
                  "warm": warm[len(warm) // 2], "pydantic": "pydantic" in sys.modules}))
"""
ROWS = (
    ("story", "import hero.story.format (story fields)"),
    ("config", "import hero.config.loader (settings declared)"),
    ("first", "first load_config of a process"),
    ("warm", "load_config again (median of 200)"),
)


def probe(src: Path, runs: int) -> list[dict[str, float]]:
    """``runs`` fresh interpreters importing hero from ``src``."""
    env = {**os.environ, **GIT_ISOLATION, "PYTHONPATH": str(src)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    out = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="hero-bench-config-") as tmp:
            proc = subprocess.run(
                [sys.executable, "-c", _PROBE, tmp],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
        out.append(json.loads(proc.stdout))
    return out


def help_imports(src: Path) -> list[str]:
    """The configuration modules `hero --help` imports (none, as it should be)."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    code = (
        "import sys, runpy; sys.argv = ['hero', '--help']\n"
        "try:\n    runpy.run_module('hero', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "names = ('hero.config.loader', 'hero.config.settings', 'hero.story.format', 'pydantic')\n"
        "print(' '.join(n for n in names if n in sys.modules), file=sys.stderr)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    return proc.stderr.split()


def extract(ref: str, into: Path) -> Path:
    """``src/`` of commit ``ref``, extracted under ``into``."""
    archive = subprocess.run(
        ["git", "-C", str(SRC.parent), "archive", ref, "src"], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "src"


def bench(report: Report, runs: int, against: str | None) -> None:
    trees = {"this checkout": SRC}
    with tempfile.TemporaryDirectory(prefix="hero-bench-ref-") as tmp:
        if against:
            trees[against] = extract(against, Path(tmp))
        for src in trees.values():
            subprocess.run(
                [sys.executable, "-m", "compileall", "-q", str(src / "hero")], check=True
            )
        samples: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
        for _ in range(runs):  # the trees take turns
            for name, src in trees.items():
                samples[name] += probe(src, 1)
        for name, src in trees.items():
            report.section(f"{name} ({src}); median of {runs} launches")
            for key, label in ROWS:
                report.add(f"  {label}", f"{median([s[key] for s in samples[name]]) * 1e3:.2f} ms")
            report.add("  pydantic imported", str(any(s["pydantic"] for s in samples[name])))
            report.add("  `hero --help` imports", " ".join(help_imports(src)) or "none of them")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15, help="launches per tree")
    parser.add_argument("--against", metavar="REF", help="also measure this commit's src/")
    args = parser.parse_args()
    started = time.monotonic()
    print(env_line("hero"), flush=True)
    report = Report()
    run_sections(report, [("config load", lambda: bench(report, max(1, args.runs), args.against))])
    print_report(report, started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
