"""What a story's repository of its own costs, on a generated repository of
10,000 files and 50,000 commits: laying it out, ``make_safe`` between commands, bringing
a story's commits back; the old layout's ``git worktree add`` and a ``git clone --local
--shared`` for comparison; and what the sandbox adds per command. A report, not a test: it
prints a table and exits 0.

    python bench/storyrepo.py                      # about 1 min on 2 cores, once generated
    python bench/storyrepo.py --cache ~/.cache/x   # where the generated repository is kept
    python bench/storyrepo.py --runs 3 --sandbox-runs 50   # shorter

The repository is generated once (``git fast-import``, then ``git gc``: about 20 s on 2
cores, 86 MB on disk) and kept under ``--cache`` (default ``$TMPDIR/hero-bench-storyrepo``);
each run works on a copy of it, so the cached one stays as generated. The git operations run
one after another, each on a fresh path after ``os.sync()``, interleaved run by run; section
a.'s checkout time is that of the ``reset --hard`` inside ``lay_out`` itself (the module's
``git`` is wrapped with a timer for the call). Nothing is deleted until the end.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hero.git.storyrepo import StoryRepo

#: Keeps the user's and the system's git config out of every git the bench and hero run.
GIT_ISOLATION = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
#: A story's own repository must not slow a story's start or end: laying it out and
#: bringing its commits back, under 1 s.
LAYOUT_TARGET_MS = 1000.0
#: ``make_safe`` runs before every git call of hero's: tens of microseconds.
MAKE_SAFE_TARGET_MS = 0.1
#: The sandbox runs around every command of a round: it adds at most 1 ms per command.
SANDBOX_ADDED_TARGET_MS = 1.0
#: Bumped when the generated repository's shape changes (a new cache entry then).
GENERATOR_VERSION = 1
AUTHOR = "Bench <bench@example.com>"


# --------------------------------------------------------------------------- the table


@dataclass
class Row:
    operation: str
    runs: str = ""
    median: str = ""
    low: str = ""
    p90: str = ""
    target: str = ""
    ok: str = ""


class Table:
    def __init__(self) -> None:
        self.rows: list[Row] = []
        self.notes: list[str] = []

    def section(self, title: str) -> None:
        self.rows.append(Row(f"[{title}]"))

    def timed(
        self,
        operation: str,
        samples_ms: Sequence[float],
        target_ms: float | None = None,
        *,
        target_text: str = "",
        digits: int = 1,
    ) -> float:
        """A row of ``samples_ms`` (median, min, p90); PASS/FAIL on the median against
        ``target_ms``. Returns the median."""
        med = statistics.median(samples_ms)
        target = ""
        ok = ""
        if target_ms is not None:
            target = target_text or f"< {target_ms:g} ms"
            ok = "PASS" if med < target_ms else "FAIL"
        self.rows.append(
            Row(
                operation,
                str(len(samples_ms)),
                f"{med:.{digits}f}",
                f"{min(samples_ms):.{digits}f}",
                f"{p90(samples_ms):.{digits}f}",
                target,
                ok,
            )
        )
        return med

    def value(
        self, operation: str, median: str, p90: str = "", target: str = "", ok: str = ""
    ) -> None:
        self.rows.append(Row(operation, "", median, "", p90, target, ok))

    def render(self) -> str:
        head = Row("operation", "runs", "median ms", "min ms", "p90 ms", "target", "ok")
        body = [r for r in (head, *self.rows) if not r.operation.startswith("[")]
        names = ("operation", "runs", "median", "low", "p90", "target", "ok")
        w = [max(len(getattr(r, a)) for r in body) for a in names]
        lines = []
        for i, r in enumerate((head, *self.rows)):
            if r.operation.startswith("["):
                lines.append(r.operation)
                continue
            cells = [f"{r.operation:<{w[0]}}"]
            cells += [f"{getattr(r, a):>{w[j]}}" for j, a in enumerate(names[1:6], 1)]
            cells.append(r.ok)
            lines.append(" | ".join(cells).rstrip())
            if i == 0:
                lines.append("-+-".join("-" * n for n in w))
        return "\n".join(lines)


def p90(xs: Sequence[float]) -> float:
    """The 90th percentile, nearest rank."""
    ordered = sorted(xs)
    return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]


def ms_since(started: float) -> float:
    return (time.perf_counter() - started) * 1000


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def git_version() -> str:
    return subprocess.run(
        ["git", "--version"], capture_output=True, text=True, check=False
    ).stdout.strip()


# --------------------------------------------------------------------------- the repository


def file_path(i: int) -> str:
    """File ``i`` of the generated repository: 100 files a directory."""
    return f"src/pkg{i // 100:03d}/mod{i % 100:02d}.py"


def file_text(i: int, version: int) -> bytes:
    """A small Python module (about 400 bytes); each version changes two lines."""
    lines = [f'"""Module {i} of the generated repository."""', "", "import math", ""]
    lines += [f"CONSTANT_{k} = {(i * 31 + k * 17) % 1000}" for k in range(8)]
    lines += [f"REVISION = {version}", ""]
    lines += [
        f"def value_{i}(x: float) -> float:",
        f"    return math.sqrt(abs(x)) * {version % 97 + 1} + CONSTANT_{version % 8}",
        "",
    ]
    return "\n".join(lines).encode()


def _data(payload: bytes) -> bytes:
    return b"data %d\n" % len(payload) + payload + b"\n"


def fast_import_stream(files: int, commits: int, seed: int = 17) -> Iterator[bytes]:
    """``git fast-import`` input: commit 1 adds every file, each later one changes 1 to 3
    files (mostly 1) on ``main``; linear history, one minute apart."""
    rng = random.Random(seed)
    versions = [0] * files
    start = 1_600_000_000
    for n in range(1, commits + 1):
        if n == 1:
            touched = list(range(files))
            message = f"initial import of {files} files\n".encode()
        else:
            touched = rng.sample(range(files), rng.choice((1, 1, 1, 1, 2, 2, 3)))
            message = f"change {n}: update {', '.join(file_path(i) for i in touched)}\n".encode()
        when = f"{AUTHOR} {start + 60 * n} +0000\n".encode()
        chunk = [b"commit refs/heads/main\n", b"author " + when, b"committer " + when]
        chunk.append(_data(message))
        for i in touched:
            versions[i] += 1
            chunk.append(f"M 100644 inline {file_path(i)}\n".encode())
            chunk.append(_data(file_text(i, versions[i])))
        chunk.append(b"\n")
        yield b"".join(chunk)
    yield b"done\n"


def generate(cache: Path, files: int, commits: int) -> tuple[Path, str]:
    """The generated repository under ``cache`` (made now if it is not complete there),
    and what was done to get it."""
    repo = cache / f"repo-v{GENERATOR_VERSION}-{files}f-{commits}c"
    complete = repo.with_name(repo.name + ".complete")
    if complete.is_file() and (repo / ".git").is_dir():
        return repo, f"cached at {repo}"
    started = time.monotonic()
    if repo.exists():
        shutil.rmtree(repo)
    repo.mkdir(parents=True)
    env = {**os.environ, **GIT_ISOLATION}

    def run(*args: str) -> None:
        subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)

    run("init", "-q", "-b", "main")
    print(f"... generating {files} files, {commits} commits with git fast-import", flush=True)
    proc = subprocess.Popen(
        ["git", "fast-import", "--quiet", "--done"],
        cwd=repo,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
    )
    assert proc.stdin is not None
    buffered: list[bytes] = []
    size = 0
    for chunk in fast_import_stream(files, commits):
        buffered.append(chunk)
        size += len(chunk)
        if size >= 1 << 20:
            proc.stdin.write(b"".join(buffered))
            buffered, size = [], 0
    proc.stdin.write(b"".join(buffered))
    proc.stdin.close()
    if proc.wait() != 0:
        raise RuntimeError(f"git fast-import failed with exit code {proc.returncode}")
    imported = time.monotonic() - started
    run("reset", "-q", "--hard", "main")
    print("... git gc (once)", flush=True)
    gc_started = time.monotonic()
    run("gc", "--quiet")
    gc_s = time.monotonic() - gc_started
    complete.write_text("ok\n")
    return repo, (
        f"generated at {repo} in {time.monotonic() - started:.0f} s "
        f"(fast-import {imported:.0f} s, gc {gc_s:.0f} s)"
    )


def describe(repo: Path) -> str:
    env = {**os.environ, **GIT_ISOLATION}

    def out(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True
        ).stdout.strip()

    commits = out("rev-list", "--count", "HEAD")
    tracked = len(out("ls-files").splitlines())
    counts = dict(
        line.split(": ", 1) for line in out("count-objects", "-v").splitlines() if ": " in line
    )
    return (
        f"{tracked} files, {commits} commits, {counts.get('packs', '?')} pack(s) of "
        f"{int(counts.get('size-pack', '0')) / 1024:.1f} MB, {counts.get('count', '?')} loose "
        f"objects"
    )


# --------------------------------------------------------------------------- the sections


def bench_layout(
    table: Table, target_path: Path, scratch: Path, files: int, runs: int, sandbox_runs: int
) -> None:
    import hero.git.storyrepo as storyrepo_module
    from hero.git.ops import WORKTREE_TIMEOUT_S, TargetRepo, git
    from hero.git.storyrepo import StoryRepo

    target = TargetRepo(target_path)
    tip = git(target_path, "rev-parse", "HEAD").strip()
    identity = target.identity_env()
    stories: list[StoryRepo] = []

    # What each git call inside lay_out took, by subcommand: its `reset --hard` is the
    # checkout; the rest is init, config, refs. (A wrapper around the module's `git`, which
    # the bench puts back after.)
    spent: dict[str, float] = {}
    calls: list[str] = []

    def timed_git(cwd: Path, *args: str, **kwargs: Any) -> str:
        started = time.perf_counter()
        try:
            return git(cwd, *args, **kwargs)
        finally:
            spent[args[0]] = spent.get(args[0], 0.0) + ms_since(started)
            calls.append(args[0])

    # (a) and (d), interleaved run by run so that the file system's moods hit all alike; each
    # on a fresh path, after os.sync() (no writeback of the previous run's files pending).
    # Nothing is deleted until the end (deleting 10,000 files is disk work of its own). Run 0
    # is a warm-up, not counted.
    lay_out: list[float] = []
    checkout: list[float] = []
    rest: list[float] = []
    added: list[float] = []
    cloned: list[float] = []
    clone_only: list[float] = []
    floor: list[float] = []
    texts = [(file_path(i), file_text(i, 1)) for i in range(files)]
    for r in range(runs + 1):
        story = StoryRepo(target, scratch / f"story-{r}", f"hero/bench-{r}", tip)
        os.sync()
        spent.clear()
        calls.clear()
        vars(storyrepo_module)["git"] = timed_git
        try:
            started = time.perf_counter()
            story.lay_out(tip)
            total = ms_since(started)
        finally:
            vars(storyrepo_module)["git"] = git
        if r:
            lay_out.append(total)
            checkout.append(spent.get("reset", 0.0))
            rest.append(total - spent.get("reset", 0.0))
            stories.append(story)

        wt = scratch / f"worktree-{r}"
        os.sync()
        started = time.perf_counter()
        git(
            target_path,
            "worktree",
            "add",
            "--quiet",
            "-b",
            f"bench-wt-{r}",
            str(wt),
            tip,
            timeout_s=WORKTREE_TIMEOUT_S,
        )
        if r:
            added.append(ms_since(started))

        clone = scratch / f"clone-{r}"
        os.sync()
        started = time.perf_counter()
        git(
            scratch,
            "clone",
            "--local",
            "--shared",
            "--no-checkout",
            "--quiet",
            str(target_path),
            str(clone),
            timeout_s=WORKTREE_TIMEOUT_S,
        )
        bare_clone = ms_since(started)
        git(clone, "checkout", "--quiet", "-b", f"bench-{r}", tip, timeout_s=WORKTREE_TIMEOUT_S)
        if r:
            cloned.append(ms_since(started))
            clone_only.append(bare_clone)

        plain = scratch / f"files-{r}"
        os.sync()
        started = time.perf_counter()
        for name, text in texts:
            dest = plain / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(text)
        if r:
            floor.append(ms_since(started))
    lay_out_calls = ", ".join(f"{n} {spent[n]:.1f}" for n in sorted(spent, key=calls.index))
    table.section(f"a. laying out a story's repository (fresh path, {runs} runs + 1 warm-up)")
    table.timed("StoryRepo.lay_out(tip), checkout included", lay_out, LAYOUT_TARGET_MS)
    table.timed("  its `git reset --hard tip` (the checkout)", checkout)
    table.timed(f"  the rest ({len(calls) - 1} other git calls, files)", rest)
    table.timed(f"  for scale: Python writes the same {files} files", floor)
    table.notes.append(f"git calls of the last lay_out, ms: {lay_out_calls}")

    # (b) make_safe between commands, on a laid-out repository with nothing to put back.
    story = stories[-1]
    repeats = max(200, 200 * runs)
    story.make_safe()
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        story.make_safe()
        samples.append(ms_since(started))
    first = []
    for _ in range(runs):
        fresh = StoryRepo(target, story.path, story.branch, tip)
        started = time.perf_counter()
        fresh.make_safe()
        first.append(ms_since(started))
    table.section("b. make_safe() between commands (before every git call of hero's)")
    table.timed(
        "make_safe(), nothing to put back",
        samples,
        MAKE_SAFE_TARGET_MS,
        target_text="< 100 us",
        digits=3,
    )
    table.timed("  first call on a new StoryRepo (+ git config --blob)", first, digits=2)

    # (c) bring_back: 1 commit (round 1), then 10 more on top (a later round); the target's
    # branch is made at tip first, as _prepare_worktree makes it.
    table.section("c. bringing a story's commits back (fetch, fsckObjects, update-ref)")
    back: dict[int, list[float]] = {1: [], 10: []}
    for r, story in enumerate(stories):
        git(target_path, "update-ref", f"refs/heads/{story.branch}", tip, "")
        for count in (1, 10):
            for k in range(count):
                edited = story.path / file_path((r * 100 + k * 7 + count) % files)
                edited.write_text(edited.read_text() + f"# story {r}, commit {count}.{k}\n")
                git(story.path, "commit", "-q", "--no-verify", "-am", f"work {k}", env=identity)
            started = time.perf_counter()
            with target.locked():
                brought = story.bring_back()
            back[count].append(ms_since(started))
            if brought != story.tip() or target.branch_sha(story.branch) != brought:
                raise RuntimeError(f"bring_back did not move {story.branch} to {story.tip()}")
    table.timed("bring_back(), 1 new commit", back[1], LAYOUT_TARGET_MS)
    table.timed("bring_back(), 10 new commits on top", back[10], LAYOUT_TARGET_MS)
    both = [a + b for a, b in zip(lay_out, back[1], strict=True)]
    table.timed("lay_out + bring_back (1 commit), per run", both, LAYOUT_TARGET_MS)

    table.section("d. for comparison (same runs as a.): the old linked worktree, a shared clone")
    table.timed("git worktree add -b x path tip (old layout)", added)
    table.timed("git clone --local --shared + checkout", cloned)
    table.timed("  the clone alone (--no-checkout)", clone_only)

    bench_sandbox(table, stories[0], sandbox_runs)


def bench_sandbox(table: Table, story: StoryRepo, runs: int) -> None:
    """``true`` through run_command: bare, in the sandbox without limits, with limits;
    interleaved, after 10 warm-up runs each."""
    from hero.leftovers import RUN_MARKER
    from hero.runner import run_command
    from hero.sandbox.bwrap import build, bwrap_problem
    from hero.sandbox.limits import Limits, mechanism

    title = f"e. what the sandbox adds per command: `true` through run_command, {runs} runs each"
    table.section(title)
    bwrap = shutil.which("bwrap")
    problem = "bwrap is not installed" if bwrap is None else bwrap_problem(bwrap)
    if bwrap is None or problem:
        table.value("sandbox", "n/a", ok=f"FAILED: {problem}")
        return
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    marked = {**env, RUN_MARKER: f"hero-bench-storyrepo-{os.getpid()}"}
    # as the pipeline builds it (hide: the hero home, which the bench has none of, and the
    # user's repository)
    guarded, hide = story.guarded(), (story.target.path,)
    plain = build(story.path, story.objects_dir(), guarded=guarded, hide=hide, bwrap=bwrap)
    limited = build(
        story.path, story.objects_dir(), guarded=guarded, hide=hide, bwrap=bwrap, limits=Limits()
    )
    variants: dict[str, Callable[[], object]] = {
        "no sandbox": lambda: run_command("true", story.path, timeout_s=30, env=env),
        "no sandbox, RUN_MARKER set (/proc scans)": lambda: run_command(
            "true", story.path, timeout_s=30, env=marked
        ),
        "sandbox, no limits": lambda: run_command(
            "true", story.path, timeout_s=30, env=env, sandbox=plain
        ),
        "sandbox, Limits() (cgroup + rlimits)": lambda: run_command(
            "true", story.path, timeout_s=30, env=env, sandbox=limited
        ),
    }
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for i in range(runs + 10):
        for name, fn in variants.items():
            started = time.perf_counter()
            result = fn()
            took = ms_since(started)
            if getattr(result, "exit_code", None) != 0:
                raise RuntimeError(f"{name}: `true` did not exit 0: {result}")
            if i >= 10:
                samples[name].append(took)
    medians = {name: table.timed(name, xs, digits=2) for name, xs in samples.items()}
    bare = medians["no sandbox"]
    for name in ("sandbox, no limits", "sandbox, Limits() (cgroup + rlimits)"):
        added = medians[name] - bare
        p90_added = p90(samples[name]) - p90(samples["no sandbox"])
        ok = "PASS" if added <= SANDBOX_ADDED_TARGET_MS else "FAIL"
        table.value(f"  added by {name}", f"{added:.2f}", f"{p90_added:.2f}", "<= 1 ms", ok)
    table.notes.append(f"limits enforced by: {mechanism()}")


# --------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path(tempfile.gettempdir()) / "hero-bench-storyrepo",
        help="where the generated repository is kept between runs",
    )
    parser.add_argument("--runs", type=int, default=5, help="repetitions of each git operation")
    parser.add_argument("--sandbox-runs", type=int, default=200, help="commands per variant")
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--commits", type=int, default=50_000)
    parser.add_argument("--keep", action="store_true", help="keep the run's scratch directory")
    args = parser.parse_args(argv)
    os.environ.update(GIT_ISOLATION)
    started = time.monotonic()
    print(
        f"environment: python {sys.version.split()[0]}, {os.cpu_count()} cpus, {git_version()}, "
        f"load average {load_average()}",
        flush=True,
    )
    cached, how = generate(args.cache.resolve(), args.files, args.commits)
    print(f"repository: {describe(cached)}; {how}", flush=True)
    scratch = Path(tempfile.mkdtemp(prefix="hero-bench-storyrepo-run-"))
    table = Table()
    try:
        target = scratch / "target"
        print("... copying it for this run", flush=True)
        shutil.copytree(cached, target, symlinks=True)
        print("... measuring", flush=True)
        bench_layout(table, target, scratch, args.files, args.runs, args.sandbox_runs)
    except Exception:  # noqa: BLE001 - a report: show what failed, exit 0
        table.value("could not measure the rest", "FAILED", ok="FAILED")
        table.notes.append(f"the bench failed:\n{traceback.format_exc()}")
    finally:
        print()
        print(table.render())
        print()
        for note in table.notes:
            print(note)
        if args.keep:
            print(f"kept {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
        print(
            f"load average at the end {load_average()}; "
            f"benchmark took {time.monotonic() - started:.0f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
