"""Prompt templates: files in the package, overridable per home (``<home>/prompts/<name>``).

A template and the values a role gives it must match exactly: a placeholder with no value
(a typo such as ``{{verfiy}}``) and a value the template never shows (a dropped
``{{feedback}}`` would hide the reviewer's feedback from the worker) are both a PromptError
naming the template's file, rather than a prompt that silently says less than it should.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from hero.errors import HeroError
from hero.yamlio import ValueProblem, read_file

_PACKAGE_PROMPTS = Path(__file__).parents[1] / "prompts"
#: The largest template hero reads (the built-in ones are a few kilobytes).
MAX_TEMPLATE_BYTES = 262_144
#: ``{{name}}``, spaces inside the braces allowed.
_PLACEHOLDER = re.compile(r"\{\{\s*(\w+)\s*\}\}")


class PromptError(HeroError):
    """A prompt template does not fit the values given for it; the message names the file."""


@dataclass(frozen=True)
class Template:
    name: str  # e.g. "worker_task.md"
    path: Path  # the file it was read from: the home's override or the built-in one
    text: str

    @property
    def overridden(self) -> bool:
        return self.path.parent != _PACKAGE_PROMPTS

    def placeholders(self) -> frozenset[str]:
        return frozenset(m.group(1) for m in _PLACEHOLDER.finditer(self.text))

    def render(self, **values: object) -> str:
        """Fill every ``{{name}}``; raises PromptError unless the template uses exactly the
        names in ``values``. Values are inserted as they are, never rendered again."""
        used = self.placeholders()
        unknown, unused = used - values.keys(), values.keys() - used
        if unknown or unused:
            raise PromptError(self._mismatch(unknown, unused, values.keys()))
        return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), self.text)

    def _mismatch(self, unknown: Iterable[str], unused: Iterable[str], given: Iterable[str]) -> str:
        where = (
            f"{self.path} (the home's override of {self.name})"
            if self.overridden
            else (f"{self.path} (built in)")
        )
        problems = []
        if unknown:
            problems.append(f"unknown placeholder(s) {_braced(unknown)}, which hero gives no value")
        if unused:
            problems.append(f"placeholder(s) {_braced(unused)} missing from the template")
        wanted = f"it must use exactly {_braced(given)}" if given else "it must use no placeholders"
        return f"{where}: {'; '.join(problems)}; {wanted}"


def load_template(name: str, home: Path | None = None) -> Template:
    """``<home>/prompts/<name>`` when that file exists, else the built-in template."""
    path = _PACKAGE_PROMPTS / name
    if home is not None and (home / "prompts" / name).is_file():
        path = home / "prompts" / name
    try:
        # a regular file, read with a limit: a FIFO or a huge file never stalls a role
        text = read_file(path, limit=MAX_TEMPLATE_BYTES, what="prompt template").decode("utf-8")
    except ValueProblem as exc:
        raise PromptError(f"{path}: cannot read the prompt template: {exc.message}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PromptError(f"{path}: cannot read the prompt template: {exc}") from None
    return Template(name, path, text)


def render(name: str, home: Path | None, /, **values: object) -> str:
    """Load template ``name`` (see ``load_template``) and fill it with ``values``."""
    return load_template(name, home).render(**values)


def render_added(name: str, home: Path | None, added: dict[str, str], /, **values: object) -> str:
    """Like :func:`render`, with ``added``: placeholders newer than a home's override may
    be (the memory's ``{{memory}}``). The built-in template places each; an override
    without one gets its text at the end, so that an override written before it still
    works, and what it adds is never silently dropped. An empty value adds nothing: the
    prompt is then byte for byte what it was before the placeholder existed."""
    template = load_template(name, home)
    used = template.placeholders()
    text = template.render(**values, **{k: v for k, v in added.items() if k in used})
    return text + "".join(v for k, v in added.items() if k not in used and v)


def _braced(names: Iterable[str]) -> str:
    return ", ".join(f"{{{{{n}}}}}" for n in sorted(names))
