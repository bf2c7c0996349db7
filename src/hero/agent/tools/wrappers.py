"""Wrappers: commands that run another command (``sudo``, ``timeout``, ``nice``, ``flock``,
``env``, ``xargs``, ``find -exec``, ``su``, ``watch``, ``bwrap`` and the others of ``_WRAPPERS``
and ``_HANDLERS``), git's aliases and the commands of ``git rebase --exec``, ``git submodule
foreach`` and ``git bisect run``. :func:`command_parts` gives every command a command line would
run: its simple commands and, after each wrapper, the command it wraps, its options read as the
wrapper reads them.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

from hero.agent.tools.command_args import (
    FILLED,
    UncheckedCommand,
    after_assignments,
    check_located,
    filled_word,
    first_operand,
    inner_command,
    joined_words,
    literal_word,
    names_set,
    program,
    scan_options,
    string_commands,
    takes,
    text_commands,
)
from hero.agent.tools.shell_input import fed_commands, shell_commands, source_commands
from hero.agent.tools.shell_syntax import (
    MAX_NESTING,
    CommandSyntaxError,
    SimpleCommand,
    Word,
    parse_commands,
)

#: The words ``xargs`` (or ``parallel``) appends from its input.
_FROM_INPUT = Word(FILLED, "<input>", literal=False)
#: Bash's tables that make a name run something else: an alias, a remembered program path.
_NAME_TABLES = ("BASH_ALIASES", "BASH_CMDS")


def command_parts(command: str) -> tuple[SimpleCommand, ...]:
    """Every command ``command`` would run: its simple commands and, after each wrapper,
    the command it wraps (``sudo rm x`` is ``sudo rm x`` and ``rm x``). Raises
    CommandSyntaxError when it cannot be parsed, UncheckedCommand when it runs commands that
    cannot be found on the command line."""
    parts, unchecked = find_parts(command)
    if unchecked:
        raise unchecked[0]
    return tuple(parts)


def find_parts(command: str) -> tuple[list[SimpleCommand], list[UncheckedCommand]]:
    """The parts ``command_parts`` finds, and why some could not be followed (the parts
    found up to there are kept, so a deny rule can still name one)."""
    parts: list[SimpleCommand] = []
    unchecked: list[UncheckedCommand] = []
    if any(name in command for name in _NAME_TABLES):
        unchecked.append(UncheckedCommand(_TABLES_REASON))
    for simple in parse_commands(command):
        try:
            for part in _with_wrapped(simple, 0):
                parts.append(part)
        except UncheckedCommand as exc:
            unchecked.append(exc)
    return parts, unchecked


_TABLES_REASON = (
    "`BASH_ALIASES` and `BASH_CMDS` make a name run another command (an alias, a remembered "
    "path), which the policy does not follow"
)


def _with_wrapped(cmd: SimpleCommand, depth: int) -> Iterator[SimpleCommand]:
    if depth > MAX_NESTING:
        raise CommandSyntaxError(f"wrappers nested more than {MAX_NESTING} levels deep")
    if any(name in w.value for w in cmd.words for name in _NAME_TABLES):
        raise UncheckedCommand(_TABLES_REASON)
    yield cmd
    for inner in _wrapped(cmd):
        yield from _with_wrapped(inner, depth + 1)


@dataclass(frozen=True)
class _Wrapper:
    """How a wrapper's own options look, so the command it runs can be found."""

    short: str = ""
    """Option letters that take a value (``-n 5`` or ``-n5``)."""
    long: Mapping[str, int] = field(default_factory=dict)
    """``--name`` options that take values (``--name v`` or ``--name=v``), and how many."""
    optional: str = ""
    """Option letters whose value is optional and attached (``xargs -i{}``)."""
    operands: int = 0
    """Operands between the options and the command (``timeout``'s duration)."""
    arch: bool = False
    """A first word that is no option is an operand before the options (``setarch``)."""
    priority: bool = False
    """A number may stand before the command (``chrt``'s priority)."""
    assignments: bool = False
    """Whether ``VAR=value`` words may stand before the command (``sudo``)."""
    strings: frozenset[str] = frozenset()
    """Options whose value is a command string for ``sh -c`` (``su -c``); ``flock`` and
    ``sg`` take it where the command would stand."""
    joined: bool = False
    """The command's words are joined with blanks and run by ``sh -c`` (``watch``)."""
    direct: frozenset[str] = frozenset()
    """Options with which a ``joined`` wrapper runs the words as they are (``watch -x``)."""
    shell: bool = False
    """With no command it runs a shell, which reads commands from its standard input."""
    shell_options: frozenset[str] = frozenset()
    """Options with which it runs such a shell when no command is given (``sudo -s``)."""
    no_command: frozenset[str] = frozenset()
    """Options with which it runs no command (``chrt -p PID``)."""
    hidden: frozenset[str] = frozenset()
    """Options with which it reads its command from elsewhere (``bwrap --args FD``)."""
    permute: bool = False
    """Options may follow its operands, which are data, not a command (``script FILE``)."""


_SUDO_LONG = takes(
    *("--user", "--group", "--close-from", "--chdir", "--host", "--prompt", "--role", "--type"),
    *("--other-user", "--command-timeout", "--chroot"),
)
_XARGS_LONG = {
    **takes("--arg-file", "--delimiter", "--max-args", "--max-procs", "--max-chars"),
    **takes("--process-slot-var"),
    **takes("--replace", "--eof", "--max-lines", n=0),
}
_SU_LONG = takes(
    "--whitelist-environment", "--group", "--supp-group", "--shell", "--command"
) | takes("--session-command")
_STRACE_LONG = takes(
    *("--output", "--trace", "--signal", "--status", "--attach", "--user", "--env"),
    *("--detach-on", "--interruptible", "--trace-path", "--columns", "--abbrev", "--verbose"),
    *("--raw", "--read", "--write", "--kvm", "--string-limit", "--const-print-style"),
    *("--summary-syscall-overhead", "--summary-sort-by", "--summary-columns", "--inject"),
    *("--fault", "--decode-pids"),
)
_SYSTEMD_RUN_LONG = takes(
    *("--unit", "--property", "--host", "--machine", "--description", "--slice"),
    *("--service-type", "--uid", "--gid", "--nice", "--working-directory", "--setenv"),
    *("--path-property", "--socket-property", "--timer-property", "--on-active", "--on-boot"),
    *("--on-startup", "--on-unit-active", "--on-unit-inactive", "--on-calendar"),
    *("--capsule", "--expand-environment", "--background", "--json"),
)
_BWRAP_LONG = {
    **takes(
        *("--args", "--argv0", "--level-prefix", "--userns", "--userns2", "--pidns", "--uid"),
        *("--gid", "--hostname", "--chdir", "--unsetenv", "--lock-file", "--sync-fd"),
        *("--remount-ro", "--exec-label", "--file-label", "--proc", "--dev", "--tmpfs"),
        *("--mqueue", "--dir", "--seccomp", "--add-seccomp-fd", "--block-fd", "--info-fd"),
        *("--userns-block-fd", "--json-status-fd", "--cap-add", "--cap-drop", "--perms"),
        *("--size", "--overlay-src", "--tmp-overlay", "--ro-overlay"),
    ),
    **takes(
        *("--bind", "--bind-try", "--dev-bind", "--dev-bind-try", "--ro-bind", "--ro-bind-try"),
        *("--bind-fd", "--ro-bind-fd", "--file", "--bind-data", "--ro-bind-data", "--symlink"),
        *("--chmod", "--setenv"),
        n=2,
    ),
    **takes("--overlay", n=3),
}
_PARALLEL_LONG = {
    **takes(
        *("--arg-file", "--arg-sep", "--arg-file-sep", "--colsep", "--delimiter", "--jobs"),
        *("--max-procs", "--max-args", "--max-replace-args", "--max-chars", "--sshlogin"),
        *("--sshloginfile", "--slf", "--joblog", "--results", "--res", "--tmpdir"),
        *("--tempdir", "--timeout", "--delay", "--retries", "--halt", "--halt-on-error"),
        *("--load", "--memfree", "--memsuspend", "--nice", "--workdir", "--wd", "--basefile"),
        *("--bf", "--transferfile", "--tf", "--return", "--env", "--tag-string", "--tagstring"),
        *("--block", "--block-size", "--recstart", "--recend", "--header", "--termseq"),
        *("--sqlmaster", "--sqlworker", "--sqlandworker", "--ssh", "--sshdelay", "--rpl"),
        *("--parens", "--limit", "--semaphorename", "--id", "--template", "--trc", "--trim"),
        *("--group-by", "--compress-program", "--decompress-program", "--profile"),
        *("--minversion", "--seqreplace", "--process-slot-var", "--ctagstring", "--shebang"),
    ),
    **takes("--replace", "--eof", "--max-lines", n=0),
}
_SHELL_OPTION = names_set("-c", "--command")

_WRAPPERS: dict[str, _Wrapper] = {
    "builtin": _Wrapper(),
    "busybox": _Wrapper(),
    "nohup": _Wrapper(),
    "setsid": _Wrapper(),
    "exec": _Wrapper("a"),
    "time": _Wrapper("fo", takes("--format", "--output")),
    "nice": _Wrapper("n", takes("--adjustment")),
    "timeout": _Wrapper("sk", takes("--signal", "--kill-after"), operands=1),
    "stdbuf": _Wrapper("ioe", takes("--input", "--output", "--error")),
    "sudo": _Wrapper(
        "ugCDprtUTR",
        _SUDO_LONG,
        assignments=True,
        shell_options=names_set("-s", "--shell", "-i", "--login"),
        no_command=names_set("-e", "--edit", "-l", "--list", "-v", "--validate", "-V", "--version"),
    ),
    "doas": _Wrapper(
        "auC", assignments=True, shell_options=names_set("-s"), no_command=names_set("-C")
    ),
    "pkexec": _Wrapper(long=takes("--user"), shell=True),
    "ionice": _Wrapper(
        "cnpPu",
        takes("--class", "--classdata", "--pid", "--pgid", "--uid"),
        no_command=names_set("-p", "-P", "-u", "--pid", "--pgid", "--uid"),
    ),
    "flock": _Wrapper(
        "wE",
        takes("--timeout", "--wait", "--conflict-exit-code"),
        operands=1,
        strings=_SHELL_OPTION,
    ),
    "setpriv": _Wrapper(
        long=takes(
            *("--ruid", "--euid", "--rgid", "--egid", "--reuid", "--regid", "--groups"),
            *("--inh-caps", "--ambient-caps", "--bounding-set", "--securebits", "--pdeathsig"),
            *("--selinux-label", "--apparmor-profile", "--landlock-access", "--landlock-rule"),
            *("--seccomp-filter",),
        ),
        no_command=names_set("-d", "--dump"),
    ),
    "chrt": _Wrapper(
        "TPD",
        takes("--sched-runtime", "--sched-period", "--sched-deadline"),
        priority=True,
        no_command=names_set("-p", "--pid", "-m", "--max"),
    ),
    "taskset": _Wrapper(operands=1, no_command=names_set("-p", "--pid")),
    "prlimit": _Wrapper("po", takes("--pid", "--output"), no_command=names_set("-p", "--pid")),
    "unshare": _Wrapper(
        "RwSG",
        takes(
            *("--map-user", "--map-group", "--map-users", "--map-groups", "--propagation"),
            *("--setgroups", "--root", "--wd", "--setuid", "--setgid", "--monotonic"),
            *("--boottime", "--load-interp"),
        ),
        shell=True,
    ),
    "nsenter": _Wrapper("tSGW", takes("--target", "--setuid", "--setgid", "--wdns"), shell=True),
    "chroot": _Wrapper(long=takes("--groups", "--userspec"), operands=1, shell=True),
    "script": _Wrapper(
        "IOBTmEoc",
        takes(
            *("--log-in", "--log-out", "--log-io", "--log-timing", "--logging-format"),
            *("--echo", "--output-limit", "--command"),
        ),
        strings=_SHELL_OPTION,
        shell=True,
        permute=True,
    ),
    "sg": _Wrapper(operands=1, strings=names_set("-c"), joined=True, shell=True),
    "newgrp": _Wrapper(shell=True, permute=True),
    "watch": _Wrapper(
        "nq", takes("--interval", "--equexit"), joined=True, direct=names_set("-x", "--exec")
    ),
    "strace": _Wrapper("abeEIoOpPsSuUX", _STRACE_LONG),
    "ltrace": _Wrapper(
        "aAeFlnopsuxwD",
        takes("--align", "--config", "--indent", "--library", "--output", "--where"),
    ),
    "valgrind": _Wrapper(),
    "catchsegv": _Wrapper(),
    "eatmydata": _Wrapper(),
    "unbuffer": _Wrapper(),
    "fakeroot": _Wrapper("lsib", takes("--lib", "--faked"), shell=True),
    "systemd-run": _Wrapper("upHME", _SYSTEMD_RUN_LONG, shell_options=names_set("-S", "--shell")),
    "dbus-launch": _Wrapper(long=takes("--autolaunch", "--config-file")),
    "firejail": _Wrapper(shell=True),
    "bwrap": _Wrapper(long=_BWRAP_LONG, hidden=names_set("--args")),
    "setarch": _Wrapper(arch=True, shell=True, no_command=names_set("--list")),
    **dict.fromkeys(("linux32", "linux64", "i386", "x86_64", "uname26"), _Wrapper(shell=True)),
    "chpst": _Wrapper("uUbe/nlLmdopfct"),
    "proot": _Wrapper(
        "rbmqwkivRS",
        takes("--rootfs", "--bind", "--mount", "--qemu", "--pwd", "--cwd", "--kernel-release")
        | takes("--change-id", "--verbose"),
        shell=True,
    ),
    "torsocks": _Wrapper(
        "upaP", takes("--user", "--pass", "--address", "--port"), shell_options=names_set("--shell")
    ),
}
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "rbash", "posh", "yash"})
_SU = _Wrapper("wgGsc", _SU_LONG, strings=names_set("-c", "--command", "--session-command"))
_RUNUSER = replace(_SU, short="wgGscu", long={**_SU_LONG, **takes("--user")})
_XARGS = _Wrapper("adEILnPs", _XARGS_LONG, optional="iel")
_PARALLEL = _Wrapper("aCdEIjJLnNPSs", _PARALLEL_LONG, optional="iel")


def _wrapped(cmd: SimpleCommand) -> list[SimpleCommand]:
    """The commands ``cmd`` runs when it is a wrapper, else nothing."""
    name = program(cmd.words[0].value)
    args = cmd.words[1:]
    wrapper = _WRAPPERS.get(name)
    if wrapper is not None:
        if name == "sg" and args and args[0].value == "-":  # sg [-] GROUP: a login shell
            args = args[1:]
        return _wrapper(cmd, name, wrapper, args)
    if name in _SHELLS:
        return shell_commands(cmd, args)
    if name.startswith("git-") and len(name) > 4:  # git-rm, git-core's programs: `git rm`
        return _git((literal_word(name[4:]), *args))
    handler = _HANDLERS.get(name)
    return handler(cmd, args) if handler is not None else []


def _wrapper(
    cmd: SimpleCommand, name: str, w: _Wrapper, args: Sequence[Word]
) -> list[SimpleCommand]:
    start = 1 if w.arch and args and not args[0].value.startswith("-") else 0
    opts = scan_options(args, w.short, w.long, optional=w.optional, start=start, permute=w.permute)
    if opts.has(w.no_command):
        return []
    for option, _ in opts.found:
        if option in w.hidden:
            raise UncheckedCommand(f"`{name} {option}` reads the command it runs from elsewhere")
    string = opts.value(w.strings)
    if string is not None:
        return string_commands(name, string)
    i = len(args) if w.permute else opts.end + w.operands
    if w.priority and i < len(args) and args[i].value.isdigit():
        i += 1
    if w.assignments:
        i = after_assignments(args, i)
    check_located(name, args, i)
    if i < len(args) and args[i].value in w.strings:  # flock FILE -c STRING, sg GROUP -c ...
        return string_commands(name, args[i + 1]) if i + 1 < len(args) else []
    if i >= len(args):
        if w.shell or opts.has(w.shell_options):  # the shell it runs reads stdin
            return fed_commands(cmd, f"`{name}` (with no command it runs a shell)")
        return []
    if w.joined and not opts.has(w.direct):
        return string_commands(name, joined_words(args[i:]))
    return [inner_command(cmd, args[i:])]


def _env(cmd: SimpleCommand, args: Sequence[Word]) -> list[SimpleCommand]:
    i = first_operand(args, "uCSPa", takes("--unset", "--chdir", "--split-string", "--argv0"))
    # -S STRING / --split-string=STRING: the string is split into more arguments for env
    k = 0
    while k < i:
        v = args[k].value
        split: str | None = None
        after = k + 1
        if v.startswith("--split-string"):
            if "=" in v:
                split = v.partition("=")[2]
            else:
                split, after = _value_after(args, k), k + 2
        elif v.startswith("-") and not v.startswith("--"):
            for at, letter in enumerate(v[1:], 1):
                if letter in "uCSPa":
                    if letter == "S":
                        split = v[at + 1 :]
                        if not split:
                            split, after = _value_after(args, k), k + 2
                    break
        if split is not None:
            if FILLED in split:
                raise UncheckedCommand("`env -S` would split a string filled in at run time")
            try:
                words = [literal_word(w) for w in shlex.split(split)]
            except ValueError as exc:
                raise CommandSyntaxError(f"env -S: {exc}") from None
            return [inner_command(cmd, (literal_word("env"), *words, *args[after:]))]
        k += 1
    while i < len(args) and args[i].value == "-":  # "env -" is "env -i"
        i += 1
    i = after_assignments(args, i)
    check_located("env", args, i)
    return [inner_command(cmd, args[i:])] if i < len(args) else []


def _value_after(args: Sequence[Word], k: int) -> str:
    return args[k + 1].value if k + 1 < len(args) else ""


def _command(cmd: SimpleCommand, args: Sequence[Word]) -> list[SimpleCommand]:
    opts = scan_options(args)
    if any(name in ("-v", "-V") for name, _ in opts.found):
        return []  # command -v NAME describes NAME, it does not run it
    check_located("command", args, opts.end)
    return [inner_command(cmd, args[opts.end :])] if opts.end < len(args) else []


def _eval(cmd: SimpleCommand, args: Sequence[Word]) -> list[SimpleCommand]:
    return string_commands("eval", joined_words(args))


def _find_exec(cmd: SimpleCommand, args: Sequence[Word]) -> list[SimpleCommand]:
    """``find ... -exec CMD {} ;`` (and -execdir, -ok, -okdir): the CMDs, ``{}`` filled in."""
    out: list[SimpleCommand] = []
    i = 0
    while i < len(args):
        if args[i].value in ("-exec", "-execdir", "-ok", "-okdir"):
            j = i + 1
            while j < len(args) and args[j].value not in (";", "+"):
                j += 1
            if j > i + 1:
                out.append(SimpleCommand(tuple(filled_word(w, "{}") for w in args[i + 1 : j])))
            i = j
        i += 1
    return out


def _xargs(cmd: SimpleCommand, args: Sequence[Word]) -> list[SimpleCommand]:
    """``xargs CMD``: CMD with the words of its input appended, or put where ``-I``'s string
    stands."""
    opts = scan_options(args, _XARGS.short, _XARGS.long, optional=_XARGS.optional)
    check_located("xargs", args, opts.end)
    placeholder: str | None = None
    for option, value in opts.found:
        if option == "-I" and value is not None:
            placeholder = value.value
        elif option in ("-i", "--replace"):
            placeholder = value.value if value is not None else "{}"
    words = list(args[opts.end :]) or [literal_word("echo")]
    if placeholder:
        return [SimpleCommand(tuple(filled_word(w, placeholder) for w in words))]
    return [SimpleCommand((*words, _FROM_INPUT))]


#: The replacement strings of GNU parallel (``{}``, ``{.}``, ``{/}``, ``{2}``, ``{= perl =}``).
_PARALLEL_PLACEHOLDER = re.compile(r"\{=.*?=\}|\{[^{}\s]*\}")


def _parallel(cmd: SimpleCommand, args: Sequence[Word]) -> list[SimpleCommand]:
    """``parallel CMD ::: ARGS``: CMD joined into a command line for a shell, each argument
    (quoted, as parallel does) where a replacement string stands or appended. Without CMD
    each argument is a command line itself."""
    opts = scan_options(args, _PARALLEL.short, _PARALLEL.long, optional=_PARALLEL.optional)
    check_located("parallel", args, opts.end)
    arg_sep = opts.value(("--arg-sep",))
    file_sep = opts.value(("--arg-file-sep",))
    seps = {arg_sep.value if arg_sep else ":::", file_sep.value if file_sep else "::::"}
    seps |= {s + "+" for s in seps}
    rest = args[opts.end :]
    k = next((n for n, w in enumerate(rest) if w.value in seps), len(rest))
    template, inputs = rest[:k], rest[k:]
    if not template:
        literal_only = (
            inputs
            and inputs[0].value == (arg_sep.value if arg_sep else ":::")
            and not any(w.value in seps for w in inputs[1:])
            and not opts.has(names_set("-a", "--arg-file"))
        )
        if not literal_only:
            raise UncheckedCommand(
                "`parallel` without a command runs the command lines of its input, which the "
                "policy cannot read"
            )
        return [part for w in inputs[1:] for part in string_commands("parallel", w)]
    line = _PARALLEL_PLACEHOLDER.sub(FILLED, " ".join(w.value for w in template))
    custom = opts.value(("-I", "-i", "--replace"))
    if custom is not None:
        line = line.replace(custom.value, FILLED)
    if FILLED not in line:
        line += " " + FILLED
    return text_commands(line)


def _su(cmd: SimpleCommand, args: Sequence[Word]) -> list[SimpleCommand]:
    """``su [-] [-c STRING] [-s SHELL] [USER [ARGS]]``: SHELL (``sh``) with ``-c STRING`` and
    ARGS; ``runuser -u USER [--] CMD``: CMD itself."""
    name = program(cmd.words[0].value)
    w = _RUNUSER if name == "runuser" else _SU
    check_located(name, args, len(args))
    opts = scan_options([a for a in args if a.value != "-"], w.short, w.long, permute=True)
    shell = opts.value(("-s", "--shell")) or literal_word("sh")
    string = opts.value(w.strings)
    if string is not None:
        return [inner_command(cmd, (shell, literal_word("-c"), string, *opts.operands[1:]))]
    if name == "runuser" and opts.value(("-u", "--user")) is not None:
        return [inner_command(cmd, opts.operands or (shell,))]
    return [inner_command(cmd, (shell, *opts.operands[1:]))]


def _alias(cmd: SimpleCommand, args: Sequence[Word]) -> list[SimpleCommand]:
    # An alias makes a name run other words; following it would mean expanding aliases as
    # bash does (from the next line on, only when expand_aliases is on or in POSIX mode, as
    # `sh` is; a value ending in a blank expands the next word too), and checking the value
    # alone is not enough (`alias g=git` then `g rm x`). A one-shot command has no need for
    # an alias, so under a policy defining one is refused; listing them (`alias`) is not.
    if any("=" in a.value and not a.value.startswith("-") for a in args):
        raise UncheckedCommand(
            "`alias` would give other commands a name the policy does not follow; aliases "
            "cannot be defined while a command policy is set"
        )
    return []


def _hash(cmd: SimpleCommand, args: Sequence[Word]) -> list[SimpleCommand]:
    if scan_options(args, "p").has(names_set("-p")):  # hash -p /bin/rm ls: `ls` then runs /bin/rm
        raise UncheckedCommand(
            "`hash -p` would make a name run another program, which the policy does not follow"
        )
    return []


def _trap(cmd: SimpleCommand, args: Sequence[Word]) -> list[SimpleCommand]:
    """``trap STRING SIGNAL...``: STRING runs when the signal comes (EXIT: at the end)."""
    operands = args[first_operand(args) :]
    if len(operands) >= 2 and operands[0].value != "-":
        return string_commands("trap", operands[0])
    return []


#: git's global options (before the subcommand) that take a value as the next word.
GIT_VALUE_OPTIONS = frozenset(
    {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--config-env"}
)


def _git(args: Sequence[Word]) -> list[SimpleCommand]:
    """What git runs from its command line: aliases defined there (``-c alias.x=...``,
    ``git config alias.x ...``: the alias's command, checked when it is defined), and the
    commands of ``rebase --exec``, ``submodule foreach`` and ``bisect run``."""
    out: list[SimpleCommand] = []
    settings: list[Word] = []
    i = 0
    while i < len(args) and args[i].value.startswith("-") and args[i].value != "--":
        a = args[i].value
        if a == "-c" and i + 1 < len(args):
            settings.append(args[i + 1])
        elif a.startswith("--config-env"):
            env_setting = a.partition("=")[2] if "=" in a else _value_after(args, i)
            if env_setting.lower().startswith("alias."):
                raise UncheckedCommand("`git --config-env alias...` takes an alias from a variable")
        i += 2 if a in GIT_VALUE_OPTIONS else 1
    if i >= len(args):
        return out
    sub, rest = args[i].value, args[i + 1 :]
    for word in settings:
        key, _, value = word.value.partition("=")
        if key.lower().startswith("alias."):
            out += _git_alias(value, rest)
    if sub == "config":
        opts = scan_options(rest, "f", _GIT_CONFIG_LONG, permute=True)
        operands = [w.value for w in opts.operands]
        if operands[:1] == ["set"]:
            operands = operands[1:]
        if len(operands) >= 2 and operands[0].lower().startswith("alias."):
            out += _git_alias(operands[1], ())
    elif sub == "rebase":
        opts = scan_options(rest, "sXCx", _GIT_REBASE_LONG, permute=True)
        for option, command in opts.found:
            if option in ("-x", "--exec") and command is not None:
                out += string_commands("git rebase --exec", command)
    elif sub == "submodule":
        values = [w.value for w in rest]
        if "foreach" in values:
            after = rest[values.index("foreach") + 1 :]
            words = after[first_operand(after) :]
            if words:
                out += string_commands("git submodule foreach", joined_words(words))
    elif sub == "bisect" and rest[:1] and rest[0].value == "run" and rest[1:]:
        out.append(SimpleCommand(tuple(rest[1:])))
    return out


_GIT_CONFIG_LONG = takes("--file", "--blob", "--type", "--default", "--comment", "--value")
_GIT_REBASE_LONG = takes("--exec", "--onto", "--strategy", "--strategy-option", "--whitespace")


def _git_alias(value: str, tail: Sequence[Word]) -> list[SimpleCommand]:
    """What a git alias runs: ``!COMMAND`` a shell command, else git with its words."""
    if FILLED in value:
        raise UncheckedCommand("a git alias would be filled in at run time")
    if value.startswith("!"):
        return text_commands(value[1:])
    try:
        words = [literal_word(w) for w in shlex.split(value)]
    except ValueError as exc:
        raise CommandSyntaxError(f"git alias {value!r}: {exc}") from None
    return [SimpleCommand((literal_word("git"), *words, *tail))]


_HANDLERS: dict[str, Callable[[SimpleCommand, Sequence[Word]], list[SimpleCommand]]] = {
    "env": _env,
    "command": _command,
    "eval": _eval,
    "find": _find_exec,
    "xargs": _xargs,
    "parallel": _parallel,
    "su": _su,
    "runuser": _su,
    "alias": _alias,
    "hash": _hash,
    "trap": _trap,
    ".": source_commands,
    "source": source_commands,
    "git": lambda cmd, args: _git(args),
}
