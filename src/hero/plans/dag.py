"""A plan's stories as a graph: each story id and the ids it depends on.

Pure functions over ``Mapping[str, Sequence[str]]`` (id -> its dependencies), in the
mapping's order wherever an order shows: the order the stories were declared in is the
order people read them in, and the order ties are broken in.

An edge runs from a dependency to its dependent: ``a -> b`` when ``b`` depends on ``a``.
A dependency that is not a node of the mapping is ignored by everything but
:func:`problems`, which reports it; so are self-dependencies and cycles, except that
:func:`layers` refuses a graph it cannot order (ValueError).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

Nodes = Mapping[str, Sequence[str]]

#: Titles longer than this are cut in the text drawing, so that the columns stay readable.
MAX_TITLE_CHARS = 60


# ----------------------------------------------------------------------------- checks


def problems(nodes: Nodes) -> list[str]:
    """Everything that keeps ``nodes`` from being a plan hero can run, one line each.

    Unknown dependencies and self-dependencies (per story, in order), then each cycle named
    by its path (``cycle: a -> b -> a``: a depends on b, which depends on a), then a graph
    with no root (no story without dependencies). An empty graph has no problems.
    """
    found: list[str] = []
    for node, deps in nodes.items():
        for dep in dict.fromkeys(deps):
            if dep == node:
                found.append(f"{node}: depends on itself")
            elif dep not in nodes:
                found.append(f"{node}: depends on {dep!r}, which is not a story of the plan")
    for cycle in _cycles(nodes):
        found.append(f"cycle: {' -> '.join(cycle)} (each story depends on the next)")
    if nodes and all(deps for deps in nodes.values()):
        found.append(
            "no root: every story depends on another, so none can start; at least one story "
            "must depend on none"
        )
    return found


def _edges(nodes: Nodes) -> dict[str, list[str]]:
    """Each node's known dependencies, once each, without itself."""
    return {
        node: [d for d in dict.fromkeys(deps) if d in nodes and d != node]
        for node, deps in nodes.items()
    }


def _dependents(nodes: Nodes) -> dict[str, list[str]]:
    """Each node's known dependents, in node order."""
    out: dict[str, list[str]] = {node: [] for node in nodes}
    for node, deps in _edges(nodes).items():
        for dep in deps:
            out[dep].append(node)
    return out


def _cycles(nodes: Nodes) -> list[list[str]]:
    """One cycle per group of stories that depend on each other in a circle, as a path that
    starts and ends at the group's first story (in node order)."""
    edges = _edges(nodes)
    order = {node: i for i, node in enumerate(nodes)}
    cycles = []
    for group in _strongly_connected(edges):
        if len(group) > 1:
            start = min(group, key=order.__getitem__)
            cycles.append(_cycle_through(start, group, edges))
    cycles.sort(key=lambda cycle: order[cycle[0]])
    return cycles


def _strongly_connected(edges: Mapping[str, Sequence[str]]) -> list[set[str]]:
    """Tarjan's algorithm, iterative: a long chain of stories cannot hit the recursion limit."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []
    for root in edges:
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(edges[root]))]
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group: set[str] = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == node:
                        break
                groups.append(group)
    return groups


def _cycle_through(start: str, group: set[str], edges: Mapping[str, Sequence[str]]) -> list[str]:
    """A shortest path start -> ... -> start inside ``group`` (breadth first)."""
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in edges[node]:
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if child in group and child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError(f"{start} is in a cycle group but no cycle was found")


# ----------------------------------------------------------------------------- order


def layers(nodes: Nodes) -> list[list[str]]:
    """The stories in topological layers: layer 0 depends on nothing, and each story sits
    one layer below its deepest dependency. Within a layer, stories keep the mapping's
    order. ValueError naming the stories when a cycle (or a self-dependency) leaves some
    impossible to order; unknown dependencies are ignored."""
    ordered, stuck = _layering(nodes)
    if stuck:
        raise ValueError(
            "cannot order the stories: a cycle runs through or above " + ", ".join(stuck)
        )
    return ordered


def partial_layers(nodes: Nodes) -> tuple[list[list[str]], list[str]]:
    """:func:`layers` of every story that can be ordered, and the stories in or below a
    cycle (which :func:`layers` refuses): for a view that draws a plan whatever it holds."""
    return _layering(nodes)


def _layering(nodes: Nodes) -> tuple[list[list[str]], list[str]]:
    """(layers of every story that can be ordered, the stories in or below a cycle)."""
    order = {node: i for i, node in enumerate(nodes)}
    waiting = {
        node: len([d for d in dict.fromkeys(deps) if d in nodes]) for node, deps in nodes.items()
    }
    dependents: dict[str, list[str]] = {node: [] for node in nodes}
    for node, deps in nodes.items():
        for dep in dict.fromkeys(deps):
            if dep in nodes:
                dependents[dep].append(node)
    out: list[list[str]] = []
    frontier = [node for node in nodes if waiting[node] == 0]
    while frontier:
        out.append(frontier)
        released: list[str] = []
        for node in frontier:
            for child in dependents[node]:
                waiting[child] -= 1
                if waiting[child] == 0:
                    released.append(child)
        frontier = sorted(released, key=order.__getitem__)
    placed = {node for layer in out for node in layer}
    return out, [node for node in nodes if node not in placed]


def descendants(nodes: Nodes, id: str) -> set[str]:
    """Every story that depends on ``id``, directly or through others (``id`` itself not)."""
    dependents = _dependents(nodes)
    seen: set[str] = set()
    todo = list(dependents.get(id, ()))
    while todo:
        node = todo.pop()
        if node not in seen and node != id:
            seen.add(node)
            todo.extend(dependents[node])
    return seen


def leaves(nodes: Nodes) -> list[str]:
    """The stories no other story depends on, in the mapping's order."""
    dependents = _dependents(nodes)
    return [node for node in nodes if not dependents[node]]


# ----------------------------------------------------------------------------- drawing


def render_text(
    nodes: Nodes,
    titles: Mapping[str, str] | None = None,
    statuses: Mapping[str, str] | None = None,
) -> str:
    """The graph as people read it in a terminal: the stories by layer, one line each,
    ``id  title  [status]  <- dep1, dep2``, so that a story with several dependencies
    names them all on its own line. Stories caught in a cycle come last, under their own
    heading. ``statuses`` None leaves the status column out."""
    if not nodes:
        return "(no stories)\n"
    titles = titles or {}
    ordered, stuck = _layering(nodes)
    groups = [(f"layer {i}", layer) for i, layer in enumerate(ordered, 1)]
    if stuck:
        groups.append(("in a cycle (cannot be ordered)", stuck))
    cut = {node: _cut(titles.get(node, "")) for node in nodes}
    marks = (
        {node: f"[{statuses.get(node) or '?'}]" for node in nodes} if statuses is not None else {}
    )
    id_w = max(len(node) for node in nodes)
    title_w = max(len(t) for t in cut.values())
    mark_w = max((len(m) for m in marks.values()), default=0)
    lines: list[str] = []
    for heading, members in groups:
        lines.append(heading)
        for node in members:
            row = f"  {node:<{id_w}}"
            if title_w:
                row += f"  {cut[node]:<{title_w}}"
            if statuses is not None:
                row += f"  {marks[node]:<{mark_w}}"
            deps = [
                dep if dep in nodes else f"{dep} (unknown)" for dep in dict.fromkeys(nodes[node])
            ]
            if deps:
                row += "  <- " + ", ".join(deps)
            lines.append(row.rstrip())
    return "\n".join(lines) + "\n"


def _cut(title: str) -> str:
    title = " ".join(title.split())
    if len(title) > MAX_TITLE_CHARS:
        return title[: MAX_TITLE_CHARS - 3] + "..."
    return title


#: Fill colours for a story's status, shared by the mermaid and dot drawings.
_STATUS_COLOURS = {
    "passed": "#c8e6c9",
    "running": "#bbdefb",
    "queued": "#fff9c4",
    "interrupted": "#fff9c4",
    "gave_up": "#ffcdd2",
    "error": "#ffcdd2",
    "unreadable": "#ffcdd2",
    "skipped": "#e0e0e0",
    "cancelled": "#e0e0e0",
}

#: Words mermaid reads as keywords where a node id stands; such ids get another name.
_MERMAID_KEYWORDS = frozenset(
    {
        "end",
        "graph",
        "flowchart",
        "subgraph",
        "direction",
        "style",
        "class",
        "classdef",
        "click",
        "linkstyle",
        "default",
        "call",
        "href",
    }
)


def render_mermaid(
    nodes: Nodes,
    titles: Mapping[str, str] | None = None,
    statuses: Mapping[str, str] | None = None,
) -> str:
    """The graph as a mermaid flowchart (``graph TD``), a dependency pointing to its
    dependent (``a --> b``); each node labelled with its id, title and status, every
    character mermaid would read as syntax written as an entity code."""
    titles = titles or {}
    names = _mermaid_ids(nodes)
    lines = ["graph TD"]
    for node in nodes:
        label = node + (f": {titles[node]}" if titles.get(node) else "")
        text = _mermaid_text(label)
        if statuses is not None:
            text += "<br/>" + _mermaid_text(f"[{statuses.get(node) or '?'}]")
        lines.append(f'  {names[node]}["{text}"]')
    for node, deps in _edges(nodes).items():
        lines.extend(f"  {names[dep]} --> {names[node]}" for dep in deps)
    if statuses is not None:
        by_status: dict[str, list[str]] = {}
        for node in nodes:
            status = statuses.get(node) or ""
            if status in _STATUS_COLOURS:
                by_status.setdefault(status, []).append(names[node])
        for status, members in by_status.items():
            lines.append(f"  classDef {status} fill:{_STATUS_COLOURS[status]}")
            lines.append(f"  class {','.join(members)} {status}")
    return "\n".join(lines) + "\n"


def _mermaid_ids(nodes: Nodes) -> dict[str, str]:
    """A mermaid node id per story: the story's own id where mermaid reads it as one (letters,
    digits and '_', not a keyword), else one made of it that no other story uses."""

    def plain(node: str) -> bool:
        return re.fullmatch(r"[A-Za-z0-9_]+", node) is not None and (
            node.lower() not in _MERMAID_KEYWORDS
        )

    names = {node: node for node in nodes if plain(node)}
    taken = set(names.values())
    for node in nodes:
        if node in names:
            continue
        base = "s_" + re.sub(r"[^A-Za-z0-9_]", "_", node)
        name, n = base, 1
        while name in taken:
            n += 1
            name = f"{base}_{n}"
        names[node] = name
        taken.add(name)
    return names


def _mermaid_text(text: str) -> str:
    """Text safe inside a mermaid ``["..."]`` label."""
    return (
        text.replace("#", "#35;").replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;")
    )


def render_dot(
    nodes: Nodes,
    titles: Mapping[str, str] | None = None,
    statuses: Mapping[str, str] | None = None,
    *,
    name: str = "plan",
) -> str:
    """The graph in Graphviz's dot language (``digraph``), a dependency pointing to its
    dependent; every id and label a quoted, escaped string."""
    titles = titles or {}
    lines = [
        f"digraph {_dot_quote(name)} {{",
        "  rankdir=TB;",
        '  node [shape=box, style="rounded,filled", fillcolor="#ffffff"];',
    ]
    for node in nodes:
        label = node + (f"\n{titles[node]}" if titles.get(node) else "")
        attrs = ""
        if statuses is not None:
            status = statuses.get(node) or "?"
            label += f"\n[{status}]"
            if status in _STATUS_COLOURS:
                attrs = f", fillcolor={_dot_quote(_STATUS_COLOURS[status])}"
        lines.append(f"  {_dot_quote(node)} [label={_dot_quote(label)}{attrs}];")
    for node, deps in _edges(nodes).items():
        lines.extend(f"  {_dot_quote(dep)} -> {_dot_quote(node)};" for dep in deps)
    lines.append("}")
    return "\n".join(lines) + "\n"


def _dot_quote(text: str) -> str:
    """A dot quoted string: backslashes and quotes escaped, line breaks as ``\\n``."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    escaped = escaped.replace("\r\n", "\n").replace("\r", "\n").replace("\n", "\\n")
    return f'"{escaped}"'
