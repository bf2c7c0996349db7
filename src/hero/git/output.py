"""hero's own commits of a worker's work, and the build output they leave out.

hero commits a worktree itself in a few places: the rescue of what a worker left uncommitted
at a phase's end (``hero.git.phases``), the work kept before a fresh start or a move
(``hero.run.workspace``, ``hero.git.storyrepo``) and the work-in-progress snapshot
(``hero.git.wip``). Each takes every change to a file the branch already has, and of the
files it does not have yet, those that are neither ignored (the repository's own ignore
files, as git reads them) nor build output: ``build_output`` in roles.yaml, ``.gitignore``-
style patterns (``__pycache__/``, ``*.pyc``, ``node_modules/``, ...). A build file a test run
or an install left behind never reaches a branch through hero, ``.gitignore`` or not.

git does the matching: the patterns go on ``git ls-files``'s command line (``--exclude``),
where they outrank every ignore file, so a ``.gitignore`` the worker writes (``!*.pyc``)
cannot bring a file back, and nothing in the repository can change them. git does not walk
into a directory they leave out (a ``node_modules`` of thousands of files costs nothing).
What is left out stays in the worktree as it is. A file the worker staged (``git add``) but
did not commit counts as not on the branch yet: it is left out too, unstaged.

The worker's own commits of such files are its own: ``added_build_output`` names them for the
reviewer (hero.roles.reviewer), who sees them in the diff as well.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from hero.git.ops import git, head_sha

#: The most paths (and characters of paths) one ``git add`` or ``git reset`` is given: far
#: below the system's limit on a command line, whatever the paths' lengths.
_CHUNK_PATHS = 1000
_CHUNK_CHARS = 64_000
#: The files a diff adds (``git diff ... <from> <to>``).
_ADDED = ("diff", "--name-only", "-z", "--no-renames", "--diff-filter=A")
#: The files of an index that patterns given after it match.
_MATCHING = ("ls-files", "-z", "--cached", "--ignored")
#: The most names the reviewer is given in the line that names committed build output.
SHOWN_MAX = 20


def excludes(patterns: Sequence[str]) -> list[str]:
    """``git ls-files`` arguments that leave ``patterns`` (``.gitignore``-style) out."""
    return [f"--exclude={p}" for p in patterns if p]


def untracked(
    worktree: Path, build_output: Sequence[str] = (), env: Mapping[str, str] | None = None
) -> list[str]:
    """The files of ``worktree`` that git does not track, neither ignored nor matching
    ``build_output`` (a repository nested in it: its directory, ``sub/``). One ``git
    ls-files``, which walks into no directory left out."""
    out = git(
        worktree,
        "ls-files",
        "-z",
        "--others",
        "--exclude-standard",
        *excludes(build_output),
        env=env,
    )
    return [p for p in out.split("\0") if p]


def stage_all(
    worktree: Path, build_output: Sequence[str] = (), env: Mapping[str, str] | None = None
) -> None:
    """Stage what hero's commit of ``worktree`` takes (``git add --all``, build output left
    out); ``env`` may name another index (``GIT_INDEX_FILE``)."""
    if not build_output:
        git(worktree, "add", "--all", "--", ".", env=env)
        return
    _unstage_new_output(worktree, build_output, env)
    git(worktree, "add", "--update", "--", ".", env=env)
    literal = {**(env or {}), "GIT_LITERAL_PATHSPECS": "1"}
    for chunk in _chunks(untracked(worktree, build_output, env)):
        git(worktree, "add", "--", *chunk, env=literal)


def _unstage_new_output(
    worktree: Path, build_output: Sequence[str], env: Mapping[str, str] | None
) -> None:
    """Files staged but in no commit yet (not in ``HEAD``) that are build output: out of the
    index again, untouched in the worktree."""
    # fails only where HEAD is no commit yet (never so for hero's commits): nothing to unstage
    new = git(worktree, *_ADDED, "--cached", "HEAD", env=env, check=False)
    added = {p for p in new.split("\0") if p}
    if not added:
        return
    matching = git(worktree, *_MATCHING, *excludes(build_output), env=env)
    staged = sorted({p for p in matching.split("\0") if p} & added)
    literal = {**(env or {}), "GIT_LITERAL_PATHSPECS": "1"}
    for chunk in _chunks(staged):
        git(worktree, "reset", "-q", "HEAD", "--", *chunk, env=literal)


def commit_all(
    worktree: Path, message: str, identity: Mapping[str, str], build_output: Sequence[str] = ()
) -> str | None:
    """Commit everything uncommitted in the worktree but build output (see the module's
    docstring); returns the new sha, or None when there was nothing to commit."""
    if not git(worktree, "status", "--porcelain", "--untracked-files=all").strip():
        return None
    stage_all(worktree, build_output)
    if build_output and not git(worktree, "diff", "--cached", "--name-only", "HEAD").strip():
        return None  # only build output was left
    git(worktree, "commit", "--no-verify", "-q", "-m", message, env=identity)
    return head_sha(worktree)


def added_build_output(repo: Path, base: str, tip: str, build_output: Sequence[str]) -> list[str]:
    """The files matching ``build_output`` that ``tip`` has and ``base`` had not (what a
    branch's commits add as build output), in path order. Read in a scratch index of
    ``tip``'s tree, in a directory of its own: the repository's index and files are not
    touched, a bare repository works too."""
    if not build_output or not base or not tip:
        return []
    new = git(repo, *_ADDED, base, tip)
    added = {p for p in new.split("\0") if p}
    if not added:
        return []
    with tempfile.TemporaryDirectory(prefix="hero-output-") as scratch:
        env = {"GIT_INDEX_FILE": str(Path(scratch) / "index")}
        tree = ("--work-tree", scratch)  # ls-files wants one; it reads no file there
        git(repo, *tree, "read-tree", tip, env=env)
        matching = git(repo, *tree, *_MATCHING, *excludes(build_output), env=env)
    return sorted({p for p in matching.split("\0") if p} & added)


def build_output_line(paths: Sequence[str], limit: int = SHOWN_MAX) -> str:
    """What the reviewer is told of the build output a branch adds: one line naming at most
    ``limit`` of ``paths`` and how many more; "" for none."""
    if not paths:
        return ""
    shown = ", ".join(paths[:limit])
    more = f", and {len(paths) - limit} more" if len(paths) > limit else ""
    return (
        f"Build or cache output committed on this branch ({len(paths)} file(s) matching "
        f"hero's build_output setting): {shown}{more}. A build, a test run or an install "
        "makes such files; check that each belongs in the repository."
    )


def _chunks(paths: Sequence[str]) -> Iterator[list[str]]:
    chunk: list[str] = []
    size = 0
    for path in paths:
        if chunk and (len(chunk) >= _CHUNK_PATHS or size + len(path) > _CHUNK_CHARS):
            yield chunk
            chunk, size = [], 0
        chunk.append(path)
        size += len(path) + 1
    if chunk:
        yield chunk
