"""Worktrees, branches, commits and diffs on the target repository.

Every operation that touches the shared repository's refs or worktree list goes through
``TargetRepo.locked()``: a thread lock for stories run in one process and an ``flock`` on a
file in the repository's git directory for several hero processes on one machine. A story
runs in one hero home at a time (``TargetRepo.story_lock``), and hero removes no worktree
it did not create. ``clear_stale_locks`` removes the lock files a git killed with hero left.

Every git call goes through ``git()``: the ``git`` program run by ``hero.runner`` (not a
library such as GitPython, which is not meant for long-running processes), with a timeout,
no hook and no filesystem monitor (``NO_PROGRAMS``), no replace ref and no graft (what a
worker writes there never changes the commits hero's git sees), git's own diff (no external diff or
textconv program), a cap on what it prints, and an environment without secrets. A worker
never reaches the user's repository's config or hooks (each story works in a repository of
its own, ``hero.git.storyrepo``); hero's git that walks a story's repository at a phase's
end runs in that story's sandbox (``confined``).

The user's global and system git config are read as always (``user.name``, ``safe.directory``,
credential helpers, LFS filters live there).
"""

from __future__ import annotations

import fcntl
import os
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path

from hero.errors import UsageError
from hero.git.reffiles import head_from_files, ref_from_files
from hero.locks import repo_story_busy, repo_story_lock
from hero.names import StoryRef
from hero.runner import child_env, run_process

#: Used for hero's commits (and the worker's) where git has no identity configured.
DEFAULT_IDENTITY = {
    "GIT_AUTHOR_NAME": "hero",
    "GIT_AUTHOR_EMAIL": "hero@localhost",
    "GIT_COMMITTER_NAME": "hero",
    "GIT_COMMITTER_EMAIL": "hero@localhost",
}

#: Seconds any git call may take: far more than a local git operation needs, and still an
#: end to one that waits on a lock, a credential prompt or a network remote.
DEFAULT_TIMEOUT_S = 120.0
#: For calls that write or delete a whole checkout (``worktree add``/``remove``), which on a
#: big repository take minutes.
WORKTREE_TIMEOUT_S = 600.0

#: Seconds hero waits, at a story's start, for a git lock file of the story that a live
#: process holds (say, a git still finishing), before it gives up with a GitError.
LOCK_WAIT_S = DEFAULT_TIMEOUT_S
#: A lock file no process has open may still be live for a moment: git closes a ref's lock
#: file before it renames it into place. One younger than this is given time to go away.
LOCK_GRACE_S = 2.0
_LOCK_POLL_S = 0.25

#: What hero's own git may see of hero's environment: where git and its configuration live,
#: who commits, how commits are signed. Nothing else: not the provider keys or any other
#: secret, and not GIT_DIR, GIT_INDEX_FILE, GIT_EXTERNAL_DIFF and the like, which would point
#: hero's git at another repository or change the output hero reads.
_GIT_INHERITS = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "EMAIL",
        "TMPDIR",
        "TZ",
        "XDG_CONFIG_HOME",
        "GNUPGHOME",
        "SSH_AUTH_SOCK",
        # how the network is reached (submodules are cloned by hero's own git)
        "http_proxy",
        "https_proxy",
        "no_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "ALL_PROXY",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "GIT_SSL_CAINFO",
        "GIT_SSH",
        "GIT_SSH_COMMAND",
        "GIT_EXEC_PATH",
        "GIT_TEMPLATE_DIR",
        "GIT_CONFIG_GLOBAL",
        "GIT_CONFIG_SYSTEM",
        "GIT_CONFIG_NOSYSTEM",
        "GIT_CONFIG_COUNT",
        "GIT_CONFIG_PARAMETERS",
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "GIT_AUTHOR_DATE",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
        "GIT_COMMITTER_DATE",
    }
)
_GIT_INHERITS_PREFIXES = ("GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_", "GIT_TRACE")
#: Added to runner's non-interactive settings: output in one language, the one hero parses;
#: no replace ref and no graft: what a worker writes under ``refs/replace/`` or into
#: ``info/grafts`` never changes which commit, tree or parent hero's git sees (a replace ref
#: could otherwise hide a commit's change from the scope check and the reviewer's diff).
_GIT_SETTINGS = {"LC_ALL": "C", "GIT_NO_REPLACE_OBJECTS": "1", "GIT_GRAFT_FILE": "/dev/null"}
#: Before every git command hero runs itself: no hook and no filesystem monitor runs, whatever
#: the worker wrote into the repository's hooks or config (a ``-c`` on the command line wins
#: over every config file). The settings that name a program git cannot do without here
#: (filter, diff and merge drivers, signing...) are kept as the user set them; what a worker
#: or a check changes of them is undone before hero's next git runs (see ``ProgramWatch``).
NO_PROGRAMS = (
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.useReplaceRefs=false",
)


#: The most of a git command's output hero holds (each of stdout and stderr): whatever a
#: worker commits (a 4 GB file, a million refs), hero's memory stays bounded.
GIT_OUTPUT_MAX_BYTES = 64 << 20
#: A file bigger than this counts as binary in the reviewer's diff: named, not shown, and
#: never read whole into hero's git.
BIG_FILE_BYTES = 1 << 20
#: The most binary files left out of a diff by name (each is a pathspec argument).
_EXCLUDED_MAX = 2000
#: The most of a diff hero reads for the reviewer before cutting it (it is cut further to
#: ``max_chars`` by ``diff_since``).
DIFF_READ_MAX_BYTES = 4 << 20


#: Turns a git argv run in a directory into the argv that runs it in a sandbox.
Wrap = Callable[[Sequence[str], Path], list[str]]
#: While set (``confined``): hero's own git calls in a directory under the root run in that
#: sandbox. Per thread (a story's run is one thread), so one story's never reaches another's.
_CONFINED: ContextVar[tuple[Path, Wrap] | None] = ContextVar("hero_git_confined", default=None)


@contextmanager
def confined(root: Path, wrap: Wrap | None) -> Iterator[None]:
    """Within the block, hero's own git calls in ``root`` (a story's repository) run in the
    sandbox ``wrap`` builds (None: as they are). A story's repository holds what a worker
    made: git there reads the git directories of its submodules, which a worker can make or
    swap, and runs the filters they name, so hero's git that walks it (status, add, commit at
    a phase's end) runs where the worker's own commands do."""
    if wrap is None:
        yield
        return
    token = _CONFINED.set((Path(os.path.realpath(root)), wrap))
    try:
        yield
    finally:
        _CONFINED.reset(token)


class GitError(UsageError):
    """A git command failed; the message holds the command and git's own words."""


def git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of hero's own git calls (see ``_GIT_INHERITS``), then ``extra``."""
    base = {
        k: v
        for k, v in os.environ.items()
        if k in _GIT_INHERITS or k.startswith(_GIT_INHERITS_PREFIXES)
    }
    return child_env(base, extra={**_GIT_SETTINGS, **(extra or {})})


def git(
    cwd: Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_output: int = GIT_OUTPUT_MAX_BYTES,
    cut_ok: bool = False,
    input: bytes | None = None,
) -> str:
    """Run ``git ARGS`` in ``cwd`` and return its stdout (``input``: what it reads on its
    standard input, through a temporary file).

    Raises GitError when git cannot be started, when it runs longer than ``timeout_s`` (it
    and its children are ended), with ``check`` when it exits non-zero, and when its output
    is over ``max_output`` bytes, unless ``cut_ok`` (then its middle is left out, marked).
    """
    command = f"git {' '.join(args)}"
    argv = ["git", *NO_PROGRAMS, *args]
    box = _CONFINED.get()
    if box is not None and _within(Path(os.path.realpath(cwd)), box[0]):
        argv = box[1](argv, Path(cwd))
    try:
        with tempfile.TemporaryFile() as fed:
            if input is not None:
                fed.write(input)
                fed.seek(0)
            result = run_process(
                argv,
                cwd,
                timeout_s=timeout_s,
                env=git_env(env),
                max_output=max_output,
                stdin=fed if input is not None else None,
            )
    except OSError as exc:
        raise GitError(f"{command} (in {cwd}) could not start: {exc.strerror or exc}") from None
    if result.timed_out:
        said = result.stderr.strip()
        raise GitError(
            f"{command} (in {cwd}) timed out after {timeout_s:g} s and was ended with its child "
            "processes; git may be waiting for a lock, a credential prompt or a network remote"
            + (f"; it said: {said}" if said else "")
        )
    if check and result.exit_code != 0:
        detail = (result.stderr or result.stdout).strip()
        raise GitError(f"{command} (in {cwd}) failed: {detail}")
    if result.cut_bytes and not cut_ok:
        raise GitError(
            f"{command} (in {cwd}) printed over {max_output >> 20} MiB; hero reads no more "
            "than that of a git command's output"
        )
    return result.stdout


@dataclass(frozen=True)
class Bounded:
    """Text cut to a size, saying how much was left out."""

    text: str
    cut_chars: int = 0
    omitted: tuple[str, ...] = ()


class TargetRepo:
    """The user's repository that stories branch from."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.RLock()
        self._depth = 0  # how deep the thread that holds the lock has taken it
        self._identity: dict[str, str] | None = None
        self._lock_path: Path | None = None
        self._common: Path | None = None
        self._format = ""  # the object format, once asked

    def object_format(self) -> str:
        """The repository's object format (sha1, sha256; a repository keeps the one it was
        made with, so it is asked once)."""
        if not self._format:
            out = git(self.path, "rev-parse", "--show-object-format", check=False)
            self._format = out.strip() or "sha1"
        return self._format

    def common_dir(self) -> Path:
        """The repository's git common directory (``.git`` of the main worktree), absolute."""
        if self._common is None:
            common = Path(git(self.path, "rev-parse", "--git-common-dir").strip())
            self._common = (common if common.is_absolute() else self.path / common).resolve()
        return self._common

    @contextmanager
    def locked(self) -> Iterator[None]:
        """The repository-wide lock every story of every hero process on this repository
        shares: held only while the user's refs or worktree list change (milliseconds, not a
        phase's end). Re-entrant within a thread: a holder may call what takes it again."""
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield
                finally:
                    self._depth -= 1
                return
            if self._lock_path is None:
                self._lock_path = self.common_dir() / "hero.lock"
            with open(self._lock_path, "a") as fh:
                fcntl.flock(fh, fcntl.LOCK_EX)
                self._depth = 1
                try:
                    yield
                finally:
                    self._depth = 0
                    fcntl.flock(fh, fcntl.LOCK_UN)

    @contextmanager
    def story_lock(self, story_id: StoryRef | str, home: Path) -> Iterator[None]:
        """Hold the story's lock in this repository (see ``hero.locks.repo_story_lock``):
        ``StoryBusy``, naming the other home, while another hero runs the story here."""
        with repo_story_lock(self.common_dir(), story_id, home):
            yield

    def story_busy(self, story_id: StoryRef | str) -> str | None:
        """Why another hero process (of any home) keeps the story from running on this
        repository now, or None; None too when the repository cannot be read (the run
        itself then says why)."""
        try:
            return repo_story_busy(self.common_dir(), story_id)
        except GitError:
            return None

    def identity_env(self) -> dict[str, str]:
        """Author and committer variables to set, empty where git already has a user."""
        if self._identity is None:
            name = git(self.path, "config", "user.name", check=False).strip()
            email = git(self.path, "config", "user.email", check=False).strip()
            self._identity = {} if (name and email) else dict(DEFAULT_IDENTITY)
        return self._identity

    def current_branch(self) -> str:
        return current_branch(self.path)

    def rev_parse(self, ref: str) -> str:
        sha = commit_of(self.path, ref)
        if not sha:
            raise GitError(f"base ref '{ref}' does not name a commit in {self.path}")
        return sha

    def branch_sha(self, branch: str) -> str | None:
        return branch_tip(self.path, branch) or None

    def keep_branch_aside(self, branch: str, own_worktree: Path | None = None) -> str:
        """Rename ``branch`` to a fresh name so its commits are kept; returns the new name.

        A worktree of the branch is removed only if it is ``own_worktree`` (the caller's
        own checkout, its work committed) or gone from disk; any other checkout of the
        branch is refused with a GitError naming it (see ``_remove_worktree_of``)."""
        stamp = time.strftime("%Y%m%d-%H%M%S")
        new = f"{branch}-prev-{stamp}"
        n = 1
        while self.branch_sha(new):
            n += 1
            new = f"{branch}-prev-{stamp}-{n}"
        with self.locked():
            self._remove_worktree_of(branch, own_worktree)
            git(self.path, "branch", "-m", branch, new)
        return new

    def _worktrees_of(self, branch: str) -> list[Path]:
        """The checkouts of ``branch`` git knows of, the main worktree left out."""
        listing = git(self.path, "worktree", "list", "--porcelain")
        found: list[Path] = []
        current: str | None = None
        for line in listing.splitlines():
            if line.startswith("worktree "):
                current = line[len("worktree ") :]
            elif line == f"branch refs/heads/{branch}" and current:
                if Path(current).resolve() != self.path.resolve():
                    found.append(Path(current))
        return found

    def _remove_worktree_of(self, branch: str, own_worktree: Path | None) -> None:
        """Remove the checkouts of ``branch`` so it can be renamed or checked out elsewhere.

        Only ``own_worktree`` (this hero home's ``worktrees/<id>``) or a path that no longer
        exists is removed: a live checkout elsewhere is another home's or a person's, and
        ``--force`` would throw away its uncommitted work, so it is refused instead."""
        mine = own_worktree.resolve() if own_worktree is not None else None
        checkouts = [path for path in self._worktrees_of(branch) if path.exists()]
        for path in checkouts:
            if path.resolve() != mine:
                raise GitError(
                    f"branch '{branch}' is checked out in {path}, a worktree this hero home "
                    "did not create: it may hold another hero home's or a person's uncommitted "
                    "work, so hero leaves it alone. Finish the work there, or remove it "
                    f"(`git worktree remove {path}`), then run the story again"
                )
        for path in checkouts:
            git(
                self.path,
                "worktree",
                "remove",
                "--force",
                str(path),
                check=False,
                timeout_s=WORKTREE_TIMEOUT_S,
            )
        git(self.path, "worktree", "prune")  # the ones whose folder is gone


# ------------------------------------------------------------------------ stale lock files


@dataclass(frozen=True)
class _Lock:
    """One lock file as seen at one moment: which file, which inode, how old."""

    path: Path
    inode: int
    mtime_ns: int

    @property
    def age_s(self) -> float:
        return time.time() - self.mtime_ns / 1e9


@dataclass
class _Users:
    """Who may be using some lock files: the processes that have them open, and the git
    processes working in some directories. ``known`` is False where /proc cannot tell."""

    known: bool = True
    holding: dict[Path, list[int]] = field(default_factory=dict)
    gits: dict[int, Path] = field(default_factory=dict)

    def gits_in(self, roots: Sequence[Path]) -> list[int]:
        return [pid for pid, cwd in self.gits.items() if any(_within(cwd, r) for r in roots)]


def commit_of(repo: Path, rev: str) -> str:
    """The commit ``rev`` names in ``repo`` (a branch, a tag peeled, a sha, ``HEAD``), or ""
    when it names none: the one ``rev-parse --verify``."""
    return git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False).strip()


def branch_tip(repo: Path, branch: str) -> str:
    """The object ``refs/heads/<branch>`` points at in ``repo`` (not peeled: what the ref
    holds, whatever a worker made it hold), or "" when there is no such branch. Read from
    the repository's files when that is plain (git.reffiles, which trusts nothing a worker
    wrote there), else asked of git (in the story's sandbox when ``confined``)."""
    tip = ref_from_files(repo, branch)
    if tip is not None:
        return tip
    return git(
        repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}", check=False
    ).strip()


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _stat_lock(path: Path) -> _Lock | None:
    try:
        st = path.lstat()
    except OSError:
        return None
    return _Lock(path, st.st_ino, st.st_mtime_ns)


def _lock_users(paths: Sequence[Path]) -> _Users:
    """Scan /proc once: who has one of ``paths`` open, and which git processes run where.

    git keeps a lock file's descriptor open while it holds an index or packed-refs lock, but
    closes a ref's lock file before renaming it, so a git working in the directory counts
    too. A process of another user cannot be looked into and is passed over (it cannot
    write this user's repository); one of this user that cannot be looked into makes the
    answer unknown."""
    users = _Users()
    wanted = {str(p) for p in paths}
    me, uid = os.getpid(), os.getuid()
    try:
        entries = [int(e) for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return _Users(known=False)
    for pid in entries:
        if pid == me:
            continue
        base = f"/proc/{pid}"
        try:
            fds = os.listdir(f"{base}/fd")
        except FileNotFoundError:
            continue  # gone meanwhile
        except OSError:
            try:
                if os.stat(base).st_uid == uid:
                    users.known = False
            except OSError:
                pass
            continue
        for fd in fds:
            try:
                target = os.readlink(f"{base}/fd/{fd}")
            except OSError:
                continue
            if target in wanted:
                users.holding.setdefault(Path(target), []).append(pid)
        try:
            with open(f"{base}/comm", "rb") as fh:
                is_git = fh.read().startswith(b"git")
            if is_git:
                with open(f"{base}/cmdline", "rb") as fh:
                    # a long-lived helper (fsmonitor--daemon, credential-cache--daemon)
                    # holds no lock of a command's
                    is_git = b"--daemon" not in fh.read()
            if is_git:
                users.gits[pid] = Path(os.readlink(f"{base}/cwd"))
        except OSError:
            continue
    return users


def _describe(pids: Sequence[int]) -> str:
    parts = []
    for pid in pids[:3]:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            cmd = ""
        parts.append(f"pid {pid}" + (f" ({cmd[:80]})" if cmd else ""))
    return ", ".join(parts)


def _verdict(lock: _Lock, users: _Users, roots: Sequence[Path]) -> str:
    """ "stale" (remove it), else why it may be live: who holds it, or "young", "unknown"."""
    holders = users.holding.get(lock.path, []) + users.gits_in(roots)
    if holders:
        return f"held by {_describe(holders)}"
    if not users.known:
        return "stale" if lock.age_s > DEFAULT_TIMEOUT_S else "unknown"
    return "stale" if lock.age_s >= LOCK_GRACE_S else "young"


def _remove_stale(lock: _Lock, say: Callable[[str], None]) -> None:
    now = _stat_lock(lock.path)
    if now is None or (now.inode, now.mtime_ns) != (lock.inode, lock.mtime_ns):
        return  # gone, or a new lock file by a live git since it was looked at
    try:
        lock.path.unlink()
    except FileNotFoundError:
        return
    say(f"removed stale git lock {lock.path} left by a process that died")


def worktree_gitdir(worktree: Path) -> Path | None:
    """The worktree's own git directory (``<common>/worktrees/<name>``), from its ``.git``
    file; None if ``worktree`` is not a linked worktree."""
    try:  # a small regular file, never through a link (a worker may have made it)
        fd = os.open(worktree / ".git", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        text = fh.read(4096).decode("utf-8", errors="replace")
    if not text.startswith("gitdir:"):
        return None
    gitdir = Path(text[len("gitdir:") :].strip())
    return (gitdir if gitdir.is_absolute() else worktree / gitdir).resolve()


def clear_stale_locks(
    repo: TargetRepo,
    branch: str,
    worktree: Path,
    say: Callable[[str], None],
    *,
    wait_s: float | None = None,
) -> None:
    """Remove the git lock files a dead process left behind for this story; wait for live ones.

    After ``kill -9`` of hero and its git, ``HEAD.lock``, ``index.lock`` (in the worktree's
    git directory) and ``refs/heads/<branch>.lock`` stay, and every git call on the story
    fails. Call this at a story's start, with the story's locks held and its old processes
    ended, before any git call of hero's on it. A lock file no process has open (and no
    git works in the worktree) is removed, with a note through ``say``; one that a live
    process holds is waited on, at most ``wait_s`` (default ``LOCK_WAIT_S``), then a
    GitError names it. Where /proc cannot tell, a lock file counts as stale once older than
    git's timeout.

    The repository's shared lock files (``packed-refs.lock``, ``config.lock``, the main
    worktree's ``index.lock``) are removed only if no process holds them and no git works
    anywhere in the repository; else they are left alone, never waited on.
    """
    common = repo.common_dir()
    mine = worktree.resolve()
    own = [common / "refs" / "heads" / f"{branch}.lock"]
    gitdir = worktree / ".git"
    if gitdir.is_dir() and not gitdir.is_symlink():  # the story's own repository
        own += sorted(gitdir.glob("*.lock"))
        own.append(gitdir / "refs" / "heads" / f"{branch}.lock")
    else:  # an earlier layout's linked worktree
        linked = worktree_gitdir(worktree)
        if linked is not None:
            own += sorted(linked.glob("*.lock"))
    wait_s = LOCK_WAIT_S if wait_s is None else wait_s
    deadline = time.monotonic() + wait_s
    told: set[Path] = set()
    while True:
        locks = [lock for lock in map(_stat_lock, own) if lock is not None]
        if not locks:
            break
        users = _lock_users([lock.path for lock in locks])
        waiting: list[str] = []
        for lock in locks:
            verdict = _verdict(lock, users, [mine])
            if verdict == "stale":
                _remove_stale(lock, say)
            else:
                waiting.append(f"{lock.path} ({verdict})")
                if verdict.startswith("held") and lock.path not in told:
                    told.add(lock.path)
                    say(f"waiting for git lock {lock.path}, {verdict}")
        if not waiting:
            break
        if time.monotonic() >= deadline:
            raise GitError(
                f"git lock file(s) of {branch} still held after {wait_s:g} s: "
                + "; ".join(waiting)
                + ". A git process is still working there; let it finish or end it, then "
                "run the story again"
            )
        time.sleep(_LOCK_POLL_S)
    shared = [common / n for n in ("packed-refs.lock", "config.lock", "index.lock")]
    locks = [lock for lock in map(_stat_lock, shared) if lock is not None]
    if locks:
        roots = [repo.path.resolve(), common, *_registered_worktrees(common)]
        users = _lock_users([lock.path for lock in locks])
        for lock in locks:
            if _verdict(lock, users, roots) == "stale":
                _remove_stale(lock, say)


def _registered_worktrees(common: Path) -> list[Path]:
    """The linked worktrees git knows of, from ``<common>/worktrees/*/gitdir``."""
    found = []
    for gitdir_file in sorted(common.glob("worktrees/*/gitdir")):
        try:
            dot_git = Path(gitdir_file.read_text(encoding="utf-8", errors="replace").strip())
        except OSError:
            continue
        found.append(dot_git.parent.resolve())
    return found


def current_branch(worktree: Path) -> str:
    """The branch checked out in ``worktree``, or ``HEAD`` (detached). Read from the
    files when that is plain (git.reffiles), else asked of git."""
    name = head_from_files(worktree)
    if name is None:
        name = git(worktree, "symbolic-ref", "--quiet", "--short", "HEAD", check=False).strip()
    return name or "HEAD"


def head_sha(worktree: Path) -> str:
    return git(worktree, "rev-parse", "HEAD").strip()


def log_since(
    worktree: Path, base_sha: str, max_chars: int = 8_000, *, tip: str = "HEAD"
) -> Bounded:
    text = git(
        worktree,
        "log",
        "--no-color",
        "--format=%h %s",
        f"{base_sha}..{tip}",
        max_output=max(max_chars * 4, 1 << 20),
        cut_ok=True,
    )
    return _bound(text, max_chars)


def diff_since(
    worktree: Path, base_sha: str, max_chars: int = 60_000, *, tip: str = "HEAD"
) -> tuple[Bounded, str]:
    """The diff from the base to ``tip`` and its ``--stat`` summary.

    Whole files are kept in order while they fit in ``max_chars``; the files left out are
    named in ``Bounded.omitted`` so the reader knows what it did not see.
    """
    # git's own diff, whatever external diff or textconv program the config names; a file
    # over BIG_FILE_BYTES counts as binary, and binary files are left out of the diff by
    # name (git would read each whole into memory only to say "Binary files differ")
    plain = (
        "-c",
        f"core.bigFileThreshold={BIG_FILE_BYTES}",
        "diff",
        "--no-color",
        "--no-ext-diff",
        "--no-textconv",
    )
    stat = git(
        worktree, *plain, "--stat", base_sha, tip, max_output=max(max_chars, 1 << 20), cut_ok=True
    )
    numstat = git(worktree, *plain, "--numstat", "-z", "--no-renames", base_sha, tip)
    binary = [rec[len("-\t-\t") :] for rec in numstat.split("\0") if rec.startswith("-\t-\t")][
        :_EXCLUDED_MAX
    ]
    limit = ["--", ".", *(f":(exclude,literal){p}" for p in binary)] if binary else []
    diff = git(worktree, *plain, base_sha, tip, *limit, max_output=DIFF_READ_MAX_BYTES, cut_ok=True)
    if binary:
        diff += (
            f"\n[not shown: {len(binary)} binary file(s), or over {BIG_FILE_BYTES >> 20} MiB: "
            + ", ".join(binary[:50])
            + (", ..." if len(binary) > 50 else "")
            + "]\n"
        )
    if len(diff) <= max_chars:
        return Bounded(diff), stat
    parts = diff.split("\ndiff --git ")
    kept: list[str] = []
    omitted: list[str] = []
    used = 0
    for i, part in enumerate(parts):
        chunk = part if i == 0 else "diff --git " + part
        if used + len(chunk) <= max_chars:
            kept.append(chunk)
            used += len(chunk) + 1
        else:
            header = chunk.split("\n", 1)[0]
            name = header.rsplit(" b/", 1)[-1] if " b/" in header else header
            omitted.append(f"{name} ({chunk.count(chr(10))} lines)")
    return Bounded("\n".join(kept), len(diff) - used, tuple(omitted)), stat


def _bound(text: str, max_chars: int) -> Bounded:
    if len(text) <= max_chars:
        return Bounded(text)
    return Bounded(text[:max_chars], len(text) - max_chars)


# ------------------------------------------------------------ merging without a worktree


class MergeConflict(GitError):
    """Branches git cannot merge on its own: their changes to ``files`` conflict.

    ``branches`` are the branches of the merge that failed, in order: all but the last had
    been merged already (the left side), the last is the one that conflicted with them.
    ``files`` is empty where git reports a conflict of whole directories (one renamed to
    different places) that no single file shows."""

    files: tuple[str, ...]
    branches: tuple[str, ...]

    def __init__(self, branches: Sequence[str], files: Sequence[str]) -> None:
        self.branches = tuple(branches)
        self.files = tuple(files)
        *merged, right = self.branches or ("?",)
        left = merged[0] if len(merged) == 1 else f"the merge of {', '.join(merged)}"
        if self.files:
            shown = ", ".join(self.files[:_CONFLICTS_SHOWN])
            more = len(self.files) - _CONFLICTS_SHOWN
            where = f"in: {shown}" + (f", and {more} more" if more > 0 else "")
        else:
            where = (
                "(git names no conflicted file: a conflict of whole directories, such as one "
                "renamed to different places on each side)"
            )
        super().__init__(f"merge conflict between {left} and {right} {where}")


#: Conflicted files named in a MergeConflict's message (all are in ``files``).
_CONFLICTS_SHOWN = 20


def merge_heads(
    repo: Path, heads: Sequence[tuple[str, str]], message: str, identity: Mapping[str, str]
) -> str:
    """The sha of a commit that holds every head; ``heads`` are ``(label, sha)`` pairs, the
    label (a branch name) only for messages.

    Duplicates and heads that are ancestors of another head are dropped; if one head is
    left it is the answer, else the heads are merged pairwise, left to right, each merge a
    new commit (``message``, by ``identity``) whose parents are the merge so far and the
    next head. Only objects are written: no worktree, index or ref changes.

    Raises MergeConflict when two sides conflict, and GitError when a sha is no commit here,
    the histories are unrelated, or git is older than 2.38.
    """
    if not heads:
        raise ValueError("merge_heads needs at least one head")
    unique: dict[str, str] = {}  # sha -> label, in the order given
    for label, sha in heads:
        unique.setdefault(sha, label)
    if len(unique) == 1:
        return next(iter(unique))
    kept = [
        (label, sha)
        for sha, label in unique.items()
        if not any(other != sha and _is_ancestor(repo, sha, other) for other in unique)
    ]
    (first_label, merged_sha), *rest = kept
    merged = [first_label]
    for label, sha in rest:
        tree, conflicts = _merge_tree(repo, merged_sha, sha)
        if conflicts is not None:
            raise MergeConflict((*merged, label), conflicts)
        merged_sha = git(
            repo, "commit-tree", tree, "-p", merged_sha, "-p", sha, "-m", message, env=identity
        ).strip()
        merged.append(label)
    return merged_sha


def set_branch(repo: Path, branch: str, sha: str) -> None:
    """Point ``refs/heads/<branch>`` at ``sha``, creating the branch or moving it (hero owns
    it). Refused with a GitError naming the worktree while the branch is checked out in
    one, the main worktree included: its files and index would no longer match the branch.
    A concurrent create or move makes this fail rather than be overwritten."""
    ref = f"refs/heads/{branch}"
    new = commit_of(repo, sha)
    if not new:
        raise GitError(f"cannot set branch '{branch}' to {sha}: not a commit in {repo}")
    old = branch_tip(repo, branch)
    if old == new:
        return
    checkouts = _checkouts_of(repo, branch)
    if checkouts:
        path = checkouts[0]
        raise GitError(
            f"branch '{branch}' is checked out in {path}; hero does not move a branch under a "
            "checkout, whose files and index would no longer match it. Switch that checkout "
            "to another branch (or remove it, if it is a linked worktree: `git worktree "
            f"remove {path}`), then run again"
        )
    # The old value makes git refuse if the branch moved (or, with "", appeared) meanwhile.
    git(repo, "update-ref", "-m", f"hero: set {branch}", ref, new, old)


def _checkouts_of(repo: Path, branch: str) -> list[Path]:
    """The worktrees, the main one included, that have ``branch`` checked out; one whose
    folder is gone holds no work and is left out (as in ``_remove_worktree_of``)."""
    found: list[Path] = []
    current: Path | None = None
    for line in git(repo, "worktree", "list", "--porcelain").splitlines():
        if line.startswith("worktree "):
            current = Path(line[len("worktree ") :])
        elif line == f"branch refs/heads/{branch}" and current is not None and current.exists():
            found.append(current)
    return found


def _is_ancestor(repo: Path, ancestor: str, descendant: str) -> bool:
    code, _, said = _git_answer(repo, "merge-base", "--is-ancestor", ancestor, descendant)
    if code not in (0, 1):
        raise GitError(
            f"git merge-base --is-ancestor {ancestor} {descendant} (in {repo}) failed: {said}"
        )
    return code == 0


def _merge_tree(repo: Path, left: str, right: str) -> tuple[str, tuple[str, ...] | None]:
    """Merge two commits into a tree object: the tree's sha and, if they conflict, the
    conflicted paths (None when clean). ``-z`` so a path comes back as it is, not quoted."""
    args = ("merge-tree", "--write-tree", "--name-only", "--no-messages", "-z", left, right)
    code, out, said = _git_answer(repo, *args)
    tree, *paths = out.split("\0")
    # exit 1 is a conflict only with a tree on stdout: a bad commit exits 1 too, with none
    if code in (0, 1) and is_oid(tree):
        return tree, None if code == 0 else tuple(dict.fromkeys(p for p in paths if p))
    if code == 129:  # git before 2.38: merge-tree takes three trees, prints its usage
        version = git(repo, "version", check=False).strip() or "this git"
        raise GitError(
            f"merging branches needs git >= 2.38 (`git merge-tree --write-tree`); {version} "
            "does not have it. Install a newer git, then run again"
        )
    raise GitError(f"git {' '.join(args)} (in {repo}) failed: {said or out.strip()}")


def is_oid(text: str) -> bool:
    """A full object id (SHA-1 or SHA-256), in lower-case hex."""
    return len(text) in (40, 64) and all(c in "0123456789abcdef" for c in text)


def _git_answer(cwd: Path, *args: str) -> tuple[int, str, str]:
    """``git()`` (timeout, hooks off, safe environment) for the commands whose exit code is
    part of the answer, which ``git()`` does not return: ``(exit code, stdout, stderr)``.
    Raises GitError as ``git()`` does when git cannot start or times out."""
    command = f"git {' '.join(args)}"
    try:
        result = run_process(
            ["git", *NO_PROGRAMS, *args], cwd, timeout_s=DEFAULT_TIMEOUT_S, env=git_env()
        )
    except OSError as exc:
        raise GitError(f"{command} (in {cwd}) could not start: {exc.strerror or exc}") from None
    if result.timed_out:
        raise GitError(
            f"{command} (in {cwd}) timed out after {DEFAULT_TIMEOUT_S:g} s and was ended with "
            "its child processes"
        )
    return result.exit_code, result.stdout, result.stderr.strip()
