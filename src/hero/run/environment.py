"""The project's environment: what the ``setup`` commands make (a virtualenv, node_modules, a
module cache), made once per key and reused by every story whose key matches.

The key (:func:`environment_key`) is a hash of the setup commands and of the files of the base
commit that ``setup_inputs`` names (their blob ids: a changed lock file makes a new key). With a
sandbox, setup runs in a checkout of the base commit of its own, seen at ``PROJECT_PATH`` as
every story's repository is, with the network unless ``setup_network`` is false, no secret in
its environment, and a HOME that is kept. What it made (the directories git does not track)
moves to ``envs/<key>/tree`` in the hero home, what it left in HOME to ``envs/<key>/home``;
every later story's sandbox binds them read-only at the same paths, so that a virtualenv's
scripts and an editable install (which name ``PROJECT_PATH``) hold in each story's repository.
Its tools (``.venv/bin``, ``node_modules/.bin``, ...) come first on PATH, and hero's own Python
environment is not shown.

Two stories of one key: the second waits for the first's setup (a lock per key) and reuses it.
A setup that fails raises :class:`SetupFailed` (the story ends before any model call, the log
kept in the story's run folder); nothing of it is kept. Without a sandbox, setup runs in the
story's own repository, each run: nothing can be shared at a path every story sees.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import re
import secrets
import shutil
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hero.config.home import Config
from hero.errors import HeroError, Interrupted
from hero.fsio import atomic_write
from hero.git.ops import TargetRepo, git
from hero.git.storyrepo import StoryRepo
from hero.redact import Redactor
from hero.runner import run_command
from hero.sandbox.bwrap import (
    PROJECT_PATH,
    SANDBOX_HOME,
    ProjectMounts,
    Sandbox,
    bwrap_problem,
)
from hero.sandbox.bwrap import resolve as resolve_sandbox

#: The environments' folder in the hero home.
ENVS_DIR = "envs"
#: The record of a made environment, in its folder.
RECORD = "env.json"
#: What the record's layout is (a record of another is made again).
LAYOUT = 1
#: What of the setup's HOME is not kept: caches, which only made the setup faster.
HOME_SKIPPED = (".cache",)
#: Seconds between two looks at another process's setup of the same key.
_WAIT_POLL_S = 0.2


class SetupFailed(HeroError):
    """A setup command failed: the story does not start."""


class EnvironmentBusy(HeroError):
    """Another process holds an environment's lock (its setup, or a story taking it)."""


@dataclass(frozen=True)
class Environment:
    """A made environment: where it is and what a story's commands see of it."""

    key: str
    path: Path | None
    """``envs/<key>``; None for one made in the story's own repository (no sandbox)."""
    dirs: tuple[str, ...] = ()
    """The directories the setup made, relative to the repository (``.venv``)."""
    home_entries: tuple[str, ...] = ()
    """What the setup left in HOME and is kept (``go``, ``.cargo``)."""
    bins: tuple[str, ...] = ()
    """Directories put first on PATH, as commands see them."""
    venv: str = ""
    """A virtualenv among ``dirs``, as commands see it (``VIRTUAL_ENV``)."""
    seconds: float = 0.0
    """How long its setup took."""
    made_in_place: tuple[str, ...] = ()
    """Without a sandbox: the directories the setup made in the story's repository."""

    @property
    def excluded(self) -> tuple[str, ...]:
        """The directories of the repository that are the environment's, not the story's."""
        return self.dirs or self.made_in_place

    def mounts(self, worktree: Path | None = None) -> ProjectMounts:
        """What a story's sandbox binds of it; ``worktree``: the story's repository, whose
        mount points are checked (a directory the worker replaced by a link is not bound)."""
        if self.path is None:
            return ProjectMounts(path=self.bins)
        read_only = [
            (str(self.path / "tree" / d), f"{PROJECT_PATH}/{d}")
            for d in self.dirs
            if worktree is None or mount_point(worktree, d)
        ]
        read_only += [
            (str(self.path / "home" / e), f"{SANDBOX_HOME}/{e}") for e in self.home_entries
        ]
        env = (("VIRTUAL_ENV", self.venv),) if self.venv else ()
        return ProjectMounts(read_only=tuple(read_only), path=self.bins, env=env)

    def tools_first(self, env: dict[str, str]) -> None:
        """Without a sandbox (one made in the story's repository): its tools first on ``env``'s
        PATH, its virtualenv as ``VIRTUAL_ENV``. A sandbox does this itself (``mounts``)."""
        if self.path is None and self.bins:
            env["PATH"] = ":".join([*self.bins, env.get("PATH", "")])
            if self.venv:
                env["VIRTUAL_ENV"] = self.venv

    def record(self, *, reused: bool, log: str) -> dict[str, Any]:
        """The run record's ``setup``: key, reused or built, seconds, log path."""
        return {
            "key": self.key,
            "reused": reused,
            "seconds": round(self.seconds, 3),
            "log": log,
            "path": str(self.path) if self.path is not None else "",
        }


def checks_sandbox(
    config: Config,
    worktree: Path,
    environment: Environment | None,
    *,
    objects: Path | None,
    hide: Iterable[Path],
    guarded: Iterable[Path] = (),
    warn: Callable[[str], None] = lambda _message: None,
) -> Sandbox | None:
    """The sandbox a project's checks run in outside a story's run (`hero bench make`, the
    bench's judge), as a story's checks run (``Workspace.confine``): the ``sandbox``
    setting, the network as ``verify_network`` says, ``environment``'s directories bound at
    their places in ``worktree`` and its tools first on PATH, hero's own Python not shown.
    None without a sandbox (then ``Environment.tools_first`` gives the commands its tools)."""
    safety = config.safety
    box = resolve_sandbox(
        safety.sandbox,
        worktree=worktree,
        objects=objects,
        guarded=guarded,
        hide=tuple(hide),
        limits=safety.limits,
        toolchains=safety.toolchain_dirs,
        cgroups=safety.sandbox_cgroups != "off",
        project=environment.mounts(worktree)
        if environment is not None and environment.path is not None
        else None,
        warn=warn,
    )
    return box.with_network(safety.verify_network) if box is not None else None


# ----------------------------------------------------------------------------- the key


def setup_commands(config: Config, story_setup: Sequence[str]) -> tuple[str, ...]:
    """The home's setup commands, then the story's."""
    return (*config.project.setup, *story_setup)


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A ``setup_inputs`` glob as a regex over a path from the repository's root: ``*``
    and ``?`` within a path component, ``**`` across them."""
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def key_inputs(repo: Path, base_sha: str, globs: Iterable[str]) -> list[tuple[str, str]]:
    """(path, blob id) of every file of ``base_sha`` a glob names, in path order."""
    regexes = [glob_regex(g.strip().lstrip("/")) for g in globs if g.strip()]
    out = git(repo, "ls-tree", "-r", "-z", "--full-tree", base_sha)
    found = []
    for entry in out.split("\0"):
        meta, _, path = entry.partition("\t")
        parts = meta.split()
        if len(parts) == 3 and parts[1] == "blob" and any(r.match(path) for r in regexes):
            found.append((path, parts[2]))
    return sorted(found)


def environment_key(
    repo: Path, base_sha: str, commands: Sequence[str], globs: Iterable[str], *, sandboxed: bool
) -> str:
    """The environment's key: the commands, the input files' content at ``base_sha``, and
    where it is made (sandboxed or not, this machine's architecture)."""
    data = {
        "layout": LAYOUT,
        "commands": list(commands),
        "inputs": key_inputs(repo, base_sha, globs),
        "sandboxed": sandboxed,
        "machine": platform.machine(),
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:24]


# ----------------------------------------------------------------------------- made once


def envs_dir(home: Path) -> Path:
    return home / ENVS_DIR


#: The file of an environment whose time says when a story last took it.
USED = "used"
#: An environment taken this recently is never removed (its story may not have saved its
#: record yet).
RECENT_S = 600.0


def touch_used(path: Path) -> None:
    try:
        (path / USED).touch()
    except OSError:
        pass


def last_used(path: Path) -> float:
    """When a story last took the environment at ``path`` (when it was made, else)."""
    for name in (USED, RECORD):
        try:
            return os.lstat(path / name).st_mtime
        except OSError:
            continue
    return 0.0


def load(path: Path) -> Environment | None:
    """The environment made in ``path``, or None when there is none (or not of this layout)."""
    try:
        data = json.loads((path / RECORD).read_text(encoding="utf-8"))
        if data.get("layout") != LAYOUT:
            return None
        return Environment(
            key=str(data["key"]),
            path=path,
            dirs=tuple(str(d) for d in data["dirs"]),
            home_entries=tuple(str(e) for e in data["home_entries"]),
            bins=tuple(str(b) for b in data["bins"]),
            venv=str(data.get("venv") or ""),
            seconds=float(data.get("seconds") or 0.0),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


@contextmanager
def key_lock(
    home: Path, key: str, cancel: threading.Event | None, *, wait: bool = True
) -> Iterator[None]:
    """Hold ``envs/<key>.lock``: one setup per key at a time; a second waits (stoppable);
    without ``wait``, EnvironmentBusy at once."""
    directory = envs_dir(home)
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / f"{key}.lock", "a") as fh:
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not wait:
                    raise EnvironmentBusy("another hero process is taking it") from None
                if cancel is not None and cancel.wait(_WAIT_POLL_S):
                    raise Interrupted("stopped while waiting for another story's setup") from None
                if cancel is None:
                    time.sleep(_WAIT_POLL_S)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@dataclass
class Setup:
    """One story's setup: finds its environment, or makes it."""

    config: Config
    repo: TargetRepo
    base_sha: str
    commands: tuple[str, ...]
    env: Mapping[str, str]
    """The commands' environment (no secret: hero.runner.child_env)."""
    log_path: Path
    redactor: Redactor
    cancel: threading.Event | None = None

    def sandboxed(self) -> bool:
        return self.config.safety.sandbox != "none" and _bwrap_works(self.config)

    def key(self) -> str:
        return environment_key(
            self.repo.path,
            self.base_sha,
            self.commands,
            self.config.project.setup_inputs,
            sandboxed=self.sandboxed(),
        )

    def ensure(self, worktree: Path) -> tuple[Environment, bool]:
        """The environment and whether it was reused; made now when there is none."""
        key = self.key()
        if not self.sandboxed():
            return self._in_place(key, worktree), False
        final = envs_dir(self.config.home) / key
        with key_lock(self.config.home, key, self.cancel):  # housekeeping takes it too
            found = load(final)  # made earlier, or by the story this one waited for
            if found is not None:
                touch_used(final)
                return found, True
            made = self._make(key, final)
            touch_used(final)
            return made, False

    # -- made in a checkout of its own, sandboxed -------------------------------------------

    def _make(self, key: str, final: Path) -> Environment:
        home = self.config.home
        work = envs_dir(home) / f".make-{key}-{os.getpid()}-{secrets.token_hex(4)}"
        project, kept_home = work / "project", work / "home"
        try:
            kept_home.mkdir(parents=True)
            checkout = StoryRepo(self.repo, project, "hero-setup", self.base_sha)
            checkout.lay_out(self.base_sha)
            safety = self.config.safety
            box = resolve_sandbox(
                "bwrap",
                worktree=project,
                objects=checkout.objects_dir(),
                guarded=checkout.guarded(),
                hide=(home, self.repo.path),
                network=self.config.project.setup_network,
                limits=safety.limits,
                project=ProjectMounts(writable=((str(kept_home), SANDBOX_HOME),)),
                toolchains=safety.toolchain_dirs,
                cgroups=safety.sandbox_cgroups != "off",
            )
            started = time.monotonic()
            self._run_all(project, box)
            seconds = time.monotonic() - started
            checkout.make_safe()  # what the setup did to its git directory, undone
            dirs = _move_made(project, work / "tree")
            entries = _kept_home(kept_home)
            bins, venv = _tools(work / "tree", dirs, kept_home, entries)
            record = {
                "layout": LAYOUT,
                "key": key,
                "commands": list(self.commands),
                "dirs": dirs,
                "home_entries": entries,
                "bins": bins,
                "venv": venv,
                "seconds": round(seconds, 3),
                "made_at": time.time(),
                "base_sha": self.base_sha,
            }
            remove(project)
            shutil.copyfile(self.log_path, work / "setup.log")
            atomic_write(work / RECORD, json.dumps(record, indent=2).encode())
            os.rename(work, final)
        except BaseException:
            remove(work)
            raise
        made = load(final)
        if made is None:  # cannot be: it was just written
            raise SetupFailed(f"the environment {final} could not be read back")
        return made

    def _run_all(self, cwd: Path, box: Any) -> None:
        timeout = self.config.project.setup_timeout_s
        with open(self.log_path, "w", encoding="utf-8") as log:
            for command in self.commands:
                log.write(f"$ {command}\n")
                log.flush()
                result = run_command(
                    command, cwd, timeout_s=timeout, env=self.env, cancel=self.cancel, sandbox=box
                )
                log.write(self.redactor.redact(result.output))
                log.write(f"\n[exit {result.exit_code} in {result.duration_s:.1f} s]\n")
                log.flush()
                if result.cancelled:
                    raise Interrupted("stopped during the setup")
                if result.exit_code != 0:
                    why = (
                        f"timed out after {timeout:g} s"
                        if result.timed_out
                        else (f"exited {result.exit_code}")
                    )
                    tail = self.redactor.redact(result.output.strip()[-300:])
                    raise SetupFailed(
                        f"setup failed: `{command}` {why}; nothing else ran (its log: "
                        f"{self.log_path}){': ' + ' '.join(tail.split()) if tail else ''}"
                    )

    # -- made in the story's own repository (no sandbox) ------------------------------------

    def _in_place(self, key: str, worktree: Path) -> Environment:
        started = time.monotonic()
        self._run_all(worktree, None)
        made = [
            d.rstrip("/") for d in _untracked_dirs(worktree) if _is_dir(worktree / d.rstrip("/"))
        ]
        bins, venv = _tools(worktree, made, None, [], inside=str(worktree))
        return Environment(
            key=key,
            path=None,
            bins=tuple(bins),
            venv=venv,
            seconds=time.monotonic() - started,
            made_in_place=tuple(made),
        )


def _bwrap_works(config: Config) -> bool:
    """Whether setup runs sandboxed: bwrap works, or is required (``sandbox: bwrap``; then
    the sandbox itself says why it cannot, and the story ends in error)."""
    if config.safety.sandbox == "bwrap":
        return True
    bwrap = shutil.which("bwrap")
    return bwrap is not None and bwrap_problem(bwrap) is None


def _untracked_dirs(repo: Path) -> list[str]:
    """What git does not track in ``repo``, ignored or not, a directory as one entry."""
    out = git(repo, "ls-files", "--others", "--directory", "-z")
    return [p for p in out.split("\0") if p]


def _is_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _move_made(project: Path, tree: Path) -> list[str]:
    """Move the directories the setup made (real directories, not links) into ``tree``."""
    moved = []
    for entry in _untracked_dirs(project):
        rel = entry.rstrip("/")
        if not entry.endswith("/") or not _is_dir(project / rel) or not mount_point(project, rel):
            continue  # a file, or a link: nothing to bind
        dest = tree / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.rename(project / rel, dest)
        moved.append(rel)
    return sorted(moved)


def _kept_home(home: Path) -> list[str]:
    """What the setup left in HOME that is kept: directories and files, not links, not caches."""
    kept = []
    for entry in sorted(os.listdir(home)):
        mode = os.lstat(home / entry).st_mode
        if entry in HOME_SKIPPED:
            remove(home / entry)
        elif stat.S_ISDIR(mode) or stat.S_ISREG(mode):
            kept.append(entry)
    return kept


def _tools(
    tree: Path,
    dirs: Sequence[str],
    home: Path | None,
    home_entries: Sequence[str],
    *,
    inside: str = PROJECT_PATH,
) -> tuple[list[str], str]:
    """The directories to put first on PATH (as commands see them) and the virtualenv."""
    bins: list[str] = []
    venv = ""
    for d in sorted(dirs, key=lambda d: (d.count("/"), d)):
        if _is_file(tree / d / "pyvenv.cfg") and _is_dir(tree / d / "bin"):
            bins.append(f"{inside}/{d}/bin")
            venv = venv or f"{inside}/{d}"
        if d == "node_modules" and _is_dir(tree / d / ".bin"):
            bins.append(f"{inside}/{d}/.bin")
    if home is not None:
        for sub in ("go/bin", ".cargo/bin", ".local/bin"):
            if sub.split("/")[0] in home_entries and _is_dir(home / sub):
                bins.append(f"{SANDBOX_HOME}/{sub}")
    return bins, venv


def _is_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def mount_point(repo: Path, rel: str) -> bool:
    """Whether ``rel`` in ``repo`` can take a bind: each part a real directory or missing
    (made here), never a link or a file, so that no bind lands anywhere but where it says."""
    current = repo
    for part in Path(rel).parts:
        if part in ("..", ".", ""):
            return False
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            try:
                current.mkdir()
            except OSError:
                return False
            continue
        except OSError:
            return False
        if not stat.S_ISDIR(mode):
            return False
    return True


def remove(path: Path) -> None:
    """Delete ``path`` whatever its modes (a setup may leave read-only directories)."""
    if os.path.islink(path) or os.path.isfile(path):
        os.unlink(path)
        return
    if not os.path.isdir(path):
        return
    for root, subdirs, _files in os.walk(path):  # links are not walked into
        for name in subdirs:
            sub = os.path.join(root, name)
            if not os.path.islink(sub):
                try:
                    os.chmod(sub, 0o700)
                except OSError:
                    pass
    shutil.rmtree(path, ignore_errors=True)


# ----------------------------------------------------------------------------- the home's


def environments(home: Path) -> list[Path]:
    """Every environment folder of the home (made ones, and ``.make-*`` ones a setup left)."""
    directory = envs_dir(home)
    try:
        return sorted(p for p in directory.iterdir() if _is_dir(p) and p.name != "baselines")
    except OSError:
        return []


def maker_alive(path: Path) -> bool:
    """Whether the ``.make-<key>-<pid>-<n>`` folder ``path`` is a live process's setup."""
    parts = path.name.rsplit("-", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return False
    try:
        os.kill(int(parts[1]), 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True
