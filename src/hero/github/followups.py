"""Follow-ups: review comments and failing checks on hero's pull requests become stories.

Every sweep of the watcher, after the report-back, :func:`followup_sweep` looks at each
pull request hero opened for a passed ``gh-<n>`` story (its branch ``hero/gh-<n>``) and:

- **closed or merged**: no more follow-ups for it; a follow-up still queued is cancelled
  (a running one is asked to stop), and nothing is said.
- **a follow-up under way**: waits for it. Once it ended, a passed one's commits are
  pushed to the same branch (so the same pull request updates), and hero answers: a reply
  on each review comment thread it acted on, and one summary comment on the pull request
  for the rest (the review's own text, comments addressed to hero, failing checks), naming
  the commits and the files changed; a follow-up that did not pass says so, with nothing
  pushed. hero resolves no thread.
- **new steering**: a review requesting changes (its text and its line comments), and a
  review comment or a comment on the pull request that starts with ``followup_command``
  (default ``/hero``) or mentions ``@followup_mention``, from a user whose role on the
  repository is at least ``followup_permission`` (default write) → one follow-up story
  (:func:`hero.story.followup.write_followup`: ``revises:`` the original story, on its
  branch) with those comments as the reviewer's findings, file and line where GitHub gives
  them; at most ``followup_max_per_pull`` per pull request. Anyone else's comment is
  ignored: it never reaches a story, so never the model.
- **failing checks**: on hero's head commit, check runs and commit statuses. Any still
  queued or running → wait for the next sweep; any failed → one follow-up with the failing
  checks' names and the end of their output (bounded); all passed → nothing. One per head
  commit, at most ``ci_followup_max_per_pull`` per pull request.

Exactly once, across restarts and two hero processes: ``runs/github/followups.json``
records, per pull request, every comment id acted on (an edit keeps the id: it is not
acted on again), the follow-ups started, the head commits whose checks were judged and the
replies made. It is written atomically, and a sweep holds ``runs/github/followups.lock``
(another process's sweep meanwhile skips its follow-ups). The ids are recorded *before* the
story is written, so a crash in between loses a follow-up rather than starting it twice.

``dry_run`` (``hero github watch --dry-run``): the sweep reads GitHub and logs what it would
do (``would follow up``, ``would reply``, ``would cancel``) and writes nothing anywhere.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from hero.config.home import Config
from hero.config.sections import GitHubSettings
from hero.errors import UsageError
from hero.fsio import atomic_write
from hero.git.ops import GitError, git
from hero.git.rewrite import new_commits
from hero.github.api import GitHub, GitHubError
from hero.github.defang import OwnIssue, defang
from hero.github.intake import _frontmatter, sanitize
from hero.github.report import _gh_issues, _Issue, _push
from hero.locks import PidLock
from hero.names import StoryRef
from hero.redact import Redactor
from hero.state import RunState, StateError, Status, load_state
from hero.story.feedback import contain_sections
from hero.story.followup import Finding, FollowupTaken, next_revision_id, write_followup
from hero.yamlio import ValueProblem, read_file

#: The record of follow-ups (relative to the home).
RECORD_FILE = Path("runs") / "github" / "followups.json"
#: The lock a sweep of follow-ups holds (relative to the home).
LOCK_FILE = Path("runs") / "github" / "followups.lock"
#: A record larger than this is not hero's: refused (never silently dropped: it holds ids).
MAX_RECORD_BYTES = 8 * 1024 * 1024
#: The most of one comment a finding quotes.
MAX_COMMENT_CHARS = 4_000
#: The most of one failing check's output a finding quotes (its end: where errors are).
MAX_CHECK_OUTPUT_CHARS = 3_000
#: The most commits and files a reply names.
MAX_NAMED = 20
#: Ids tried for one follow-up when other writers keep taking the next free one.
MAX_ID_TRIES = 20
#: Roles on a repository, least first.
ROLES = ("none", "read", "triage", "write", "maintain", "admin")
#: Check-run conclusions that count as passing.
PASSING = frozenset({"success", "neutral", "skipped"})
#: The hidden line in hero's own replies: a comment holding it never steers a follow-up.
MARKER = "<!-- hero:followup"

#: Statuses of a follow-up story that has not ended.
_UNDER_WAY = frozenset({Status.QUEUED, Status.RUNNING, Status.INTERRUPTED})


#: What writes a follow-up story: ``(home, of_id, findings, source) -> path``.
class Writer(Protocol):
    """What writes a follow-up story: :func:`write_followup_story`'s signature."""

    def __call__(
        self, home: Path, of_id: str, findings: list[Finding], source: dict[str, Any], story_id: str
    ) -> Path: ...


class FollowupsBusy(UsageError):
    """Another hero process is sweeping this home's follow-ups."""


# ----------------------------------------------------------------------------- the record


@dataclass
class _Pull:
    """What hero knows of one of its pull requests."""

    number: int
    story: str
    """The original story (``gh-<n>``); its branch ``hero/<story>`` is the pull's head."""
    issue: int
    url: str = ""
    """The pull request's page (the follow-up story's source names it)."""
    head: str = ""
    """The commit hero last pushed to the branch: the one whose checks count."""
    closed: bool = False
    handled: list[str] = field(default_factory=list)
    """Comment ids acted on (``review:<id>``, ``review_comment:<id>``, ``issue_comment:<id>``)."""
    comment_followups: int = 0
    ci_followups: int = 0
    ci_judged: dict[str, str] = field(default_factory=dict)
    """Head commit -> ``passed`` or ``failed``: checks judged once per commit."""
    active: dict[str, Any] | None = None
    """The follow-up under way: story, kind, threads (review comment ids to reply on),
    summary (whether one summary comment is due), replied (what was answered so far)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "story": self.story,
            "issue": self.issue,
            "url": self.url,
            "head": self.head,
            "closed": self.closed,
            "handled": self.handled,
            "comment_followups": self.comment_followups,
            "ci_followups": self.ci_followups,
            "ci_judged": self.ci_judged,
            "active": self.active,
        }


class Record:
    """``runs/github/followups.json``: the pull requests hero follows up, by number."""

    def __init__(self, path: Path, pulls: dict[int, _Pull], *, dry_run: bool) -> None:
        self.path = path
        self.pulls = pulls
        self.dry_run = dry_run

    @classmethod
    def load(cls, home: Path, *, dry_run: bool = False) -> Record:
        """The record (empty when there is none). ValueError naming the file for one that
        is not hero's: the ids in it are what keeps a comment from being acted on twice, so
        it is never replaced by an empty one."""
        path = Path(home) / RECORD_FILE
        try:
            raw = read_file(path, limit=MAX_RECORD_BYTES, what="JSON file")
        except FileNotFoundError:
            return cls(path, {}, dry_run=dry_run)
        except ValueProblem as exc:
            raise ValueError(f"{path}: {exc}") from None
        try:
            data = json.loads(raw)
            pulls = {int(k): _pull_of(int(k), v) for k, v in data["pulls"].items()}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(
                f"{path}: not a record of hero's follow-ups ({type(exc).__name__}: {exc}); "
                "move it aside to start afresh (comments already acted on may then be again)"
            ) from None
        return cls(path, pulls, dry_run=dry_run)

    def save(self) -> None:
        if self.dry_run:
            return
        data = {"version": 1, "pulls": {str(n): p.to_json() for n, p in sorted(self.pulls.items())}}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, (json.dumps(data, indent=1) + "\n").encode("utf-8"))


def _pull_of(number: int, v: Mapping[str, Any]) -> _Pull:
    active = v.get("active")
    return _Pull(
        number=number,
        story=str(v["story"]),
        issue=int(v["issue"]),
        url=str(v.get("url") or ""),
        head=str(v.get("head") or ""),
        closed=bool(v.get("closed")),
        handled=[str(x) for x in v.get("handled") or []],
        comment_followups=int(v.get("comment_followups") or 0),
        ci_followups=int(v.get("ci_followups") or 0),
        ci_judged={str(a): str(b) for a, b in (v.get("ci_judged") or {}).items()},
        active=dict(active) if isinstance(active, Mapping) else None,
    )


class SweepLock(PidLock):
    """One sweep of follow-ups per home at a time."""

    def __init__(self, home: Path) -> None:
        path = Path(home) / LOCK_FILE
        super().__init__(
            path, lambda pid: FollowupsBusy(f"follow-ups of {home} are being swept (pid {pid})")
        )


# ----------------------------------------------------------------------------- the sweep


@dataclass
class _Sweep:
    home: Path
    gh: GitHub
    settings: GitHubSettings
    config: Config
    log: Any
    record: Record
    write: Writer
    redactor: Redactor
    roles: dict[str, str] = field(default_factory=dict)
    room: int | None = None
    """Follow-up stories this sweep may still write (None: no cap)."""

    @property
    def dry_run(self) -> bool:
        return self.settings.dry_run


def followup_sweep(
    home: Path,
    gh: GitHub,
    settings: GitHubSettings,
    config: Config,
    log: Any,
    *,
    write: Writer | None = None,
    room: int | None = None,
) -> None:
    """Follow up every pull request hero opened (see the module's text). Never raises an
    Exception: a failure with one pull request is logged and tried again next sweep.
    ``write``: what writes a follow-up story (default: :func:`write_followup_story`).
    ``room``: how many follow-up stories this sweep may write (what ``max_per_sweep`` left
    after the intake; None: no cap); the others wait for later sweeps, oldest pull first."""
    home = Path(home)
    redactor = Redactor((*(s for s in (settings.token,) if s), *config.secrets))
    lock = None if settings.dry_run else SweepLock(home)
    try:
        if lock is not None:
            lock.acquire()
    except FollowupsBusy as exc:
        log.info("follow-ups skipped", reason=str(exc))
        return
    try:
        try:
            record = Record.load(home, dry_run=settings.dry_run)
        except (OSError, ValueError) as exc:
            log.error("follow-ups stopped", error=redactor.redact(_one_line(exc)))
            return
        sweep = _Sweep(
            home, gh, settings, config, log, record, write or write_followup_story, redactor
        )
        sweep.room = room
        _find_pulls(sweep)
        for pull in sorted(record.pulls.values(), key=lambda p: p.number):
            if pull.closed:
                continue
            try:
                _follow(sweep, pull)
            except (GitHubError, GitError, OSError, StateError, ValueError) as exc:
                error = redactor.redact(_one_line(exc))
                log.warning("follow-up failed", pull=pull.number, error=error)
            except Exception as exc:  # noqa: BLE001 - one pull's bug never stops the sweep
                error = redactor.redact(_one_line(f"internal error: {type(exc).__name__}: {exc}"))
                log.error("follow-up failed", pull=pull.number, error=error)
    finally:
        if lock is not None:
            lock.release()


def _find_pulls(sweep: _Sweep) -> None:
    """Add to the record the open pull request of each passed gh-story not in it yet."""
    known = {p.story for p in sweep.record.pulls.values()}
    for issue in _gh_issues(sweep.home, sweep.settings.repo, sweep.log):
        if issue.state.status != Status.PASSED or issue.id in known:
            continue
        try:
            found = sweep.gh.find_open_pull(issue.branch)
        except GitHubError as exc:
            sweep.log.warning("pull not found", story=issue.id, error=_one_line(exc))
            continue
        number = found.get("number") if found else None
        if isinstance(number, int) and not isinstance(number, bool) and number > 0:
            url = _one_line(str(found.get("html_url") or "")) if found else ""
            url = url if re.fullmatch(r"https?://\S{1,500}", url) else ""
            pull = _Pull(number, issue.id, issue.number, url, head=issue.state.head_sha)
            sweep.record.pulls[number] = pull
            sweep.record.save()


def _follow(sweep: _Sweep, pull: _Pull) -> None:
    """One pull request's turn in the sweep."""
    found = sweep.gh.pull(pull.number)
    if str(found.get("state") or "") != "open":
        _closed(
            sweep, pull, "merged" if found.get("merged") or found.get("merged_at") else "closed"
        )
        return
    if pull.active is not None:
        if not _finish(sweep, pull):
            return  # still under way: one follow-up at a time
    if pull.comment_followups < sweep.settings.followup_max_per_pull:
        if _from_comments(sweep, pull):
            return
    if pull.ci_followups < sweep.settings.ci_followup_max_per_pull and pull.head:
        _from_checks(sweep, pull)


def _closed(sweep: _Sweep, pull: _Pull, how: str) -> None:
    """A pull request closed or merged: follow-ups stop; a queued one is cancelled."""
    active = pull.active or {}
    story = str(active.get("story") or "")
    if sweep.dry_run:
        sweep.log.info("would stop follow-ups", pull=pull.number, reason=f"it was {how}")
        if story:
            sweep.log.info("would cancel", story=story, pull=pull.number)
        return
    if story:
        from hero.run.cancel import cancel

        path = Path(str(active.get("path") or ""))
        reason = f"cancelled: pull request #{pull.number} of {sweep.settings.repo} was {how}"
        result = cancel(sweep.home, StoryRef("", story), path if path.is_file() else None, reason)
        sweep.log.info("follow-up " + result.outcome, story=story, pull=pull.number, reason=reason)
    pull.closed = True
    pull.active = None
    sweep.record.save()
    sweep.log.info("follow-ups stopped", pull=pull.number, reason=f"it was {how}")


# ----------------------------------------------------------------------------- comments


@dataclass(frozen=True)
class _Comment:
    key: str
    """``review:<id>``, ``review_comment:<id>`` or ``issue_comment:<id>``."""
    finding: Finding | None
    """What it asks (None: nothing of its own, as a review without text)."""
    thread: int | None = None
    """The review comment to reply on (None: answered in the summary comment)."""


def _from_comments(sweep: _Sweep, pull: _Pull) -> bool:
    """Start a follow-up from new steering comments; whether one was started."""
    comments = _steering(sweep, pull)
    if not comments:
        return False
    findings = [c.finding for c in comments if c.finding is not None]
    threads = [c.thread for c in comments if c.thread is not None]
    summary = any(c.thread is None for c in comments)
    _start(sweep, pull, "review", [c.key for c in comments], findings, threads, summary)
    return True


def _steering(sweep: _Sweep, pull: _Pull) -> list[_Comment]:
    """The new comments on ``pull`` that steer hero, from people allowed to, oldest first."""
    gh, handled = sweep.gh, set(pull.handled)
    found: list[_Comment] = []
    review_comments = gh.review_comments(pull.number)
    requesting: set[int] = set()
    for review in gh.reviews(pull.number):
        rid = review.get("id")
        if not isinstance(rid, int) or str(review.get("state")) != "CHANGES_REQUESTED":
            continue
        if not _allowed(sweep, review):
            continue
        requesting.add(rid)
        body = _text(review.get("body"))
        if f"review:{rid}" not in handled:
            said = f"Review by {_login(review)} (changes requested): {body}"
            found.append(_Comment(f"review:{rid}", Finding(said) if body else None))
    for comment in review_comments:
        cid = comment.get("id")
        key = f"review_comment:{cid}"
        if not isinstance(cid, int) or key in handled:
            continue
        in_review = comment.get("pull_request_review_id") in requesting
        body = _text(comment.get("body"))
        if not (in_review or _addressed(sweep.settings, body)) or not _allowed(sweep, comment):
            continue
        text = f"Review comment by {_login(comment)}: {_unaddressed(sweep.settings, body)}"
        found.append(_Comment(key, _at(comment, text), cid))
    for comment in gh.comments(pull.number):
        cid = comment.get("id")
        key = f"issue_comment:{cid}"
        if not isinstance(cid, int) or key in handled:
            continue
        body = _text(comment.get("body"))
        if not _addressed(sweep.settings, body) or not _allowed(sweep, comment):
            continue
        text = f"Comment by {_login(comment)}: {_unaddressed(sweep.settings, body)}"
        found.append(_Comment(key, Finding(text)))
    if all(c.finding is None for c in found):
        return []  # an empty review alone (its comments handled) asks for nothing new
    return found


def _addressed(settings: GitHubSettings, body: str) -> bool:
    """Whether ``body`` starts with the command (as a word: ``/hero`` is not ``/heroes``)
    or mentions the configured name."""
    if _commanded(settings, body):
        return True
    mention = settings.followup_mention.strip().lstrip("@")
    if mention:
        return re.search(rf"(?<![\w@])@{re.escape(mention)}(?![\w-])", body, re.I) is not None
    return False


def _commanded(settings: GitHubSettings, body: str) -> bool:
    command = settings.followup_command.strip()
    if not command or not body.lower().startswith(command.lower()):
        return False
    rest = body[len(command) :]
    return not rest or not (rest[0].isalnum() or rest[0] in "-_")


def _unaddressed(settings: GitHubSettings, body: str) -> str:
    """``body`` without the command it starts with (a names-only mention stays)."""
    if _commanded(settings, body):
        rest = body[len(settings.followup_command.strip()) :].lstrip(" \t:,")
        return rest.strip() or "(the command alone: see the thread)"
    return body


def _allowed(sweep: _Sweep, item: Mapping[str, Any]) -> bool:
    """Whether the author of ``item`` may steer hero (hero's own text never does)."""
    if MARKER in str(item.get("body") or ""):
        return False
    user = item.get("user")
    if isinstance(user, Mapping) and str(user.get("type") or "") == "Bot":
        return False
    login = _login(item)
    if not login:
        return False
    role = sweep.roles.get(login.lower())
    if role is None:
        role = sweep.gh.permission(login)
        sweep.roles[login.lower()] = role
    wanted = sweep.settings.followup_permission
    have = ROLES.index(role) if role in ROLES else 0
    return have >= ROLES.index(wanted)


def _text(body: object) -> str:
    """A comment's body as a finding's text: what GitHub shows a reader, bounded, no
    heading that could open a section of the story (secrets go in :func:`_start`)."""
    text = sanitize(str(body or "")).strip()
    if len(text) > MAX_COMMENT_CHARS:
        text = text[:MAX_COMMENT_CHARS] + " [... cut]"
    return contain_sections(text) if text else ""


def _at(comment: Mapping[str, Any], text: str) -> Finding:
    """``text`` as a finding about the file and line the review comment is on, if any."""
    path = comment.get("path")
    line = comment.get("line") or comment.get("original_line")
    if not isinstance(path, str):
        return Finding(text)
    path = _one_line(sanitize(path)).replace("`", "")[:500]
    if not isinstance(line, int) or isinstance(line, bool) or line < 1:
        line = None
    return Finding(text, file=path, line=line if path else None)


def _login(item: Mapping[str, Any]) -> str:
    user = item.get("user")
    login = user.get("login") if isinstance(user, Mapping) else None
    return login if isinstance(login, str) else ""


# ----------------------------------------------------------------------------- checks


def _from_checks(sweep: _Sweep, pull: _Pull) -> None:
    """Judge the checks on hero's head commit once they all finished."""
    sha = pull.head
    if sha in pull.ci_judged:
        return
    failed: list[Finding] = []
    running = 0
    seen = 0
    for run in sweep.gh.check_runs(sha):
        seen += 1
        name = _one_line(sanitize(str(run.get("name") or "?")))
        if str(run.get("status")) != "completed":
            running += 1
        elif str(run.get("conclusion")) not in PASSING:
            failed.append(_check_finding(name, run))
    for status in sweep.gh.statuses(sha):
        seen += 1
        state = str(status.get("state") or "")
        context = _one_line(sanitize(str(status.get("context") or "?")))
        if state == "pending":
            running += 1
        elif state in ("failure", "error"):
            said = _one_line(sanitize(str(status.get("description") or "")))
            text = f"Commit status `{context}` {state}" + (f": {said}" if said else "")
            failed.append(Finding(text))
    if running or not seen:
        sweep.log.debug("checks waited for", pull=pull.number, sha=sha[:12], running=running)
        return
    if not failed:
        if not sweep.dry_run:
            pull.ci_judged[sha] = "passed"
            sweep.record.save()
        sweep.log.info("checks passed", pull=pull.number, sha=sha[:12])
        return
    _start(sweep, pull, "ci", [], failed, [], True, failed_sha=sha)


def _check_finding(name: str, run: Mapping[str, Any]) -> Finding:
    """A failing check run as a finding: its name, conclusion and title, then the end of
    its summary and text (where errors are), bounded."""
    output = run.get("output")
    output = output if isinstance(output, Mapping) else {}
    head = f"Check `{name}` {_one_line(sanitize(str(run.get('conclusion'))))}"
    title = _one_line(sanitize(str(output.get("title") or "")))[:300]
    if title:
        head += f": {title}"
    parts = [sanitize(str(output.get(k) or "")).strip() for k in ("summary", "text")]
    tail = "\n".join(p for p in parts if p)
    if len(tail) > MAX_CHECK_OUTPUT_CHARS:
        tail = "[... the start cut]\n" + tail[-MAX_CHECK_OUTPUT_CHARS:]
    return Finding(contain_sections(head + ("\n" + tail if tail else "")))


# ----------------------------------------------------------------------------- starting


def _start(
    sweep: _Sweep,
    pull: _Pull,
    kind: str,
    keys: list[str],
    findings: list[Finding],
    threads: list[int],
    summary: bool,
    *,
    failed_sha: str = "",
) -> None:
    """Record the comments as handled, then write the follow-up story (with room left in
    this sweep; else it waits, nothing recorded)."""
    if sweep.room is not None:
        if sweep.room <= 0:
            sweep.log.info("follow-up waits", pull=pull.number, reason="max_per_sweep reached")
            return
        sweep.room -= 1
    findings = [replace(f, text=sweep.redactor.redact(f.text)) for f in findings]
    if sweep.dry_run:
        sweep.log.info(
            "would follow up", pull=pull.number, story=pull.story, kind=kind, comments=keys
        )
        return
    pull.handled.extend(keys)
    if failed_sha:
        pull.ci_judged[failed_sha] = "failed"
    if kind == "ci":
        pull.ci_followups += 1
    else:
        pull.comment_followups += 1
    source: dict[str, Any] = {"repo": sweep.settings.repo, "issue": pull.issue}
    if pull.url:
        source["url"] = pull.url
    story = next_revision_id(sweep.home, pull.story)
    pull.active = {
        "story": story,
        "path": str(sweep.home / "inbox" / f"{story}.md"),
        "kind": kind,
        "threads": threads,
        "summary": summary,
        # what to write: kept until it is written, so a crash between this save and the
        # file is repaired by the next sweep (_write_pending), never lost nor doubled
        "pending": {
            "findings": [[f.text, f.file, f.line] for f in findings],
            "source": source,
        },
    }
    sweep.record.save()
    _write_pending(sweep, pull)


def _write_pending(sweep: _Sweep, pull: _Pull) -> None:
    """Write the follow-up recorded as ``pending`` under its recorded id (once: a file of
    that id written before a crash, with this pull request as its source, is the one)."""
    active = pull.active
    assert active is not None
    pending = active["pending"]
    findings = [Finding(str(t), str(f or ""), ln) for t, f, ln in pending["findings"]]
    source = dict(pending["source"])
    for _ in range(MAX_ID_TRIES):
        story = str(active["story"])
        try:
            path = sweep.write(sweep.home, pull.story, findings, source, story_id=story)
        except FollowupTaken:
            if _ours(Path(str(active["path"])), pull.story, source):
                path = Path(str(active["path"]))  # written before a crash: not again
            else:  # another writer (a `hero revise`) took the id meanwhile: the next one
                story = next_revision_id(sweep.home, pull.story)
                active.update(story=story, path=str(sweep.home / "inbox" / f"{story}.md"))
                sweep.record.save()
                continue
        active.pop("pending", None)
        active.update(story=story, path=str(path))
        sweep.record.save()
        sweep.log.info(
            "follow-up written",
            pull=pull.number,
            story=story,
            kind=active.get("kind"),
            findings=len(findings),
        )
        return
    raise ValueError(f"follow-up of {pull.story}: no free id after {MAX_ID_TRIES} tries")


def _ours(path: Path, of_id: str, source: dict[str, Any]) -> bool:
    """Whether the story file at ``path`` is the follow-up this sweep recorded: it revises
    ``of_id`` and its source is this pull request's."""
    meta = _frontmatter(path) if path.is_file() else None
    return meta is not None and meta.get("revises") == of_id and meta.get("source") == source


def write_followup_story(
    home: Path, of_id: str, findings: list[Finding], source: dict[str, Any], story_id: str
) -> Path:
    """The default writer: :func:`hero.story.followup.write_followup` (its rounds and
    budget as the home's follow-up settings say), under the id the record holds."""
    return write_followup(home, of_id, findings, source=source, story_id=story_id)


# ----------------------------------------------------------------------------- finishing


def _finish(sweep: _Sweep, pull: _Pull) -> bool:
    """Answer for the follow-up under way once it ended; whether it has."""
    active = pull.active
    assert active is not None
    if active.get("pending"):  # recorded, then a crash before its file was written
        if sweep.dry_run:
            sweep.log.info("would write follow-up", pull=pull.number, story=active.get("story"))
        else:
            _write_pending(sweep, pull)
        return False
    story = str(active.get("story") or "")
    state = load_state(sweep.home, story) if story else None
    written = Path(str(active.get("path") or ""))
    if story and state is None and written.is_file():
        return False  # queued: not started yet
    if state is not None and state.status in _UNDER_WAY:
        return False
    if state is None:  # never written (a crash right after the record), or deleted unrun
        sweep.log.info("follow-up gone", pull=pull.number, story=story or None)
        if not sweep.dry_run:
            pull.active = None
            sweep.record.save()
        return True
    if sweep.dry_run:
        sweep.log.info("would reply", pull=pull.number, story=story, status=state.status.value)
        return True
    changed = ""
    if state.status == Status.PASSED:
        _push_followup(sweep, pull, state)
        changed = _what_changed(sweep.config.target_repo, state)
        pull.head = state.head_sha
        sweep.record.save()
    replied = set(active.get("replied") or [])
    body = sweep.redactor.redact(_reply_text(story, state, changed))
    for thread in active.get("threads") or []:
        if str(thread) in replied:
            continue
        sweep.gh.reply_to_review_comment(pull.number, int(thread), body)
        replied.add(str(thread))
        active["replied"] = sorted(replied)
        sweep.record.save()
    if (active.get("summary") or not active.get("threads")) and "summary" not in replied:
        sweep.gh.add_comment(pull.number, body)
        active["replied"] = sorted(replied | {"summary"})
        sweep.record.save()
    pull.active = None
    sweep.record.save()
    sweep.log.info("follow-up answered", pull=pull.number, story=story, status=state.status.value)
    return True


def _push_followup(sweep: _Sweep, pull: _Pull, state: RunState) -> None:
    """Push the follow-up's head to the pull request's branch (as the report-back pushes)."""
    issue = _Issue(state, pull.issue, state.title or state.id, branch_name=f"hero/{pull.story}")
    own = OwnIssue(sweep.settings.repo, pull.issue)
    _push(issue, sweep.config.target_repo, sweep.settings.remote, own)


def _what_changed(repo: Path, state: RunState) -> str:
    """The follow-up's commits and the files they changed, as markdown lines."""
    if not state.base_sha or not state.head_sha:
        return ""
    commits = new_commits(repo, state.head_sha, [state.base_sha])
    files = git(repo, "diff", "--name-only", state.base_sha, state.head_sha).split("\n")
    files = [f for f in files if f]
    lines = [
        f"- `{c.sha[:12]}` {_one_line((c.message.splitlines() or [''])[0])[:200]}"
        for c in commits[:MAX_NAMED]
    ]
    if len(commits) > MAX_NAMED:
        lines.append(f"- and {len(commits) - MAX_NAMED} more")
    named = ", ".join(f"`{f}`" for f in files[:MAX_NAMED])
    if len(files) > MAX_NAMED:
        named += f" and {len(files) - MAX_NAMED} more"
    return "Commits:\n" + "\n".join(lines) + (f"\n\nFiles changed: {named}" if named else "")


def _reply_text(story: str, state: RunState, changed: str) -> str:
    if state.status == Status.PASSED:
        head = f"hero's follow-up `{story}` passed and pushed `{state.head_sha[:12]}`."
        text = head + ("\n\n" + changed if changed else "\n\nNo new commit.")
    else:
        why = _one_line(state.error) or "the reviewer did not approve"
        text = f"hero's follow-up `{story}` ended {state.status.value}: {why}. Nothing was pushed."
    return defang(text) + f"\n\n{MARKER} {story} -->\n"


def _one_line(text: object) -> str:
    return " ".join(str(text).split())
