"""The dependency rule: whether a story's dependencies let it run now.

One owner for the rule. ``hero watch``, ``hero run-plan``, ``hero run`` and ``hero status``
all ask :func:`gate`, so what status says a story waits for is what it waits for.

A story may run once every story it depends on has passed (``READY``). While one has not
ended yet, it waits (``WAIT``). When one has failed (gave up or ended in error, and its file
is unchanged since, so it will not run again without an edit or ``hero retry``), or has been
skipped for such a failure further up, the story is skipped (``SKIP``), naming the ancestor
that failed and its status. A dependency hero does not know at all is ``UNKNOWN``: reported,
not waited on forever; so is a cycle of dependencies (``UNKNOWN`` with ``cycle``).

A story of a plan depends on stories of its own plan; a loose story on loose stories.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from hero.names import StoryRef
from hero.state import RunState, StateError, Status, file_digest, load_state
from hero.story.record import Story


class Gate(StrEnum):
    READY = "ready"
    WAIT = "wait"
    SKIP = "skip"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Decision:
    gate: Gate
    reason: str = ""
    #: the dependencies that have not passed, each with what it is: "a (running)"
    waits_for: tuple[str, ...] = ()
    #: for SKIP: the ancestor that failed, and its status
    failed: tuple[StoryRef, str] | None = field(default=None, compare=False)
    #: for UNKNOWN: the cycle of dependencies the story is in or under, as ids: a, b, a
    cycle: tuple[str, ...] = ()


#: The endings that stay failed until an edit or a retry (their dependents are skipped).
_FAILED = frozenset({Status.GAVE_UP, Status.ERROR, Status.BUDGET_EXCEEDED, Status.CANCELLED})


def failed_status(state: RunState | None) -> str | None:
    """The status of a story that failed and stays failed until an edit or a retry, or None."""
    if state is None or state.status not in _FAILED:
        return None
    if state.story_digest and state.story_path:
        if file_digest(Path(state.story_path)) != state.story_digest:
            return None  # edited since it ended: it runs again
    return str(state.status)


class Rule:
    """The rule over one home, remembering what it read (make a new one to look again).

    ``known(ref)`` says whether a story with no run record exists anyway (its file is in
    the inbox, or in a plan folder); ``deps_of(ref)`` gives the dependencies of a story the
    rule meets only as a dependency (None: not known), so that a skip can be traced up the
    DAG through stories whose records still say ``skipped`` from an earlier failure.
    """

    def __init__(
        self,
        home: Path,
        *,
        known: Container[StoryRef] = (),
        deps_of: Callable[[StoryRef], tuple[str, ...] | None] | None = None,
    ) -> None:
        self.home = home
        self.known = known
        self.deps_of = deps_of or (lambda _ref: None)
        self._states: dict[StoryRef, RunState | None] = {}
        self._gates: dict[StoryRef, Decision] = {}

    @classmethod
    def over(cls, home: Path, stories: Iterable[Story]) -> Rule:
        """The rule knowing ``stories`` (the story files there are: queued, running, in the
        inbox); of two with one key, the first is kept."""
        known: dict[StoryRef, Story] = {}
        for story in stories:
            known.setdefault(story.ref, story)

        def deps_of(ref: StoryRef) -> tuple[str, ...] | None:
            story = known.get(ref)
            return None if story is None else story.depends_on

        return cls(home, known=known.keys(), deps_of=deps_of)

    def state(self, ref: StoryRef) -> RunState | None:
        if ref not in self._states:
            try:
                self._states[ref] = load_state(self.home, ref)
            except StateError:
                self._states[ref] = None
        return self._states[ref]

    def gate(self, story: Story) -> Decision:
        return self._gate(story.ref, story.depends_on, ())

    def _gate(self, ref: StoryRef, deps: tuple[str, ...], path: tuple[StoryRef, ...]) -> Decision:
        if ref in self._gates:
            return self._gates[ref]
        waits: list[str] = []
        unknown: list[str] = []
        for dep_id in deps:
            dep = StoryRef(ref.plan, dep_id)
            state = self.state(dep)
            if state is not None and state.status == Status.PASSED:
                continue
            status = failed_status(state)
            if status is not None:
                return self._decide(
                    ref, Decision(Gate.SKIP, _failed(dep, status), failed=(dep, status))
                )
            above_deps = self.deps_of(dep)
            if above_deps is not None and (dep in path or dep == ref):
                # a cycle: none of its stories can ever run; said, never waited on
                chain = (*path[path.index(dep) :], ref, dep) if dep in path else (ref, dep)
                return self._decide(ref, _in_cycle(tuple(r.id for r in chain)))
            if above_deps is not None:
                # a dependency that has not run yet (or was skipped before): skipped too if
                # something above it failed, whatever order the stories are looked at in
                above = self._gate(dep, above_deps, (*path, ref))
                if above.gate == Gate.SKIP and above.failed is not None:
                    failed, status = above.failed
                    reason = f"{_failed(failed, status)} (through '{dep.key}')"
                    return self._decide(ref, Decision(Gate.SKIP, reason, failed=above.failed))
                if above.cycle:
                    if ref.id in above.cycle:
                        return self._decide(ref, _in_cycle(above.cycle))
                    reason = (
                        f"depends on '{dep.key}', which is in a cycle of dependencies: "
                        f"{' -> '.join(above.cycle)}; fix depends_on"
                    )
                    decision = Decision(Gate.UNKNOWN, reason, cycle=above.cycle)
                    return self._decide(ref, decision)
            if state is None and dep not in self.known and above_deps is None:
                unknown.append(dep_id)
                continue
            waits.append(f"{dep_id} ({state.status if state is not None else 'not run yet'})")
        if unknown:
            where = f"plan '{ref.plan}'" if ref.plan else "this home"
            decision = Decision(
                Gate.UNKNOWN,
                f"depends on {', '.join(repr(u) for u in unknown)}, which is no story of "
                f"{where} (no run record, no story file); fix depends_on",
                tuple(waits) + tuple(f"{u} (unknown)" for u in unknown),
            )
        elif waits:
            decision = Decision(Gate.WAIT, "waits for " + ", ".join(waits), tuple(waits))
        else:
            decision = Decision(Gate.READY)
        return self._decide(ref, decision)

    def _decide(self, ref: StoryRef, decision: Decision) -> Decision:
        self._gates[ref] = decision
        return decision


def _in_cycle(chain: tuple[str, ...]) -> Decision:
    reason = f"its dependencies form a cycle: {' -> '.join(chain)}; fix depends_on"
    return Decision(Gate.UNKNOWN, reason, cycle=chain)


def _failed(dep: StoryRef, status: str) -> str:
    return f"story '{dep.key}' {_said(status)}"


def _said(status: str) -> str:
    if status == Status.GAVE_UP:
        return "gave up"
    return "was cancelled" if status == Status.CANCELLED else f"ended in {status}"
