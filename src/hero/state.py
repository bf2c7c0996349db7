"""The run record of one story (``runs/state/<id>.json``) and its atomic persistence."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import Any

from hero.errors import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_TIMEOUT,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    UsageError,
)
from hero.fsio import atomic_write
from hero.llm.usage import Usage
from hero.names import StoryRef
from hero.redact import Redactor
from hero.story.record import MAX_STORY_BYTES
from hero.yamlio import ValueProblem, read_file


class Status(StrEnum):
    """Where a story is in its life. The values are the contract in ``runs/state/<id>.json``."""

    QUEUED = "queued"
    RUNNING = "running"
    PASSED = "passed"
    GAVE_UP = "gave_up"
    ERROR = "error"
    SKIPPED = "skipped"
    INTERRUPTED = "interrupted"
    BUDGET_EXCEEDED = "budget_exceeded"
    CANCELLED = "cancelled"  # from outside the run: its GitHub issue closed (hero.run.cancel)


STATUSES = tuple(s.value for s in Status)
#: Statuses from which the next run continues the same branch and round count.
RESUMABLE = frozenset(
    {Status.QUEUED, Status.RUNNING, Status.INTERRUPTED, Status.ERROR, Status.BUDGET_EXCEEDED}
)
#: Statuses in which a story has ended.
TERMINAL = frozenset(
    {
        Status.PASSED,
        Status.GAVE_UP,
        Status.ERROR,
        Status.SKIPPED,
        Status.BUDGET_EXCEEDED,
        Status.CANCELLED,
    }
)


#: The budgets of time (roles.yaml keys, see hero.run.budget): a story stopped by one of them
#: ended on a timeout, which a command reports with exit 124 (see :func:`exit_code`).
TIME_BUDGETS = frozenset({"max_story_wall_s", "max_round_wall_s"})

#: A run record is a few KB per round; a file far larger than any could be is not one.
MAX_STATE_BYTES = 64 * 1024 * 1024


class StateError(UsageError):
    """A state file that cannot be read; names the file."""


def to_status(value: object) -> Status:
    """The ``Status`` a state file's string names; ValueError naming anything else."""
    if isinstance(value, str) and value in STATUSES:
        return Status(value)
    raise ValueError(f"unknown status {value!r}; expected one of {', '.join(STATUSES)}")


def _known(cls: type[Any], data: object) -> dict[str, Any]:
    """The entries of ``data`` that are fields of ``cls``: a newer hero's extra keys are ignored."""
    if not isinstance(data, dict):
        raise TypeError(f"expected an object for {cls.__name__}, found {type(data).__name__}")
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


@dataclass(frozen=True)
class WorkerOutcome:
    """How the worker's agent loop ended in one round."""

    turns: int = 0
    tool_calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    stop_reason: str = ""
    detail: str = ""
    summary: str = ""  # the end of the worker's last message


@dataclass(frozen=True)
class ReviewRecord:
    """The reviewer's verdict on one round, or the short-circuit that stood in for it."""

    verdict: str = ""
    summary: str = ""
    short_circuited: bool = False
    malformed: bool = False
    ac_check: list[dict[str, Any]] = field(default_factory=list)
    comments: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Round:
    """One finished round. The field names and their order are the JSON keys of
    ``rounds[i]`` in ``runs/state/<id>.json``: a contract users' scripts read."""

    round: int
    started_at: float = 0.0
    duration_s: float = 0.0
    worker: WorkerOutcome = field(default_factory=WorkerOutcome)
    verify: dict[str, Any] = field(default_factory=dict)  # the verifier's own record, as is
    review: ReviewRecord = field(default_factory=ReviewRecord)
    head_sha: str = ""
    feedback: str = ""  # what the worker reads in the next round
    # The round checked the branch brought up to date with its target (hero.run.keepup):
    # {mode, targets, base, from, to, conflict, files, resolved}; {} (and left out of the
    # file) for any other round.
    update: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if not self.update:
            del data["update"]  # a round as before branches were kept up with their target
        return data

    @classmethod
    def from_dict(cls, data: object) -> Round:
        kwargs = _known(cls, data)
        if "worker" in kwargs:
            kwargs["worker"] = WorkerOutcome(**_known(WorkerOutcome, kwargs["worker"]))
        if "review" in kwargs:
            kwargs["review"] = ReviewRecord(**_known(ReviewRecord, kwargs["review"]))
        if not isinstance(kwargs.get("verify", {}), dict):
            raise TypeError("a round's verify record is not an object")
        if not isinstance(kwargs.get("update", {}), dict):
            raise TypeError("a round's update record is not an object")
        return cls(**kwargs)


@dataclass
class RunState:
    id: str
    status: Status = Status.QUEUED
    title: str = ""
    story_path: str = ""
    branch: str = ""
    base_ref: str = ""
    base_sha: str = ""
    head_sha: str = ""
    worktree: str = ""
    current_round: int = 0
    round_offset: int = 0  # rounds finished before the current budget (a retry after gave_up)
    phase: str = ""
    rounds: list[Round] = field(default_factory=list)
    # the story's spend over all its runs, as the file holds it: a Usage's to_dict (read it
    # with Usage.from_dict, write it with record_usage); a story never run has no cached count
    usage: dict[str, Any] = field(
        default_factory=lambda: {"tokens_in": 0, "tokens_out": 0, "llm_calls": 0, "cost_usd": 0.0}
    )
    error: str = ""
    started_at: float = 0.0
    updated_at: float = 0.0
    finished_at: float | None = None
    runs: int = 0
    story_digest: str = ""  # sha256 of the story file as hero last left it (edits show up)
    plan: str = ""  # the plan the story belongs to; "" (and left out of the file) for none
    round_started_at: float = 0.0  # when the current round started; its time so far counts
    # towards max_story_wall_s and max_round_wall_s (see hero.run.budget)
    # the wall time of rounds not in ``rounds``: cut short by a budget, an error, a stop or
    # a kill (up to the record's last save), or set aside by a fresh start. It counts
    # towards max_story_wall_s like the rounds' own durations (see hero.run.budget.story_spend)
    cut_short_s: float = 0.0
    # Why an ``interrupted`` story paused on its model's provider rather than on a stop:
    # {provider, kind (transient | permanent), reason, error}; {} (and left out of the
    # file) otherwise. The daemon's breakers (hero.llm.breaker) read it, from a remote
    # worker's published record too, and the next run clears it.
    outage: dict[str, str] = field(default_factory=dict)
    # The models this run uses (hero.llm.models.models_record): {worker: {provider, model,
    # reasoning_effort}, reviewer: {...}}, set when a run starts; {} (and left out of the
    # file) in a record from before, or of a story never run.
    models: dict[str, dict[str, str | None]] = field(default_factory=dict)
    # The roles.yaml key of the budget that stopped a ``budget_exceeded`` story
    # (``max_story_wall_s``, ``max_story_tokens``, ...); "" (and left out of the file)
    # otherwise. It tells a story that ran out of time (exit 124) from one that ran out of
    # money, without reading the error's words; the next run clears it.
    budget: str = ""
    # Why the story ended on a conflict with its target (hero.run.keepup): {target, sha,
    # files, detail}; {} (and left out of the file) otherwise. The next run clears it.
    conflict: dict[str, Any] = field(default_factory=dict)
    # The project's environment this run used (hero.run.environment): {key, reused, seconds,
    # log, path}; {} (and left out of the file) for a story without setup.
    setup: dict[str, Any] = field(default_factory=dict)
    # The story's checks on the commit it started from (hero.run.baseline): {commit, cached,
    # log, checks: [{tier, command, passed, exit_code, timed_out, tail}]}; {} (and left out
    # of the file) before it ran, or for a story without checks.
    baseline: dict[str, Any] = field(default_factory=dict)
    # The story this one is a follow-up of (its ``revises:``, hero.run.revision): its rounds
    # run on that story's branch; "" (and left out of the file) for any other story.
    revises: str = ""
    # The story's ``labels:`` as its last run read them (the board filters by them); [] (and
    # left out of the file) for a story without labels, or a record from before labels.
    labels: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        # Plain values, as read from JSON or written by hand, become their types here.
        self.status = to_status(self.status)
        if not isinstance(self.rounds, list):
            raise TypeError(f"rounds: expected a list, found {type(self.rounds).__name__}")
        self.rounds = [r if isinstance(r, Round) else Round.from_dict(r) for r in self.rounds]
        if not isinstance(self.outage, dict) or not all(
            isinstance(v, str) for v in self.outage.values()
        ):
            raise TypeError("outage: expected an object of text values")
        if not isinstance(self.models, dict) or not all(
            isinstance(v, dict) and all(x is None or isinstance(x, str) for x in v.values())
            for v in self.models.values()
        ):
            raise TypeError("models: expected an object of role -> object of text values")
        if not isinstance(self.revises, str):
            raise TypeError(f"revises: expected text, found {type(self.revises).__name__}")
        if not isinstance(self.labels, list) or not all(isinstance(x, str) for x in self.labels):
            raise TypeError("labels: expected a list of text")
        if not isinstance(self.budget, str):
            raise TypeError(f"budget: expected text, found {type(self.budget).__name__}")
        for name in ("setup", "baseline", "conflict"):
            if not isinstance(getattr(self, name), dict):
                raise TypeError(f"{name}: expected an object")
        checks = self.baseline.get("checks", [])
        if not isinstance(checks, list) or not all(isinstance(c, dict) for c in checks):
            raise TypeError("baseline: expected its checks as a list of objects")

    def max_rounds(self, budget: int) -> int:
        """The round count at which this run stops: ``budget`` rounds after the offset."""
        return self.round_offset + budget

    def grant_fresh_budget(self) -> bool:
        """A story that gave up gets a fresh budget of rounds on the same branch: the rounds
        it has finished stop counting against its budget. Returns whether it was granted."""
        if self.status != Status.GAVE_UP:
            return False
        self.round_offset = len(self.rounds)
        return True

    @property
    def round_open(self) -> bool:
        """A round has started and is not yet in ``rounds``."""
        return float(self.round_started_at or 0.0) > 0 and all(
            r.round != self.current_round for r in self.rounds
        )

    def open_round_s(self, until: float) -> float:
        """The time of the round in progress up to ``until``; 0 when none is."""
        if not self.round_open:
            return 0.0
        return max(0.0, until - float(self.round_started_at))

    def close_open_round(self, until: float) -> None:
        """The round in progress was cut short at ``until``: its time so far moves into
        ``cut_short_s``, once (the round is no longer in progress afterwards, and the run
        that takes the story again starts it anew)."""
        if not self.round_open:
            return
        spent = self.open_round_s(until)
        self.cut_short_s = round(float(self.cut_short_s or 0.0) + spent, 3)
        self.round_started_at = 0.0

    def record_usage(self, usage: Usage) -> None:
        """The story's spend is now ``usage`` (any other key a newer hero wrote is kept)."""
        old = self.usage if isinstance(self.usage, dict) else {}
        self.usage = {**old, **usage.to_dict()}

    @property
    def timed_out(self) -> bool:
        """The story ended on a time budget (``max_story_wall_s``, ``max_round_wall_s``)."""
        return self.status == Status.BUDGET_EXCEEDED and self.budget in TIME_BUDGETS

    @property
    def built_on(self) -> str:
        """The commit the next round must build on: the last round's head, else the base."""
        return (self.rounds[-1].head_sha if self.rounds else "") or self.base_sha

    @property
    def ref(self) -> StoryRef:
        return StoryRef(self.plan, self.id)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = self.status.value
        if not self.plan:
            del data["plan"]  # a loose story's record is as it always was
        if not self.round_started_at:
            del data["round_started_at"]  # as before budgets, until a round starts
        if not self.cut_short_s:
            del data["cut_short_s"]  # as before, until a round is cut short
        if not self.outage:
            del data["outage"]  # as before outages were told apart
        if not self.models:
            del data["models"]  # as before models were recorded
        if not self.budget:
            del data["budget"]  # as before time budgets were told apart
        if not self.revises:
            del data["revises"]  # as before follow-ups
        if not self.labels:
            del data["labels"]  # as before labels
        for name in ("setup", "baseline"):
            if not data[name]:
                del data[name]  # as before project environments
        if not self.conflict:
            del data["conflict"]  # as before branches kept up with their target
        for r in data["rounds"]:
            if not r.get("update"):
                r.pop("update", None)  # a round as before
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunState:
        """A state read from JSON; ValueError or TypeError for a record that does not fit."""
        return cls(**_known(cls, data))


def exit_code(state: RunState) -> int:
    """What a command that ran one story exits with, from how its run record ended (the
    table is in docs/run.md#exit-codes): 0 passed; 124 ``budget_exceeded`` on a time
    budget; 75 paused on a model provider that is unavailable, 2 on one that refuses every
    request; 1 any other end. An interrupted run never gets here: it exits 130 where the
    interrupt is caught."""
    if state.status == Status.PASSED:
        return EXIT_OK
    if state.timed_out:
        return EXIT_TIMEOUT
    if state.status == Status.INTERRUPTED and state.outage:
        return EXIT_USAGE if state.outage.get("kind") == "permanent" else EXIT_UNAVAILABLE
    return EXIT_FAILED


def file_digest(path: Path) -> str:
    """sha256 of a story file's bytes, or "" if it cannot be read as one.

    Read as every story file is (:func:`hero.yamlio.read_file`): a regular file of at most
    ``MAX_STORY_BYTES``, never blocking on a FIFO nor reading a device without end.
    """
    import hashlib

    try:
        return hashlib.sha256(read_file(path, limit=MAX_STORY_BYTES)).hexdigest()
    except (OSError, ValueProblem):
        return ""


def state_dir(home: Path) -> Path:
    return home / "runs" / "state"


def state_path(home: Path, story: StoryRef | str) -> Path:
    """``runs/state/<id>.json``, or ``runs/state/plans/<plan>/<id>.json`` for a plan's story."""
    return StoryRef.of(story).state_path(home)


def load_state(home: Path, story: StoryRef | str) -> RunState | None:
    """The run record of ``story`` (a ref, an id or ``"<plan>/<id>"``), None if there is none."""
    ref = StoryRef.of(story)
    path = ref.state_path(home)
    try:
        # a regular file of bounded size: a FIFO or a device put here must not hang hero
        text = read_file(path, limit=MAX_STATE_BYTES, what="state file").decode("utf-8")
        data = json.loads(text)
        if (
            not isinstance(data, dict)
            or data.get("id") != ref.id
            or (data.get("plan") or "") != ref.plan
        ):
            raise ValueError("not a state record for this story")
        return RunState.from_dict(data)
    except FileNotFoundError:
        return None
    except ValueProblem as exc:
        raise StateError(
            f"{path}: unreadable state ({exc.message}); move it aside to start the story afresh"
        ) from exc
    except (OSError, ValueError, TypeError, RecursionError) as exc:  # a UnicodeDecodeError
        # is a ValueError; RecursionError: JSON nested thousands of levels deep
        raise StateError(
            f"{path}: unreadable state ({exc}); move it aside to start the story afresh"
        ) from exc


def save_state(
    home: Path, state: RunState, redact: Redactor | None = None, *, durable: bool = True
) -> None:
    """Write the state atomically: a crash leaves the old file or the new one, never half.
    Every secret in ``redact`` is taken out of its strings (errors, summaries, feedback).

    A record that no longer says ``running`` has no round in progress: one still open (a
    run killed with SIGKILL left it, and this writer ends the story) counts up to the
    record's last save, the last moment it is known to have been worked on."""
    if state.status != Status.RUNNING:
        state.close_open_round(float(state.updated_at or 0.0))
    state.updated_at = time.time()
    path = state.ref.state_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = state.to_dict()
    if redact:
        record = redact.redact_value(record)
    data = json.dumps(record, indent=2, ensure_ascii=False)
    atomic_write(path, data.encode("utf-8"), durable=durable)
