"""The run record of one story (``runs/state/<id>.json``) and its atomic persistence."""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any


class Status(StrEnum):
    """Where a story is in its life. The values are the contract in ``runs/state/<id>.json``."""

    QUEUED = "queued"
    RUNNING = "running"
    PASSED = "passed"
    GAVE_UP = "gave_up"
    ERROR = "error"
    SKIPPED = "skipped"
    INTERRUPTED = "interrupted"

    @property
    def terminal(self) -> bool:
        """The story has ended; nothing more happens until a person acts (edit, retry)."""
        return self in TERMINAL

    @property
    def resumable(self) -> bool:
        """The next run continues the same branch and round count."""
        return self in RESUMABLE


STATUSES = tuple(s.value for s in Status)
#: Statuses from which the next run continues the same branch and round count.
RESUMABLE = frozenset({Status.QUEUED, Status.RUNNING, Status.INTERRUPTED, Status.ERROR})
#: Statuses in which a story has ended.
TERMINAL = frozenset({Status.PASSED, Status.GAVE_UP, Status.ERROR, Status.SKIPPED})


class StateError(Exception):
    """A state file that cannot be read; names the file."""


@dataclass
class RunState:
    id: str
    status: str = "queued"
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
    rounds: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, Any] = field(
        default_factory=lambda: {"tokens_in": 0, "tokens_out": 0, "llm_calls": 0, "cost_usd": 0.0}
    )
    error: str = ""
    started_at: float = 0.0
    updated_at: float = 0.0
    finished_at: float | None = None
    runs: int = 0
    story_digest: str = ""  # sha256 of the story file as hero last left it (edits show up)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunState:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


def file_digest(path: Path) -> str:
    """sha256 of a file's bytes, or "" if it cannot be read."""
    import hashlib

    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return ""


def state_dir(home: Path) -> Path:
    return home / "runs" / "state"


def state_path(home: Path, story_id: str) -> Path:
    return state_dir(home) / f"{story_id}.json"


def load_state(home: Path, story_id: str) -> RunState | None:
    path = state_path(home, story_id)
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("id") != story_id:
            raise ValueError("not a state record for this story")
        return RunState.from_dict(data)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError) as exc:  # UnicodeDecodeError is a ValueError
        raise StateError(
            f"{path}: unreadable state ({exc}); move it aside to start the story afresh"
        ) from exc


def save_state(home: Path, state: RunState) -> None:
    """Write the state atomically: a crash leaves the old file or the new one, never half."""
    state.updated_at = time.time()
    directory = state_dir(home)
    directory.mkdir(parents=True, exist_ok=True)
    data = json.dumps(state.to_dict(), indent=2, ensure_ascii=False)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{state.id}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, state_path(home, state.id))
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
