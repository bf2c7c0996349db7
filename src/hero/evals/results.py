"""What `hero bench run` writes and `hero bench report` reads, in the run's output folder.

- ``results-NAME.jsonl``: one line per task and run of configuration NAME, with
  ``instance_id``, ``run``, ``resolved``, ``rounds``, ``tokens``, ``cost_usd``, ``wall_s``,
  ``status`` (hero's own fields may follow them);
- ``predictions-NAME.jsonl``: SWE-bench's prediction format, one line per task and run:
  ``instance_id``, ``model_name_or_path``, ``model_patch``.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hero.errors import UsageError
from hero.evals.tasks import json_lines

#: A configuration's name: it is part of file names.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class ResultsError(UsageError):
    """A results or predictions file that cannot be read: names the file and the line."""


@dataclass(frozen=True)
class Result:
    """One task's outcome under one configuration, in one run."""

    instance_id: str
    run: int
    resolved: bool
    rounds: int
    tokens: int
    cost_usd: float
    wall_s: float
    status: str
    """hero's story status (``passed``, ``gave_up``, ...) or ``judge_error``."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Prediction:
    instance_id: str
    model_name_or_path: str
    model_patch: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def results_path(out: Path, name: str) -> Path:
    return Path(out) / f"results-{name}.jsonl"


def predictions_path(out: Path, name: str) -> Path:
    return Path(out) / f"predictions-{name}.jsonl"


def check_name(name: str) -> str:
    """A configuration's name, checked (it names files); UsageError otherwise."""
    if not NAME_RE.match(name):
        raise UsageError(
            f"configuration name {name!r}: letters, digits, '.', '_' and '-', starting with a "
            "letter or digit, at most 64"
        )
    return name


def read_results(path: Path) -> list[Result]:
    """The results of one configuration; ResultsError naming the file and line."""
    out: list[Result] = []
    for where, data in _lines(path):
        try:
            out.append(
                Result(
                    instance_id=_str(data, "instance_id"),
                    run=int(data.get("run", 1)),
                    resolved=bool(data["resolved"]),
                    rounds=int(data.get("rounds") or 0),
                    tokens=int(data.get("tokens") or 0),
                    cost_usd=float(data.get("cost_usd") or 0.0),
                    wall_s=float(data.get("wall_s") or 0.0),
                    status=str(data.get("status") or ""),
                )
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ResultsError(f"{where}: not a result ({type(exc).__name__}: {exc})") from None
    return out


def append_line(path: Path, data: dict[str, Any]) -> None:
    """One JSON line appended and flushed to disk (a crash leaves at most a torn last line,
    which :func:`read_results` refuses and the runner drops before resuming)."""
    import os

    line = (json.dumps(data, ensure_ascii=False) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def _lines(path: Path) -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    for where, data in json_lines(path, ResultsError):
        if not isinstance(data, dict):
            raise ResultsError(f"{where}: expected a JSON object")
        out.append((where, data))
    return out


def _str(data: dict[str, Any], key: str) -> str:
    value = data[key]
    if not isinstance(value, str) or not value:
        raise ValueError(f"{key}: expected a non-empty string; found {value!r}")
    return value


def read_lines(path: Path) -> list[dict[str, Any]]:
    """The whole JSON lines of a file (none when it is missing); a torn last line is left
    out."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict):
            out.append(data)
    return out
