"""`hero bench run TASKS.jsonl -c NAME=OVERRIDES.yaml [-c ...] [--runs N] [--out DIR]`.

Each task runs, under each configuration and ``--runs`` times, as a story of its own, in the
foreground, through hero's own run path (``hero.run.launch.run_with_config``, what `hero run`
uses), then is judged by its hidden tests (:mod:`hero.evals.judge`).

Configurations
    ``-c NAME=OVERRIDES.yaml``: NAME names the output files (letters, digits, ``.``, ``_``,
    ``-``); the YAML file holds settings of ``config/roles.yaml`` (the same keys, e.g.
    ``worker: {model: ...}``, ``max_retries: 1``), deep-merged over the home's. Each
    configuration gets a home of its own, ``DIR/homes/NAME``: its ``config/roles.yaml`` is the
    merged one, the rest of the home's ``config/`` (providers, ``config.local.yaml``) is linked.
    An unknown key, or a value hero refuses, is an error naming the overrides file and the key
    (exit 2). ``target_repo`` cannot be overridden: the bench sets it per task.

What the worker sees
    The story's problem statement is the task's; its base is the task's ``base_commit``; it
    has no ``verify:`` of its own (the home's ``default_verify``, if any, runs): the hidden tests
    are never shown. The worker never sees the future: each task-run's story works on a
    repository of its own, ``DIR/work/NAME/<story id>/repo``, made with ``git init`` and a fetch
    of ``base_commit`` alone from the home's ``target_repo`` (no tags, no other ref), so it
    holds no commit, object or ref after the base: not the fix, not the test patch, not another
    configuration's or run's work. hero's own story repository borrows only that repository's
    objects. Keep ``sandbox`` on (bwrap): without it the worker's commands can read any file of
    the machine, the user's repository included.

Judging
    After the story ends, whatever its status, the worker's final tree (its story branch's
    tip, else the base) has its test side put back as at the base (:mod:`hero.evals.guard`:
    test files, pytest's configuration and hooks), then gets the hidden test patch, the test
    patch's files first put back as at the base (a worker that deleted or weakened tests
    gains nothing); the ``FAIL_TO_PASS`` and ``PASS_TO_PASS`` tests run by node id
    (``--test-command``, default ``python -m pytest``) as the verifier runs a story's checks:
    in the configuration's project environment (``setup``) and sandbox, within
    ``--judge-timeout`` seconds. Resolved: every one of them passed. A task-run that cannot
    be judged (its test patch does not apply, its setup fails, no sandbox) has status
    ``judge_error``.

Outputs, in ``--out DIR``
    ``results-NAME.jsonl``: a line per finished task-run (``instance_id``, ``run``,
    ``resolved``, ``rounds``, ``tokens``, ``cost_usd``, ``wall_s``, ``status``, then hero's
    ``story_id``, ``failed_tests``, ``error``); ``predictions-NAME.jsonl``: SWE-bench's
    ``instance_id``, ``model_name_or_path`` (the configuration's worker model),
    ``model_patch`` (the diff from the base to the worker's final tree), and ``run``.

Resuming
    Run the same command again with the same ``--out``: the task-runs the results files
    already hold are skipped (a torn last line, from a kill, is dropped; a prediction without
    its result too). A task-run that was under way starts afresh under a new story id (its
    attempt number is a suffix, ``-a2``), so the stale record of the killed one blocks nothing.

Parallel
    Up to the home's ``max_parallel`` task-runs at a time, each in a thread of this process
    (as `hero watch` runs stories). A configuration whose ``engine`` is ``celery`` (the
    home's, or its overrides') sends its task-runs to `hero worker` processes
    (:mod:`hero.evals.dispatch`: each task-run's own repository, the overrides sealed in the
    task, a record of each dispatch so that a resumed bench awaits what it sent rather than
    sending it again); it is judged here as any. A progress line per task-run goes to
    stderr; ``--events`` prints one JSON event per task-run start and end on stdout.

Exit codes: 0 every task-run ran (resolved or not); 1 some could not be judged
(``judge_error``); 2 a usage or configuration error.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hero.config.home import Config
from hero.errors import UsageError
from hero.evals.dispatch import CeleryBench
from hero.evals.judge import DEFAULT_TEST_COMMAND, JudgeError, judge
from hero.evals.results import (
    Prediction,
    Result,
    check_name,
    predictions_path,
    read_lines,
    results_path,
)
from hero.evals.tasks import Task, read_tasks
from hero.git.ops import GitError, git

JUDGE_ERROR = "judge_error"
#: Attempts of one task-run (each a fresh story) before the bench gives up on it.
MAX_ATTEMPTS = 1000


@dataclass(frozen=True)
class Configuration:
    name: str
    overrides: Path
    config: Config
    #: the overrides themselves (sent to the worker with the Celery engine)
    values: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def model(self) -> str:
        role = self.config.roles.get("worker")
        return role.model if role is not None and role.model else "unknown"


def main(args: argparse.Namespace) -> int:
    from hero.config.loader import load_config, resolve_home

    if args.runs < 1:
        raise UsageError(f"--runs: expected at least 1; found {args.runs}")
    tasks = read_tasks(args.tasks)
    home = resolve_home(getattr(args, "home", None))
    out = Path(args.out).expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    user = load_config(home)
    configs = [configuration(spec, home, user.target_repo, out) for spec in _specs(args.config)]
    _record(home, out, [c.name for c in configs])  # for the status page's /bench
    todo: list[tuple[Configuration, Task, int]] = []
    for c in configs:
        done = resume(out, c.name)
        todo += [
            (c, t, n)
            for n in range(1, args.runs + 1)
            for t in tasks
            if (t.instance_id, n) not in done
        ]
    root = getattr(args, "remote_root", None)
    bench = Bench(
        out=out,
        user_repo=user.target_repo,
        total=len(todo),
        events=bool(getattr(args, "events", False)),
        test_command=getattr(args, "test_command", None) or DEFAULT_TEST_COMMAND,
        judge_timeout_s=float(getattr(args, "judge_timeout", None) or 600.0),
        remote_root=Path(root).expanduser().resolve() if root else out / "remotes",
    )
    for c in configs:
        bench.engine_for(c)  # a Celery engine that cannot be used fails here, before any run
    parallel = max(1, user.max_parallel)
    if parallel == 1 or len(todo) <= 1:
        for item in todo:
            bench.run_one(*item)
    else:
        pool = ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="bench")
        try:
            for future in [pool.submit(bench.run_one, *item) for item in todo]:
                future.result()
        except BaseException:
            # Ctrl-C (or a bug): the task-runs not started yet are dropped; those under way
            # end as their stories do, and the next run starts them afresh; those sent to
            # workers run on there, and the next run awaits them (hero.evals.dispatch)
            for engine in bench.engines.values():
                engine.cancel.set()
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown()
    _record(home, out, [c.name for c in configs])
    errors = 0
    for c in configs:
        errors += sum(
            1 for r in read_lines(results_path(out, c.name)) if r.get("status") == JUDGE_ERROR
        )
    return 1 if errors else 0


def _record(home: Path, out: Path, names: list[str]) -> None:
    """The output folder recorded in the home (runs/bench/folders.json) for `hero serve`'s
    /bench; a record that cannot be written is said, and the bench goes on."""
    from hero.errors import HeroError
    from hero.evals.folders import record_folder

    try:
        record_folder(home, out, names)
    except HeroError as exc:
        print(f"hero bench: warning: {exc}", file=sys.stderr)


# ----------------------------------------------------------------------------- configurations


def _specs(values: list[str]) -> list[tuple[str, Path]]:
    specs: list[tuple[str, Path]] = []
    for value in values:
        name, sep, file = value.partition("=")
        if not sep or not file:
            raise UsageError(f"-c {value}: expected NAME=OVERRIDES.yaml")
        check_name(name)
        if any(name == n for n, _ in specs):
            raise UsageError(f"-c {value}: configuration {name!r} given twice")
        specs.append((name, Path(file).expanduser().resolve()))
    return specs


def configuration(spec: tuple[str, Path], home: Path, user_repo: Path, out: Path) -> Configuration:
    """The configuration's own home (``out/homes/NAME``) with the overrides merged into its
    roles.yaml, loaded; UsageError naming the overrides file and key for a bad one."""
    import yaml

    from hero.config.overrides import check_overrides, derived_home, merged_roles

    name, file = spec
    try:
        raw = yaml.safe_load(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"-c {name}={file}: no such file") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise UsageError(f"{file}: cannot be read as YAML: {exc}") from None
    over = check_overrides(raw, str(file))
    if "target_repo" in over:
        raise UsageError(f"{file}: target_repo: hero bench sets it for each task")
    merged = merged_roles(home, over)
    merged["target_repo"] = str(user_repo)
    config = derived_home(home, merged, out / "homes" / name, str(file))
    return Configuration(name, file, config, over)


# ----------------------------------------------------------------------------- resuming


def resume(out: Path, name: str) -> set[tuple[str, int]]:
    """The task-runs configuration ``name`` finished; its files rewritten without a torn
    last line, and without a prediction whose result was never written."""
    from hero.fsio import atomic_write

    results = results_path(out, name)
    rows = read_lines(results)
    done: dict[tuple[str, int], dict[str, Any]] = {}
    for row in rows:
        key = (str(row.get("instance_id")), int(row.get("run") or 1))
        done.setdefault(key, row)
    if results.exists():
        atomic_write(results, "".join(json.dumps(r) + "\n" for r in done.values()).encode())
    preds = predictions_path(out, name)
    if preds.exists():
        kept: dict[tuple[str, int], dict[str, Any]] = {}
        for row in read_lines(preds):
            key = (str(row.get("instance_id")), int(row.get("run") or 1))
            if key in done:
                kept.setdefault(key, row)
        atomic_write(preds, "".join(json.dumps(r) + "\n" for r in kept.values()).encode())
    return set(done)


# ----------------------------------------------------------------------------- one task-run


def story_base_id(config: str, task: Task, run: int) -> str:
    """A story id for the task-run, unique per (configuration, task, run)."""
    from hero.run.adhoc import slug

    digest = hashlib.sha256(f"{config}\0{task.instance_id}".encode()).hexdigest()[:8]
    words = slug(task.instance_id)[:40].strip("-") or "task"
    cfg = slug(config)[:20].strip("-") or "cfg"
    return f"bench-{cfg}-{words}-{digest}-r{run}"


def make_source(user_repo: Path, base: str, dest: Path) -> None:
    """A repository holding ``base`` and what it reaches, nothing else: ``git init`` and a
    fetch of that one commit, no tags; its branch ``bench`` checked out at it."""
    dest.mkdir(parents=True, exist_ok=True)
    git(dest, "init", "-q", "-b", "bench")
    git(
        dest,
        "-c",
        "uploadpack.allowAnySHA1InWant=true",
        "fetch",
        "-q",
        "--no-tags",
        "--no-write-fetch-head",
        "--no-recurse-submodules",
        str(user_repo),
        base,
    )
    git(dest, "update-ref", "refs/heads/bench", base)
    git(dest, "reset", "-q", "--hard", base)


def _claim(folder: Path, base_id: str) -> str:
    """The next attempt's story id (``<base>-aN``), its work folder made."""
    folder.mkdir(parents=True, exist_ok=True)
    for n in range(1, MAX_ATTEMPTS + 1):
        story_id = f"{base_id}-a{n}"
        try:
            (folder / story_id).mkdir()
        except FileExistsError:
            continue
        return story_id
    raise UsageError(f"{folder}: {MAX_ATTEMPTS} attempts of {base_id}; clear the folder")


@dataclass
class Bench:
    out: Path
    user_repo: Path
    total: int
    events: bool
    test_command: str
    judge_timeout_s: float
    remote_root: Path

    def __post_init__(self) -> None:
        self.lock = threading.Lock()
        self.finished = 0
        #: per configuration on the Celery engine: its engine, and its task-runs already
        #: sent ((instance_id, run) -> story id, hero.evals.dispatch)
        self.engines: dict[str, CeleryBench] = {}
        self.dispatched: dict[str, dict[tuple[str, int], str]] = {}

    def engine_for(self, c: Configuration) -> CeleryBench | None:
        """The Celery engine configuration ``c`` runs on, or None for the local engine."""
        if not c.config.engine.remote:
            return None
        with self.lock:
            if c.name not in self.engines:
                from hero.evals.dispatch import CeleryBench, read_dispatched

                self.engines[c.name] = CeleryBench(c.config, self.out, self.remote_root)
                self.dispatched[c.name] = read_dispatched(self.out, c.name)
            return self.engines[c.name]

    def emit(self, event: dict[str, Any]) -> None:
        if self.events:
            with self.lock:
                sys.stdout.write(json.dumps(event) + "\n")
                sys.stdout.flush()

    def run_one(self, c: Configuration, task: Task, run: int) -> Result:
        from hero.run.adhoc import title_of
        from hero.state import load_state
        from hero.story.feedback import contain_sections
        from hero.story.format import write_story

        started = time.monotonic()
        base_id = story_base_id(c.name, task, run)
        work_root = self.out / "work" / c.name
        engine = self.engine_for(c)
        # a task-run sent to a worker before this bench was stopped: awaited, not sent again
        sent = self.dispatched.get(c.name, {}).get((task.instance_id, run))
        story_id = sent or _claim(work_root, base_id)
        work = work_root / story_id
        source = work / "repo"
        self.emit(
            {
                "event": "task_started",
                "config": c.name,
                "instance_id": task.instance_id,
                "run": run,
                "story_id": story_id,
            }
        )
        status, error, rounds, tokens, cost = "error", "", 0, 0, 0.0
        try:
            if not sent:
                make_source(self.user_repo, task.base_commit, source)
        except (GitError, OSError) as exc:
            error = f"the base commit {task.base_commit} cannot be had from {self.user_repo}: {exc}"
            return self._end(
                c, task, run, story_id, started, JUDGE_ERROR, error, 0, 0, 0.0, "", False, {}
            )
        config = dataclasses.replace(c.config, target_repo=source, target_base_ref=task.base_commit)
        story_path = config.home / "inbox" / f"{story_id}.md"
        story_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            if not sent:
                write_story(
                    story_path,
                    {"id": story_id, "title": title_of(task.problem_statement)},
                    f"## Goal\n\n{contain_sections(task.problem_statement.strip())}\n",
                )
            if engine is not None:
                record = {"story_id": story_id, "instance_id": task.instance_id, "run": run}
                state = engine.run(
                    c.name,
                    dict(c.values),
                    config,
                    story_path,
                    source,
                    None if sent else {**record, "config": c.name},
                )
            else:
                from hero.run.launch import run_with_config

                state = run_with_config(story_path, config)
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure of the story is its result
            error = f"{type(exc).__name__}: {exc}"
            state = None
        try:
            state = load_state(config.home, story_id) or state
        except Exception:  # noqa: BLE001
            pass
        if state is not None:
            status = str(state.status)
            rounds = max(len(state.rounds), state.current_round)
            usage = state.usage
            tokens = int(usage.get("tokens_in", 0)) + int(usage.get("tokens_out", 0))
            cost = float(usage.get("cost_usd", 0.0) or 0.0)
            error = error or state.error
        final = task.base_commit
        branch = state.branch if state is not None and state.branch else f"hero/{story_id}"
        tip = git(
            source, "rev-parse", "-q", "--verify", f"refs/heads/{branch}^{{commit}}", check=False
        ).strip()
        if tip:
            final = tip
        try:
            patch = git(source, "diff", "--binary", task.base_commit, final)
        except GitError:
            patch = ""
        try:
            judged = judge(
                task,
                source,
                final,
                config,
                work,
                test_command=self.test_command,
                timeout_s=self.judge_timeout_s,
            )
        except (JudgeError, GitError, OSError) as exc:
            return self._end(
                c,
                task,
                run,
                story_id,
                started,
                JUDGE_ERROR,
                f"judging: {exc}",
                rounds,
                tokens,
                cost,
                patch,
                False,
                {},
            )
        return self._end(
            c,
            task,
            run,
            story_id,
            started,
            status,
            error,
            rounds,
            tokens,
            cost,
            patch,
            judged.resolved,
            judged.failed,
        )

    def _end(
        self,
        c: Configuration,
        task: Task,
        run: int,
        story_id: str,
        started: float,
        status: str,
        error: str,
        rounds: int,
        tokens: int,
        cost: float,
        patch: str,
        resolved: bool,
        failed: Mapping[str, str],
    ) -> Result:
        from hero.evals.results import append_line

        result = Result(
            instance_id=task.instance_id,
            run=run,
            resolved=resolved,
            rounds=rounds,
            tokens=tokens,
            cost_usd=round(cost, 6),
            wall_s=round(time.monotonic() - started, 3),
            status=status,
        )
        prediction = Prediction(task.instance_id, c.model, patch)
        with self.lock:
            # the prediction first: a kill between the two leaves a prediction without its
            # result, which the next run drops (resume) and writes again
            append_line(predictions_path(self.out, c.name), {**prediction.to_json(), "run": run})
            append_line(
                results_path(self.out, c.name),
                {
                    **result.to_json(),
                    "story_id": story_id,
                    "failed_tests": dict(failed),
                    "error": error[:2000],
                },
            )
            self.finished += 1
            word = (
                "resolved"
                if resolved
                else ("judge error" if status == JUDGE_ERROR else f"not resolved ({status})")
            )
            sys.stderr.write(
                f"[{self.finished}/{self.total}] {c.name} {task.instance_id} run {run}: {word}\n"
            )
            sys.stderr.flush()
        self.emit(
            {
                "event": "task_ended",
                "config": c.name,
                "instance_id": task.instance_id,
                "run": run,
                "story_id": story_id,
                "resolved": resolved,
                "status": status,
                "rounds": rounds,
                "tokens": tokens,
                "cost_usd": result.cost_usd,
                "wall_s": result.wall_s,
            }
        )
        return result
