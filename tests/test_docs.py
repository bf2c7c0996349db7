"""The documentation: the README is the way in, the reference is the MkDocs site in docs/.

The README opens with the two commands for a fresh machine and stays short; every page the
site's nav names exists and every page in docs/ is in the nav; the README's links land on
files; every command `hero --help` lists is documented; and `mkdocs build --strict` (no broken
link or anchor, no page left out) passes where mkdocs is installed (the dev extra has it).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from helpers import REPO_ROOT

ROOT = REPO_ROOT
README = ROOT / "README.md"
DOCS = ROOT / "docs"

#: The README's first lines, byte for byte: the two commands for a fresh machine.
README_OPENING = [
    "# hero",
    "",
    "```sh",
    "python3 -m venv .venv && . .venv/bin/activate && pip install -e . && hero demo",
    "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[dev]' && pytest",
    "```",
]


def nav_pages(nav: object) -> Iterator[str]:
    """Every page file named in mkdocs.yml's ``nav`` (entries, sections, bare names)."""
    if isinstance(nav, str):
        yield nav
    elif isinstance(nav, list):
        for item in nav:
            yield from nav_pages(item)
    elif isinstance(nav, dict):
        for value in nav.values():
            yield from nav_pages(value)


def mkdocs_config() -> dict[str, object]:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    assert isinstance(config, dict)
    return config


def test_readme_opens_with_the_two_commands_and_stays_short() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert lines[: len(README_OPENING)] == README_OPENING
    assert len(lines) < 250, f"README.md has {len(lines)} lines: the reference goes in docs/"


def test_ci_runs_the_readmes_test_command() -> None:
    """`.ci/run` makes the README's virtual environment, installs the dev extra in it and
    ends with pytest: the README's second command, with the checks between."""
    steps = [
        line.strip()
        for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    install, test = README_OPENING[4].rsplit(" && ", 1)
    assert install in steps and steps[-1] == test
    assert steps.index(install) < steps.index(test)
    build = next(step for step in steps if "mkdocs build" in step)
    assert "--strict" in build and "--site-dir" in build  # no site lands in the checkout
    assert steps.index("mypy") < steps.index(build) < steps.index(test)


@pytest.mark.slow
def test_the_readmes_environment_works_as_ci_runs_it(tmp_path: Path) -> None:
    """The part of the two commands before pip: a virtual environment with python3 (which a
    system Python, such as Debian's, needs before any `pip install`), made and activated
    under `set -euo pipefail` as `.ci/run` runs it, with Python 3.11 or newer in it; and
    git ignores it, so it never lands in a commit."""
    setup = README_OPENING[3].split(" && pip ")[0]
    assert setup == README_OPENING[4].split(" && pip ")[0]
    check = "python -c 'import sys; assert sys.version_info >= (3, 11); print(sys.prefix)'"
    done = subprocess.run(
        ["bash", "-c", f"set -euo pipefail; {setup} && {check}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()) == tmp_path / ".venv"
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", ".venv/bin/python"], cwd=ROOT, capture_output=True
    )
    assert ignored.returncode == 0, ".venv/ is not git-ignored"


def test_the_docs_show_the_readmes_two_commands() -> None:
    for page in (DOCS / "index.md", ROOT / "CONTRIBUTING.md"):
        text = page.read_text(encoding="utf-8")
        assert "\n".join(README_OPENING[2:6]) in text, page.name
        assert "Python 3.11 or newer" in text, page.name
    assert "Python 3.11 or newer" in README.read_text(encoding="utf-8")


def test_every_nav_page_exists_and_every_page_is_in_the_nav() -> None:
    config = mkdocs_config()
    assert config["site_name"] == "hero"
    theme = config["theme"]
    assert isinstance(theme, dict) and theme["name"] == "material"
    pages = list(nav_pages(config["nav"]))
    assert len(pages) == len(set(pages)), "a page is in the nav twice"
    missing = [page for page in pages if not (DOCS / page).is_file()]
    assert not missing, f"in mkdocs.yml's nav but not in docs/: {missing}"
    on_disk = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert sorted(pages) == on_disk
    for subject in ("settings.md", "story-fields.md", "safety.md", "celery.md", "benchmarks.md"):
        assert subject in pages


def test_the_readmes_links_land_on_files() -> None:
    text = README.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    local = [t.split("#")[0] for t in targets if not re.match(r"[a-z]+://", t)]
    assert any(t.startswith("docs/") for t in local), "the README points into docs/"
    broken = [t for t in local if not (ROOT / t).exists()]
    assert not broken, f"README.md links to files that do not exist: {broken}"


def test_every_command_is_documented() -> None:
    """Each command `hero --help` lists is written as `hero <command>` in the README or docs."""
    shown = subprocess.run(
        [sys.executable, "-m", "hero", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    helptext = shown.stdout
    commands = re.findall(r"^ {4}([a-z][a-z-]*) ", helptext, flags=re.MULTILINE)
    assert {"run", "watch", "plan", "worker"} <= set(commands)
    docs = README.read_text(encoding="utf-8") + "".join(
        p.read_text(encoding="utf-8") for p in DOCS.rglob("*.md")
    )
    undocumented = [c for c in commands if not re.search(rf"\bhero {c}\b(?!-)", docs)]
    assert not undocumented, f"commands no page documents: {undocumented}"


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None,
    reason="mkdocs and mkdocs-material are not installed (pip install -e '.[dev]' has them)",
)
def test_the_site_builds_strictly(tmp_path: Path) -> None:
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stderr
    assert (site / "index.html").is_file()
    # The included files arrive whole: bench/README.md's and CONTRIBUTING.md's headings.
    assert "hero benchmarks" in (site / "benchmarks" / "index.html").read_text(encoding="utf-8")
    assert "Contributing to hero" in (site / "contributing" / "index.html").read_text(
        encoding="utf-8"
    )


def test_the_celery_pages_acl_user_is_the_one_the_tests_run_as() -> None:
    """tests/engine/test_trust.py runs a story as the limited Redis user docs/celery.md tells you to make."""
    page = " ".join((DOCS / "celery.md").read_text(encoding="utf-8").split())
    documented = re.search(r"`ACL SETUSER hero (reset on >\S+ [^`]+)`", page)
    assert documented is not None
    tested = re.search(
        r'^ACL_RULES = "([^"]+)"$',
        (ROOT / "tests" / "engine" / "test_trust.py").read_text(encoding="utf-8"),
        flags=re.MULTILINE,
    )
    assert tested is not None

    def without_password(rules: str) -> str:
        return re.sub(r">\S+", ">PASSWORD", rules)

    assert without_password(documented.group(1)) == without_password(tested.group(1))
