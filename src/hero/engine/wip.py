"""A worker's work in progress, kept off its machine: a round resumed elsewhere goes on with
the worktree as the last finished turn left it.

Why a git commit on the remote, not files in Redis: the worktree is git's to describe
(deletions, modes, symlinks, untracked files), a commit on the story branch's tip costs only
the objects that changed (``git add`` from a copy of the index reads only changed files; a
push sends only new objects), and every worker already reaches the remote. Redis holds only
the snapshot's mark, sealed like everything else a worker publishes.

After each worker turn (between two of its commands: nothing of the worker runs) the worker
commits the worktree's tree on the branch's tip, as a commit on no branch
(hero.git.wip), checked for secret values as hero's own commits are (a snapshot holding one
is not taken: its mark says so), and keeps it at ``refs/hero/wip/<branch>`` in its clone.
Its publisher pushes that ref to the remote, then publishes the mark in ``P:wip:K``:
the snapshot, the tip it is on, the round and the run record it belongs to.

The next worker of a round that stopped mid-conversation takes the snapshot only when its
mark is sealed, names this round of this run record, and is on the branch's tip as the
remote has it now; the commit it fetches must be the one the mark names, with that tip as
its only parent. Then the worktree is made the snapshot's, uncommitted. Otherwise the
worktree is the branch as pushed, and the note that tells the model it was restarted says
honestly what was lost and why.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hero.engine.store import Store
from hero.engine.trust import Untrusted
from hero.git.ops import GitError, commit_of, git, is_oid
from hero.git.remote import push_env
from hero.git.wip import Snapshot, WipRefused
from hero.redact import Redactor

if TYPE_CHECKING:
    from hero.run.pipeline import StoryRun

LOG = logging.getLogger("hero.worker")
#: Where a snapshot is kept, in a worker's clone and on the remote (``refs/hero/`` is hero's).
WIP_REFS = "refs/hero/wip/"

#: What the restart note says of the worktree (see hero.agent.replay.restart_note).
RESTORED = (
    "This round goes on on another machine. hero put the worktree back as your last "
    "finished turn left it: the changes you had not committed are there again, uncommitted "
    "(your commits of this round too, as changes: they had not left the machine); what a "
    "call that was still running did is not. Check it (git status, git diff, the files you "
    "were changing) before going on."
)
CLEAN = (
    "This round goes on on another machine, in a fresh checkout of {branch} at {tip}: you "
    "had nothing uncommitted when your last finished turn ended, so only what a call that "
    "was still running did is lost. Check it (git status, git log) before going on."
)
LOST = (
    "This round goes on on another machine, in a fresh checkout of {branch} at {tip}, its "
    "last pushed commit: {why}, so the changes you made in this round and had not "
    "committed, and your commits of this round, are not there. Check what is (git status, "
    "git log) and make them again."
)


@dataclass(frozen=True)
class WipMark:
    """What a worker publishes of its last snapshot."""

    sha: str  # the snapshot ("" when the worktree was the tip's, or it was refused)
    tip: str  # the story branch's tip it is on, as pushed
    round: int
    started: float | None  # the run record's started_at
    base: str  # the run record's base_sha
    refused: str = ""  # why no snapshot was taken (a secret value), "" when one was

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def parse(cls, text: str) -> WipMark:
        """The mark ``text`` holds; Untrusted when it is not one."""
        try:
            raw: Any = json.loads(text)
        except ValueError:
            raise Untrusted("not JSON") from None
        if not isinstance(raw, dict) or set(raw) != set(cls.__dataclass_fields__):
            raise Untrusted("not a snapshot's mark")
        sha, tip, base, refused = raw["sha"], raw["tip"], raw["base"], raw["refused"]
        number, started = raw["round"], raw["started"]
        if not (isinstance(sha, str) and (sha == "" or is_oid(sha))):
            raise Untrusted("its snapshot is not a commit id")
        if not (isinstance(tip, str) and is_oid(tip) and isinstance(base, str) and is_oid(base)):
            raise Untrusted("its tip or base is not a commit id")
        if not (isinstance(number, int) and not isinstance(number, bool) and number > 0):
            raise Untrusted("its round is not a round number")
        if not (started is None or (isinstance(started, int | float) and started >= 0)):
            raise Untrusted("its start is not a time")
        if not isinstance(refused, str) or len(refused) > 2000:
            raise Untrusted("its reason is not a short text")
        return cls(sha, tip, number, None if started is None else float(started), base, refused)


class WipKeeper:
    """One story's snapshots on one worker: taken after each turn (the pipeline's thread),
    published by the run's publisher, and put back when a round resumes here."""

    def __init__(
        self,
        store: Store,
        key: str,
        branch: str,
        owner: str,
        dispatch: str,
        clone: Path,
        clone_lock: threading.Lock,
        redactor: Redactor,
    ) -> None:
        self.store = store
        self.key = key
        self.branch = branch
        self.owner = owner
        self.dispatch = dispatch
        self.clone = clone
        self.clone_lock = clone_lock
        self.redactor = redactor
        self.ref = f"{WIP_REFS}{branch}"
        self._lock = threading.Lock()
        self._taken: Snapshot | None = None  # the last snapshot taken (the agent's thread)
        self._made: WipMark | None = None  # its mark
        self._published: WipMark | None = None  # the last one published
        self._problem = ""

    # -- after each turn (the pipeline's thread) ---------------------------------------------

    def take(self, run: StoryRun) -> None:
        """Snapshot the worktree as the turn left it (nothing of the worker runs now)."""
        state = run.state
        try:
            taken = run.workspace.snapshot(self.ref, self._taken)
            self._taken = taken
            tip, sha = taken.tip, taken.sha
            refused = ""
        except WipRefused as exc:
            tip, sha = run.workspace.repo.branch_sha(self.branch) or "", ""
            refused = f"hero did not keep a snapshot of them: {exc}"
        except Exception as exc:  # noqa: BLE001 - a snapshot never ends a story; the next
            # turn tries again, and the mark published stays that of the last one taken
            self._say(f"could not snapshot the worktree: {type(exc).__name__}: {exc}")
            return
        if not tip or not state.base_sha:
            return
        mark = WipMark(sha, tip, state.current_round, state.started_at, state.base_sha, refused)
        with self._lock:
            self._made = mark

    # -- the publisher's thread ---------------------------------------------------------------

    def publish(self, pushed: str) -> None:
        """The last snapshot on the remote, then its mark in Redis, once the tip it is on
        is the branch as ``pushed`` (one caller at a time: the run's publish lock). Raises
        what the push or Redis raise; the next pass tries again."""
        with self._lock:
            mark = self._made
        if mark is None or mark == self._published or mark.tip != pushed:
            return
        if mark.sha:
            with self.clone_lock:
                here = commit_of(self.clone, self.ref)
            if here != mark.sha:  # a newer snapshot replaced it: the next pass takes that
                return
            git(
                self.clone,
                "push",
                "--quiet",
                "--force",
                "origin",
                f"{mark.sha}:{self.ref}",
                env=push_env(self.clone, "origin"),
                timeout_s=600,
            )
        self.store.put_wip(self.key, self.owner, self.dispatch, mark.to_json())
        self._published = mark

    def drop(self) -> None:
        """The story is over: its snapshot on the remote goes (best effort: a stale one is
        never taken, its mark names a round that has ended)."""
        try:
            git(
                self.clone,
                "push",
                "--quiet",
                "origin",
                f":{self.ref}",
                env=push_env(self.clone, "origin"),
                timeout_s=120,
                check=False,
            )
        except GitError as exc:
            self._say(f"could not drop {self.ref} from the remote: {exc}")

    # -- before a round goes on here (the pipeline's thread) ------------------------------------

    def restore(self, run: StoryRun, n: int) -> str:
        """Put the last snapshot of round ``n`` back into the worktree when it can be trusted
        and still applies; returns what the restart note says of the worktree."""
        state = run.state
        tip = run.workspace.repo.branch_sha(self.branch) or ""
        where = self.store.key("wip", self.key)

        def lost(why: str) -> str:
            run.say(f"{self.key}: round {n}: the uncommitted work was not kept: {why}")
            return LOST.format(branch=self.branch, tip=tip[:12], why=why)

        try:
            sealed = self.store.wip(self.key)
            mark = None if sealed is None else WipMark.parse(sealed.value)
        except Untrusted as exc:
            LOG.warning("%s: refused %s: %s", self.key, where, exc)
            return lost("the last snapshot of the worktree published could not be trusted")
        except Exception as exc:  # noqa: BLE001 - Redis away: the round goes on without it
            return lost(f"the last snapshot of the worktree could not be read ({exc})")
        if mark is None:
            return lost("no snapshot of the worktree was published before the stop")
        if (mark.round, mark.started, mark.base) != (n, state.started_at, state.base_sha):
            return lost("the last snapshot of the worktree published is of another round")
        if mark.tip != tip:
            return lost(f"the last snapshot of the worktree is on {mark.tip[:12]}, not {tip[:12]}")
        if mark.refused:
            return lost(mark.refused)
        if not mark.sha:
            return CLEAN.format(branch=self.branch, tip=tip[:12])
        try:
            self._fetch(mark)
            run.workspace.restore(mark.sha)
        except Exception as exc:  # noqa: BLE001 - the round goes on from the branch, said
            return lost(f"the last snapshot of the worktree could not be put back ({exc})")
        run.say(f"{self.key}: round {n}: the uncommitted work put back from {mark.sha[:12]}")
        with self._lock:
            self._made = self._published = mark  # what Redis holds already
        return RESTORED

    def _fetch(self, mark: WipMark) -> None:
        """The snapshot from the remote into the clone; Untrusted unless it is the commit
        the mark names, on the mark's tip alone."""
        with self.clone_lock:
            git(
                self.clone,
                "fetch",
                "--quiet",
                "--no-tags",
                "--no-write-fetch-head",
                "origin",
                f"+{self.ref}:{self.ref}",
                timeout_s=600,
            )
            if commit_of(self.clone, self.ref) != mark.sha:
                raise Untrusted(f"{self.ref} on the remote is not the snapshot published")
            parents = git(self.clone, "rev-parse", f"{mark.sha}^@").split()
            if parents != [mark.tip]:
                raise Untrusted(f"snapshot {mark.sha[:12]} is not on {mark.tip[:12]} alone")

    def _say(self, problem: str) -> None:
        said = self.redactor.redact(" ".join(problem.split())[:300])
        if said != self._problem:
            self._problem = said
            LOG.warning("%s: %s", self.key, said)
