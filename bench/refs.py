"""The ref guard in bulk: how long hero takes to clean up the refs a worker made, and what
that costs another story on the same repository. A report, not a test: it prints a table
and exits 0.

    python bench/refs.py            # about 1 min on 2 cores
    python bench/refs.py --quick    # 1,500 and 5,000 refs only

Section 1: a story's own repository (``hero.git.storyrepo``) whose worker made N refs (half
of them packed, as ``git pack-refs`` leaves them, half loose; each at a commit of its own
every 1,000 refs), and the whole end of the worker's phase (``StoryGit.end_work``: the refs
read, the worker's dropped, their commits kept, the user's put back, the branch brought
back). The refs are written as files, not through git (which takes about 35 s for 50,000
here): the cleanup does not depend on how they were made. For reference, the old way (one
``git update-ref -d`` per ref; in the sandbox, as hero ran it, each costs more) for 1,500.

Section 2: another story's phase end on the same user's repository (a commit, the guard,
its branch brought back), alone and while a story whose worker made 50,000 refs ends its
phase in another process (as another ``hero watch`` on the same repository would).
hero's git runs unsandboxed here (``StoryGit.sandbox`` None); the number of git calls does
not grow with the refs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from report import GIT_ISOLATION, Report, env_line, make_repo, median, print_report, run_sections

HERE = Path(__file__).resolve()
#: Targets (issue 32): 50,000 worker-made refs cleaned in under 2 s; another story slowed by
#: under 1 s.
CLEAN_S = 2.0
SLOWED_S = 1.0
COUNTS = (1_500, 5_000, 50_000)


def _story(root: Path, name: str):  # type: ignore[no-untyped-def]
    """A user's repository at ``root/repo`` (made once) and a story ``name``'s own
    repository on ``hero/<name>``; returns (StoryGit, guard, base)."""
    from hero.git.ops import TargetRepo, git
    from hero.git.phases import StoryGit
    from hero.git.storyrepo import StoryRepo
    from hero.redact import Redactor

    repo = root / "repo"
    if not repo.exists():
        make_repo(repo)
    target = TargetRepo(repo)
    base = git(repo, "rev-parse", "HEAD").strip()
    branch = f"hero/{name}"
    git(repo, "branch", "-f", branch, base)
    story = StoryRepo(target, root / "worktrees" / name, branch)
    story.lay_out(base)
    phases = StoryGit(target, story, secrets=Redactor([]))
    return phases, phases.watch(base), base


def _make_refs(phases, count: int) -> None:  # type: ignore[no-untyped-def]
    """``count`` refs the worker made: half packed, half loose; a new commit every 1,000."""
    from hero.git.ops import DEFAULT_IDENTITY, git

    path = phases.repo.path
    gitdir = path / ".git"
    shas = []
    env = {**GIT_ISOLATION, **DEFAULT_IDENTITY}
    for i in range(max(1, count // 1000)):
        (path / "w.txt").write_text(f"{i}\n")
        git(path, "add", "w.txt", env=env)
        tree = git(path, "write-tree").strip()
        shas.append(git(path, "commit-tree", tree, "-p", "HEAD", "-m", f"w{i}", env=env).strip())
    git(path, "checkout", "-q", "--", ".")
    git(path, "reset", "-q")
    (path / "w.txt").unlink()
    packed = sorted(f"refs/w/p/{i:06d}" for i in range(count // 2))
    with open(gitdir / "packed-refs", "a") as fh:
        if (gitdir / "packed-refs").stat().st_size == 0:
            fh.write("# pack-refs with: peeled fully-peeled sorted \n")
        for i, name in enumerate(packed):
            fh.write(f"{shas[i % len(shas)]} {name}\n")
    loose = gitdir / "refs" / "w" / "l"
    for i in range(count - count // 2):
        d = loose / f"{i // 500:03d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{i:06d}").write_text(f"{shas[i % len(shas)]}\n")


def cleanup(report: Report, counts: tuple[int, ...]) -> None:
    report.section("1. a story whose worker made N refs: the end of its phase")
    from hero.git.refs import read_refs

    for count in counts:
        with tempfile.TemporaryDirectory() as tmp:
            phases, guard, base = _story(Path(tmp), "s1")
            _make_refs(phases, count)
            assert len(read_refs(phases.repo.path, "refs/w")) == count
            started = time.monotonic()
            end = phases.end_work(guard, "hero: rescue", base)
            took = time.monotonic() - started
            left = len(read_refs(phases.repo.path, "refs/w"))
            target = f"< {CLEAN_S:g} s" if count == 50_000 else "-"
            ok = took < CLEAN_S if count == 50_000 else None
            report.add(f"  {count:,} refs: cleaned in", f"{took:.2f} s", target, ok)
            report.add(f"  {count:,} refs: left / problems said", f"{left} / {len(end.problems)}")
    with tempfile.TemporaryDirectory() as tmp:
        phases, _guard, _ = _story(Path(tmp), "s1")
        _make_refs(phases, 1_500)
        from hero.git.ops import git

        names = list(read_refs(phases.repo.path, "refs/w"))
        started = time.monotonic()
        for name in names:
            git(phases.repo.path, "update-ref", "--no-deref", "-d", name)
        took = time.monotonic() - started
        report.add("  1,500 refs, the old way (a git per ref, unsandboxed)", f"{took:.2f} s")


def dirty(root: str) -> int:
    """In a process of its own: a story whose worker made 50,000 refs ends its phase;
    prints "ready" before, "done" after."""
    phases, guard, base = _story(Path(root), "dirty")
    _make_refs(phases, 50_000)
    print("ready", flush=True)
    sys.stdin.readline()
    phases.end_work(guard, "hero: rescue", base)
    print("done", flush=True)
    return 0


def _other_story(root: Path, n: int) -> float:
    """Another story's phase end: a commit of the worker's, the guard, its branch brought
    back. Seconds."""
    from hero.git.ops import DEFAULT_IDENTITY, git

    phases, guard, base = _story(root, f"other{n}")
    path = phases.repo.path
    (path / "work.txt").write_text(f"{n}\n")
    env = {**GIT_ISOLATION, **DEFAULT_IDENTITY}
    git(path, "add", "work.txt", env=env)
    git(path, "commit", "-q", "-m", "work", env=env)
    started = time.monotonic()
    end = phases.end_work(guard, "hero: rescue", base)
    took = time.monotonic() - started
    assert end.head and not end.problems, end.problems
    return took


def beside(report: Report, runs: int) -> None:
    report.section("2. another story's phase end on the same repository")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        alone = median([_other_story(root, i) for i in range(runs)])
        report.add("  alone (median)", f"{alone:.2f} s")
        slowed = []
        for i in range(runs):
            proc = subprocess.Popen(
                [sys.executable, str(HERE), "--dirty", str(root)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert proc.stdin is not None and proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
            proc.stdin.write("go\n")
            proc.stdin.flush()
            time.sleep(0.05)  # its phase end under way
            slowed.append(_other_story(root, 100 + i))
            finished = proc.stdout.readline().strip() == "done"
            proc.wait(timeout=600)
            if not finished:
                report.notes.append("the story with 50,000 refs did not finish its phase")
        worst = max(slowed)
        report.add("  beside a story with 50,000 refs (median)", f"{median(slowed):.2f} s")
        report.add(
            "  slowed by (worst run)",
            f"{worst - alone:.2f} s",
            f"< {SLOWED_S:g} s",
            worst - alone < SLOWED_S,
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1,500 and 5,000 refs only")
    parser.add_argument("--runs", type=int, default=3, help="runs of section 2")
    parser.add_argument("--dirty", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.dirty:
        return dirty(args.dirty)
    started = time.monotonic()
    print(env_line())
    os.environ.update(GIT_ISOLATION)
    report = Report()
    counts = COUNTS[:2] if args.quick else COUNTS
    sections = [("cleanup", lambda: cleanup(report, counts))]
    if not args.quick:
        sections.append(("beside", lambda: beside(report, args.runs)))
    run_sections(report, sections)
    print_report(report, started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
