"""Limits on every sandboxed command: tmpfs sizes, processes, memory, file size, CPU, files.

A worker's command may be hostile or just broken (a fork bomb, ``yes > /tmp/x``, a test that
leaks memory); whatever it does, the host and hero must live. ``Limits`` holds the settings
(``limit_*`` in config/roles.yaml); three mechanisms enforce them:

- **Sized tmpfs** (``tmpfs_args``): the sandbox's ``/tmp``, ``/var/tmp`` and ``/dev/shm`` are
  RAM-backed; bubblewrap's ``--size`` caps each (a write beyond fails with ENOSPC, "No space
  left on device"). Without it each would be half the RAM.
- **cgroups** where hero can make one (``confine`` probes once per process): one cgroup per
  command in the ``pids`` and ``memory`` controllers, made under hero's own cgroup (so the
  command's use also counts against whatever limits hero runs under), with ``pids.max`` and
  ``memory.limit_in_bytes`` (v1) or ``memory.max`` (v2). Both count the whole command, all its
  processes together, which an rlimit cannot; their event counters say for sure that a limit
  was hit. cgroup v1 hierarchies and cgroup v2 (where the controllers are enabled for hero's
  children) are used as found; ``mechanism()`` says which.
- **rlimits** (``setrlimit``) for the rest: file size (``RLIMIT_FSIZE``), CPU seconds
  (``RLIMIT_CPU``, soft: SIGXCPU, a few seconds later SIGKILL), open files (``RLIMIT_NOFILE``),
  no core files (``RLIMIT_CORE`` 0), and, where no cgroup controller is writable, processes
  (``RLIMIT_NPROC``) and memory (``RLIMIT_DATA``). Those two are weaker. RLIMIT_NPROC counts
  a user's processes: when hero is not root, bwrap gives the sandbox a user namespace of its
  own, where that is the command's own processes (checked: a user with 80 processes outside
  still gets exactly the limit inside); for root it is not enforced at all (the kernel
  exempts uid 0), so a root hero without a pids cgroup runs the commands as an unprivileged
  uid (``sandbox_uid``, ``hero.sandbox.bwrap.Sandbox.uid``). RLIMIT_DATA bounds each
  process, not the command. ``holds`` names the mechanism for ``hero doctor``; the setting
  ``sandbox_cgroups: off`` makes hero use no cgroup.

Memory: ``RLIMIT_DATA``, not ``RLIMIT_AS``. RLIMIT_AS counts address space reserved but never
used, and runtimes reserve a lot (Go's arenas, the JVM's heap and class space, V8's pointer
cage and WebAssembly guard regions: tens of GB), so a few GB of RLIMIT_AS breaks node, java and
go test suites that use little memory. RLIMIT_DATA counts writable private mappings only
(what a process can actually fill); reservations made ``PROT_NONE`` do not count. A cgroup is
better still: it counts memory in use (tmpfs pages included) across all the command's
processes, and the kernel's OOM killer ends the command when it is over.

How the limits reach the command: not through ``preexec_fn`` (documented as unsafe in a
threaded program such as hero, and it turns subprocess's vfork into a fork), nor a wrapper
exec (``prlimit`` from util-linux costs an exec per command, a Python wrapper ~20 ms). bwrap,
started with ``--block-fd``, makes the sandbox's init (PID 1 of the command's namespace) and
waits for hero before it forks the command; hero (``hero.runner``) then calls ``confine`` on
that init: ``prlimit(2)`` sets its rlimits from outside (``resource.prlimit``) and its pid is
written to the new cgroups' ``cgroup.procs``. Everything the command starts descends from the
init, so inherits both. ``Confinement.end`` then removes the cgroups (killing any process
left first) and reads their counters; ``Confinement.note`` (or ``explain``) turns a hit limit
into a sentence for the tool result. Measured on a 2-core machine with cgroup v1 pids and
memory (median of 200 commands through ``run_command``): ``confine`` 0.35 ms and ``end``
0.25 ms (two cgroups made, joined, read and removed); the rlimits alone 0.02 ms.

Only sandboxed commands get limits (with ``sandbox: none`` there is no init to hold), and
only where pidfds work (Linux 5.3), as the runner needs them to hold the init.

Importing this module does nothing but define things; the cgroup probe runs on first use.
"""

from __future__ import annotations

import errno
import functools
import itertools
import os
import re
import resource
import shutil
import signal
import threading
import time
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hero.config.settings import knob, settings_of

#: The sandbox's RAM-backed directories, each a tmpfs of ``Limits.tmpfs_mb``.
TMPFS_DIRS = ("/dev/shm", "/tmp", "/var/tmp")
#: The prefix of each limit's key in config/roles.yaml (``limit_processes``, ...).
SETTING_PREFIX = "limit_"
#: Where the settings are, as named in a note.
SETTINGS_FILE = "config/roles.yaml"
#: Seconds of CPU between SIGXCPU (the soft limit, a clear exit code 152) and SIGKILL.
CPU_GRACE_S = 5
#: Where cgroup file systems are mounted; what is mounted is read from /proc/self/mountinfo.
CGROUP_ROOT = Path("/sys/fs/cgroup")
#: The name of a command's cgroup: hero's PID namespace (its inode) and pid, and a counter,
#: so that a crashed hero's leftovers can be told from a running one's, in a cgroup that
#: hero processes of other PID namespaces (containers) may share.
_CGROUP_NAME_RE = re.compile(r"^hero-(\d+)-(\d+)-(\d+|probe)$")
#: How long ``end`` keeps killing what is left in a command's cgroup before giving up on it.
_END_WAIT_S = 2.0

_MB = 1 << 20
#: The ``Limits`` field each cgroup controller holds.
_FIELD = {"pids": "processes", "memory": "memory_mb"}


_SECTION = "sandbox limits"


@dataclass(frozen=True)
class Limits:
    """What one sandboxed command may use (``limit_<field>`` in config/roles.yaml; each
    field declares its setting: key, default, bounds, doc)."""

    tmpfs_mb: int = knob(
        "limit_tmpfs_mb",
        1024,
        "Size of each of the sandbox's /tmp, /var/tmp and /dev/shm, in MB.",
        note='They are kept in RAM; writing beyond fails with "No space left on device".',
        maximum=1 << 20,
        section=_SECTION,
    )
    processes: int = knob(
        "limit_processes",
        1024,
        "Processes and threads one command may have at once (a JVM has dozens of threads).",
        minimum=16,
        maximum=1 << 22,
        section=_SECTION,
    )
    memory_mb: int = knob(
        "limit_memory_mb",
        4096,
        "Memory one command may use, in MB: all its processes together with a cgroup, else "
        "each process's data.",
        minimum=64,
        maximum=1 << 24,
        section=_SECTION,
    )
    file_size_mb: int = knob(
        "limit_file_size_mb",
        2048,
        'The largest file a command may write, in MB; beyond, "File too large".',
        maximum=1 << 24,
        section=_SECTION,
    )
    cpu_s: int = knob(
        "limit_cpu_s",
        3600,
        "CPU seconds each process of a command may use; beyond, it is stopped (SIGXCPU, exit "
        "code 152).",
        maximum=1 << 30,
        section=_SECTION,
    )
    open_files: int = knob(
        "limit_open_files",
        2048,
        "Files each process of a command may have open at once.",
        minimum=32,
        maximum=1 << 20,
        section=_SECTION,
    )


def setting(name: str) -> str:
    """The config/roles.yaml key of the ``Limits`` field ``name``: ``limit_<name>``."""
    return SETTING_PREFIX + name


#: The config/roles.yaml key of every limit, in the order of the fields.
SETTINGS = tuple(s.key for s in settings_of(Limits))


def bounds(name: str) -> tuple[int, int]:
    """The smallest and largest valid value of the ``Limits`` field ``name``."""
    found = next(s for s in settings_of(Limits) if s.attr == name)
    return int(found.minimum or 1), int(found.maximum or 0)


def tmpfs_args(
    limits: Limits, dirs: Iterable[str] = TMPFS_DIRS, *, mode: str | None = None
) -> list[str]:
    """The bwrap arguments that mount a tmpfs of ``limits.tmpfs_mb`` on each of ``dirs``
    (``--size`` sets the size of the next ``--tmpfs``; bubblewrap 0.5.0 and later), of the
    file ``mode`` given (``--perms``; else bwrap's, 0755)."""
    size = str(limits.tmpfs_mb * _MB)
    args: list[str] = []
    for d in dirs:
        args += ["--size", size, *(("--perms", mode) if mode else ()), "--tmpfs", d]
    return args


# ----------------------------------------------------------------------------- cgroups


@dataclass(frozen=True)
class _Controller:
    """A cgroup controller hero can make a command's cgroup in."""

    name: str
    """pids or memory."""
    parent: Path
    """hero's own cgroup in this controller's hierarchy: commands' cgroups go inside."""
    version: int
    """1 (a hierarchy per controller) or 2 (the unified hierarchy)."""

    def limit_files(self, limits: Limits) -> list[tuple[str, str]]:
        """The files to write in a command's cgroup, in order, and what; the first must be
        there, the others are written where they are (swap accounting may be off)."""
        if self.name == "pids":
            return [("pids.max", str(limits.processes))]
        size = str(limits.memory_mb * _MB)
        if self.version == 1:  # memsw (memory + swap) may not be below the memory limit
            return [("memory.limit_in_bytes", size), ("memory.memsw.limit_in_bytes", size)]
        return [("memory.max", size), ("memory.swap.max", "0")]

    def hits(self, cgroup: Path) -> int:
        """How often the limit was hit in ``cgroup``: forks refused, or processes killed for
        memory (the OOM killer); 0 where the kernel keeps no count."""
        if self.name == "pids":
            return _counter(cgroup / "pids.events", "max")
        if self.version == 1:
            return _counter(cgroup / "memory.oom_control", "oom_kill")
        return _counter(cgroup / "memory.events", "oom_kill")


def _counter(path: Path, key: str) -> int:
    """The value of ``key`` in a cgroup file of ``key value`` lines; 0 if not there."""
    try:
        text = _read(path)
    except OSError:
        return 0
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return 0


@dataclass(frozen=True)
class _Probe:
    """What this process can use, found once (``_probe``)."""

    controllers: tuple[_Controller, ...]
    root: bool
    """Whether hero runs as root (RLIMIT_NPROC does not hold for root)."""

    def controller(self, name: str) -> _Controller | None:
        return next((c for c in self.controllers if c.name == name), None)


_probe_lock = threading.Lock()
_probed: dict[Path, _Probe] = {}
_serial = itertools.count(1)


def _probe(root: Path = CGROUP_ROOT) -> _Probe:
    """The cgroup controllers hero can make a command's cgroup in (probed once per process
    and root: a cgroup made, limited and removed in each), after removing what a crashed
    hero left there."""
    with _probe_lock:
        found = _probed.get(root)
        if found is None:
            controllers = []
            for candidate in _candidates(root):
                _clean_stale(candidate.parent)
                if _works(candidate):
                    controllers.append(candidate)
            found = _Probe(tuple(controllers), os.geteuid() == 0)
            _probed[root] = found
        return found


def _candidates(root: Path) -> list[_Controller]:
    """hero's own cgroup in the pids and memory hierarchies mounted under ``root``: from
    /proc/self/cgroup (which cgroup) and /proc/self/mountinfo (where it is mounted)."""
    try:
        own_text = Path("/proc/self/cgroup").read_text(encoding="utf-8", errors="replace")
        mount_text = Path("/proc/self/mountinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    own: dict[str, str] = {}  # controller (or "" for v2) -> path of hero's cgroup
    for line in own_text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for name in parts[1].split(",") if parts[1] else [""]:
                own[name] = parts[2]
    found: dict[str, _Controller] = {}
    for line in mount_text.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        mount_root, point = fields[3], _unescape(fields[4])
        fstype, _source, options = (line.split(" - ", 1)[1].split() + ["", ""])[:3]
        if not _inside(point, str(root)):
            continue
        if fstype == "cgroup":
            names = [n for n in ("pids", "memory") if n in options.split(",")]
            version = 1
        elif fstype == "cgroup2":
            names, version = ["pids", "memory"], 2
        else:
            continue
        for name in names:
            path = own.get(name if version == 1 else "")
            if path is None or name in found and found[name].version == 1:
                continue  # a v1 hierarchy of the controller wins: v2 cannot have it too
            if not _inside(path, mount_root):
                continue  # hero's cgroup is not under what is mounted here
            rel = path[len(mount_root.rstrip("/")) :].lstrip("/")
            parent = Path(point, rel) if rel else Path(point)
            if version == 2 and not _v2_enabled(parent, name):
                continue
            found[name] = _Controller(name, parent, version)
    return [found[n] for n in ("pids", "memory") if n in found]


def _read(path: Path) -> str:
    """A cgroup file's text. Plain os calls, not pathlib's: a command pays for each."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = b""
        while chunk := os.read(fd, 65536):
            data += chunk
    finally:
        os.close(fd)
    return data.decode("ascii", errors="replace")


def _write(path: Path, text: str) -> None:
    """Write ``text`` to a cgroup file, in one write (the kernel acts on each write)."""
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode("ascii"))
    finally:
        os.close(fd)


def _v2_enabled(parent: Path, name: str) -> bool:
    """Whether ``name`` is enabled for the children of ``parent`` (cgroup v2); where it is
    not, hero cannot enable it: its own cgroup has processes (hero's own)."""
    try:
        enabled = (parent / "cgroup.subtree_control").read_text(encoding="ascii").split()
    except OSError:
        return False
    return name in enabled


def _unescape(path: str) -> str:
    """A mountinfo path field: spaces and such are written as octal escapes."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


def _inside(path: str, root: str) -> bool:
    return root == "/" or path == root or path.startswith(root.rstrip("/") + "/")


def _works(controller: _Controller) -> bool:
    """Whether a command's cgroup can be made, limited and removed in ``controller``."""
    probe = controller.parent / f"{_own_prefix()}probe"
    try:
        probe.mkdir()
    except OSError:
        return False
    try:
        for name, value in controller.limit_files(Limits())[:1]:
            _write(probe / name, value)
        return (probe / "cgroup.procs").is_file()
    except OSError:
        return False
    finally:
        _remove(probe, _END_WAIT_S)


def _clean_stale(parent: Path) -> None:
    """Remove the commands' cgroups that a hero process now gone left in ``parent``
    (killing what is left in them)."""
    try:
        names = os.listdir(parent)
    except OSError:
        return
    pidns = _pid_namespace()
    for name in names:
        match = _CGROUP_NAME_RE.match(name)
        if match is None or int(match.group(1)) != pidns or _alive(int(match.group(2))):
            continue
        _remove(parent / name, _END_WAIT_S)


@functools.cache
def _pid_namespace() -> int:
    """The inode of this process's PID namespace (0 where /proc does not say)."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def _own_prefix() -> str:
    """The start of the names of this process's commands' cgroups (its pid: after a fork,
    the child's own)."""
    return f"hero-{_pid_namespace()}-{os.getpid()}-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _procs(cgroup: Path) -> list[int]:
    try:
        text = _read(cgroup / "cgroup.procs")
    except OSError:
        return []
    return [int(p) for p in text.split() if p.isdigit()]


def _remove(cgroup: Path, timeout_s: float) -> bool:
    """Remove ``cgroup``, killing what is still in it first; True once it is gone."""
    deadline = time.monotonic() + timeout_s
    delay = 0.0005
    while True:
        try:
            os.rmdir(cgroup)
            return True
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno != errno.EBUSY:
                return False
        try:
            _write(cgroup / "cgroup.kill", "1")  # cgroup v2, Linux 5.14: all at once
        except OSError:
            for pid in _procs(cgroup):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


# ----------------------------------------------------------------------------- confine


@dataclass
class Confinement:
    """The limits put on one command (``confine``): its cgroups, until ``end``."""

    limits: Limits
    cgroups: list[tuple[_Controller, Path]] = field(default_factory=list)
    hit: set[str] = field(default_factory=set)
    """After ``end``: the limits (``Limits`` field names: ``processes``, ``memory_mb``) the
    cgroups' counters say were hit. An rlimit keeps no count: its hit is read from the exit
    code and the output (``explain``)."""
    ended: bool = False

    def end(self) -> None:
        """Read the counters of the command's cgroups into ``hit``, kill what is left in
        them and remove them. Call it once the command's namespace is gone; calls after the
        first do nothing. A cgroup that cannot be removed is left to the next hero process
        (``_clean_stale``)."""
        if self.ended:
            return
        self.ended = True
        for controller, cgroup in self.cgroups:
            if controller.hits(cgroup) > 0:
                self.hit.add(_FIELD[controller.name])
            _remove(cgroup, _END_WAIT_S)

    def note(self, exit_code: int, output: str) -> str | None:
        """The sentence to add to the command's result when it hit a limit (``explain``)."""
        counted = {_FIELD[controller.name] for controller, _ in self.cgroups}
        return explain(self.limits, exit_code, output, hit=self.hit, counted=counted)


def confine(limits: Limits, pid: int, *, cgroups: bool = True) -> Confinement:
    """Put ``limits`` on process ``pid`` and everything it will start: the sandbox's init,
    before it has started the command (bwrap's ``--block-fd``).

    Its rlimits are set with ``prlimit(2)``; where a pids or memory cgroup controller is
    writable (``cgroups``, probed once), it is moved into a new cgroup per controller, with
    the limit, and the rlimit that would stand in (RLIMIT_NPROC, RLIMIT_DATA) is not set.
    A hard limit is never raised above the process's own. Raises ProcessLookupError when
    the process is gone (its sandbox failed to start), OSError when its rlimits may not be
    set; call ``end`` on the result once the command's namespace is gone."""
    confinement = Confinement(limits)
    probe = _probe() if cgroups else _Probe((), os.geteuid() == 0)
    try:
        for controller in probe.controllers:
            cgroup = _make(controller, limits)
            if cgroup is None:
                continue  # the rlimit stands in (below)
            confinement.cgroups.append((controller, cgroup))
            try:
                _write(cgroup / "cgroup.procs", str(pid))
            except ProcessLookupError:
                raise
            except OSError:  # may not move it here after all: the rlimit stands in
                confinement.cgroups.pop()
                _remove(cgroup, _END_WAIT_S)
        in_cgroup = {c.name for c, _ in confinement.cgroups}
        for res, soft, hard in _rlimits(limits, in_cgroup):
            try:
                _prlimit(pid, res, soft, hard)
            except ProcessLookupError:
                raise
            except OSError as exc:
                raise OSError(
                    exc.errno,
                    f"hero cannot put the sandbox's limits on the command (prlimit of "
                    f"process {pid}): {exc.strerror}",
                ) from exc
    except BaseException:
        confinement.end()
        raise
    return confinement


def _make(controller: _Controller, limits: Limits) -> Path | None:
    """A new cgroup for one command in ``controller``, limited; None if it cannot be made."""
    cgroup = controller.parent / f"{_own_prefix()}{next(_serial)}"
    try:
        cgroup.mkdir()
    except OSError:
        return None
    for i, (name, value) in enumerate(controller.limit_files(limits)):
        try:
            _write(cgroup / name, value)
        except OSError:
            if i == 0:  # the limit itself: without it the cgroup is no use
                _remove(cgroup, _END_WAIT_S)
                return None
    return cgroup


def _rlimits(limits: Limits, in_cgroup: set[str]) -> list[tuple[int, int, int]]:
    """(resource, soft, hard) for each rlimit a confined command gets."""
    found = [
        (resource.RLIMIT_FSIZE, limits.file_size_mb * _MB, limits.file_size_mb * _MB),
        (resource.RLIMIT_CPU, limits.cpu_s, limits.cpu_s + CPU_GRACE_S),
        (resource.RLIMIT_NOFILE, limits.open_files, limits.open_files),
        (resource.RLIMIT_CORE, 0, 0),
    ]
    if "pids" not in in_cgroup:
        found.append((resource.RLIMIT_NPROC, limits.processes, limits.processes))
    if "memory" not in in_cgroup:
        found.append((resource.RLIMIT_DATA, limits.memory_mb * _MB, limits.memory_mb * _MB))
    return found


def _prlimit(pid: int, res: int, soft: int, hard: int) -> None:
    """Lower ``pid``'s limit to (soft, hard), never above its own hard limit; the soft
    open-files limit is only lowered (a program raises it to the hard one if it needs)."""
    old_soft, old_hard = resource.prlimit(pid, res)
    infinity = resource.RLIM_INFINITY
    if old_hard != infinity:
        hard = min(hard, old_hard)
    if res == resource.RLIMIT_NOFILE and old_soft != infinity:
        soft = min(soft, old_soft)
    resource.prlimit(pid, res, (min(soft, hard), hard))


def mechanism(*, cgroups: bool = True) -> str:
    """How the limits are enforced on this machine, in one line (for the README and for
    hero to log once): which cgroup controllers, which rlimits."""
    probe = _probe() if cgroups else _Probe((), os.geteuid() == 0)
    parts = [f"{_label(c.name)}: cgroup v{c.version} ({c.parent})" for c in probe.controllers]
    if probe.controller("pids") is None:
        if probe.root and drops_uid(cgroups=cgroups):
            parts.append(
                f"processes: RLIMIT_NPROC, commands run as an unprivileged uid "
                f"({UID_BASE}-{UID_BASE + UID_SPAN - 1}: hero runs as root, which RLIMIT_NPROC "
                "does not hold, and no pids cgroup is writable)"
            )
        elif probe.root:
            parts.append(
                "processes: NOT limited (hero runs as root, which RLIMIT_NPROC does not "
                "hold, no pids cgroup is writable, and setpriv is not installed)"
            )
        else:
            parts.append("processes: RLIMIT_NPROC")
    if probe.controller("memory") is None:
        parts.append("memory: RLIMIT_DATA (per process)")
    parts.append("file size, CPU time, open files: rlimits; /tmp, /var/tmp, /dev/shm: sized tmpfs")
    return "; ".join(parts)


def _label(controller: str) -> str:
    return "processes" if controller == "pids" else controller


#: What ``holds`` names: how the processes and memory of a command are bounded here.
HOLDS_CGROUP = "cgroup v{version} pids+memory"
HOLDS_UID = "unprivileged uid + rlimits"
HOLDS_RLIMITS = "rlimits only"
HOLDS_WEAK = "rlimits only, and weak as root (processes NOT limited)"


def holds(*, cgroups: bool = True) -> str:
    """The mechanism that bounds a command's processes (and memory), in a few words, for
    ``hero doctor``: ``cgroup v2 pids+memory`` or ``cgroup v1 pids+memory`` (or only one of
    them, the other by rlimit), ``unprivileged uid + rlimits`` (hero runs as root and no
    pids cgroup is writable: commands run as a uid of their own, which RLIMIT_NPROC holds),
    ``rlimits only`` (hero is not root), or the weak case: root with neither."""
    probe = _probe() if cgroups else _Probe((), os.geteuid() == 0)
    found = sorted({c.version for c in probe.controllers})
    names = "+".join(c.name for c in probe.controllers)
    if probe.controller("pids") is not None:
        version = "/".join(f"v{v}" for v in found)
        rest = "" if probe.controller("memory") else " (memory: RLIMIT_DATA per process)"
        return f"cgroup {version} {names}{rest}"
    if not probe.root:
        return HOLDS_RLIMITS
    if drops_uid(cgroups=cgroups):
        return HOLDS_UID
    return HOLDS_WEAK


# ----------------------------------------------------------------------------- uid

#: The uids (and gids, the same number) hero runs a sandbox's commands as, when it runs as
#: root and no pids cgroup is writable (``sandbox_uid``): no account has them. A story's
#: repository always gets the same one (from its path), so that two stories running at once
#: almost never share one: RLIMIT_NPROC counts all the processes of a uid.
UID_BASE = 1_500_000_000
UID_SPAN = 1_000_000
#: The program that drops to that uid inside the sandbox (util-linux): the sandbox's init
#: keeps CAP_SETUID and CAP_SETGID for it, the command keeps no capability at all.
SETPRIV = "setpriv"


def drops_uid(*, cgroups: bool = True) -> bool:
    """Whether sandboxed commands run as an unprivileged uid here: hero runs as root (which
    RLIMIT_NPROC does not hold), no pids cgroup is writable (``cgroups``: whether hero may
    use them, the ``sandbox_cgroups`` setting), and setpriv is installed."""
    if os.geteuid() != 0:
        return False
    probe = _probe() if cgroups else _Probe((), True)
    return probe.controller("pids") is None and _setpriv() is not None


@functools.cache
def _setpriv() -> str | None:
    return shutil.which(SETPRIV, path="/usr/bin:/bin:/usr/sbin:/sbin")


def sandbox_uid(worktree: str | os.PathLike[str], *, cgroups: bool = True) -> int | None:
    """The uid a sandbox's commands for ``worktree`` run as (``drops_uid``), else None."""
    if not drops_uid(cgroups=cgroups):
        return None
    key = os.path.realpath(worktree).encode("utf-8", "surrogateescape")
    return UID_BASE + zlib.crc32(key) % UID_SPAN


# ----------------------------------------------------------------------------- explain

#: What a program prints when it could not start a process or thread (bash, dash, Python,
#: Go, the JVM, glibc's pthread_create).
_PROCESS_SIGNS = (
    "fork: Resource temporarily unavailable",
    "fork: retry: Resource temporarily unavailable",
    "Cannot fork",
    "can't fork",
    "BlockingIOError: [Errno 11]",
    "failed to create new OS thread",
    "unable to create native thread",
    "Resource temporarily unavailable (os error 11)",
    "pthread_create failed",
)
_MEMORY_SIGNS = (
    "MemoryError",
    "Cannot allocate memory",
    "std::bad_alloc",
    "out of memory",
    "Out of memory",
    "memory allocation of",
)
_FILE_SIZE_SIGNS = ("File too large", "File size limit exceeded")
_CPU_SIGNS = ("CPU time limit exceeded",)
_SPACE_SIGNS = ("No space left on device",)
_FILES_SIGNS = ("Too many open files",)
#: How much of each end of a long output ``explain`` reads.
_SCAN_CHARS = 256 * 1024
#: Exit codes of a command ended by a limit's signal: 128 + SIGXCPU, 128 + SIGXFSZ.
_SIGXCPU_EXIT = 128 + signal.SIGXCPU
_SIGXFSZ_EXIT = 128 + signal.SIGXFSZ


def explain(
    limits: Limits,
    exit_code: int,
    output: str,
    *,
    hit: Iterable[str] = (),
    counted: Iterable[str] = (),
) -> str | None:
    """One line saying which of the sandbox's limits the command hit, naming the setting;
    None when nothing says it hit one.

    ``hit``: the limits (``Limits`` field names) a cgroup's counters say were hit
    (``Confinement.hit``), reported whatever the exit code; ``counted``: those a cgroup
    counted at all, whose hit is known from ``hit`` alone. The rest is read from a failed
    command's exit code (SIGXCPU, SIGXFSZ) and output ("No space left on device", "Cannot
    fork", "MemoryError", ...)."""
    hit, counted = set(hit), set(counted)
    if len(output) > 2 * _SCAN_CHARS:  # what a failing program says is near either end
        output = output[:_SCAN_CHARS] + "\n" + output[-_SCAN_CHARS:]
    notes: list[str] = []
    failed = exit_code != 0
    guess_processes = failed and "processes" not in counted
    if "processes" in hit or (guess_processes and _says(output, _PROCESS_SIGNS)):
        notes.append(
            f"the command hit the sandbox's limit of {limits.processes} processes and threads "
            f"({_where('processes')}): starting another one failed"
        )
    if "memory_mb" in hit:
        notes.append(
            f"the command ran out of memory: its processes together may use "
            f"{limits.memory_mb} MB ({_where('memory_mb')}), and one was killed"
        )
    elif failed and "memory_mb" not in counted and _says(output, _MEMORY_SIGNS):
        notes.append(
            f"the command may have hit the sandbox's memory limit: {limits.memory_mb} MB "
            f"({_where('memory_mb')})"
        )
    if failed and (exit_code == _SIGXCPU_EXIT or _says(output, _CPU_SIGNS)):
        notes.append(
            f"a process of the command used up its {limits.cpu_s} CPU seconds "
            f"({_where('cpu_s')}) and was stopped"
        )
    if failed and (exit_code == _SIGXFSZ_EXIT or _says(output, _FILE_SIZE_SIGNS)):
        notes.append(
            f"the command tried to write a file larger than the sandbox's limit of "
            f"{limits.file_size_mb} MB ({_where('file_size_mb')})"
        )
    if failed and _says(output, _SPACE_SIGNS):
        notes.append(
            f"if it was writing under {', '.join(TMPFS_DIRS)}: each holds at most "
            f"{limits.tmpfs_mb} MB in the sandbox ({_where('tmpfs_mb')}); write large files "
            "in the worktree instead"
        )
    if failed and _says(output, _FILES_SIGNS):
        notes.append(
            f"a process of the command may have hit the sandbox's limit of {limits.open_files} "
            f"open files ({_where('open_files')})"
        )
    if not notes:
        return None
    text = "; ".join(notes)
    return text[0].upper() + text[1:] + "."


def _where(name: str) -> str:
    return f"{setting(name)} in {SETTINGS_FILE}"


def _says(output: str, signs: Sequence[str]) -> bool:
    return any(sign in output for sign in signs)
