"""End to end: the worker tries every known way around the command policy (wrappers,
builtins, aliases), each of which must still be refused.

`hero run` runs in-process against the scripted model over real HTTP, on a real git
repository in tmp_path, with ``deny_commands: [rm, "git rm"]``. In one turn the worker calls
the bash tool once per bypass form, each aimed at the tracked file ``tests/test_calc.py``:
git's dashed programs, a shell reading commands from a pipe, a here-document or a file,
``coproc``, an alias, and the wrapper programs (``ionice``, ``flock``, ``setpriv``, ``chrt``,
``taskset``, ``unshare``, ``su``, ``runuser``, ``script``, ``prlimit``, ``watch``, ``strace``,
``fakeroot``, ``parallel``, ``unbuffer`` and their cousins). Each tool result must name the
refusal (the rule and the part it caught, or why the command cannot be checked); one literal
piped into ``sh`` that the rules allow must run. Afterwards the file is still there, in the
worktree and on the story's branch, and the verifier's unittest run (which imports it)
passes.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
from conftest import git
from helpers import PY, SUB_IMPL, is_review, load_state, step_of, verdict, worker_round

from hero.cli import main
from hero.llm.scripted import Reply, ScriptedModel, ToolCall, call, calls, text

pytestmark = pytest.mark.slow  # end to end: every test here runs hero for real

VERIFY = [f"{PY} -m unittest -q", f"{PY} -c 'from calc import sub; assert sub(5, 3) == 2'"]

TARGET = "tests/test_calc.py"
RM = f"rm -f {TARGET}"
B64 = base64.b64encode(RM.encode()).decode()

#: The refusal of a part `rm -f tests/test_calc.py` that deny rule `rm` catches.
BY_RM = f"refused by deny_commands rule 'rm': `{RM}`"
UNCHECKED = "refused: "

#: (the worker's command, how its tool result must start or what it must say)
BYPASSES: list[tuple[str, str]] = [
    # git's dashed programs
    (f"/usr/lib/git-core/git-rm -q {TARGET}", "refused by deny_commands rule 'git rm': `/usr"),
    (f"git-rm -q {TARGET}", f"refused by deny_commands rule 'git rm': `git-rm -q {TARGET}`"),
    # a shell reading commands on its standard input
    (f"printf '{RM}' | sh", BY_RM),
    (f"echo {RM} | bash", BY_RM),
    (f"cat <<EOF | sh\n{RM}\nEOF", BY_RM),
    (f"printf '%s\\n' '{RM}' | sh -s", BY_RM),
    (f"base64 -d <<<{B64} | sh", "refused: `sh` would run the commands piped into it by `base64"),
    (f"printf '{RM}' > /tmp/cmds; sh < /tmp/cmds", "refused: `sh` would run the commands it reads"),
    ("bash -s", "refused: `bash` would run the commands on its standard input"),
    # coproc
    (f"bash -c 'coproc {RM}; wait'", BY_RM),
    (f"coproc NAME {{ {RM}; }}", BY_RM),
    # an alias
    (f"alias r='rm -f'\nr {TARGET}", "refused: `alias` would give other commands a name"),
    # wrappers that run their arguments as a command
    (f"ionice -c 3 {RM}", BY_RM),
    (f"flock /tmp/lock {RM}", BY_RM),
    (f"flock /tmp/lock -c '{RM}'", BY_RM),
    (f"setpriv --reuid=0 {RM}", BY_RM),
    (f"chrt -f 10 {RM}", BY_RM),
    (f"taskset -c 0 {RM}", BY_RM),
    (f"taskset 0x1 {RM}", BY_RM),
    (f"unshare -r {RM}", BY_RM),
    (f"su -c '{RM}' root", BY_RM),
    (f"runuser -u root -- {RM}", BY_RM),
    (f"runuser root -c '{RM}'", BY_RM),
    (f"script -q -c '{RM}' /dev/null", BY_RM),
    (f"prlimit --nofile=10 {RM}", BY_RM),
    (f"watch -n 1 {RM}", BY_RM),
    (f"strace -f -o /tmp/out {RM}", BY_RM),
    (f"fakeroot {RM}", BY_RM),
    (f"parallel rm -f ::: {TARGET}", "refused by deny_commands rule 'rm': `rm -f <input>`"),
    (f"unbuffer {RM}", BY_RM),
    # their cousins
    (f"stdbuf -oL {RM}", BY_RM),
    (f"chroot / {RM}", BY_RM),
    (f"nsenter -t 1 -m {RM}", BY_RM),
    (f"systemd-run --user {RM}", BY_RM),
    (f"busybox {RM}", BY_RM),
    (f"sg root -c '{RM}'", BY_RM),
    (f"setarch -R {RM}", BY_RM),
    (f"bwrap --bind / / --dev /dev {RM}", BY_RM),
    (f"trap '{RM}' EXIT", BY_RM),
    (f"echo '{RM}' | xargs -I{{}} sh -c '{{}}'", "refused: `sh` would take its options"),
    (
        f"git -c alias.r=rm r -q {TARGET}",
        f"refused by deny_commands rule 'git rm': `git rm -q {TARGET}`",
    ),
]
#: A literal the rules allow, piped into a shell: parsed through, and run.
ALLOWED = "printf 'ls tests\\n' | sh"


def worker(body: dict[str, Any]) -> Reply:
    if is_review(body):
        return verdict("APPROVED", "Good.")
    plan = [
        calls(
            *(ToolCall("bash", {"command": c}) for c, _ in BYPASSES),
            ToolCall("bash", {"command": ALLOWED}),
        ),
        call("write_file", path="calc/__init__.py", content=SUB_IMPL),
        call("bash", command="git add -A && git commit -q -m add-sub"),
        text("Done."),
    ]
    return plan[min(step_of(body), len(plan) - 1)]


def round_one_results(model: ScriptedModel) -> list[str]:
    """The tool results the worker saw in round 1, in order."""
    seen: list[str] = []
    for r in model.requests:
        if not is_review(r.body) and worker_round(r.body) == 1:
            seen = [str(m["content"]) for m in r.body["messages"] if m.get("role") == "tool"]
    return seen


def test_every_bypass_form_is_refused_and_the_file_survives(
    scripted, make_home, write_story, target_repo: Path
) -> None:
    original = (target_repo / TARGET).read_text()
    model = scripted(worker)
    # every bypass in a row is refused: more refusals in a row than worker_max_tool_errors
    # allows, which would stop the round before the last forms are tried
    home = make_home(model, deny_commands=["rm", "git rm"], worker_max_tool_errors=0)
    story = write_story(home, "s1", verify=VERIFY)

    assert main(["run", str(story), "--home", str(home)]) == 0

    seen = round_one_results(model)
    assert len(seen) >= len(BYPASSES) + 1
    wrong = [
        (command, result)
        for (command, expected), result in zip(BYPASSES, seen, strict=False)
        if not (result.startswith(expected) and result.endswith("nothing was run"))
    ]
    assert wrong == []
    unchecked = [r for (_, e), r in zip(BYPASSES, seen, strict=False) if e.startswith(UNCHECKED)]
    assert all("a command policy is set" in r for r in unchecked)
    allowed = seen[len(BYPASSES)]
    assert allowed.startswith("exit code: 0") and "test_calc.py" in allowed

    worktree = home / "worktrees" / "s1"
    assert (worktree / TARGET).read_text() == original
    assert TARGET in git(target_repo, "ls-tree", "-r", "--name-only", "hero/s1").split()
    state = load_state(home)
    assert state["status"] == "passed"
    checks = state["rounds"][0]["verify"]["commands"]
    assert [c["exit_code"] for c in checks] == [0, 0]
