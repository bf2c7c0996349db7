"""The home's record of `hero bench run`'s output folders: ``runs/bench/folders.json``.

`hero bench run` records each ``--out`` folder it writes (its absolute path, the first and
last time a run wrote there, the configurations it ran), so that the status page
(``hero serve``, ``/bench``) lists them and shows each one's report. The file is written
whole (``fsio.atomic_write``) under its lock; a reader never sees half of it::

    {"version": 1, "folders": [{"name": "out", "path": "/abs/out", "first": 1733300000.0,
      "last": 1733300100.0, "configurations": ["a", "b"]}]}

``name`` is the folder's name on the page (``/bench/NAME``): its base name made of letters,
digits, ``.``, ``_`` and ``-``, with ``-2``, ``-3``, ... after it when another folder has it
already; a folder keeps its name once recorded.

The file is hostile input to its readers (a person may edit it, a disk may tear it): it is
read as a regular file only, bounded, and every entry is checked; one that is wrong is a
problem named by its place, and the others are still read.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hero.errors import HeroError

FOLDERS_FILE = Path("runs") / "bench" / "folders.json"
#: The record is read whole; one larger than this is refused.
MAX_FOLDERS_BYTES = 4 << 20
#: Folders kept in the record; past it, those written to longest ago are dropped.
MAX_FOLDERS = 500
#: Configuration names kept per folder.
MAX_CONFIGURATIONS = 100
#: A folder's name on the page.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
VERSION = 1


@dataclass(frozen=True)
class Folder:
    """One output folder of `hero bench run`, as recorded."""

    name: str
    path: str
    first: float
    """When a `hero bench run` first wrote there (seconds since the epoch)."""
    last: float
    """When one last did."""
    configurations: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "path": self.path,
            "first": self.first,
            "last": self.last,
            "configurations": list(self.configurations),
        }


@dataclass(frozen=True)
class Record:
    """The folders read from the record, newest first, and what was wrong in it."""

    folders: tuple[Folder, ...]
    problems: tuple[str, ...]
    unreadable: bool = False
    """The record as a whole could not be read (its one problem says why)."""

    def find(self, name: str) -> Folder | None:
        return next((f for f in self.folders if f.name == name), None)


def folders_path(home: Path) -> Path:
    return Path(home) / FOLDERS_FILE


def read_folders(home: Path) -> Record:
    """The recorded folders, newest (last written) first. A record that cannot be read at
    all is one problem and no folder; a bad entry is a problem and is left out."""
    from hero.yamlio import ValueProblem, read_file

    path = folders_path(home)
    where = str(FOLDERS_FILE)
    try:
        raw = read_file(path, limit=MAX_FOLDERS_BYTES, follow_link=False)
    except FileNotFoundError:
        return Record((), ())
    except ValueProblem as exc:
        return _unreadable(f"{where}: {exc.message}")
    except OSError as exc:
        return _unreadable(f"{where}: cannot be read: {exc.strerror or exc}")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return _unreadable(f"{where}: not JSON ({_one_line(str(exc))}); fix or remove it")
    entries = data.get("folders") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        return _unreadable(f'{where}: expected {{"folders": [...]}}; fix or remove it')
    folders: list[Folder] = []
    problems: list[str] = []
    if len(entries) > MAX_FOLDERS:  # hero writes no more; each is looked at on the page
        problems.append(f"{where}: {len(entries)} folders; the first {MAX_FOLDERS} are read")
    names: set[str] = set()
    for number, entry in enumerate(entries[:MAX_FOLDERS], start=1):
        try:
            folder = _folder_of(entry)
        except ValueError as exc:
            problems.append(f"{where}: folder {number}: {exc}")
            continue
        if folder.name in names:
            problems.append(f"{where}: folder {number}: name {folder.name!r} again")
            continue
        names.add(folder.name)
        folders.append(folder)
    folders.sort(key=lambda f: f.last, reverse=True)
    return Record(tuple(folders), tuple(problems))


def record_folder(home: Path, out: Path, configurations: Iterable[str]) -> Folder:
    """Record ``out`` (absolute) as written now with ``configurations``; the folder's first
    time, name and earlier configurations are kept. HeroError when the record cannot be
    written, or is unreadable (it is then left as it is, never overwritten)."""
    from hero.fsio import atomic_write
    from hero.locks import bench_folders_lock

    path = folders_path(home)
    out_text = str(Path(out).resolve())
    now = time.time()
    with bench_folders_lock(path):
        record = read_folders(home)
        if record.unreadable:
            raise HeroError(f"{record.problems[0]}; {out_text} is not recorded there")
        old = next((f for f in record.folders if f.path == out_text), None)
        names = {f.name for f in record.folders if f is not old}
        seen = list(old.configurations) if old else []
        seen += [c for c in configurations if c not in seen]
        folder = Folder(
            name=old.name if old else _new_name(Path(out_text).name, names),
            path=out_text,
            first=old.first if old else now,
            last=now,
            configurations=tuple(seen[-MAX_CONFIGURATIONS:]),
        )
        kept = [folder, *(f for f in record.folders if f is not old)][:MAX_FOLDERS]
        text = json.dumps(
            {"version": VERSION, "folders": [f.to_json() for f in kept]},
            ensure_ascii=False,
            indent=1,
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            atomic_write(path, (text + "\n").encode("utf-8"), follow_link=False)
        except OSError as exc:
            raise HeroError(f"{path}: cannot be written: {exc}") from None
    return folder


def _unreadable(problem: str) -> Record:
    return Record((), (problem,), unreadable=True)


def _new_name(base: str, taken: set[str]) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", base).lstrip("._-")[:56] or "bench"
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        candidate = f"{name}-{n}"
    return candidate


def _folder_of(entry: object) -> Folder:
    """One entry of the record, checked; ValueError naming the field."""
    if not isinstance(entry, dict):
        raise ValueError("expected an object")
    name = entry.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ValueError(
            "name: expected letters, digits, '.', '_' and '-', starting with a letter or "
            f"digit, at most 64; found {_shown(name)}"
        )
    path = entry.get("path")
    if not isinstance(path, str) or not path.startswith("/") or "\0" in path or len(path) > 4096:
        raise ValueError(f"path: expected an absolute path; found {_shown(path)}")
    times = []
    for key in ("first", "last"):
        value = entry.get(key)
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise ValueError(f"{key}: expected a time in seconds; found {_shown(value)}")
        times.append(float(value))
    configurations = entry.get("configurations", [])
    if not isinstance(configurations, list) or not all(
        isinstance(c, str) and 0 < len(c) <= 200 for c in configurations
    ):
        raise ValueError("configurations: expected a list of names")
    return Folder(name, path, times[0], times[1], tuple(configurations[:MAX_CONFIGURATIONS]))


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _one_line(text: str) -> str:
    return " ".join(text.split())[:200]
