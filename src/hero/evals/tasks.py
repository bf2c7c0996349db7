"""A bench task in SWE-bench's format, and its JSON lines file.

One task per line, with SWE-bench's fields, so that other tools read hero's tasks and hero
reads SWE-bench-format files made elsewhere. ``FAIL_TO_PASS`` and ``PASS_TO_PASS`` are lists
of test ids; SWE-bench's own files hold them as JSON-encoded strings, which are read too.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hero.errors import UsageError
from hero.fsio import atomic_write

#: The fields of a task, in SWE-bench's order.
FIELDS = (
    "instance_id",
    "repo",
    "base_commit",
    "patch",
    "test_patch",
    "problem_statement",
    "hints_text",
    "created_at",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
    "version",
    "environment_setup_commit",
)
#: A tasks file larger than this is refused (it is read whole).
MAX_TASKS_BYTES = 512 * 1024 * 1024


class TasksError(UsageError):
    """A tasks file that cannot be read as tasks: names the file, the line and the field."""


@dataclass(frozen=True)
class Task:
    """One task: the repository at ``base_commit``, the problem, the reference fix
    (``patch``, never shown to the worker) and the hidden tests (``test_patch``)."""

    instance_id: str
    repo: str
    base_commit: str
    patch: str
    test_patch: str
    problem_statement: str
    hints_text: str = ""
    created_at: str = ""
    FAIL_TO_PASS: list[str] = field(default_factory=list)
    PASS_TO_PASS: list[str] = field(default_factory=list)
    version: str = ""
    environment_setup_commit: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def task_of(data: object, where: str) -> Task:
    """A task from one decoded JSON line; TasksError naming ``where`` and the field."""
    if not isinstance(data, dict):
        raise TasksError(f"{where}: expected a JSON object; found {type(data).__name__}")
    values: dict[str, Any] = {}
    for name in FIELDS:
        value = data.get(name)
        if name in ("FAIL_TO_PASS", "PASS_TO_PASS"):
            values[name] = _tests(value, f"{where}: {name}")
        elif name in ("instance_id", "repo", "base_commit", "problem_statement"):
            if not isinstance(value, str) or not value.strip():
                raise TasksError(f"{where}: {name}: expected a non-empty string; found {value!r}")
            values[name] = value
        elif name in ("patch", "test_patch"):
            if not isinstance(value, str):
                raise TasksError(f"{where}: {name}: expected a string (a diff); found {value!r}")
            values[name] = value
        else:
            values[name] = "" if value is None else str(value)
    return Task(**values)


def _tests(value: object, where: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):  # SWE-bench's own files: a JSON list in a string
        try:
            value = json.loads(value) if value.strip() else []
        except ValueError:
            raise TasksError(f"{where}: expected a list of test ids; found {value!r}") from None
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise TasksError(f"{where}: expected a list of test ids; found {value!r}")
    return list(value)


def json_lines(
    path: Path | str, error: type[UsageError], what: str = "file"
) -> list[tuple[str, object]]:
    """Each non-blank line of a JSON lines file, decoded, with where it is (``file:line``);
    ``error`` naming the file (and line) for a file that cannot be read or a line that is
    not JSON. The file is read whole, so one over :data:`MAX_TASKS_BYTES` is refused."""
    path = Path(path)
    try:
        if path.stat().st_size > MAX_TASKS_BYTES:
            raise error(f"{path}: larger than {MAX_TASKS_BYTES // (1024 * 1024)} MB")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{path}: no such {what}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"{path}: cannot be read: {exc}") from None
    out: list[tuple[str, object]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            out.append((where, json.loads(line)))
        except (ValueError, RecursionError) as exc:  # RecursionError: nested too deep
            raise error(f"{where}: not JSON: {exc}") from None
    return out


def read_tasks(path: Path | str) -> list[Task]:
    """Every task of a JSON lines file (blank lines skipped); TasksError naming the file and
    line for one that is not a task, and for two tasks with one ``instance_id``."""
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    for where, data in json_lines(path, TasksError, "tasks file"):
        task = task_of(data, where)
        if task.instance_id in seen:
            raise TasksError(
                f"{where}: instance_id {task.instance_id!r} again (first on line "
                f"{seen[task.instance_id]})"
            )
        seen[task.instance_id] = int(where.rsplit(":", 1)[1])
        tasks.append(task)
    return tasks


def task_lines(tasks: Iterable[Task]) -> Iterator[str]:
    for task in tasks:
        yield json.dumps(task.to_json(), ensure_ascii=False, sort_keys=False) + "\n"


def write_tasks(path: Path | str, tasks: Iterable[Task]) -> None:
    """The tasks as JSON lines, written atomically."""
    atomic_write(Path(path), "".join(task_lines(tasks)).encode("utf-8"))
