"""A story's own repository, and how its commits reach the user's.

``worktrees/<id>`` is a repository of its own, not a linked worktree of the user's: its
object store borrows the target's objects read-only through ``objects/info/alternates``
(not ``git clone --local``'s hard links, which a worker could truncate in place); its refs,
index and new objects are its own. The sandbox shows a worker this repository writable but
for the files through which git runs programs or reads other files (``config``, ``hooks``,
``info``, ``objects/info``, ``modules``: see ``guarded``), and the target's objects
read-only. The user's ``.git``, its other worktrees and other stories' repositories are not
there at all.

hero brings a story's commits into the user's repository itself (``bring_back``): its own git
fetches the story branch into a hero ref with every received object checked, and moves
``refs/heads/hero/<id>`` only forward, from the tip it last brought back. A story given a
``MessageRule`` (one taken from a GitHub issue) has the messages of the commits it brings back
for the first time rewritten by that rule (``hero.git.rewrite``), in both repositories alike.

Between two commands nothing of the worker runs (a command's processes end with it), so
hero's own reads of the story's repository are not raced; ``make_safe`` runs before each and
puts back the files hero owns (config, alternates, hooks, info) and removes what would point
git elsewhere or fool it (``commondir``, ``shallow``, grafts, a commit-graph).
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import time
from collections.abc import Sequence
from pathlib import Path

from hero.git.guard import is_ancestor
from hero.git.ops import (
    WORKTREE_TIMEOUT_S,
    GitError,
    TargetRepo,
    branch_tip,
    git,
    is_oid,
    worktree_gitdir,
)
from hero.git.output import commit_all
from hero.git.rewrite import MessageRule, rewrite_messages

#: Settings of the target's config copied into a story's repository: how files are checked
#: out. None of them runs a program.
COPIED_SETTINGS = (
    "core.autocrlf",
    "core.eol",
    "core.safecrlf",
    "core.ignorecase",
    "core.precomposeunicode",
    "core.symlinks",
    "core.filemode",
)
#: The story repository's own git settings. ``gc``/``fetch``: a worker's git writes no
#: commit-graph (``objects/info`` is read-only to it); ``uploadpack``: hero fetches a commit
#: by its sha; ``submodule.recurse``: no command of hero's walks into a submodule.
BASE_CONFIG = """[core]
\trepositoryformatversion = 0
\tbare = false
\tlogallrefupdates = true
[gc]
\tauto = 0
\twriteCommitGraph = false
[fetch]
\twriteCommitGraph = false
[repack]
\tupdateServerInfo = false
[uploadpack]
\tallowAnySHA1InWant = true
[submodule]
\trecurse = false
"""
#: Files in a git directory that point git at other files or change what history it sees:
#: never kept in a story's repository.
REMOVED = ("commondir", "shallow", "config.worktree", "objects/info/commit-graph")
REMOVED_DIRS = ("objects/info/commit-graphs",)
#: Paths of the story's git directory that a worker's commands see read-only; of each
#: submodule's git directory (``modules/<name>``, nested ones too), ``SUBMODULE_GUARDED``.
GUARDED = ("config", "hooks", "info", "objects/info")
SUBMODULE_GUARDED = ("config", "hooks", "info")
#: Protocols hero's own fetches (submodules) may use: none that runs a program.
FETCH_PROTOCOLS = (
    "-c",
    "protocol.allow=never",
    "-c",
    "protocol.file.allow=always",
    "-c",
    "protocol.https.allow=always",
    "-c",
    "protocol.http.allow=always",
    "-c",
    "protocol.ssh.allow=always",
    "-c",
    "protocol.git.allow=always",
)
#: What hero's fetch from a story's repository checks and does not do.
_BRING_BACK = (
    "-c",
    "protocol.allow=never",
    "-c",
    "protocol.file.allow=always",
    "-c",
    "transfer.fsckObjects=true",
    "-c",
    "gc.auto=0",
    "-c",
    "maintenance.auto=false",
    "-c",
    "fetch.writeCommitGraph=false",
)
#: A line git's packed-refs file may hold: its header, a ref, a peeled tag's commit.
#: A packed-refs file bigger than this is not read: it is removed (the story branch is a
#: loose ref hero keeps itself).
_PACKED_MAX_BYTES = 256 << 20
#: Git state a stop leaves in a git directory that makes a later git (a person's, in
#: ``worktrees/<id>``) run what a worker wrote: removed at each phase's end.
IN_PROGRESS = ("rebase-merge", "rebase-apply", "sequencer")
#: The largest ``.gitmodules`` hero reads.
_GITMODULES_MAX_BYTES = 1 << 20
#: A small control file hero reads (config, alternates) bigger than this was not written by
#: hero: it is replaced without being read whole.
_CONTROL_MAX_BYTES = 1 << 16


class BringBackRefused(GitError):
    """The story's branch does not build on what hero last brought back."""


class StoryRepo:
    """``worktrees/<id>``: the story's own repository, on its branch ``branch``."""

    def __init__(
        self,
        target: TargetRepo,
        path: Path,
        branch: str,
        submodules_from: str = "",
        messages: MessageRule | None = None,
        build_output: Sequence[str] = (),
    ) -> None:
        self.target = target
        self.path = path
        self.branch = branch
        #: the user's commit whose ``.gitmodules`` names the submodules to check out and
        #: their URLs (a story branch's own ``.gitmodules`` is never fetched from)
        self.submodules_from = submodules_from
        #: how the messages of the commits ``bring_back`` brings in must read (None: as
        #: they are)
        self.messages = messages
        #: what hero's own commits of the worktree leave out (hero.git.output)
        self.build_output = tuple(build_output)
        self.gitdir = path / ".git"
        self._config = ""  # what hero writes as the repository's config
        #: the user's submodules by ``rev``, read once (``_base_submodules``)
        self._submodules: dict[str, dict[str, tuple[str, str]]] = {}
        self._packed_ok: tuple[int, ...] | None = None  # packed-refs last found sound
        #: what hero writes in ``info/exclude``: the project environment's directories
        #: (hero.run.environment), which no commit may take; "" for none
        self.excluded = ""
        #: commits merged into the branch from its target (hero.git.keepup): their history
        #: is the target's, never rewritten by ``messages``
        self.upstream: tuple[str, ...] = ()

    def config_text(self) -> str:
        """The repository's config as hero writes it (worked out once)."""
        if not self._config:
            self._config = self._config_text(self.submodules_from)
        return self._config

    # -- layout ---------------------------------------------------------------------------

    def objects_dir(self) -> Path:
        """The target's object store, which this repository borrows read-only."""
        return self.target.common_dir() / "objects"

    def exists(self) -> bool:
        """A repository of the current layout is there (``.git`` a real directory)."""
        try:
            return stat.S_ISDIR(os.lstat(self.gitdir).st_mode)
        except OSError:
            return False

    def is_linked_worktree(self) -> bool:
        """An earlier hero's layout: a linked worktree of the target (``.git`` a file)."""
        try:
            return stat.S_ISREG(os.lstat(self.gitdir).st_mode)
        except OSError:
            return False

    def guarded(self) -> list[Path]:
        """The paths of the git directory a worker's command sees read-only: what makes git
        run a program or read other files, of the repository and of each submodule's git
        directory hero checked out."""
        found = [self.gitdir / name for name in GUARDED]
        for config in sorted(self.gitdir.glob("modules/**/config")):
            sub = config.parent
            if not config.is_symlink() and (sub / "HEAD").is_file():
                found += [sub / name for name in SUBMODULE_GUARDED]
        return found

    def lay_out(self, tip: str) -> list[str]:
        """Make this story's repository, on ``branch`` at ``tip`` (a commit of the target),
        or put back the control files of an existing one (``make_safe``). Returns notes."""
        notes: list[str] = []
        if self.is_linked_worktree():
            notes += self._retire_linked_worktree()
            tip = self.target.branch_sha(self.branch) or tip  # the work it kept is on it
        fresh = not self.exists()
        if fresh:
            if self.path.exists() and (self.path.is_symlink() or any(self.path.iterdir())):
                raise GitError(f"{self.path} exists and is not a story repository; move it aside")
            self._drop_registrations()
            self.path.mkdir(parents=True, exist_ok=True)
            git(
                self.path,
                "init",
                "--quiet",
                "--template=",
                f"--object-format={self.object_format()}",
                str(self.path),
            )
            self._write_control()
            self._copy_refs()
            git(self.path, "update-ref", f"refs/heads/{self.branch}", tip)
            git(self.path, "symbolic-ref", "HEAD", f"refs/heads/{self.branch}")
            git(self.path, "reset", "--quiet", "--hard", tip, timeout_s=WORKTREE_TIMEOUT_S)
        else:
            notes += self.make_safe_notes()
            for name in ("modules",):
                (self.gitdir / name).mkdir(exist_ok=True)
        return notes

    def object_format(self) -> str:
        """The target's object format (sha1, sha256): the story's repository uses it too."""
        return self.target.object_format()

    def _registration(self) -> Path | None:
        """The target's git directory of the linked worktree an earlier hero made here: only
        when the ``.git`` file points into the target's ``worktrees/``, that directory points
        back here and is on the story branch. Anything else (a ``.git`` file a worker wrote,
        pointing at the user's own ``.git``) is no registration: hero runs no git there."""
        gitdir = worktree_gitdir(self.path)
        if gitdir is None or gitdir.parent != self.target.common_dir() / "worktrees":
            return None
        back = _read_small(gitdir / "gitdir")
        head = _read_small(gitdir / "HEAD")
        if back is None or head is None:
            return None
        here = os.path.realpath(self.path / ".git")
        if os.path.realpath(back.strip()) != here:
            return None
        if head.strip() not in (f"ref: refs/heads/{self.branch}",) and not is_oid(head.strip()):
            return None
        return gitdir

    def _drop_registrations(self) -> None:
        """The target's records of a linked worktree at this path whose folder is gone (an
        earlier layout's): a repository of its own is about to be made there."""
        here = os.path.realpath(self.path / ".git")
        with self.target.locked():
            for gitdir_file in sorted(self.target.common_dir().glob("worktrees/*/gitdir")):
                said = _read_small(gitdir_file)
                if said is not None and os.path.realpath(said.strip()) == here:
                    shutil.rmtree(gitdir_file.parent)

    def _retire_linked_worktree(self) -> list[str]:
        """A story left by an earlier layout: what it left uncommitted is committed on its
        branch (in the target), then its checkout is removed for a repository of its own.
        A ``.git`` file that is no such registration is not trusted: the folder is removed
        without running git there."""
        if self._registration() is None:
            _remove(self.path)
            return [
                f"{self.path}/.git was a file pointing elsewhere (not a worktree hero made); "
                "hero ran no git there and removed the folder"
            ]
        note = []
        try:
            if commit_all(
                self.path,
                f"hero: keep uncommitted work when moving to a repository of its own "
                f"({self.branch})",
                self.target.identity_env(),
                self.build_output,
            ):
                note.append(f"kept the uncommitted work of {self.path} on {self.branch}")
        except GitError as exc:
            note.append(f"could not commit what {self.path} left: {exc}")
        with self.target.locked():
            git(
                self.target.path,
                "worktree",
                "remove",
                "--force",
                str(self.path),
                check=False,
                timeout_s=WORKTREE_TIMEOUT_S,
            )
            git(self.target.path, "worktree", "prune")
        if self.path.exists():
            shutil.rmtree(self.path)
        return [*note, f"{self.path} is now a repository of its own"]

    def _config_text(self, submodules_from: str) -> str:
        lines = [BASE_CONFIG]
        if self.object_format() != "sha1":
            lines[0] = BASE_CONFIG.replace(
                "repositoryformatversion = 0", "repositoryformatversion = 1"
            )
            lines.append(f"[extensions]\n\tobjectformat = {self.object_format()}\n")
        out = git(
            self.target.path,
            "config",
            "--get-regexp",
            "^(" + "|".join(k.replace(".", r"\.") for k in COPIED_SETTINGS) + ")$",
            check=False,
        )
        core = [line.split(" ", 1) for line in out.splitlines() if " " in line]
        if core:
            lines.append("[core]\n")
            lines += [f"\t{key.split('.', 1)[1]} = {_quoted(value)}\n" for key, value in core]
        for name, (_path, url) in sorted(self._base_submodules(submodules_from).items()):
            lines.append(f'[submodule "{_quoted_name(name)}"]\n\turl = {_quoted(url)}\n')
        return "".join(lines)

    def _write_control(self) -> None:
        """Write the files hero owns in the git directory: config, alternates, an empty
        hooks directory and ``info/exclude``, the ``modules`` directory (so that a worker
        cannot make one)."""
        _replace_file(self.gitdir / "config", self.config_text())
        info = self.gitdir / "objects" / "info"
        info.mkdir(parents=True, exist_ok=True)
        _replace_file(info / "alternates", f"{self.objects_dir()}\n")
        for name in ("hooks", "info", "modules"):
            d = self.gitdir / name
            if d.is_symlink() or (d.exists() and not d.is_dir()):
                d.unlink()
            d.mkdir(exist_ok=True)
        _replace_file(self.gitdir / "info" / "exclude", self.excluded)

    def _copy_refs(self) -> None:
        """The user's branches and tags, as a story's repository starts with them: a worker
        can read and compare with them (``git log main``); moving them here moves nothing of
        the user's. Other stories' branches are left out."""
        out = git(
            self.target.path,
            "for-each-ref",
            "--format=%(objectname) %(refname)",
            "refs/heads/",
            "refs/tags/",
        )
        lines = [
            line
            for line in out.splitlines()
            if " refs/heads/hero/" not in line and line.count(" ") == 1
        ]
        if lines:
            _replace_file(self.gitdir / "packed-refs", "\n".join(lines) + "\n")

    def catch_up(self, tip: str) -> list[str]:
        """The target's branch moved ahead of this repository's (another machine's run, a
        rescue): move the story branch forward to it, the files with it."""
        mine = self.tip()
        if mine == tip or not tip:
            return []
        if not mine:
            git(self.path, "update-ref", f"refs/heads/{self.branch}", tip)
        elif is_ancestor(self.path, mine, tip):
            git(self.path, "update-ref", f"refs/heads/{self.branch}", tip, mine)
        else:
            return []  # this repository is ahead, or went its own way: bring_back decides
        git(self.path, "symbolic-ref", "HEAD", f"refs/heads/{self.branch}")
        git(self.path, "reset", "--quiet", "--hard", tip, timeout_s=WORKTREE_TIMEOUT_S)
        return [f"{self.path} moved forward to {self.branch} at {tip[:12]}"]

    # -- submodules -------------------------------------------------------------------------

    def _base_submodules(self, rev: str) -> dict[str, tuple[str, str]]:
        """name -> (path, url) of the submodules the user's ``rev``'s ``.gitmodules`` names
        with both a path and a URL."""
        if not rev:
            return {}
        if rev not in self._submodules:  # the config and the checkout see the same entries
            found = _submodules_at(self.target.path, rev)
            self._submodules[rev] = {
                n: (p, u) for n, (p, u) in found.items() if p and u and "\n" not in n
            }
        return dict(self._submodules[rev])

    def init_submodules(self) -> list[str]:
        """Check out the submodules the user's ``submodules_from`` names, from the URLs it
        gives, where the story's branch names them the same way (one entry for the path,
        same name and URL); a submodule the branch added or pointed elsewhere is not fetched.
        git reads a submodule's name and URL from the worktree's ``.gitmodules``: while it
        runs, that file is the user's (put back as it was afterwards), so that no entry the
        branch wrote can reach it."""
        base = self._base_submodules(self.submodules_from)
        if not base:
            return []
        here = _entries_by_path(_submodules_at(self.path, "HEAD"))
        paths = [
            path
            for name, (path, url) in base.items()
            if here.get(_norm(path)) == [(name, _norm(path), url)]
        ]
        notes = [
            f"submodule {name} not checked out: the story's branch changed its path or URL"
            for name, (path, url) in base.items()
            if path not in paths and _norm(path) in here
        ]
        if not paths:
            return notes
        blob = git(
            self.target.path,
            "cat-file",
            "blob",
            f"{self.submodules_from}:.gitmodules",
            max_output=_GITMODULES_MAX_BYTES,
        )
        gitmodules = self.path / ".gitmodules"
        kept = _KeptFile(gitmodules)
        if kept.too_big:
            return [*notes, "submodules not checked out: .gitmodules is over 1 MiB"]
        try:
            _replace_file(gitmodules, blob)
            git(
                self.path,
                *FETCH_PROTOCOLS,
                "-c",
                "submodule.recurse=false",
                "submodule",
                "update",
                "--init",
                "--",
                *paths,
                timeout_s=WORKTREE_TIMEOUT_S,
            )
        finally:
            kept.put_back()
        return notes

    # -- between commands -------------------------------------------------------------------

    def make_safe(self) -> str:
        """Before hero's own git runs here: put back what hero owns of the git directory
        and remove what would point git elsewhere; returns what was found ("" if nothing).
        GitError if ``.git`` itself is gone or replaced (hero must run no git here then)."""
        return "\n".join(self.make_safe_notes())

    def make_safe_notes(self) -> list[str]:
        if not self.exists():
            raise GitError(
                f"{self.gitdir} is no longer a directory (replaced or removed): hero runs no "
                "git there"
            )
        notes: list[str] = []
        config = self.config_text()
        if _read_small(self.gitdir / "config") != config:
            _replace_file(self.gitdir / "config", config)
            notes.append(".git/config was changed; hero put it back")
        alternates = self.gitdir / "objects" / "info" / "alternates"
        if _read_small(alternates) != f"{self.objects_dir()}\n":
            _replace_file(alternates, f"{self.objects_dir()}\n")
            notes.append(".git/objects/info/alternates was changed; hero put it back")
        for name in REMOVED:
            p = self.gitdir / name
            if os.path.lexists(p):
                _remove(p)
                notes.append(f".git/{name} was made; hero removed it")
        for name in REMOVED_DIRS:
            p = self.gitdir / name
            if os.path.lexists(p):
                _remove(p)
                notes.append(f".git/{name} was made; hero removed it")
        for name, keep in (("hooks", ()), ("info", ("exclude",))):
            d = self.gitdir / name
            if not d.is_dir() or d.is_symlink():
                _remove(d)
                d.mkdir()
                notes.append(f".git/{name} was replaced; hero put it back")
                continue
            for entry in os.listdir(d):
                if entry not in keep:
                    _remove(d / entry)
                    notes.append(f".git/{name}/{entry} was made; hero removed it")
        if _read_small(self.gitdir / "info" / "exclude") != self.excluded:
            _replace_file(self.gitdir / "info" / "exclude", self.excluded)
            notes.append(
                ".git/info/exclude was changed; hero "
                + ("put it back" if self.excluded else "emptied it")
            )
        note = self._check_packed_refs()
        if note:
            notes.append(note)
        return notes

    def _check_packed_refs(self) -> str:
        """A packed-refs file git cannot read stops every git here (hero's included): its
        lines git would refuse are dropped. Read again only when it changed (its ctime,
        which no command can set back, is part of what is compared)."""
        path = self.gitdir / "packed-refs"
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return ""
        if not stat.S_ISREG(st.st_mode) or st.st_size > _PACKED_MAX_BYTES:
            _remove(path)
            self._packed_ok = None
            return ".git/packed-refs was not a file git can read; hero removed it"
        key = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if key == self._packed_ok:
            return ""
        with open(path, "rb") as fh:
            data = fh.read(_PACKED_MAX_BYTES + 1)
        hexlen = 64 if self.object_format() == "sha256" else 40
        kept: list[bytes] = []
        dropped = 0
        for i, line in enumerate(data.split(b"\n")):
            if not line:
                continue
            if _packed_line_ok(line, hexlen, first=i == 0, after=kept[-1] if kept else b""):
                kept.append(line)
            else:
                dropped += 1
        if dropped or (data and not data.endswith(b"\n")):
            _replace_file(path, b"".join(k + b"\n" for k in kept).decode("utf-8"))
        st = os.lstat(path)
        self._packed_ok = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if not dropped:
            return ""
        return f".git/packed-refs held {dropped} line(s) git cannot read; hero dropped them"

    def end_phase(self) -> list[str]:
        """At a phase's end, with nothing of the worker running: the git state of a rebase,
        cherry-pick or revert left in progress is removed (its ``exec`` lines would run in
        a person's git later, outside the sandbox). Returns notes."""
        notes = []
        for name in IN_PROGRESS:
            p = self.gitdir / name
            if os.path.lexists(p):
                _remove(p)
                notes.append(
                    f"a {name.replace('-', ' ')} left in progress in .git/{name}; hero removed it"
                )
        return notes

    # -- the story's commits into the user's repository ---------------------------------------

    def tip(self) -> str:
        """The story branch's tip in this repository, or ""."""
        return branch_tip(self.path, self.branch)

    def bring_back(self, notes: list[str] | None = None) -> str:
        """Bring the story branch's commits onto the target's ``refs/heads/<branch>``, which
        only moves forward: BringBackRefused if the new tip does not build on the target's
        branch as it is. Received objects are checked (``transfer.fsckObjects``). With a
        ``MessageRule``, the commits not brought back before are rewritten by it (in the
        target, which then holds their objects; the story branch here moves to the same new
        commits, whose trees are the ones checked out); what was rewritten is added to
        ``notes``. Returns the target branch's tip. Call it between commands; the target's lock
        is held only while its refs move."""
        self.make_safe()
        tip = self.tip()
        if not tip:
            raise GitError(f"{self.branch} is missing in {self.path}")
        current = self.target.branch_sha(self.branch) or ""
        if tip == current:
            return current
        incoming = self._incoming
        self._fetch(tip)
        moves = [f"delete {incoming}"]
        try:
            if current and not is_ancestor(self.target.path, current, tip):
                raise BringBackRefused(
                    f"{self.branch} at {tip[:12]} in the story's repository does not build on "
                    f"{current[:12]}, the commit hero last brought into {self.target.path}; "
                    "hero left the user's repository as it was"
                )
            new = self._rewrite(tip, current, notes)
            if new != tip:  # here first: if moving the target's branch fails, the next call
                # finds the same new commits here, on what it brought back, and moves it then
                git(self.path, "update-ref", f"refs/heads/{self.branch}", new, tip)
            target_ref = f"refs/heads/{self.branch}"
            moves.insert(
                0,
                f"update {target_ref} {new} {current}" if current else f"create {target_ref} {new}",
            )
        finally:
            self._move_in_target(moves)
        return new

    def _rewrite(self, tip: str, current: str, notes: list[str] | None) -> str:
        """``tip`` with the messages of its commits after ``current`` as ``messages`` has
        them (the tip itself when they already are); BringBackRefused if that cannot be."""
        rule = self.messages
        if rule is None:
            return tip
        try:
            done = rewrite_messages(self.target.path, tip, [current, *self.upstream], rule)
        except GitError as exc:
            raise BringBackRefused(
                f"hero must rewrite commit messages on {self.branch} ({rule.why}) and could "
                f"not: {exc}; hero left the user's repository as it was"
            ) from None
        if done.reworded and notes is not None:
            pairs = ", ".join(f"{old[:12]} is now {new[:12]}" for old, new in done.reworded[:5])
            if len(done.reworded) > 5:
                pairs += f" and {len(done.reworded) - 5} more"
            moved = (
                f"; {done.moved} commit(s) after them were made anew on top, changes, authors "
                "and dates the same"
                if done.moved
                else ""
            )
            notes.append(
                f"hero rewrote the message of {len(done.reworded)} commit(s) on {self.branch}: "
                f"{rule.why}. {pairs}{moved}; {self.branch} is now at {done.tip[:12]}, no "
                f"longer {tip[:12]}. Build on it as it is (`git log` shows the new messages)."
            )
        return done.tip

    def replace_in_target(self, new: str, old: str) -> None:
        """The target's branch moved from ``old`` to this repository's ``new``, which need
        not build on it (a rebase of the branch, hero.git.keepup); each object checked.
        Between commands; the target's lock is taken for the moment its refs move."""
        self.make_safe()
        self._fetch(new)
        try:
            self._move_in_target(
                [f"update refs/heads/{self.branch} {new} {old}", f"delete {self._incoming}"]
            )
        except GitError:
            self._move_in_target([f"delete {self._incoming}"])
            raise

    def keep_in_target(self, branch: str, as_name: str = "") -> str:
        """Bring a branch of this repository (a stray one hero made) into the target under
        the same name (or ``as_name``), so that the user finds it; returns its tip ("" if
        there is none)."""
        sha = branch_tip(self.path, branch)
        if not sha:
            return ""
        self.keep_commit(sha, f"refs/heads/{as_name or branch}")
        return sha

    def keep_commit(self, sha: str, ref: str) -> None:
        """A commit of this repository (a stray branch's, a work-in-progress snapshot, see
        hero.git.wip) into the target's ``ref``, each object checked."""
        self.make_safe()
        self._fetch(sha)
        self._move_in_target([f"update {ref} {sha}", f"delete {self._incoming}"])

    @property
    def _incoming(self) -> str:
        """The target's ref (hero's, this story's alone) that a fetch from here writes."""
        return f"refs/hero/incoming/{self.branch}"

    def _move_in_target(self, moves: Sequence[str]) -> None:
        """The target's refs changed in one transaction (``update-ref --stdin`` lines),
        holding the repository-wide lock for that moment alone. GitError if git refuses."""
        feed = "".join(f"{m}\n" for m in moves).encode("utf-8")
        with self.target.locked():
            git(self.target.path, "update-ref", "--stdin", input=feed)

    def _fetch(self, sha: str) -> None:
        """hero's own fetch of ``sha`` from this repository into the target (its objects,
        each checked, and this story's ``_incoming`` ref; no lock: no ref of the user's or
        of another story changes); a refused fetch leaves no temporary pack behind."""
        pack_dir = self.target.common_dir() / "objects" / "pack"
        before = set(os.listdir(pack_dir)) if pack_dir.is_dir() else set()
        try:
            git(
                self.target.path,
                *_BRING_BACK,
                "fetch",
                "--quiet",
                "--no-tags",
                "--no-write-fetch-head",
                "--no-recurse-submodules",
                "--no-auto-gc",
                str(self.gitdir),
                f"+{sha}:{self._incoming}",
                timeout_s=WORKTREE_TIMEOUT_S,
            )
        except GitError:
            if pack_dir.is_dir():
                for name in set(os.listdir(pack_dir)) - before:
                    if name.startswith(("tmp_pack_", "tmp_idx_", "tmp_rev_")):
                        _remove(pack_dir / name)
            raise

    def remove(self) -> None:
        """Delete the story's repository (its commits must be in the target already)."""
        if self.is_linked_worktree():
            self._retire_linked_worktree()
        if os.path.lexists(self.path):
            _remove(self.path)


def _submodules_at(repo: Path, rev: str) -> dict[str, tuple[str, str]]:
    """name -> (path, url) of every submodule ``rev``'s ``.gitmodules`` in ``repo`` names
    ("" for a field it leaves out)."""
    out = git(
        repo,
        "config",
        "--blob",
        f"{rev}:.gitmodules",
        "--get-regexp",
        r"^submodule\..*\.(path|url)$",
        check=False,
    )
    found: dict[str, dict[str, str]] = {}
    for line in out.splitlines():
        key, _, value = line.partition(" ")
        name, _, field = key[len("submodule.") :].rpartition(".")
        found.setdefault(name, {})[field] = value
    return {n: (f.get("path", ""), f.get("url", "")) for n, f in found.items()}


def _quoted(value: str) -> str:
    """A value as git config's file syntax takes it, whatever characters it holds."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _quoted_name(name: str) -> str:
    return name.replace("\\", "\\\\").replace('"', '\\"')


def _read_small(path: Path) -> str | None:
    """A small file's text, without following a link; None for anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, _CONTROL_MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > _CONTROL_MAX_BYTES:
        return None
    return data.decode("utf-8", errors="replace")


def _replace_file(path: Path, text: str) -> None:
    """Write ``path`` anew (a temp file renamed over it: a link there is replaced, never
    written through)."""
    tmp = path.with_name(f".{path.name}.hero-{os.getpid()}-{time.monotonic_ns()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        os.write(fd, text.encode("utf-8"))
    finally:
        os.close(fd)
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    os.replace(tmp, path)


def _remove(path: Path) -> None:
    """Remove a file, a link or a directory tree (links inside it are not followed)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def _packed_line_ok(line: bytes, hexlen: int, *, first: bool, after: bytes) -> bool:
    """A line git's packed-refs reader takes: the header (first line only), ``<oid> <ref>``
    with a well-formed ref name, or ``^<oid>`` peeling the ref on the line before."""
    if line.startswith(b"#"):
        return first and line.startswith(b"# pack-refs with:")
    if line.startswith(b"^"):
        return _hex(line[1:], hexlen) and bool(after) and not after.startswith((b"^", b"#"))
    oid, _, name = line.partition(b" ")
    return _hex(oid, hexlen) and _refname_ok(name)


def _hex(text: bytes, length: int) -> bool:
    return len(text) == length and all(c in b"0123456789abcdef" for c in text)


#: What git's ``check-ref-format`` refuses in a ref name (beside the rules of ``_refname_ok``).
_BAD_REF_CHARS = re.compile(rb"[\x00-\x20\x7f~^:?*\[\\]")


def _refname_ok(name: bytes) -> bool:
    """A ref name git accepts (``git check-ref-format``'s rules), under ``refs/``."""
    if not name.startswith(b"refs/") or name.endswith((b"/", b".")) or b"@{" in name:
        return False
    if b".." in name or b"//" in name or _BAD_REF_CHARS.search(name) or name == b"@":
        return False
    return all(
        part and not part.startswith(b".") and not part.endswith(b".lock")
        for part in name.split(b"/")
    )


def _norm(path: str) -> str:
    """A submodule path as git compares it: no ``./`` in front, no ``/`` at the end."""
    while path.startswith("./"):
        path = path[2:]
    return path.rstrip("/")


def _entries_by_path(
    entries: dict[str, tuple[str, str]],
) -> dict[str, list[tuple[str, str, str]]]:
    """path -> every (name, path, url) a ``.gitmodules`` gives for it."""
    found: dict[str, list[tuple[str, str, str]]] = {}
    for name, (path, url) in sorted(entries.items()):
        found.setdefault(_norm(path), []).append((name, _norm(path), url))
    return found


class _KeptFile:
    """A file as it was (bytes and mode, a link's target, or absent), to put back."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.link: str | None = None
        self.data: bytes | None = None
        self.mode = 0o644
        self.too_big = False
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return
        if stat.S_ISLNK(st.st_mode):
            self.link = os.readlink(path)
        elif stat.S_ISREG(st.st_mode):
            with open(path, "rb") as fh:
                self.data = fh.read(_GITMODULES_MAX_BYTES + 1)
            self.too_big = len(self.data) > _GITMODULES_MAX_BYTES
            self.mode = stat.S_IMODE(st.st_mode)

    def put_back(self) -> None:
        _remove(self.path)
        if self.link is not None:
            os.symlink(self.link, self.path)
        elif self.data is not None:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, self.mode)
            with os.fdopen(fd, "wb") as fh:
                fh.write(self.data)
