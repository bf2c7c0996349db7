"""A plan's DAG as an SVG picture made by hero: no JavaScript, no layout library.

Layered top to bottom by longest path (each story one layer below its deepest dependency,
:func:`hero.plans.dag.partial_layers`); the stories caught in a cycle in a last row of
their own. Each node is a box coloured by its status (a CSS class, ``status-<status>``,
in the shipped stylesheet: the page's Content-Security-Policy allows no inline style) and
links to the story's page; each dependency is an arrow from the dependency down to the
story. Every text in it (ids, titles, statuses) is escaped: a title is hostile input.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from html import escape
from urllib.parse import quote

NODE_W = 200
NODE_H = 48
GAP_X = 28
GAP_Y = 56
MARGIN = 16
TITLE_CHARS = 28
_CLASS_RE = re.compile(r"[^a-z0-9_-]")


def status_class(status: str) -> str:
    """``status-passed``: the CSS class of a status (anything else reduced to safe characters)."""
    return "status-" + (_CLASS_RE.sub("-", status.lower()) or "unknown")


def render_svg(
    plan: str,
    layers: Sequence[Sequence[str]],
    stuck: Sequence[str],
    deps: Mapping[str, Sequence[str]],
    titles: Mapping[str, str],
    statuses: Mapping[str, str],
) -> str:
    """The SVG of a plan: ``layers`` (top first) and ``stuck`` (a last row) of story ids,
    ``deps`` each story's dependencies (unknown ones are not drawn)."""
    rows = [list(layer) for layer in layers] + ([list(stuck)] if stuck else [])
    widest = max((len(row) for row in rows), default=0)
    # room on the right for the edges that bow aside round a layer they skip
    width = MARGIN * 2 + max(widest, 1) * NODE_W + max(widest - 1, 0) * GAP_X + NODE_W // 2
    height = MARGIN * 2 + max(len(rows), 1) * NODE_H + max(len(rows) - 1, 0) * GAP_Y
    where: dict[str, tuple[float, float]] = {}
    for r, row in enumerate(rows):
        row_w = len(row) * NODE_W + max(len(row) - 1, 0) * GAP_X
        left = (width - row_w) / 2
        for c, node in enumerate(row):
            where[node] = (left + c * (NODE_W + GAP_X), MARGIN + r * (NODE_H + GAP_Y))
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="dag" role="img" '
        f'width="{width:g}" height="{height:g}" viewBox="0 0 {width:g} {height:g}" '
        f'aria-label="{escape("plan " + plan)}">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" '
        'markerWidth="8" markerHeight="8" orient="auto-start-reverse">'
        '<path d="M 0 0 L 10 5 L 0 10 z" class="arrow"/></marker></defs>',
    ]
    for node, node_deps in deps.items():
        if node not in where:
            continue
        x, y = where[node]
        for dep in dict.fromkeys(node_deps):
            if dep not in where or dep == node:
                continue
            dx, dy = where[dep]
            x1, y1, x2, y2 = dx + NODE_W / 2, dy + NODE_H, x + NODE_W / 2, y
            if y - dy > NODE_H + GAP_Y:  # it skips a layer: bowed aside, not hidden behind one
                bow = NODE_W * 0.75 if x2 >= x1 else -NODE_W * 0.75
                path = (
                    f"M {x1:g} {y1:g} C {x1 + bow:g} {y1 + GAP_Y:g}, "
                    f"{x2 + bow:g} {y2 - GAP_Y:g}, {x2:g} {y2:g}"
                )
            else:
                path = f"M {x1:g} {y1:g} L {x2:g} {y2:g}"
            out.append(f'<path class="edge" d="{path}" marker-end="url(#arrow)"/>')
    for node, (x, y) in where.items():
        status = statuses.get(node) or "unknown"
        title = " ".join((titles.get(node) or "").split())
        short = title if len(title) <= TITLE_CHARS else title[: TITLE_CHARS - 1] + "…"
        href = "/stories/" + quote(f"{plan}/{node}", safe="/")
        out.append(
            f'<a href="{escape(href)}" class="node {status_class(status)}">'
            f"<title>{escape(f'{node}: {title} [{status}]')}</title>"
            f'<rect x="{x:g}" y="{y:g}" width="{NODE_W}" height="{NODE_H}" rx="6"/>'
            f'<text x="{x + 8:g}" y="{y + 19:g}" class="id">{escape(_short(node))} '
            f'<tspan class="st">[{escape(status)}]</tspan></text>'
            f'<text x="{x + 8:g}" y="{y + 37:g}" class="title">{escape(short)}</text>'
            "</a>"
        )
    out.append("</svg>")
    return "\n".join(out)


def _short(node: str) -> str:
    return node if len(node) <= 22 else node[:21] + "…"
