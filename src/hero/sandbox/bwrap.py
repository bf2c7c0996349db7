"""Where the worker's and the checks' commands run: inside bubblewrap (``bwrap``).

A sandboxed command sees the system read-only (``SYSTEM_DIRS``, the Python hero runs on,
the directories on ``PATH`` that are not under a home, the ``toolchain_dirs`` named:
``default_tool_dirs``) and the story's own repository (``hero.git.storyrepo``)
writable, but for the parts of its git directory through which git runs programs or reads
other files (``guarded``: config, hooks, info, objects/info, modules), which are read-only;
the target's object store, which the story's repository borrows, is read-only too. The
user's repository, its ``.git`` and its other worktrees, other stories' repositories and the
hero home are not there. It gets a private ``/tmp`` and ``HOME`` (``SANDBOX_HOME``), its own
PID namespace (it cannot see hero's processes, and when the command ends every process it
started ends with it), no capabilities, and, unless asked for, no network (a namespace with
only its own loopback). ``/root``, ``/home`` and the user's own home are not there, apart
from the story's repository, the Python hero runs on and the toolchains named.

As root where no pids cgroup holds a command's processes (``hero.sandbox.limits.drops_uid``),
the worker's and the checks' commands run as an unprivileged uid (``Sandbox.uid``, through
``wrap_command`` and ``as_user``), which RLIMIT_NPROC holds, and what they write is lent to
that uid while they run (``Sandbox.lent``); hero's own git in the sandbox stays root.

``resolve`` turns the ``sandbox`` setting into a ``Sandbox`` (or None), checking once per
process that bwrap works here by running a sandboxed ``true`` (``bwrap_problem``).
``Sandbox.wrap`` turns a command's argv into the bwrap argv that runs it: a sandbox of its
own per command, as the checks' commands and hero's own git get. The worker's commands of
one round share one such sandbox instead (``hero.sandbox.session``): the same mounts,
network and limits, and still nothing a command started outlives it, but ``/tmp`` (with
``HOME`` in it), ``/var/tmp`` and ``/dev/shm`` hold the worker's files from one command of
the round to the next, and start empty at the round's first.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from hero.errors import HeroError
from hero.git.ops import GitError, git
from hero.runner import run_process
from hero.sandbox.limits import SETPRIV, Limits, sandbox_uid, tmpfs_args

MODES = ("auto", "bwrap", "none")
#: The system, bound read-only where it exists (a symlink such as ``/bin -> usr/bin`` is
#: recreated as the same symlink).
SYSTEM_DIRS = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/opt",
    "/nix",
    "/sys",
)
#: Files of the system that hold secrets (readable to a command run as root): replaced by
#: an empty file.
MASKED_FILES = ("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-")
#: System files that are often symlinks to a place outside the system directories (with
#: systemd-resolved, /etc/resolv.conf points into /run): their targets are bound read-only.
LINKED_FILES = ("/etc/resolv.conf",)
#: Never shown, but for the worktree and tool directories inside them; the hero home and
#: the user's home are added by ``build``.
HIDDEN = ("/root", "/home")
#: HOME inside the sandbox: in its private /tmp, empty at the start of every command run in
#: a sandbox of its own, and of every round of the worker's (``hero.sandbox.session``).
SANDBOX_HOME = "/tmp/home"
#: Where a story's repository is seen too when it has a project environment
#: (:class:`ProjectMounts`): the same path in every sandbox, so that what the setup wrote
#: there (a virtualenv's scripts, an editable install) holds in every story's repository.
PROJECT_PATH = "/hero/project"
#: Variables that point into the real home: unset, so tools fall back to ``HOME``.
_UNSET = (
    "XDG_CONFIG_HOME",
    "XDG_CACHE_HOME",
    "XDG_DATA_HOME",
    "XDG_STATE_HOME",
    "XDG_RUNTIME_DIR",
)
#: Namespaces and process rules of every sandboxed command. ``--cap-drop ALL``: run as root,
#: bwrap keeps every capability, with which a command could remount the system writable.
_BASE_FLAGS = (
    "--die-with-parent",
    "--new-session",
    "--unshare-pid",
    "--unshare-ipc",
    "--unshare-uts",
    "--cap-drop",
    "ALL",
)
#: The capabilities the init of a sandbox whose commands run as an unprivileged uid keeps:
#: to become that uid (setpriv) and to end what runs as it.
_DROP_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_KILL")
#: The file mode of the sandbox's /tmp, /var/tmp, /dev/shm and HOME when its commands run as
#: an unprivileged uid (else they are root's, and the command is root).
_SHARED_MODE = "01777"
#: What makes bubblewrap work on a machine where it does not.
_HOW_TO_FIX = (
    "install the system package bubblewrap, e.g. apt-get install bubblewrap; it needs "
    "unprivileged user namespaces, or hero run as root"
)
#: Seconds the check that bwrap works may take (a loaded machine starts processes slowly).
PROBE_TIMEOUT_S = 30.0


class SandboxUnavailable(HeroError):
    """``sandbox: bwrap`` is set and bubblewrap does not work on this machine."""


@dataclass(frozen=True)
class ProjectMounts:
    """A project environment in the sandbox (:mod:`hero.run.environment`): the story's
    repository seen at ``PROJECT_PATH`` too (commands start there), what the setup made bound
    on top, its tools first on ``PATH``, and hero's own Python environment not shown."""

    read_only: tuple[tuple[str, str], ...] = ()
    """(path on this machine, path in the sandbox) bound read-only: the environment's
    directories under ``PROJECT_PATH``, what its setup kept of HOME under ``SANDBOX_HOME``."""
    writable: tuple[tuple[str, str], ...] = ()
    """The same, bound writable (the setup's own HOME, kept after it)."""
    path: tuple[str, ...] = ()
    """Directories in the sandbox put first on PATH."""
    env: tuple[tuple[str, str], ...] = ()
    """More variables set (``VIRTUAL_ENV``)."""


def hero_python_dirs() -> tuple[str, ...]:
    """The Python environment hero itself runs in, when it is a virtual environment (its
    interpreter and packages, which a project's commands must not pick up); () otherwise."""
    if os.path.realpath(sys.prefix) == os.path.realpath(sys.base_prefix):
        return ()
    return tuple(dict.fromkeys(os.path.normpath(p) for p in (sys.prefix, sys.exec_prefix)))


def sandbox_python() -> str:
    """An interpreter a sandbox shows even when hero's virtual environment is hidden: the
    one it was made from (hero's own modules are not needed there, only the standard ones)."""
    base = getattr(sys, "_base_executable", "") or sys.executable
    return base if os.path.isfile(base) else sys.executable


@dataclass(frozen=True)
class Sandbox:
    """How to run one story's commands in bubblewrap: the bwrap argv up to the command."""

    prefix: tuple[str, ...]
    """bwrap, its namespaces and mounts: everything but the network, the cwd and the command."""
    network: bool = False
    """Whether commands share hero's network (else: a namespace with only a loopback)."""
    limits: Limits | None = None
    """What each command may use (``hero.sandbox.limits``); hero.runner puts them on the sandbox's
    init before the command starts."""
    env_changes: tuple[tuple[str, str | None], ...] = ()
    """What bwrap does to a command's environment (the ``--setenv`` and ``--unsetenv`` in
    ``prefix``, in order; None: unset), for a command that is not started by bwrap itself
    (``hero.sandbox.session``): ``env_for``."""
    worktrees: tuple[str, ...] = ()
    """The story repository's paths on this machine (as given, and resolved)."""
    project: bool = False
    """The repository is seen at ``PROJECT_PATH`` too, and commands start there."""
    cgroups: bool = True
    """Whether the limits may use cgroups (the ``sandbox_cgroups`` setting)."""
    uid: int | None = None
    """The unprivileged uid (and gid) the commands run as (``hero.sandbox.limits.sandbox_uid``:
    hero runs as root and no pids cgroup is writable), or None: as hero's own."""
    lend: tuple[str, ...] = ()
    """With ``uid``: what the commands write (the story's repository, the writable binds),
    owned by ``uid`` while a command runs (``lent``)."""
    keep: tuple[str, ...] = ()
    """With ``uid``: what stays hero's inside ``lend`` (the guarded parts of the git
    directory, bound read-only anyway)."""

    def inside(self, path: Path | str) -> str:
        """Where ``path`` (on this machine) is seen by a command: under ``PROJECT_PATH``
        for a path in the story's repository when it has a project environment."""
        text = os.path.abspath(path)
        if self.project:
            for root in self.worktrees:
                if _inside(text, root):
                    return PROJECT_PATH + text[len(root.rstrip("/")) :]
        return text

    def wrap(
        self,
        argv: Sequence[str],
        cwd: Path,
        *,
        info_fd: int | None = None,
        block_fd: int | None = None,
        as_pid_1: bool = False,
        drop: bool = False,
    ) -> list[str]:
        """The argv that runs ``argv`` in ``cwd`` (a path inside the worktree) in the sandbox.

        ``info_fd``: bwrap writes to it, as JSON, the ``child-pid`` of the init (PID 1) of
        the command's PID namespace, then closes it. ``block_fd``: the sandbox waits to
        start the command until it can read from this fd (or its write end is closed).
        ``as_pid_1``: ``argv`` itself is the init (bwrap's own reaper is left out), so
        ``child-pid`` is ``argv``'s process: what ``hero.sandbox.session`` runs. ``drop``:
        with ``uid``, the init keeps what it needs to start commands as that uid and end
        them (CAP_SETUID, CAP_SETGID, CAP_KILL; a command has none: ``as_user``)."""
        net = () if self.network else ("--unshare-net",)
        fds: list[str] = []
        if drop and self.uid is not None:
            for cap in _DROP_CAPS:
                fds += ["--cap-add", cap]
        if info_fd is not None:
            fds += ["--info-fd", str(info_fd)]
        if block_fd is not None:
            fds += ["--block-fd", str(block_fd)]
        if as_pid_1:
            fds.append("--as-pid-1")
        return [*self.prefix, *net, *fds, "--chdir", self.inside(cwd), "--", *argv]

    def wrap_command(
        self,
        argv: Sequence[str],
        cwd: Path,
        *,
        info_fd: int | None = None,
        block_fd: int | None = None,
    ) -> list[str]:
        """``wrap`` for a command of the worker's or the checks' (not hero's own git): with
        ``uid``, run as that uid (``as_user``)."""
        return self.wrap(self.as_user(argv), cwd, info_fd=info_fd, block_fd=block_fd, drop=True)

    def as_user(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run as ``uid`` (setpriv, from the sandbox's init, which may set it):
        every uid and gid that one, no supplementary group, no capability. The sandbox's
        ``no_new_privs`` (bwrap sets it) keeps a set-uid program from raising them again."""
        if self.uid is None:
            return list(argv)
        uid = str(self.uid)
        return [
            SETPRIV,
            *("--reuid", uid, "--regid", uid, "--clear-groups", "--inh-caps=-all", "--"),
            *argv,
        ]

    @contextlib.contextmanager
    def lent(self) -> Iterator[None]:
        """While a command runs as ``uid``: what it may write owned by that uid, then all of
        it hero's again (root's), set-uid and set-gid bits cleared, so that hero's own git
        and tools find the story's repository as they left it. Nothing of the uid runs
        outside a command (every process of a command ends with it)."""
        if self.uid is None:
            yield
            return
        keep = frozenset(self.keep)
        for root in self.lend:
            _chown_tree(root, self.uid, keep)
        try:
            yield
        finally:
            for root in self.lend:
                _chown_tree(root, 0, keep, strip=True)

    def env_for(self, env: Mapping[str, str]) -> dict[str, str]:
        """``env`` as bwrap hands it to a command it starts (``env_changes``)."""
        found = dict(env)
        for name, value in self.env_changes:
            if value is None:
                found.pop(name, None)
            else:
                found[name] = value
        return found

    def with_network(self, network: bool) -> Sandbox:
        return dataclasses.replace(self, network=network)


def resolve(
    mode: str,
    *,
    worktree: Path,
    objects: Path | None,
    guarded: Iterable[Path] = (),
    hide: Iterable[Path] = (),
    network: bool = False,
    limits: Limits | None = None,
    project: ProjectMounts | None = None,
    toolchains: Iterable[str] = (),
    cgroups: bool = True,
    warn: Callable[[str], None] = lambda _message: None,
) -> Sandbox | None:
    """The sandbox the ``sandbox`` setting asks for: None for ``none``; for ``auto`` a
    Sandbox when bwrap works, else None after one call of ``warn``; for ``bwrap`` a Sandbox,
    else ``SandboxUnavailable`` saying why. Arguments as for ``build``."""
    if mode not in MODES:
        raise ValueError(f"sandbox mode must be one of {', '.join(MODES)}; got {mode!r}")
    if mode == "none":
        return None
    bwrap = shutil.which("bwrap")
    problem = "bwrap is not installed (not on PATH)" if bwrap is None else bwrap_problem(bwrap)
    if bwrap is None or problem:
        if mode == "bwrap":
            raise SandboxUnavailable(
                f"sandbox: bwrap is set in config/roles.yaml, but {problem}. Make bubblewrap "
                f"work here ({_HOW_TO_FIX}), or set sandbox: auto (no sandbox where it does "
                "not work) or sandbox: none"
            )
        warn(
            f"warning: commands run WITHOUT a sandbox: {problem}. sandbox: auto is set in "
            f"config/roles.yaml; make bubblewrap work here ({_HOW_TO_FIX}), or set "
            "sandbox: none to run without one and without this warning"
        )
        return None
    return build(
        worktree,
        objects,
        guarded=guarded,
        hide=hide,
        network=network,
        bwrap=bwrap,
        limits=limits,
        project=project,
        toolchains=toolchains,
        cgroups=cgroups,
    )


@functools.cache
def bwrap_problem(bwrap: str) -> str | None:
    """Why ``bwrap`` cannot run a sandboxed command here (its own words), or None when it
    can. Runs a sandboxed ``true`` the first time it is asked, per bwrap path and process."""
    with tempfile.TemporaryDirectory(prefix="hero-sandbox-probe-") as tmp:
        box = build(Path(tmp), None, bwrap=bwrap, identity=False)
        try:
            result = run_process(
                box.wrap(["true"], Path(tmp)), Path(tmp), timeout_s=PROBE_TIMEOUT_S
            )
        except OSError as exc:
            return f"bwrap could not be started: {exc.strerror or exc}"
    if result.timed_out:
        return f"a sandboxed `true` did not finish in {PROBE_TIMEOUT_S:g} s"
    if result.exit_code != 0:
        said = " ".join(result.stderr.split()) or f"exit code {result.exit_code}"
        return f"bwrap does not work here: {said}"
    return None


def build(
    worktree: Path,
    objects: Path | None,
    *,
    guarded: Iterable[Path] = (),
    hide: Iterable[Path] = (),
    network: bool = False,
    bwrap: str = "bwrap",
    tool_dirs: Iterable[str] | None = None,
    identity: bool = True,
    limits: Limits | None = None,
    project: ProjectMounts | None = None,
    toolchains: Iterable[str] = (),
    cgroups: bool = True,
) -> Sandbox:
    """The sandbox for commands run in ``worktree`` (writable), a story's repository whose
    object store borrows ``objects`` (read-only; None: no repository), the paths of its git
    directory in ``guarded`` read-only.

    ``hide``: directories that must not be seen (the hero home), beside ``HIDDEN`` and the
    user's home. ``tool_dirs``: directories commands need read-only (default: the Python
    hero runs on, ``toolchains`` and the directories on ``PATH`` outside the homes, see
    ``default_tool_dirs``). ``identity``: set the git author and committer from the
    repository's git config where the environment does not, since the user's
    ``~/.gitconfig`` is not in the sandbox. ``project``: a project environment
    (:class:`ProjectMounts`). ``cgroups``: whether the limits may use cgroups; where they
    do not hold the processes of a root hero, the commands run as an unprivileged uid
    (``Sandbox.uid``)."""
    worktree = Path(os.path.abspath(worktree))
    real_worktree = worktree.resolve()
    hidden = [*HIDDEN, str(Path.home()), *(os.path.abspath(p) for p in hide)]
    hidden = [h for h in dict.fromkeys(hidden) if h != "/"]
    system = [d for d in SYSTEM_DIRS if os.path.lexists(d)]
    writable = [str(real_worktree), str(worktree)]
    hero_python = hero_python_dirs() if project is not None else ()
    if tool_dirs is None:  # with a project: hero's own interpreter and packages not shown
        tool_dirs = default_tool_dirs(toolchains, skip=hero_python)
    tools = _tool_dirs(tool_dirs, system=system, hidden=hidden, writable=writable)
    uid = sandbox_uid(real_worktree, cgroups=cgroups) if limits is not None else None

    args: list[str] = [bwrap, *_BASE_FLAGS]
    for d in system:
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        else:
            args += ["--ro-bind", d, d]
    args += ["--proc", "/proc", "--dev", "/dev"]
    if limits is not None:  # each tmpfs sized: RAM-backed space a command cannot overfill
        args += tmpfs_args(limits, mode=_SHARED_MODE if uid is not None else None)
    else:
        args += ["--tmpfs", "/dev/shm", "--tmpfs", "/tmp", "--tmpfs", "/var/tmp"]
    if uid is not None:  # writable by the command's uid, as /tmp is
        args += ["--perms", _SHARED_MODE]
    args += ["--dir", SANDBOX_HOME]

    # Mounts on top, shallowest first, so that a deeper one is never covered by another.
    mounts: list[tuple[str, tuple[str, ...]]] = []
    roots = [*system, *tools]
    for h in hidden:
        if os.path.isdir(h) and any(_inside(h, r) and h != r for r in roots):
            mounts.append((h, ("--tmpfs", h)))
    for f in MASKED_FILES:
        if os.path.isfile(f):
            mounts.append((f, ("--ro-bind", "/dev/null", f)))
    for t in tools:
        mounts.append((t, ("--ro-bind", t, t)))
    for f in LINKED_FILES:
        target = os.path.realpath(f)
        shown = any(_inside(target, r) for r in roots)
        if target != f and os.path.isfile(target) and not shown:
            if not any(_inside(target, h) for h in hidden):
                mounts.append((target, ("--ro-bind", target, target)))
    for w in dict.fromkeys(writable[:2]):
        mounts.append((w, ("--bind", str(real_worktree), w)))
    if objects is not None:
        mounts += _git_mounts(real_worktree, Path(objects), guarded)
    if project is not None:
        mounts += _project_mounts(real_worktree, guarded if objects is not None else None, project)
    mounts.sort(key=lambda m: len(PurePosixPath(m[0]).parts))
    made: set[str] = set()
    for dest, op in mounts:
        if uid is not None:  # bwrap makes a mount's missing parents 0700: the uid's way
            for parent in reversed(PurePosixPath(dest).parents[:-1]):
                p = str(parent)
                if p not in made and not any(_inside(p, r) for r in system):
                    made.add(p)
                    args += ["--perms", "0755", "--dir", p]
        args += op
    args += ["--remount-ro", "/"]
    if limits is not None:  # bwrap's /dev is a tmpfs of its own, unsized: read-only
        args += ["--remount-ro", "/dev"]

    changes: list[tuple[str, str | None]] = [("HOME", SANDBOX_HOME), ("TMPDIR", "/tmp")]
    changes += [(name, None) for name in _UNSET]
    if identity and objects is not None:
        changes += _git_identity(worktree).items()
    if project is not None:
        changes += _project_env(project, hero_python)
    for name, value in changes:
        args += ["--unsetenv", name] if value is None else ["--setenv", name, value]
    worktrees = tuple(dict.fromkeys((str(worktree), str(real_worktree))))
    lend: tuple[str, ...] = ()
    keep: tuple[str, ...] = ()
    if uid is not None:
        lend = (str(real_worktree), *(src for src, _dest in (project.writable if project else ())))
        keep = tuple(os.path.realpath(p) for p in guarded) if objects is not None else ()
    return Sandbox(
        tuple(args),
        network,
        limits,
        tuple(changes),
        worktrees,
        project is not None,
        cgroups=cgroups,
        uid=uid,
        lend=tuple(dict.fromkeys(lend)),
        keep=keep,
    )


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def default_tool_dirs(toolchains: Iterable[str] = (), skip: Sequence[str] = ()) -> list[str]:
    """What commands see read-only beside the system, but what is in ``skip``: the Python
    hero runs on (the sandbox's init is that interpreter), the ``toolchains`` named in the
    ``toolchain_dirs`` setting, and the directories on ``PATH`` that are not under a home
    (``hidden_path_dirs``): a ``~/bin`` holds the user's own scripts, and often secrets."""
    prefixes = (sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix)
    known = [*prefixes, *toolchains]
    hidden = set(hidden_path_dirs(toolchains))
    path_dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d not in hidden]
    return [
        d
        for d in (*known, *path_dirs)
        if d and not any(_inside(os.path.normpath(d), s) for s in skip)
    ]


def homes() -> tuple[str, ...]:
    """Where users' homes are: never shown to a command but for what is named."""
    return tuple(dict.fromkeys(h for h in (*HIDDEN, str(Path.home())) if h != "/"))


def hidden_path_dirs(toolchains: Iterable[str] = ()) -> list[str]:
    """The directories on ``PATH`` that are under a home (``homes``) and not inside the
    Python hero runs on or one of ``toolchains``: not shown to commands, with what they
    hold (``hero doctor`` names the tools among them)."""
    prefixes = (sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix)
    shown = [os.path.normpath(p) for p in (*prefixes, *toolchains) if p]
    found = []
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if not d or not os.path.isabs(d):
            continue
        real = os.path.normpath(d)
        if any(_inside(real, h) for h in homes()) and not any(_inside(real, t) for t in shown):
            found.append(d)
    return list(dict.fromkeys(found))


def _chown_tree(root: str, uid: int, keep: frozenset[str], *, strip: bool = False) -> None:
    """Make ``root`` and everything under it owned by ``uid`` (and the gid of that number),
    links themselves and not what they point to, but for the paths in ``keep`` and what is
    under them; ``strip``: clear the set-uid and set-gid bits of files (the kernel does on
    a chown too; said here so that it holds on any file system)."""
    stack = [root]
    while stack:
        path = stack.pop()
        if path in keep:
            continue
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if st.st_uid != uid or st.st_gid != uid:
            try:
                os.lchown(path, uid, uid)
            except OSError:
                pass
        if strip and stat.S_ISREG(st.st_mode) and st.st_mode & (stat.S_ISUID | stat.S_ISGID):
            with contextlib.suppress(OSError):
                os.chmod(path, stat.S_IMODE(st.st_mode) & ~(stat.S_ISUID | stat.S_ISGID))
        if stat.S_ISDIR(st.st_mode):
            try:
                with os.scandir(path) as entries:
                    stack.extend(e.path for e in entries)
            except OSError:
                pass


def _project_mounts(
    worktree: Path, guarded: Iterable[Path] | None, project: ProjectMounts
) -> list[tuple[str, tuple[str, ...]]]:
    """The story's repository at ``PROJECT_PATH`` as at its own path (its git directory
    bound on itself, the guarded paths read-only), then the environment's binds."""
    real = str(worktree)
    mounts: list[tuple[str, tuple[str, ...]]] = [(PROJECT_PATH, ("--bind", real, PROJECT_PATH))]
    if guarded is not None:
        gitdir = PROJECT_PATH + "/.git"
        mounts.append((gitdir, ("--bind", real + "/.git", gitdir)))
        for path in guarded:
            p = str(path)
            if _inside(p, real):
                dest = PROJECT_PATH + p[len(real) :]
                mounts.append((dest, ("--ro-bind-try", p, dest)))
    for src, dest in project.read_only:
        mounts.append((dest, ("--ro-bind", src, dest)))
    for src, dest in project.writable:
        mounts.append((dest, ("--bind", src, dest)))
    return mounts


def _project_env(
    project: ProjectMounts, hero_python: Sequence[str]
) -> list[tuple[str, str | None]]:
    """PATH with the environment's tools first and hero's own Python environment left out;
    its other variables; hero's VIRTUAL_ENV unset when the project has none."""
    kept = [
        d
        for d in os.environ.get("PATH", "").split(os.pathsep)
        if d and not any(_inside(os.path.normpath(d), h) for h in hero_python)
    ]
    changes: list[tuple[str, str | None]] = [
        ("PATH", os.pathsep.join(dict.fromkeys([*project.path, *kept])))
    ]
    names = {name for name, _value in project.env}
    if "VIRTUAL_ENV" not in names:
        changes.append(("VIRTUAL_ENV", None))
    changes += list(project.env)
    return changes


def _tool_dirs(
    given: Iterable[str] | None,
    *,
    system: Sequence[str],
    hidden: Sequence[str],
    writable: Sequence[str],
) -> list[str]:
    """The read-only directories commands need beyond the system: existing absolute
    directories that are not already shown, and that hold no hidden directory."""
    if given is None:
        given = default_tool_dirs()
    found: list[str] = []
    for raw in given:
        if not raw or not os.path.isabs(raw):
            continue
        d = os.path.normpath(raw)
        if d == "/" or not os.path.isdir(d) or d in found:
            continue
        if any(_inside(h, d) for h in hidden):  # would show a hidden directory
            continue
        if any(_inside(d, w) for w in writable):  # already there, and writable
            continue
        masked = any(_inside(d, h) for h in hidden)
        if not masked and any(_inside(d, s) for s in system):  # already there
            continue
        found.append(d)
    # One inside another one found is there already (none found holds a hidden directory).
    return [d for d in found if not any(o != d and _inside(d, o) for o in found)]


def _git_mounts(
    worktree: Path, objects: Path, guarded: Iterable[Path]
) -> list[tuple[str, tuple[str, ...]]]:
    """The story's git directory writable, bound on itself so that a command can neither
    rename nor replace it; its ``guarded`` paths and the borrowed object store read-only."""
    gitdir = str(worktree / ".git")
    mounts: list[tuple[str, tuple[str, ...]]] = [(gitdir, ("--bind", gitdir, gitdir))]
    for path in guarded:
        p = str(path)
        mounts.append((p, ("--ro-bind-try", p, p)))
    o = str(objects.resolve())
    mounts.append((o, ("--ro-bind", o, o)))
    return mounts


def _git_identity(worktree: Path) -> dict[str, str]:
    """Author and committer from git's config (the user's global one included), for the
    variables not set in hero's environment."""
    try:
        out = git(worktree, "config", "--get-regexp", r"^user\.(name|email)$", check=False)
    except GitError:
        return {}
    values = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    found: dict[str, str] = {}
    for key, names in (
        ("user.name", ("GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME")),
        ("user.email", ("GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL")),
    ):
        value = values.get(key, "").strip()
        for name in names:
            if value and name not in os.environ:
                found[name] = value
    return found
