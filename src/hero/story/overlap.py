"""Whether two stories' scopes overlap: the one rule ``hero status``, the status page, the
event stream and ``hero watch`` (with ``overlap: serial``) ask.

A scope is a list of the globs of :mod:`hero.agent.tools.scope` (gitignore-style: ``*`` and
``?`` within a path component, ``**`` across, ``[...]``, ``{a,b}``; a glob without ``/``
matches a name at any depth; one with ``/`` is anchored at the root; a glob that matches a
directory covers everything under it). The rule is conservative: two scopes overlap when
some path *could* match a glob of each, and whatever the rule cannot decide counts as an
overlap. So:

- an unscoped story (``scope`` empty) overlaps every story on its repository; a glob that
  is the whole tree (``.``, ``/``, ``**``) too;
- stories on different target repositories never overlap;
- a glob without ``/`` (``*.py``, ``README.md``) overlaps every glob: it matches a name at
  any depth, and a directory so named may hold a file the other matches (``x.py/y.md``);
- two anchored globs are compared component by component from the root: they overlap
  unless, at some component before either reaches a ``**``, no name can match both
  (``src/app`` and ``src/web``; ``docs/*.md`` and ``docs/*.txt``; ``a*`` and ``b*``). When
  one runs out first, the other names something under what it covers (``src`` and
  ``src/app/x.py``): an overlap. Two components with wildcards are told apart only by
  their fixed starts and ends (``*.py`` and ``*.md`` never meet; ``a*`` and ``*b`` may).

Nothing here reads a file: the scopes come from the stories as parsed.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

#: A glob's ``{a,b}`` choices are expanded up to this many alternatives; past it, the rule
#: says "overlap" rather than spend time on a pathological glob.
MAX_ALTERNATIVES = 64
_WILD = "*?["


@dataclass(frozen=True)
class Scoped:
    """A story queued or running, as the rule sees it: its key, its target repository (any
    string naming it; stories of one home all have the home's), and its scope."""

    key: str
    repo: str
    scope: tuple[str, ...]


#: A scope as the rule compares it: each glob's alternatives as path components from the
#: root; None: it may touch any path (unscoped, the whole tree, a name at any depth, or a
#: glob the rule cannot decide).
Compiled = tuple[tuple[str, ...], ...] | None


def overlapping(stories: Iterable[Scoped]) -> dict[str, tuple[str, ...]]:
    """Each story's key -> the keys of the others whose scopes overlap its own (in the
    order given); a story that overlaps none is left out.

    Every pair is decided by :func:`compiled_overlap`, but only the pairs that may meet are
    looked at: two paths whose fixed starts (their components up to the first wildcard)
    part somewhere never meet, so each path is filed in a tree of fixed starts and compared
    only with the paths filed above or below it. A queue of hundreds of scoped stories then
    costs about as many comparisons as it has overlaps."""
    items = list(stories)
    pairs: set[tuple[int, int]] = set()
    by_repo: dict[str, list[int]] = {}
    for n, story in enumerate(items):
        by_repo.setdefault(story.repo, []).append(n)
    for members in by_repo.values():
        pairs |= _pairs_in_repo([(n, compile_scope(items[n].scope)) for n in members])
    found: dict[str, list[str]] = {}
    for i, j in sorted(pairs):
        a, b = items[i].key, items[j].key
        if a != b:
            found.setdefault(a, []).append(b)
            found.setdefault(b, []).append(a)
    order = {s.key: n for n, s in reversed(list(enumerate(items)))}
    return {k: tuple(sorted(set(v), key=order.__getitem__)) for k, v in found.items()}


@dataclass
class _Node:
    """A fixed start in the tree of :func:`_pairs_in_repo`: the paths filed here (whose
    fixed start it is, with their story's index) and the longer fixed starts below."""

    here: list[tuple[int, tuple[str, ...]]]
    below: dict[str, _Node]

    def all_under(self) -> Iterator[tuple[int, tuple[str, ...]]]:
        stack = [self]
        while stack:
            node = stack.pop()
            yield from node.here
            stack.extend(node.below.values())


def _pairs_in_repo(items: list[tuple[int, Compiled]]) -> set[tuple[int, int]]:
    """The ``(i, j)`` (``i < j``) of the stories of one repository whose scopes overlap."""
    pairs: set[tuple[int, int]] = set()
    everywhere = [n for n, compiled in items if compiled is None]
    for n, _ in items:  # a story that may touch any path overlaps every other
        pairs.update((min(n, m), max(n, m)) for m in everywhere if m != n)
    root = _Node([], {})
    scoped = [(n, compiled) for n, compiled in items if compiled is not None]
    for n, compiled in scoped:
        for path in compiled:
            node = root
            for part in _fixed(path):
                node = node.below.setdefault(part, _Node([], {}))
            node.here.append((n, path))
    for n, compiled in scoped:
        for path in compiled:
            for m, other in _candidates(root, _fixed(path)):
                pair = (min(n, m), max(n, m))
                if m != n and pair not in pairs and _paths_meet(path, other):
                    pairs.add(pair)
    return pairs


def _fixed(path: tuple[str, ...]) -> tuple[str, ...]:
    """The path's components up to its first one with a wildcard."""
    for n, part in enumerate(path):
        if _wild(part):
            return path[:n]
    return path


def _candidates(root: _Node, fixed: tuple[str, ...]) -> Iterator[tuple[int, tuple[str, ...]]]:
    """The paths filed on the way to ``fixed`` and under it: the only ones that may meet a
    path whose fixed start it is."""
    node = root
    for part in fixed:
        yield from node.here
        if part not in node.below:
            return
        node = node.below[part]
    yield from node.all_under()


def stories_overlap(a: Scoped, b: Scoped) -> bool:
    """Whether the two stories may change one path: same repository, overlapping scopes."""
    return a.repo == b.repo and scopes_overlap(a.scope, b.scope)


def scopes_overlap(a: Sequence[str], b: Sequence[str]) -> bool:
    """Whether some path could be in both scopes (an empty scope is the whole tree)."""
    return compiled_overlap(compile_scope(a), compile_scope(b))


def globs_overlap(a: str, b: str) -> bool:
    """Whether some path could match both globs (what the rule cannot decide: True)."""
    return compiled_overlap(compile_scope((a,)), compile_scope((b,)))


def compile_scope(scope: Sequence[str]) -> Compiled:
    """``scope`` as the rule compares it (see :data:`Compiled`)."""
    if not scope:
        return None
    paths: list[tuple[str, ...]] = []
    for glob in scope:
        anchored = _anchored(glob)
        alternatives = None if anchored is None else _alternatives(anchored)
        if alternatives is None:  # the whole tree, a name at any depth, or undecided
            return None
        paths += (tuple(alt.split("/")) for alt in alternatives)
    return tuple(paths)


def compiled_overlap(a: Compiled, b: Compiled) -> bool:
    if a is None or b is None:
        return True
    return any(_paths_meet(x, y) for x in a for y in b)


def _anchored(text: str) -> str | None:
    """The glob as a path from the root (no leading ``./`` or ``/``, no trailing ``/``), or
    None when it matches everywhere: the whole tree, or a name at any depth. Read as
    :class:`hero.agent.tools.scope._Glob` reads it."""
    raw = text.strip()
    pat = raw
    while pat.startswith("./"):
        pat = pat[2:]
    pat = pat.rstrip("/")
    by_name = "/" not in pat and not raw.startswith(("/", "./"))
    pat = pat.lstrip("/")
    if by_name or pat in ("", ".", "**"):
        return None
    return pat


def _alternatives(pat: str) -> list[str] | None:
    """The glob with its ``{a,b}`` choices expanded; None when that is not decidable here
    (a class and a brace in one glob) or would make more than MAX_ALTERNATIVES."""
    if "{" not in pat:
        return [pat]
    if "[" in pat:
        return None
    out = _expand(pat)
    return out if out is not None and len(out) <= MAX_ALTERNATIVES else None


def _expand(pat: str) -> list[str] | None:
    start = pat.find("{")
    end = pat.find("}", start) if start >= 0 else -1
    if end < 0:  # no brace, or one never closed: a plain character
        return [pat]
    heads = []
    for alt in pat[start + 1 : end].split(","):
        expanded = _expand(alt)
        if expanded is None:
            return None
        heads += expanded
    tails = _expand(pat[end + 1 :])
    if tails is None or len(heads) * len(tails) > MAX_ALTERNATIVES:
        return None
    return [pat[:start] + h + t for h in heads for t in tails]


def _paths_meet(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    for x, y in zip(a, b, strict=False):
        if x == y and "**" not in x:
            continue
        if "**" in x or "**" in y:  # spans components: not decided here
            return True
        if not _names_meet(x, y):
            return False
    return True  # one covers a directory above the other's paths


def _names_meet(x: str, y: str) -> bool:
    """Whether one path component could match both patterns."""
    x_wild, y_wild = _wild(x), _wild(y)
    if not x_wild and not y_wild:
        return x == y
    if not x_wild and "[" not in y:  # * and ? never meet a "/" within one component
        return fnmatch.fnmatchcase(x, y)
    if not y_wild and "[" not in x:
        return fnmatch.fnmatchcase(y, x)
    # two patterns (or a class): only their fixed starts and ends can tell them apart
    px, py = _fixed_start(x), _fixed_start(y)
    sx, sy = _fixed_end(x), _fixed_end(y)
    return (px.startswith(py) or py.startswith(px)) and (sx.endswith(sy) or sy.endswith(sx))


def _wild(name: str) -> bool:
    return "*" in name or "?" in name or "[" in name


def _fixed_start(name: str) -> str:
    """The characters before the first wildcard (a ``[`` counts, closed or not)."""
    cut = min((i for i in (name.find(c) for c in _WILD) if i >= 0), default=len(name))
    return name[:cut]


def _fixed_end(name: str) -> str:
    """The characters after the last ``*``, ``?`` or ``]``: no more than the fixed end."""
    cut = max(name.rfind(c) for c in "*?]")
    return name[cut + 1 :]
