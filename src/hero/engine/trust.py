"""What hero takes from Redis or from a task, checked before it is used: Redis is hostile
input. Anyone who can reach it (a leaked broker password, another tenant of the server) can
queue a task or write any of hero's keys, so nothing read there becomes a path, a record or
a story until it has passed these checks:

- story keys and plan names by the one story-id rule (:meth:`hero.names.StoryRef.valid`);
- a run record against the story it claims to be (the ref the reader asked for), its
  fields' types, its size;
- the name of a published file (one plain name, never a path), a story file's name;
- sizes: records, story texts, published files, how many files and dependencies.

Whether a value was written by a hero process at all is the seal's business
(:mod:`hero.engine.seal`); both checks apply.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, fields, is_dataclass
from typing import Any

from hero.errors import HeroError
from hero.names import StoryRef
from hero.state import MAX_STATE_BYTES, RunState
from hero.story.record import MAX_STORY_BYTES

#: The largest file (trace, verify log) a worker may publish and a reader takes whole.
MAX_FILE_BYTES = 256 << 20
#: How many files one story may publish (a few per round).
MAX_FILES = 1000
#: How many dependencies' records a task may carry.
MAX_DEPS = 1000
#: The longest text of what the memory tells a story (its section, its recap) a task carries:
#: the coordinator keeps them within a few thousand tokens (memory_recall_tokens).
MAX_MEMORY_CHARS = 256 << 10
#: A progress line longer than this is cut.
MAX_LOG_CHARS = 4000
#: A published file's name: one plain name (``round-2.jsonl``, ``verify-r1.log``).
FILE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
#: A dispatch: the hex of a uuid4, as the coordinator makes it.
DISPATCH_RE = re.compile(r"[0-9a-f]{32}")


class Untrusted(HeroError):
    """A task or a value hero will not use. ``str()`` says what is wrong with it (a part of
    the value at most, quoted and cut: it may be anything)."""


def story_ref(key: object, plan: object = None, story_id: object = None) -> StoryRef:
    """The story ``key`` names (``<id>`` or ``<plan>/<id>``), checked by the story-id rule;
    with ``plan`` and ``story_id``, they must name the same story."""
    if not isinstance(key, str) or len(key) > 200 or not (key.isascii() and key.isprintable()):
        raise Untrusted(f"not a story key: {_shown(key)}")  # ("s1\n" passes a `$` pattern)
    ref = StoryRef.of(key)
    if not ref.valid() or ref.key != key:
        raise Untrusted(f"not a story key: {_shown(key)}")
    if story_id is not None and (
        not isinstance(story_id, str)
        or not isinstance(plan, str | None)
        or StoryRef(plan or "", story_id) != ref
    ):
        raise Untrusted(f"its plan and id do not name story {key}")
    return ref


def dispatch_of(value: object) -> str:
    """A dispatch id, checked."""
    if not isinstance(value, str) or not DISPATCH_RE.fullmatch(value):
        raise Untrusted("not a dispatch id")
    return value


def file_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a published file's name (it becomes ``runs/<id>/<name>``)."""
    if not FILE_NAME_RE.fullmatch(name) or ".." in name:
        return f"not a plain file name (pattern {FILE_NAME_RE.pattern}): {_shown(name)}"
    return None


def story_file_name(value: object, ref: StoryRef) -> str:
    """The story file's name in the inbox (``<name>.md``): one plain name, never a path."""
    if value is None or value == "":
        return f"{ref.id}.md"
    if (
        not isinstance(value, str)
        or len(value) > 255
        or not value.endswith(".md")
        or value.startswith(".")
        or "/" in value
        or "\\" in value
        or not value.isprintable()
    ):
        raise Untrusted(f"not a story file name: {_shown(value)}")
    return value


def bounded_text(value: object, limit: int, what: str) -> str:
    """``value`` as a string of at most ``limit`` bytes (UTF-8)."""
    if not isinstance(value, str):
        raise Untrusted(f"{what}: expected a string; found {type(value).__name__}")
    if len(value) > limit or len(value.encode("utf-8", "surrogatepass")) > limit:
        raise Untrusted(f"{what}: larger than {limit} bytes")
    return value


def record_for(ref: StoryRef, text: object, what: str = "the run record") -> RunState:
    """The run record ``text`` holds, which must be story ``ref``'s: the size of a record,
    a JSON object, ``id`` and ``plan`` those of ``ref``, each field of its type."""
    text = bounded_text(text, MAX_STATE_BYTES, what)
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise Untrusted(f"{what}: not JSON ({' '.join(str(exc).split())[:100]})") from None
    if not isinstance(data, dict):
        raise Untrusted(f"{what}: expected a JSON object")
    if data.get("id") != ref.id or (data.get("plan") or "") != ref.plan:
        claimed = data.get("plan"), data.get("id")
        raise Untrusted(f"{what}: it claims to be story {_shown(claimed)}, not {ref.key}")
    try:
        state = RunState.from_dict(data)
    except (ValueError, TypeError, RecursionError) as exc:
        raise Untrusted(f"{what}: {' '.join(str(exc).split())[:200]}") from None
    _check_types(state, what)
    return state


def _check_types(obj: Any, what: str) -> None:
    """Every plain field of the record ``obj`` (and of its rounds) of its declared type: what
    a reader formats, adds or compares must not turn out to be a list or an object."""
    for f in fields(obj):
        value = getattr(obj, f.name)
        kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")
        if kind in _PLAIN and not _PLAIN[kind](value):
            raise Untrusted(f"{what}: {f.name}: expected {kind}")
        if is_dataclass(value):
            _check_types(value, what)
    for round_ in getattr(obj, "rounds", ()):
        _check_types(round_, what)


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


#: The field types a record's fields are checked against, by their declared name.
_PLAIN: dict[str, Callable[[Any], bool]] = {
    "str": lambda v: isinstance(v, str),
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "float": _number,
    "bool": lambda v: isinstance(v, bool),
    "float | None": lambda v: v is None or _number(v),
    "dict[str, Any]": lambda v: isinstance(v, dict),
    "list[dict[str, Any]]": lambda v: isinstance(v, list) and all(isinstance(x, dict) for x in v),
}


def _shown(value: object) -> str:
    """A hostile value, as a log line may show it: quoted, cut (before it is quoted: it may
    be megabytes)."""
    if isinstance(value, tuple):
        return "(" + ", ".join(_shown(v) for v in value[:4]) + ")"
    if isinstance(value, str):
        text = repr(value[:120])
    elif value is None or isinstance(value, int | float):
        text = repr(value)
    else:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 120 else text[:117] + "..."


# ----------------------------------------------------------------------------- a task


@dataclass(frozen=True)
class Task:
    """What a worker is sent (hero.engine.remote.RemoteRun.payload), once authenticated:
    the story, the dispatch and the sender's version, checked first (they are the same in
    every hero version); the rest by :func:`contents`, once the versions agree."""

    ref: StoryRef
    dispatch: str
    version: str
    payload: dict[str, Any]

    @property
    def key(self) -> str:
        return self.ref.key


@dataclass(frozen=True)
class Contents:
    """The rest of a task, checked: the story file, this home's record of the story and its
    current round's trace, its dependencies' records, the base branch."""

    file_name: str
    story_text: str
    state: RunState | None
    files: dict[str, bytes]
    deps: tuple[RunState, ...]
    base_ref: str
    memory_section: str = ""
    """What the repository's memory tells the worker, recalled by the coordinator (which
    keeps the memory: hero.memory.recall); "" for nothing."""
    memory_recap: str = ""
    """The recap of the last stories the reviewer is told; "" for none."""


def task_of(payload: dict[str, Any]) -> Task:
    """The head of an authenticated payload; Untrusted for one that names no story."""
    ref = story_ref(payload.get("key"), payload.get("plan"), payload.get("id"))
    dispatch = dispatch_of(payload.get("dispatch"))
    version = payload.get("version")
    if not isinstance(version, str) or len(version) > 100:
        raise Untrusted("version: expected a version string")
    return Task(ref, dispatch, version, payload)


def contents(task: Task) -> Contents:
    """The rest of ``task``, each part checked (Untrusted naming the part)."""
    p, ref = task.payload, task.ref
    state = p.get("state")
    files = _mapping(p.get("files"), MAX_FILES, "files")
    for name in files:
        problem = file_name_problem(name)
        if problem:
            raise Untrusted(f"files: {problem}")
    deps = _mapping(p.get("deps"), MAX_DEPS, "deps")
    dep_records = []
    for dep_key, record in deps.items():
        try:
            dep = story_ref(dep_key)
        except Untrusted as exc:
            raise Untrusted(f"deps: {exc}") from None
        if dep.plan != ref.plan:  # a story depends on stories of its own plan
            raise Untrusted(f"deps: {_shown(dep_key)} is not a story of plan {ref.plan!r}")
        dep_records.append(record_for(dep, record, f"deps[{dep_key}]"))
    base_ref = p.get("base_ref") or ""
    if (
        not isinstance(base_ref, str)
        or len(base_ref) > 255
        or ".." in base_ref
        or base_ref.startswith(("-", "/"))
        or any(c.isspace() or ord(c) < 32 for c in base_ref)
    ):
        raise Untrusted(f"base_ref: not a branch name: {_shown(base_ref)}")
    memory = _mapping(p.get("memory"), 2, "memory")
    if memory.keys() - {"section", "recap"}:
        raise Untrusted("memory: expected only a section and a recap")
    return Contents(
        file_name=story_file_name(p.get("file_name"), ref),
        story_text=bounded_text(p.get("story_text") or "", MAX_STORY_BYTES, "story_text"),
        state=None if state is None else record_for(ref, state, "state"),
        files={
            name: bounded_text(text, MAX_FILE_BYTES, f"files[{name}]").encode("utf-8")
            for name, text in files.items()
        },
        deps=tuple(dep_records),
        base_ref=base_ref,
        memory_section=bounded_text(
            memory.get("section") or "", MAX_MEMORY_CHARS, "memory.section"
        ),
        memory_recap=bounded_text(memory.get("recap") or "", MAX_MEMORY_CHARS, "memory.recap"),
    )


def _mapping(value: object, most: int, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise Untrusted(f"{what}: expected an object")
    if len(value) > most:
        raise Untrusted(f"{what}: more than {most} entries")
    return value
