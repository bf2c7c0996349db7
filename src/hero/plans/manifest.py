"""A plan's folder as a record: ``inbox/<name>/`` with its stories and ``_manifest.yaml``.

``hero plan`` writes the folder: one story file per story, and the manifest, the record of
what was planned (the plan's name, the plan file it came from and that file's sha256, when,
and each story with its title and dependencies)::

    name: auth
    source: /home/me/plans/auth.md
    source_sha256: 9f86d0...
    created_at: '2025-01-31T12:00:00Z'
    stories:
    - id: add-model
      title: Add the user model
      depends_on: []

The manifest is what was planned; what runs is the story files (their ``depends_on``),
which people may edit. A story that passed moves to ``done/<name>/``, so a plan's stories
are read from both folders; a file in the inbox wins over one of the same id in done.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from hero.errors import UsageError
from hero.names import ID_RE, MANIFEST, is_story_id, plan_name_problem
from hero.story.format import parse_story
from hero.story.record import Story, StoryError
from hero.yamlio import ValueProblem, decode_text, describe, load_yaml, read_file, string_list

#: The largest manifest hero reads: far more than the record of any plan needs.
MAX_MANIFEST_BYTES = 1 << 20
MANIFEST_KEYS = ("name", "source", "source_sha256", "created_at", "stories")
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


class PlanError(UsageError):
    """A plan folder or manifest hero cannot use; ``str(e) == f"{path}: {field}: {message}"``."""

    def __init__(self, path: Path | str, field: str, message: str) -> None:
        self.path = Path(path)
        self.field = field
        self.message = " ".join(str(message).split())
        super().__init__(f"{self.path}: {self.field}: {self.message}")


class ManifestStory(NamedTuple):
    """One story as it was planned."""

    id: str
    title: str
    depends_on: tuple[str, ...]


@dataclass(frozen=True)
class Manifest:
    name: str
    """The plan's name: its folder in inbox/ (and done/), its branch ``hero/plan/<name>``."""
    source: str
    """The plan file the stories were made from, as an absolute path."""
    source_sha256: str
    """sha256 of the plan file's bytes as the planner read them."""
    created_at: str
    """When the plan was written: ISO 8601, UTC (``2025-01-31T12:00:00Z``)."""
    stories: tuple[ManifestStory, ...]
    """Each planned story, in the planner's order."""


def utc_now() -> str:
    """The time now as the manifest writes it: ISO 8601, UTC, to the second."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ----------------------------------------------------------------------------- the manifest


def dump_manifest(manifest: Manifest) -> str:
    """The manifest's YAML text, keys in declared order; :func:`read_manifest` reads it back."""
    import yaml

    data = {
        "name": manifest.name,
        "source": manifest.source,
        "source_sha256": manifest.source_sha256,
        "created_at": manifest.created_at,
        "stories": [
            {"id": s.id, "title": s.title, "depends_on": list(s.depends_on)}
            for s in manifest.stories
        ],
    }
    text: str = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=1 << 16)
    return text


def read_manifest(path: Path) -> Manifest:
    """Read and check a ``_manifest.yaml``; PlanError naming the file and the key.

    Keys beyond :data:`MANIFEST_KEYS` are ignored (a newer hero may add some).
    """
    path = Path(path)
    try:
        text = decode_text(read_file(path, limit=MAX_MANIFEST_BYTES, what="manifest file"))
        data = load_yaml(text)
    except ValueProblem as exc:
        raise PlanError(path, "file", exc.message) from None
    except OSError as exc:
        raise PlanError(path, "file", f"cannot read it: {exc.strerror or exc}") from None
    if not isinstance(data, dict):
        raise PlanError(
            path,
            "file",
            f"expected a mapping of {', '.join(MANIFEST_KEYS)}; found {describe(data)}",
        )
    name = _string(data, "name", path)
    problem = plan_name_problem(name)
    if problem:
        raise PlanError(path, "name", problem)
    source = _string(data, "source", path)
    digest = _string(data, "source_sha256", path)
    if not _SHA256_RE.match(digest):
        raise PlanError(
            path, "source_sha256", f"expected 64 lowercase hex digits; found {describe(digest)}"
        )
    created = data.get("created_at")
    if isinstance(created, datetime):  # an unquoted timestamp, as a person may write it
        created = created.isoformat()
    created_at = _string({"created_at": created}, "created_at", path)
    try:
        datetime.fromisoformat(created_at)
    except ValueError:
        raise PlanError(
            path, "created_at", f"expected an ISO 8601 time; found {describe(created_at)}"
        ) from None
    return Manifest(name, source, digest, created_at, _stories(data.get("stories"), path))


def _string(data: Mapping[Any, Any], key: str, path: Path) -> str:
    value = data.get(key)
    if value is None:
        raise PlanError(path, key, "required key is missing; expected a non-empty string")
    if not isinstance(value, str) or not value.strip():
        raise PlanError(path, key, f"expected a non-empty string; found {describe(value)}")
    return value.strip()


def _stories(value: Any, path: Path) -> tuple[ManifestStory, ...]:
    if not isinstance(value, list):
        raise PlanError(path, "stories", f"expected a list of stories; found {describe(value)}")
    out: list[ManifestStory] = []
    seen: set[str] = set()
    for n, entry in enumerate(value, 1):
        where = f"stories[{n}]"
        if not isinstance(entry, dict):
            raise PlanError(
                path, where, f"expected a mapping (id, title, depends_on); found {describe(entry)}"
            )
        story_id = entry.get("id")
        if not is_story_id(story_id):
            raise PlanError(
                path,
                f"{where}.id",
                f"expected a story id (pattern {ID_RE}); found {describe(story_id)}",
            )
        if story_id in seen:
            raise PlanError(
                path, f"{where}.id", f"expected unique ids; {story_id!r} is listed twice"
            )
        seen.add(story_id)
        title = entry.get("title")
        if not isinstance(title, str) or not title.strip():
            raise PlanError(
                path, f"{where}.title", f"expected a non-empty string; found {describe(title)}"
            )
        try:
            deps = string_list(entry.get("depends_on"))
        except ValueProblem as exc:
            raise PlanError(path, f"{where}.depends_on", exc.message) from None
        out.append(ManifestStory(story_id, title.strip(), deps))
    return tuple(out)


# ----------------------------------------------------------------------------- the folder


def plan_dir(home: Path, name: str) -> Path | None:
    """``inbox/<name>/`` if it holds the manifest, else ``done/<name>/`` if that does, else
    None (also for a name no plan can have, so that no name reaches outside the home)."""
    if plan_name_problem(name) is not None:
        return None
    for where in ("inbox", "done"):
        folder = Path(home) / where / name
        if (folder / MANIFEST).is_file():
            return folder
    return None


@dataclass(frozen=True)
class Plan:
    """A plan as it stands in a home: its manifest and its story files.

    ``stories`` holds every story file of ``inbox/<name>/`` and ``done/<name>/`` that
    could be read (inbox first), each with ``.plan == name``; manifest order first, then
    the rest by id. A file that cannot be used (it does not parse, or its id is not its
    file name) is left out of ``stories`` and named in ``problems``, one line each: a view
    shows the rest, a command that runs the plan must refuse while ``problems`` is not empty.
    """

    name: str
    folder: Path
    manifest: Manifest
    stories: dict[str, Story]
    problems: list[str] = field(default_factory=list)

    def deps(self) -> dict[str, tuple[str, ...]]:
        """The DAG that runs: each story's id and its ``depends_on``, in ``stories`` order."""
        return {story_id: story.depends_on for story_id, story in self.stories.items()}

    def titles(self) -> dict[str, str]:
        return {story_id: story.title for story_id, story in self.stories.items()}


def read_plan(home: Path, name: str) -> Plan:
    """The plan ``name`` of ``home``; PlanError when there is none or its manifest is bad."""
    home = Path(home)
    folder = plan_dir(home, name)
    if folder is None:
        problem = plan_name_problem(name)
        if problem:
            raise PlanError(name, "name", problem)
        raise PlanError(
            home / "inbox" / name,
            "plan",
            f"no plan named {name!r}: neither inbox/{name}/{MANIFEST} nor "
            f"done/{name}/{MANIFEST} exists",
        )
    manifest = read_manifest(folder / MANIFEST)
    if manifest.name != name:
        raise PlanError(
            folder / MANIFEST,
            "name",
            f"expected the folder's name {name!r}; found {manifest.name!r}",
        )
    problems: list[str] = []
    found: dict[str, Story] = {}
    for path in _story_files(home / "inbox" / name, home / "done" / name):
        try:
            story = parse_story(path)
        except StoryError as exc:
            problems.append(str(exc))
            continue
        if story.id != path.stem:
            problems.append(
                f"{path}: id: expected the file's name without .md ({path.stem!r}); "
                f"found {story.id!r}"
            )
            continue
        found[story.id] = replace(story, plan=name)
    order = [s.id for s in manifest.stories if s.id in found]
    order += sorted(set(found) - set(order))
    return Plan(name, folder, manifest, {i: found[i] for i in order}, problems)


def _story_files(*folders: Path) -> Iterable[Path]:
    """The ``.md`` files (not dot-files) of the folders, a name seen in an earlier folder
    skipped in a later one."""
    seen: set[str] = set()
    for folder in folders:
        try:
            entries = sorted(folder.iterdir())
        except (FileNotFoundError, NotADirectoryError):
            continue
        for path in entries:
            if path.name.startswith(".") or path.suffix != ".md" or path.name in seen:
                continue
            seen.add(path.name)
            yield path
