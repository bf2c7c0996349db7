"""The read-only git tools, git_log and git_show: the story's history as the model may read it.

They run hero's one git wrapper (``hero.git.ops.git``: no hook, no filesystem monitor, no
replace refs, a timeout, a bounded output) in the tool context's worktree, inside the
sandbox of hero's own git when the caller confines it (``hero.git.ops.confined``). What the
model names is hostile input, and so are the refs a worker wrote: a revision is checked
(no option, no control character, bounded) and passed after ``--end-of-options``; a path
is a literal pathspec after ``--``. No pager, no external diff or textconv program, no
signature check (gpg) runs; the output is cut to a bound, saying so.
"""

from __future__ import annotations

from hero.agent.tools.context import ToolContext, ToolError, ToolOutcome
from hero.git.ops import GitError, git

#: Commits git_log lists when the model gives no max_count, and the most it may ask for.
LOG_DEFAULT = 20
LOG_MAX = 200
#: The most of git's output read for one call (the tool result is cut further to the
#: context's ``max_result_chars``); a bigger commit is shown cut, saying so.
READ_MAX_BYTES = 1 << 20
#: The longest revision accepted.
REV_MAX_CHARS = 256
#: Seconds one call may take.
TIMEOUT_S = 30.0

#: What every call passes: plain output, none of the programs a repository's config may name.
_PLAIN = (
    "-c",
    "core.bigFileThreshold=1m",
    "-c",
    "log.showSignature=false",
    "-c",
    "core.quotePath=false",
)
_NO_PROGRAMS = ("--no-color", "--no-ext-diff", "--no-textconv", "--no-show-signature")
_LITERAL = {"GIT_LITERAL_PATHSPECS": "1", "GIT_PAGER": "cat", "PAGER": "cat"}


def tool_git_log(ctx: ToolContext, path: str = "", max_count: int = LOG_DEFAULT) -> ToolOutcome:
    if not 1 <= max_count <= LOG_MAX:
        raise ToolError(f"tool 'git_log': max_count must be between 1 and {LOG_MAX}")
    args = [
        "log",
        *_NO_PROGRAMS,
        "--no-decorate",
        "--date=short",
        "--format=%h %ad %an%n    %s",
        f"--max-count={max_count}",
        "HEAD",
        "--",
        *_pathspec("git_log", path),
    ]
    text = _run(ctx, "git_log", args)
    return ToolOutcome(text or "(no commits)", is_error=False)


def tool_git_show(ctx: ToolContext, rev: str, path: str = "") -> ToolOutcome:
    args = [
        "show",
        *_NO_PROGRAMS,
        "--no-decorate",
        "--stat",
        "--patch",
        "--end-of-options",
        _revision(rev),
        "--",
        *_pathspec("git_show", path),
    ]
    return ToolOutcome(_run(ctx, "git_show", args) or "(nothing to show)", is_error=False)


def _revision(rev: str) -> str:
    """``rev`` when it can only be read as a revision; ToolError otherwise."""
    text = rev.strip()
    if not text:
        raise ToolError("tool 'git_show': rev is empty; give a commit, e.g. HEAD or HEAD~1")
    if len(text) > REV_MAX_CHARS:
        raise ToolError(f"tool 'git_show': rev is over {REV_MAX_CHARS} characters")
    if text.startswith("-"):
        raise ToolError(f"tool 'git_show': rev {text[:40]!r} starts with '-': not a revision")
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise ToolError("tool 'git_show': rev holds a control character")
    return text


def _pathspec(tool: str, path: str) -> list[str]:
    text = path.strip()
    if not text or text == ".":
        return []
    if "\x00" in text or any(ord(c) < 32 for c in text):
        raise ToolError(f"tool '{tool}': path holds a control character")
    if text.startswith("/"):
        raise ToolError(f"tool '{tool}': path {text!r} is absolute; give it from the root")
    return [text]


def _run(ctx: ToolContext, tool: str, args: list[str]) -> str:
    """git ``args`` in the worktree, its output cut to READ_MAX_BYTES; ToolError with git's
    own words when it fails (an unknown revision, a path outside the repository)."""
    if ctx.before_git is not None:
        ctx.before_git()  # what hero owns of the story's git directory, put back first
    try:
        out = git(
            ctx.root,
            *_PLAIN,
            *args,
            env=_LITERAL,
            timeout_s=TIMEOUT_S,
            max_output=READ_MAX_BYTES,
            cut_ok=True,
        )
    except GitError as exc:
        said = str(exc).split(" failed: ", 1)[-1]
        raise ToolError(f"tool '{tool}': {said[:2000]}") from None
    return out
