"""Report-back: what hero tells GitHub about the stories it took from issues.

Every sweep of the watcher calls :func:`report_sweep`, which looks at the run record of each
``gh-<n>`` story whose story file names an issue of the configured repository (its
``source`` block) and says on GitHub what the record says:

- **running**: the issue gets the in-progress label (once per run);
- **passed**: ``hero/<id>`` is pushed to the configured remote, one pull request is opened
  from it (an open one from that branch is reused), the labels become *done*, and the issue
  gets a comment with the pull request's link;
- **gave_up**, **error**, **budget_exceeded**: the issue gets a comment with the reason and
  the last reviewer feedback, and the *failed* label;
- **cancelled** (see :mod:`hero.github.cancel`): nothing. With ``cancel_when_closed`` on,
  an ending whose issue was closed (or lost the label) by the time it is reported is not
  reported either: the issue is looked at right before the pull request and the comment,
  and the story's branch stays as it is. Nor does a story being cancelled get the
  in-progress label.

With ``dry_run`` nothing is pushed, labelled or commented, and nothing written: ``would
label`` and ``would report`` are logged instead.

Exactly once, across restarts and lost local files: every report comment carries a hidden
marker naming the story, the ending and the run (``<!-- hero:report gh-12 passed run 3 at
1712345678 -->``), and a report is done when the issue has a comment with its marker. The
comment is the last step, so an ending whose comment exists was reported whole; an ending
whose report was cut short is done again from the start, and every earlier step is safe to
repeat: a push of the same commit changes nothing, the open pull request from the branch is
found before one is created, labels are set, not toggled. ``runs/github/reported.json``
remembers what was reported to save API calls; it is never needed for correctness.

A failure (a ``GitHubError``, a push that fails, an unreadable record, a bug) is logged
with the story and tried again on the next sweep; one story's failure does not keep the
others from being reported, and no ``Exception`` leaves :func:`report_sweep` (a
``BaseException``, such as the watcher's stop in a rate-limit wait, goes through).

Secrets: the token is only ever in the ``GitHub`` client. The push runs hero's own git
(``hero.git.ops.git``: a timeout, no hooks, an environment without secrets) to the remote as
configured in the target repository: hero adds no credential to its URL, its config or its
command line (see :func:`_push_env` for how it gets past the push refusal all of hero's git
carries). Every text sent to GitHub or logged is redacted of the token and of every secret
in the configuration, and model-written text can neither close other issues nor mention
people (:func:`hero.github.defang.defang`). Nor can the commits pushed: hero rewrote their
messages as it brought them back (``hero.git.storyrepo``), and :func:`_push` checks them
again and refuses a branch whose commits still would (say, one an older hero made).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hero.config.home import Config
from hero.config.sections import GitHubSettings
from hero.fsio import atomic_write
from hero.git.ops import GitError, commit_of, git
from hero.git.remote import push_env
from hero.git.rewrite import new_commits
from hero.github.api import GitHub, GitHubError
from hero.github.cancel import issue_gone
from hero.github.defang import OwnIssue, defang, live_references
from hero.names import StoryRef
from hero.redact import Redactor
from hero.run.cancel import requested
from hero.state import RunState, StateError, Status, load_state, state_dir
from hero.story.format import parse_story
from hero.story.record import StoryError
from hero.yamlio import ValueProblem, read_file

#: The local memory of reports done (``runs/github/reported.json``), relative to the home.
REPORTED_FILE = Path("runs") / "github" / "reported.json"
#: A reported.json larger than this is not one of hero's: it is ignored (and rewritten).
MAX_REPORTED_BYTES = 4 * 1024 * 1024
#: GitHub refuses bodies over 65,536 characters; hero's stay well below.
MAX_BODY_CHARS = 60_000
#: How much of the reviewer's feedback a failure comment quotes.
MAX_FEEDBACK_CHARS = 20_000

#: The endings reported as failures, and how each is named in the comment.
_FAILED = {
    Status.GAVE_UP: "gave up",
    Status.ERROR: "stopped with an error",
    Status.BUDGET_EXCEEDED: "ran out of budget",
}
_STORY_ID_RE = re.compile(r"^gh-(\d+)$")
#: The most commits a refused push names.
MAX_NAMED_COMMITS = 5


class PushRefused(GitError):
    """A branch whose commits would close other issues or mention people: not pushed."""


@dataclass(frozen=True)
class _Issue:
    """One gh-story's record and the issue it answers."""

    state: RunState
    number: int
    title: str
    branch_name: str = ""
    """The branch pushed when it is not the story's own (a follow-up's: its original's)."""

    @property
    def id(self) -> str:
        return self.state.id

    @property
    def branch(self) -> str:
        return self.branch_name or f"hero/{self.state.id}"

    def ending(self) -> str:
        """This ending of the story, as ``passed run 3 at 1712345678``. The run count tells
        endings apart while the record lives; the finish time tells them apart when the
        record was lost and the count began again."""
        at = int(self.state.finished_at or 0)
        return f"{self.state.status.value} run {self.state.runs} at {at}"

    def marker(self) -> str:
        """The hidden line that makes the report of this ending recognisable on the issue."""
        return f"<!-- hero:report {self.state.id} {self.ending()} -->"


def report_sweep(
    home: Path, gh: GitHub, settings: GitHubSettings, config: Config, log: Any
) -> None:
    """Report every gh-story's state to its issue (see the module's text). Never raises."""
    redactor = Redactor((*(s for s in (settings.token,) if s), *config.secrets))
    memory = _Memory.load(home)
    try:
        issues = _gh_issues(home, settings.repo, log)
    except Exception as exc:  # noqa: BLE001 - the sweep never raises; logged, next sweep again
        error = redactor.redact(_one_line(f"cannot list run records: {exc}"))
        log.warning("report skipped", error=error, note="tried again on the next sweep")
        return
    try:
        for issue in issues:
            _report_logged(issue, home, gh, settings, config, memory, redactor, log)
    finally:  # also when the watcher is stopped in a wait (a BaseException, let through)
        if not settings.dry_run:
            memory.save(log)


def _report_logged(
    issue: _Issue,
    home: Path,
    gh: GitHub,
    settings: GitHubSettings,
    config: Config,
    memory: _Memory,
    redactor: Redactor,
    log: Any,
) -> None:
    """One story's report; its failure is logged, with the story, and never raised."""
    try:
        _report(issue, home, gh, settings, config, memory, redactor, log)
    except PushRefused as exc:  # it stays refused until its commits change: an error
        error = _one_line(str(exc))
        level = log.error
    except (GitHubError, GitError, OSError) as exc:
        error = _one_line(str(exc))
        level = log.warning
    except Exception as exc:  # noqa: BLE001 - a bug must not stop the watcher; logged
        error = _one_line(f"internal error: {type(exc).__name__}: {exc}")
        level = log.error
    else:
        return
    level(
        "report failed",
        story=issue.id,
        issue=issue.number,
        status=issue.state.status.value,
        error=redactor.redact(error),
        note="tried again on the next sweep",
    )


# ----------------------------------------------------------------------------- finding


def _gh_issues(home: Path, repo: str, log: Any) -> list[_Issue]:
    """The records of gh-stories whose story file names an issue of ``repo``, by issue."""
    directory = state_dir(home)
    if not directory.is_dir():
        return []
    found: list[_Issue] = []
    for path in sorted(directory.glob("gh-*.json")):
        story_id = path.stem
        if not _STORY_ID_RE.match(story_id):
            continue
        try:
            state = load_state(home, story_id)
        except StateError as exc:
            log.debug("report skipped", story=story_id, reason=_one_line(str(exc)))
            continue
        if state is None or state.status not in (Status.RUNNING, Status.PASSED, *_FAILED):
            continue
        source = _source_of(home, state)
        if source is None:
            continue
        if str(source.get("repo", "")).lower() != repo.lower():
            continue
        number = source.get("issue")
        if isinstance(number, bool) or not isinstance(number, int) or number < 1:
            continue
        found.append(_Issue(state, number, state.title or story_id))
    found.sort(key=lambda i: i.number)
    return found


def _source_of(home: Path, state: RunState) -> Mapping[str, Any] | None:
    """The ``source`` block of the record's story file, or None when it has none or the
    file cannot be read. A passed story's file is in ``done/``; after a crash between
    recording the pass and moving the file it may still be in ``inbox/``."""
    if not state.story_path:
        return None
    recorded = Path(state.story_path)
    for path in (recorded, home / "inbox" / recorded.name, home / "done" / recorded.name):
        if not path.is_file():
            continue
        try:
            story = parse_story(path)
        except (StoryError, OSError, ValueProblem):
            continue
        if story.id != state.id:
            continue
        return story.source
    return None


# ----------------------------------------------------------------------------- reporting


def _report(
    issue: _Issue,
    home: Path,
    gh: GitHub,
    settings: GitHubSettings,
    config: Config,
    memory: _Memory,
    redactor: Redactor,
    log: Any,
) -> None:
    state = issue.state
    labels = settings.labels
    if settings.cancel_when_closed and requested(home, StoryRef("", issue.id)) is not None:
        return  # being cancelled (its issue was closed): nothing is said on the issue
    if state.status == Status.RUNNING:
        key = f"running run {state.runs}"
        if memory.done(issue.id, key):
            return
        if settings.dry_run:
            log.info("would label", story=issue.id, issue=issue.number, label=labels.in_progress)
            return
        _set_labels(gh, issue.number, add=labels.in_progress, remove=(labels.failed,))
        memory.remember(issue.id, key)
        log.info("labelled", story=issue.id, issue=issue.number, label=labels.in_progress)
        return
    key = issue.ending()
    if memory.done(issue.id, key):
        return
    if _has_comment(gh, issue.number, issue.marker()):
        memory.remember(issue.id, key)
        return
    gone = issue_gone(gh, issue.number, settings) if settings.cancel_when_closed else None
    if gone is not None:  # closed while the story ran: no pull request, no comment
        memory.remember(issue.id, key)
        log.info(
            "not reported",
            story=issue.id,
            issue=issue.number,
            status=state.status.value,
            reason=f"the issue {gone}; the story's work stays on {issue.branch}",
        )
        return
    if settings.dry_run:
        said = "push and open a pull request" if state.status == Status.PASSED else "comment"
        log.info(
            "would report", story=issue.id, issue=issue.number, status=state.status.value, to=said
        )
        return
    if state.status == Status.PASSED:
        url, reused = _open_pull(issue, gh, settings, config, redactor)
        memory.remember_pull(issue.id, url)
        _set_labels(gh, issue.number, add=labels.done, remove=(labels.in_progress, labels.failed))
        gh.add_comment(issue.number, _passed_comment(issue, url, reused, redactor))
        log.info("reported", story=issue.id, issue=issue.number, status="passed", pull=url)
    else:
        _set_labels(gh, issue.number, add=labels.failed, remove=(labels.in_progress,))
        gh.add_comment(issue.number, _failed_comment(issue, redactor))
        log.info("reported", story=issue.id, issue=issue.number, status=state.status.value)
    memory.remember(issue.id, key)


def _has_comment(gh: GitHub, number: int, marker: str) -> bool:
    return any(marker in str(c.get("body") or "") for c in gh.comments(number))


def _set_labels(gh: GitHub, number: int, *, add: str, remove: Sequence[str]) -> None:
    """Add one label and take others off: labels are set, not toggled, so a step done
    twice changes nothing."""
    gh.add_labels(number, [add])
    for label in remove:
        if label and label != add:
            gh.remove_label(number, label)  # one the issue does not have is fine


def _open_pull(
    issue: _Issue, gh: GitHub, settings: GitHubSettings, config: Config, redactor: Redactor
) -> tuple[str, bool]:
    """Push the branch, then the URL of the open pull request from it: the one that exists
    (made by an earlier sweep whose report was cut short, or by hand), else a new one.
    Returns ``(url, reused)``."""
    own = OwnIssue(settings.repo, issue.number)
    _push(issue, config.target_repo, settings.remote, own)
    existing = gh.find_open_pull(issue.branch)
    if existing is not None:
        return str(existing.get("html_url") or existing.get("url") or ""), True
    created = gh.create_pull(  # a squash merge makes the title a commit's subject: defanged
        title=redactor.redact(defang(issue.title, own)),
        body=_pull_body(issue, redactor),
        head=issue.branch,
        base=_base_branch(gh, config, settings),
    )
    return str(created.get("html_url") or created.get("url") or ""), False


def _push(issue: _Issue, repo: Path, remote: str, own: OwnIssue) -> None:
    """Put the approved commit (the record's ``head_sha``) on ``refs/heads/hero/<id>`` of
    ``remote``, as the target repository configures that remote.

    Not when a commit of the story's (``new_commits`` since the record's base) still has a
    closing keyword for another issue than the story's own or an @mention in its message:
    PushRefused, naming the commits, and nothing is pushed.

    Forced, with a lease: the branch is hero's, and after a retry its new head need not
    descend from what an earlier ending pushed, which it must still replace. The lease
    (``--force-with-lease=<ref>:<sha>`` on the value ``ls-remote`` saw a moment before, or
    "must not exist yet") makes the push fail rather than overwrite a push that raced it; the
    next sweep tries again. A remote that already holds the commit is not pushed to at all.
    """
    ref = f"refs/heads/{issue.branch}"
    wanted = issue.state.head_sha or ref
    local = commit_of(repo, wanted)
    if not local:
        raise GitError(
            f"{issue.id} passed at {wanted}, which is no commit in {repo}: nothing to push"
        )
    _check_messages(issue, repo, local, own)
    # "--": a remote named like an option (github.remote: --upload-pack=...) is no option
    listed = git(repo, "ls-remote", "--", remote, ref).split()
    remote_sha = listed[0] if listed else ""
    if remote_sha == local:
        return
    git(
        repo,
        "push",
        "--porcelain",
        f"--force-with-lease={ref}:{remote_sha}",
        "--",
        remote,
        f"{local}:{ref}",
        env=_push_env(repo, remote),
    )


_push_env = push_env  # the name this module's tests know


def _check_messages(issue: _Issue, repo: Path, tip: str, own: OwnIssue) -> None:
    """PushRefused if a commit of the story's up to ``tip`` has a message GitHub would act
    on (see ``hero.github.defang``)."""
    bad = []
    for commit in new_commits(repo, tip, [issue.state.base_sha]):
        found = live_references(commit.message, own)
        if found:
            bad.append(f"{commit.sha[:12]} ({', '.join(dict.fromkeys(found))})")
    if not bad:
        return
    named = "; ".join(bad[:MAX_NAMED_COMMITS])
    if len(bad) > MAX_NAMED_COMMITS:
        named += f"; and {len(bad) - MAX_NAMED_COMMITS} more"
    raise PushRefused(
        f"{issue.branch} not pushed: the message of commit {named} would close another issue "
        f"than #{issue.number} or notify people once the pull request merges. hero rewrites "
        "such messages as it brings a story's commits back; these were made otherwise (by an "
        f"older hero, or by hand). Reword them on {issue.branch} (or run the story afresh) "
        "and the next sweep pushes it"
    )


def _base_branch(gh: GitHub, config: Config, settings: GitHubSettings) -> str:
    """The pull request's base: ``target_base_ref`` when set (the branch hero's stories
    start from, so the pull request shows just the story's work; a ``<remote>/`` prefix is
    dropped), else the repository's default branch on GitHub."""
    base = config.target_base_ref
    if base:
        prefix = f"{settings.remote}/"
        return base[len(prefix) :] if base.startswith(prefix) else base
    return str(gh.default_branch())


# ----------------------------------------------------------------------------- texts


def _pull_body(issue: _Issue, redactor: Redactor) -> str:
    state = issue.state
    last = state.rounds[-1] if state.rounds else None
    parts = [f"hero's work on #{issue.number}: {defang(state.title or issue.id)}"]
    summary = last.review.summary.strip() if last is not None else ""
    if summary:
        parts.append("## Summary\n\n" + defang(summary))
    parts.append(_rounds_section(state))
    if last is not None:
        parts.append(_verify_section(last.round, last.verify))
        parts.append(_ac_section(last.review.ac_check))
    parts.append(f"Branch `{issue.branch}`, head `{state.head_sha[:12] or '?'}`.")
    text = "\n\n".join(p for p in parts if p)
    return _fit(redactor.redact(text), f"\n\nCloses #{issue.number}\n")


def _rounds_section(state: RunState) -> str:
    if not state.rounds:
        return "## Rounds\n\nNo round recorded."
    n = len(state.rounds)
    lines = [
        "## Rounds",
        "",
        f"Passed in round {state.rounds[-1].round} ({n} round{'s' if n != 1 else ''} in all).",
        "",
        "| round | checks | review |",
        "|---|---|---|",
    ]
    for r in state.rounds:
        verify = r.verify or {}
        commands = verify.get("commands") or []
        if not commands:
            checks = "none"
        else:
            green = sum(1 for c in commands if isinstance(c, dict) and c.get("exit_code") == 0)
            checks = f"{'passed' if verify.get('passed') else 'failed'} ({green}/{len(commands)})"
        review = r.review.verdict or "-"
        if r.review.short_circuited:  # a red check or a guardrail: the reason, in short
            review += f" (not reviewed: {defang(_one_line(r.review.summary)[:120])})"
        lines.append(f"| {r.round} | {checks} | {_cell(review, 200)} |")
    return "\n".join(lines)


def _verify_section(round_no: int, verify: Mapping[str, Any]) -> str:
    commands = [c for c in (verify.get("commands") or []) if isinstance(c, dict)]
    if not commands:
        return f"## Verifier results (round {round_no})\n\nNo verify commands."
    lines = [
        f"## Verifier results (round {round_no})",
        "",
        "| tier | command | result |",
        "|---|---|---|",
    ]
    for c in commands:
        code = c.get("exit_code")
        result = "passed" if code == 0 else f"failed (exit {code})"
        if c.get("timed_out"):
            result += ", timed out"
        duration = c.get("duration_s")
        if isinstance(duration, int | float):
            result += f", {duration:.1f} s"
        lines.append(
            f"| {_cell(str(c.get('tier', '')), 60)} | {_code(_cell(str(c.get('command', '')), 300))}"
            f" | {result} |"
        )
    skipped = verify.get("skipped_tiers") or []
    if skipped:
        lines += ["", "Not run (an earlier tier failed): " + ", ".join(map(str, skipped))]
    return "\n".join(lines)


def _ac_section(ac_check: Sequence[Mapping[str, Any]]) -> str:
    if not ac_check:
        return "## Acceptance criteria\n\nThe reviewer gave no criterion-by-criterion check."
    lines = ["## Acceptance criteria", "", "| criterion | met | commit |", "|---|---|---|"]
    for a in ac_check:
        met = "yes" if a.get("satisfied") else "no"
        commit = str(a.get("commit") or "").strip()
        lines.append(
            f"| {_cell(defang(str(a.get('ac', '?'))), 300)} | {met} | "
            f"{_code(_cell(commit, 40)) if commit else ''} |"
        )
    return "\n".join(lines)


def _passed_comment(issue: _Issue, url: str, reused: bool, redactor: Redactor) -> str:
    state = issue.state
    n = len(state.rounds)
    rounds = f"{n} round{'s' if n != 1 else ''}"
    pull = f"its pull request is {url}" if reused else f"opened a pull request: {url}"
    text = f"hero passed this story in {rounds} and {pull}\n\nBranch `{issue.branch}`."
    return redactor.redact(text) + "\n\n" + issue.marker() + "\n"


def _failed_comment(issue: _Issue, redactor: Redactor) -> str:
    state = issue.state
    n = len(state.rounds)
    rounds = f"{n} round{'s' if n != 1 else ''}"
    after = f"after {rounds}" if n else "before any round"
    if state.status == Status.GAVE_UP:
        reason = f"hero gave up {after}: the reviewer did not approve."
    else:
        why = _one_line(state.error) or "no reason recorded"
        reason = f"hero {_FAILED[state.status]} {after}: {defang(why)}"
    parts = [reason]
    last = state.rounds[-1] if state.rounds else None
    feedback = (last.feedback or "").strip() if last is not None else ""
    if feedback:
        if len(feedback) > MAX_FEEDBACK_CHARS:
            feedback = feedback[:MAX_FEEDBACK_CHARS] + "\n[... cut]"
        quoted = "\n".join(f"> {line}" if line else ">" for line in defang(feedback).splitlines())
        parts.append(f"Last reviewer feedback (round {last.round if last else '?'}):\n\n{quoted}")
    else:
        parts.append("No reviewer feedback was recorded.")
    parts.append(f"The work so far is kept on hero's branch `{issue.branch}` (not pushed).")
    text = redactor.redact("\n\n".join(parts))
    return _fit(text, "\n\n" + issue.marker() + "\n")


def _cell(text: str, limit: int) -> str:
    """One markdown table cell: one line, ``|`` escaped, at most ``limit`` characters."""
    flat = " ".join(text.split())
    if len(flat) > limit:
        flat = flat[: limit - 3] + "..."
    return flat.replace("|", "\\|")


def _code(text: str) -> str:
    """``text`` as a code span, its fence longer than any run of backticks inside."""
    if not text:
        return ""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _fit(text: str, tail: str) -> str:
    """``text`` cut so that it and ``tail`` (kept whole) fit in a GitHub body."""
    room = MAX_BODY_CHARS - len(tail)
    if len(text) > room:
        text = text[: room - 20] + "\n\n[... cut]"
    return text + tail


def _one_line(text: str) -> str:
    return " ".join(text.split())


# ----------------------------------------------------------------------------- memory


class _Memory:
    """``runs/github/reported.json``: per story, the last report done. It saves API calls;
    when it is missing, unreadable or stale, the markers on GitHub decide."""

    def __init__(
        self, path: Path, done: dict[str, str], pulls: dict[str, str] | None = None
    ) -> None:
        self.path = path
        self._done = done
        #: per story, the html_url of the pull request hero opened or found (the board links it)
        self._pulls = pulls or {}
        self._changed = False

    @classmethod
    def load(cls, home: Path) -> _Memory:
        path = home / REPORTED_FILE
        try:
            data = json.loads(read_file(path, limit=MAX_REPORTED_BYTES).decode("utf-8"))
        except (OSError, ValueProblem, ValueError):
            data = None
        done = data.get("done") if isinstance(data, dict) else None
        if not isinstance(done, dict):
            done = {}
        pulls = data.get("pulls") if isinstance(data, dict) else None
        if not isinstance(pulls, dict):
            pulls = {}
        return cls(
            path,
            {str(k): str(v) for k, v in done.items()},
            {str(k): v for k, v in pulls.items() if isinstance(v, str)},
        )

    def done(self, story_id: str, key: str) -> bool:
        return self._done.get(story_id) == key

    def remember(self, story_id: str, key: str) -> None:
        if self._done.get(story_id) != key:
            self._done[story_id] = key
            self._changed = True

    def remember_pull(self, story_id: str, url: str) -> None:
        if url and self._pulls.get(story_id) != url:
            self._pulls[story_id] = url
            self._changed = True

    def save(self, log: Any) -> None:
        if not self._changed:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            record = {"done": dict(sorted(self._done.items()))}
            if self._pulls:
                record["pulls"] = dict(sorted(self._pulls.items()))
            data = json.dumps(record, indent=2)
            atomic_write(self.path, data.encode("utf-8") + b"\n")
        except OSError as exc:  # the markers on GitHub still say what was reported
            log.warning("report memory not saved", file=str(self.path), error=str(exc))
