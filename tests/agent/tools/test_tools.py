"""Tests for hero.agent.tools: real files, real git, real subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hero.agent.tools import (
    TOOL_NAMES,
    ToolContext,
    ToolError,
    ToolOutcome,
    execute_tool,
    glob_to_regex,
    resolve_path,
    search,
    tool_schemas,
    write_text_file,
)
from hero.runner import child_env

CONTRACT: dict[str, tuple[set[str], set[str]]] = {  # name -> (all arguments, required)
    "bash": ({"command", "timeout_s"}, {"command"}),
    "read_file": ({"path", "offset", "limit"}, {"path"}),
    "write_file": ({"path", "content"}, {"path", "content"}),
    "edit_file": (
        {"path", "old_string", "new_string", "replace_all"},
        {"path", "old_string", "new_string"},
    ),
    "grep": ({"pattern", "path", "glob", "ignore_case", "output_mode"}, {"pattern"}),
    "find": ({"pattern", "path"}, {"pattern"}),
    "ls": ({"path"}, set()),
}


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    wt = tmp_path / "wt"
    wt.mkdir()
    _git(wt, "init", "-q")
    return wt


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    d = tmp_path / "outside"
    d.mkdir()
    (d / "secret.txt").write_text("TOPSECRET needle\n")
    return d


def make_ctx(root: Path, **kwargs) -> ToolContext:
    return ToolContext(root=root, env=child_env(), **kwargs)


@pytest.fixture
def ctx(root: Path) -> ToolContext:
    return make_ctx(root)


@pytest.fixture(params=["python", "rg"])
def gctx(request: pytest.FixtureRequest, root: Path) -> ToolContext:
    """A context for each grep engine: the pure-Python fallback and ripgrep (a dependency,
    so never skipped)."""
    return make_ctx(root, use_ripgrep=request.param == "rg")


def call(ctx: ToolContext, name: str, args: dict | str | None = None) -> ToolOutcome:
    raw = json.dumps(args) if isinstance(args, dict) else args
    out = execute_tool(ctx, name, raw)
    assert isinstance(out, ToolOutcome)
    return out


def ok(ctx: ToolContext, name: str, args: dict | str | None = None) -> str:
    out = call(ctx, name, args)
    assert not out.is_error, out.content
    return out.content


def err(ctx: ToolContext, name: str, args: dict | str | None = None) -> str:
    out = call(ctx, name, args)
    assert out.is_error, out.content
    return out.content


def write(root: Path, rel: str, text: str | bytes) -> Path:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text)
    return p


# --- contract ----------------------------------------------------------------------------------


def test_tool_names_and_arguments_match_contract() -> None:
    assert TOOL_NAMES == ("bash", "read_file", "write_file", "edit_file", "grep", "find", "ls")
    schemas = tool_schemas()
    assert [s["function"]["name"] for s in schemas] == list(TOOL_NAMES)
    for s in schemas:
        fn = s["function"]
        params = fn["parameters"]
        all_args, required = CONTRACT[fn["name"]]
        assert set(params["properties"]) == all_args, fn["name"]
        assert set(params["required"]) == required, fn["name"]


def test_schemas_are_valid_openai_function_tools() -> None:
    allowed = {"string", "integer", "number", "boolean"}
    for s in tool_schemas():
        assert s["type"] == "function"
        fn = s["function"]
        assert fn["description"] and len(fn["description"]) < 160
        assert fn["parameters"]["type"] == "object"
        for prop in fn["parameters"]["properties"].values():
            assert prop["type"] in allowed
    grep = next(s for s in tool_schemas() if s["function"]["name"] == "grep")
    modes = grep["function"]["parameters"]["properties"]["output_mode"]["enum"]
    assert modes == ["content", "files_with_matches", "count"]


def test_schemas_are_small() -> None:
    assert len(json.dumps(tool_schemas())) < 2400


def test_tool_schemas_returns_fresh_objects() -> None:
    first = tool_schemas()
    first[0]["function"]["name"] = "changed"
    assert tool_schemas()[0]["function"]["name"] == "bash"


# --- argument handling -------------------------------------------------------------------------


def test_unknown_tool_lists_available(ctx: ToolContext) -> None:
    msg = err(ctx, "delete_everything", {})
    assert msg.startswith("unknown tool 'delete_everything'")
    assert "bash, read_file, write_file, edit_file, grep, find, ls" in msg


@pytest.mark.parametrize("raw", ["{bad json", '{"path": "a"', "{'path': 'a'}"])
def test_malformed_json(ctx: ToolContext, raw: str) -> None:
    msg = err(ctx, "read_file", raw)
    assert "tool 'read_file'" in msg
    assert "not valid JSON" in msg
    assert '"path": string' in msg  # the expected shape


@pytest.mark.parametrize(
    ("raw", "kind"),
    [("[1, 2]", "array"), ('"a.txt"', "string"), ("42", "integer"), ("null", "null")],
)
def test_arguments_must_be_an_object(ctx: ToolContext, raw: str, kind: str) -> None:
    msg = err(ctx, "read_file", raw)
    assert f"must be a JSON object, got {kind}" in msg
    assert "read_file" in msg


def test_missing_required_argument(ctx: ToolContext) -> None:
    msg = err(ctx, "edit_file", {"path": "a.txt", "old_string": "x"})
    assert "tool 'edit_file'" in msg
    assert "missing required argument 'new_string'" in msg
    assert '"replace_all"?: boolean' in msg


def test_required_argument_given_as_null_is_missing(ctx: ToolContext) -> None:
    assert "missing required argument 'command'" in err(ctx, "bash", {"command": None})


@pytest.mark.parametrize(
    ("name", "args", "fragment"),
    [
        ("read_file", {"path": 1}, "'path' must be string, got integer"),
        ("read_file", {"path": "a", "offset": "10"}, "'offset' must be integer, got string"),
        ("read_file", {"path": "a", "offset": True}, "'offset' must be integer, got boolean"),
        ("read_file", {"path": "a", "limit": 2.5}, "'limit' must be integer, got number"),
        ("bash", {"command": ["ls"]}, "'command' must be string, got array"),
        ("bash", {"command": "true", "timeout_s": "5"}, "'timeout_s' must be number"),
        (
            "edit_file",
            {"path": "a", "old_string": "a", "new_string": "b", "replace_all": "yes"},
            "'replace_all' must be boolean, got string",
        ),
        ("grep", {"pattern": "x", "ignore_case": 1}, "'ignore_case' must be boolean"),
        ("grep", {"pattern": "x", "output_mode": "lines"}, "'output_mode' must be one of"),
        ("write_file", {"path": "a", "content": {"x": 1}}, "'content' must be string, got object"),
    ],
)
def test_wrong_argument_types(ctx: ToolContext, name: str, args: dict, fragment: str) -> None:
    msg = err(ctx, name, args)
    assert f"tool '{name}'" in msg
    assert fragment in msg


def test_unknown_argument_is_named(ctx: ToolContext) -> None:
    msg = err(ctx, "read_file", {"file_path": "a.txt"})
    assert "unknown argument 'file_path'" in msg
    assert '"path": string' in msg


def test_integral_float_accepted_for_integer(ctx: ToolContext, root: Path) -> None:
    write(root, "a.txt", "one\ntwo\nthree\n")
    assert ok(ctx, "read_file", {"path": "a.txt", "offset": 2.0, "limit": 1.0}).startswith(
        "     2\ttwo"
    )


@pytest.mark.parametrize("raw", [None, "", "  ", "{}"])
def test_empty_arguments_mean_no_arguments(ctx: ToolContext, root: Path, raw: str | None) -> None:
    write(root, "f.txt", "x")
    assert "f.txt" in ok(ctx, "ls", raw)


def test_already_parsed_arguments_accepted(ctx: ToolContext, root: Path) -> None:
    write(root, "f.txt", "x\n")
    out = execute_tool(ctx, "read_file", {"path": "f.txt"})  # type: ignore[arg-type]
    assert not out.is_error and out.content == "     1\tx"


def test_null_optional_argument_is_default(ctx: ToolContext, root: Path) -> None:
    write(root, "f.txt", "needle\n")
    out = ok(ctx, "grep", {"pattern": "needle", "path": None, "glob": None, "output_mode": None})
    assert out == "f.txt:1:needle"


def test_execute_tool_never_raises_on_internal_failure(tmp_path: Path) -> None:
    wt = tmp_path / "gone"
    wt.mkdir()
    ctx = make_ctx(wt)
    wt.rmdir()  # bash cannot even start in a missing directory
    out = call(ctx, "bash", {"command": "true"})
    assert out.is_error
    assert "tool 'bash' failed" in out.content


def test_every_result_is_capped(root: Path) -> None:
    ctx = make_ctx(root, max_result_chars=1500)
    for i in range(300):
        write(root, f"d/{'n' * 40}{i:04d}.txt", "")
    out = ok(ctx, "ls", {"path": "d"})
    assert len(out) <= 1600
    assert "characters cut from the middle" in out


# --- paths -------------------------------------------------------------------------------------


def test_resolve_path_inside(ctx: ToolContext, root: Path) -> None:
    root_r = root.resolve()
    assert resolve_path(ctx, "a/b.txt") == root_r / "a" / "b.txt"
    assert resolve_path(ctx, "a/../b.txt") == root_r / "b.txt"
    assert resolve_path(ctx, "") == root_r
    assert resolve_path(ctx, ".") == root_r
    assert resolve_path(ctx, str(root_r / "x.txt")) == root_r / "x.txt"
    assert ctx.root == root_r


@pytest.mark.parametrize("bad", ["../x", "a/../../x", "/etc/passwd", "/"])
def test_resolve_path_refuses_escape(ctx: ToolContext, bad: str) -> None:
    with pytest.raises(ToolError, match="is outside the worktree"):
        resolve_path(ctx, bad)
    assert f"path '{bad}' is outside the worktree" in err(ctx, "read_file", {"path": bad})


def test_relative_root_is_resolved(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(root.parent)
    ctx = make_ctx(Path("wt"))
    assert ctx.root == root.resolve()
    monkeypatch.chdir("/")
    assert ok(ctx, "write_file", {"path": "f.txt", "content": "x\n"}).startswith("created")
    assert (root / "f.txt").read_text() == "x\n"


def test_symlink_escape_refused(ctx: ToolContext, root: Path, outside: Path) -> None:
    (root / "link.txt").symlink_to(outside / "secret.txt")
    (root / "linkdir").symlink_to(outside, target_is_directory=True)
    for name, args in [
        ("read_file", {"path": "link.txt"}),
        ("read_file", {"path": "linkdir/secret.txt"}),
        ("write_file", {"path": "link.txt", "content": "pwned"}),
        ("write_file", {"path": "linkdir/new.txt", "content": "pwned"}),
        ("edit_file", {"path": "link.txt", "old_string": "TOPSECRET", "new_string": "x"}),
        ("ls", {"path": "linkdir"}),
        ("grep", {"pattern": "needle", "path": "linkdir"}),
        ("find", {"pattern": "*", "path": "linkdir"}),
    ]:
        assert "is outside the worktree" in err(ctx, name, args), name
    assert (outside / "secret.txt").read_text() == "TOPSECRET needle\n"
    assert not (outside / "new.txt").exists()


def test_symlink_inside_worktree_allowed(ctx: ToolContext, root: Path) -> None:
    write(root, "real.txt", "hello\n")
    (root / "alias.txt").symlink_to("real.txt")
    assert "hello" in ok(ctx, "read_file", {"path": "alias.txt"})


@pytest.mark.parametrize("target", [".git/config", ".git/hooks/pre-commit", "sub/.git/x", ".GIT/x"])
def test_writing_into_git_refused(ctx: ToolContext, root: Path, target: str) -> None:
    before = (root / ".git" / "config").read_text()
    msg = err(ctx, "write_file", {"path": target, "content": "evil"})
    assert "inside .git" in msg
    with pytest.raises(ToolError, match="inside .git"):
        write_text_file(ctx, target, "evil")
    assert (root / ".git" / "config").read_text() == before
    assert not (root / ".git" / "hooks" / "pre-commit").exists()


def test_edit_inside_git_refused(ctx: ToolContext, root: Path) -> None:
    msg = err(ctx, "edit_file", {"path": ".git/config", "old_string": "[core]", "new_string": "x"})
    assert "inside .git" in msg
    assert "[core]" in (root / ".git" / "config").read_text()


def test_write_text_file_creates_parents(ctx: ToolContext, root: Path) -> None:
    p = write_text_file(ctx, "deep/er/file.txt", "x\r\ny")
    assert p == root.resolve() / "deep" / "er" / "file.txt"
    assert p.read_bytes() == b"x\r\ny"
    with pytest.raises(ToolError, match="outside the worktree"):
        write_text_file(ctx, "../nope.txt", "x")
    with pytest.raises(ToolError, match="is a directory"):
        write_text_file(ctx, "deep", "x")


# --- links: symlinks swapped in, hard links ---------------------------------------------------

RACE_READS = 2000
#: Searches raced: each one walks a tree (rg or git, a process each), many swaps per search.
RACE_SEARCHES = 600
HARD_LINK_REFUSAL = "is a hard link; hero's file tools do not follow links out of the worktree"


class _Swapper:
    """A thread swapping ``path``, as fast as it can until stopped, between what it is (a
    regular file or a directory in the worktree) and a symlink to ``outside``, yielding to
    the tool after each swap: the race a background process could run against a
    check-then-open."""

    def __init__(self, path: Path, outside: Path) -> None:
        self.path, self.outside = path, outside
        self.swaps = 0
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        link = self.path.with_name(self.path.name + ".link")
        aside = self.path.with_name(self.path.name + ".aside")
        link.symlink_to(self.outside)
        try:
            while not self._stop.is_set():
                if self.path.is_dir():  # a directory cannot be renamed over a symlink
                    os.rename(self.path, aside)
                    os.rename(link, self.path)  # now a symlink out of the worktree
                    time.sleep(0)
                    os.rename(self.path, link)
                    os.rename(aside, self.path)  # the directory again
                else:
                    os.rename(self.path, aside)
                    os.replace(link, self.path)  # now a symlink out of the worktree
                    time.sleep(0)
                    os.replace(self.path, link)
                    os.replace(aside, self.path)  # the regular file again
                time.sleep(0)
                self.swaps += 1
        except BaseException as exc:  # noqa: BLE001 - reported by __exit__, not lost
            self.errors.append(exc)

    def __enter__(self) -> _Swapper:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        assert not self.errors, self.errors
        assert self.swaps >= 10, self.swaps  # it did race


def test_read_file_never_follows_a_symlink_swapped_in(
    ctx: ToolContext, root: Path, outside: Path
) -> None:
    write(root, "race.txt", "harmless\n")
    results = []
    with _Swapper(root / "race.txt", outside / "secret.txt"):
        for _ in range(RACE_READS):
            results.append(call(ctx, "read_file", {"path": "race.txt"}).content)
    leaked = [r for r in results if "TOPSECRET" in r]
    assert not leaked, f"{len(leaked)} of {RACE_READS} reads returned the outside file"
    assert any("harmless" in r for r in results)


@pytest.mark.slow
def test_write_file_never_writes_through_a_symlink_swapped_in(
    ctx: ToolContext, root: Path, outside: Path
) -> None:
    write(root, "race.txt", "harmless\n")
    results = []
    with _Swapper(root / "race.txt", outside / "secret.txt"):
        for i in range(RACE_READS):
            results.append(call(ctx, "write_file", {"path": "race.txt", "content": f"w{i}\n"}))
    assert (outside / "secret.txt").read_text() == "TOPSECRET needle\n"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert not any("TOPSECRET" in r.content for r in results)  # not in a diff either


@pytest.mark.slow
def test_edit_file_never_edits_through_a_symlink_swapped_in(
    ctx: ToolContext, root: Path, outside: Path
) -> None:
    (outside / "secret.txt").write_text("harmless TOPSECRET\n")
    write(root, "race.txt", "harmless\n")
    results = []
    args = {"path": "race.txt", "old_string": "harmless", "new_string": "edited"}
    with _Swapper(root / "race.txt", outside / "secret.txt"):
        for _ in range(RACE_READS):
            results.append(call(ctx, "edit_file", args).content)
    assert (outside / "secret.txt").read_text() == "harmless TOPSECRET\n"
    assert not any("TOPSECRET" in r for r in results)


def test_read_file_and_ls_never_follow_a_directory_symlink_swapped_in(
    ctx: ToolContext, root: Path, outside: Path
) -> None:
    write(root, "d/secret.txt", "harmless\n")
    (outside / "OUTSIDE-ONLY.txt").write_text("x\n")
    results = []
    with _Swapper(root / "d", outside):
        for i in range(RACE_READS):
            if i % 4:
                results.append(call(ctx, "read_file", {"path": "d/secret.txt"}).content)
            else:
                results.append(call(ctx, "ls", {"path": "d"}).content)
    assert not [r for r in results if "TOPSECRET" in r or "OUTSIDE-ONLY" in r]
    assert any("harmless" in r for r in results)


@pytest.mark.slow
@pytest.mark.parametrize("repo", ["git", "plain"])
def test_grep_and_find_never_follow_a_symlink_swapped_in(
    tmp_path: Path, outside: Path, repo: str
) -> None:
    """A directory and a file swapped for symlinks out of the worktree while grep (both
    engines) and find run: at the search root, on the way to it, and while rg or git walk
    below it. Nothing from outside is shown: no secret line, no count or file name for a
    pattern only the outside holds, no outside file name."""
    root = tmp_path / repo
    root.mkdir()
    if repo == "git":  # git ls-files lists; without a repository, the walk does
        _git(root, "init", "-q")
    write(root, "d/secret.txt", "harmless needle\n")
    write(root, "d/sub/deep.txt", "harmless needle\n")
    write(root, "race.txt", "harmless needle\n")
    write(outside, "OUTSIDE-ONLY.txt", "TOPSECRET needle\n")
    write(outside, "sub/OUTSIDE-DEEP.txt", "TOPSECRET needle\n")
    engines = [make_ctx(root, use_ripgrep=True), make_ctx(root, use_ripgrep=False)]
    calls = [
        ("grep", {"pattern": "needle"}),
        ("grep", {"pattern": "needle", "path": "d"}),
        ("grep", {"pattern": "needle", "path": "d/sub"}),
        ("grep", {"pattern": "needle", "path": "d/secret.txt"}),
        ("grep", {"pattern": "needle", "path": "race.txt"}),
        ("grep", {"pattern": "TOPSECRET", "output_mode": "count"}),
        ("grep", {"pattern": "TOPSECRET", "path": "d", "output_mode": "files_with_matches"}),
        ("find", {"pattern": "*"}),
        ("find", {"pattern": "*", "path": "d"}),
        ("find", {"pattern": "*", "path": "d/sub"}),
    ]
    results: list[tuple[str, dict, ToolOutcome]] = []
    with _Swapper(root / "d", outside), _Swapper(root / "race.txt", outside / "secret.txt"):
        for i in range(RACE_SEARCHES):
            name, args = calls[i % len(calls)]
            ctx = engines[(i // len(calls)) % 2]
            results.append((name, args, call(ctx, name, args)))
    leaked = [
        (name, args, out.content)
        for name, args, out in results
        if "TOPSECRET" in out.content
        or "OUTSIDE" in out.content
        or (args["pattern"] == "TOPSECRET" and not out.is_error and out.content != "no matches")
    ]
    assert not leaked, f"{len(leaked)} of {RACE_SEARCHES} searches showed the outside: {leaked[:3]}"
    assert any("harmless" in out.content for _, _, out in results)
    assert any("d/sub/deep.txt" in out.content for name, _, out in results if name == "find")


def test_search_special_files_and_symlinked_dirs(
    ctx: ToolContext, root: Path, outside: Path
) -> None:
    os.mkfifo(root / "pipe")
    write(root, "a.txt", "needle\n")
    for use_rg in (True, False):
        gctx = make_ctx(root, use_ripgrep=use_rg)
        assert err(gctx, "grep", {"pattern": "x", "path": "pipe"}) == "'pipe' is not a regular file"
        assert ok(gctx, "grep", {"pattern": "needle"}) == "a.txt:1:needle"
    assert err(ctx, "find", {"pattern": "*", "path": "pipe"}) == "'pipe' is not a directory"
    # Without a repository the walk lists a symlinked directory as an entry, never its files.
    plain = root.parent / "plain"
    write(plain, "a/b.txt", "needle\n")
    write(outside, "OUTSIDE-ONLY.txt", "TOPSECRET needle\n")
    (plain / "a" / "out").symlink_to(outside, target_is_directory=True)
    (plain / "c.txt").symlink_to(outside / "secret.txt")
    pctx = make_ctx(plain, use_ripgrep=False)
    assert ok(pctx, "find", {"pattern": "*"}).splitlines() == ["a/b.txt", "a/out", "c.txt"]
    assert ok(pctx, "grep", {"pattern": "needle"}) == "a/b.txt:1:needle"


def test_symlinked_intermediate_directory_refused(
    ctx: ToolContext, root: Path, outside: Path
) -> None:
    (outside / "deep").mkdir()
    (outside / "deep" / "secret.txt").write_text("TOPSECRET\n")
    write(root, "a/keep.txt", "x\n")
    (root / "a" / "abs").symlink_to(outside, target_is_directory=True)
    (root / "a" / "rel").symlink_to("../../outside", target_is_directory=True)
    for link in ("a/abs", "a/rel"):
        for name, args in [
            ("read_file", {"path": f"{link}/deep/secret.txt"}),
            ("write_file", {"path": f"{link}/deep/secret.txt", "content": "pwned"}),
            ("write_file", {"path": f"{link}/new/file.txt", "content": "pwned"}),
            (
                "edit_file",
                {"path": f"{link}/deep/secret.txt", "old_string": "T", "new_string": "x"},
            ),
            ("ls", {"path": f"{link}/deep"}),
        ]:
            assert f"path '{args['path']}' is outside the worktree" in err(ctx, name, args)
    assert (outside / "deep" / "secret.txt").read_text() == "TOPSECRET\n"
    assert sorted(p.name for p in outside.iterdir()) == ["deep", "secret.txt"]


def test_hard_link_to_an_outside_file_refused(ctx: ToolContext, root: Path, outside: Path) -> None:
    os.link(outside / "secret.txt", root / "hard.txt")
    for name, args in [
        ("read_file", {"path": "hard.txt"}),
        ("write_file", {"path": "hard.txt", "content": "pwned\n"}),
        ("edit_file", {"path": "hard.txt", "old_string": "TOPSECRET", "new_string": "x"}),
    ]:
        msg = err(ctx, name, args)
        assert msg == f"path 'hard.txt' {HARD_LINK_REFUSAL}", name
        assert "TOPSECRET" not in msg
    with pytest.raises(ToolError, match="is a hard link"):
        write_text_file(ctx, "hard.txt", "pwned\n")
    assert (outside / "secret.txt").read_text() == "TOPSECRET needle\n"
    # The same through an in-worktree symlink to the hard link.
    (root / "alias.txt").symlink_to("hard.txt")
    assert HARD_LINK_REFUSAL in err(ctx, "read_file", {"path": "alias.txt"})


def test_links_inside_the_worktree_still_work(ctx: ToolContext, root: Path) -> None:
    write(root, "src/real.txt", "hello\n")
    (root / "alias.txt").symlink_to("src/real.txt")
    (root / "srcdir").symlink_to(root / "src", target_is_directory=True)  # absolute target
    assert "hello" in ok(ctx, "read_file", {"path": "alias.txt"})
    assert "hello" in ok(ctx, "read_file", {"path": "srcdir/real.txt"})
    assert ok(ctx, "ls", {"path": "srcdir"}) == "real.txt"
    assert ok(ctx, "write_file", {"path": "alias.txt", "content": "bye\n"}).startswith(
        "updated src/real.txt"
    )
    assert (root / "src" / "real.txt").read_text() == "bye\n"
    assert (root / "alias.txt").is_symlink()
    assert ok(ctx, "write_file", {"path": "srcdir/new/n.txt", "content": "n\n"}).startswith(
        "created src/new/n.txt"
    )
    assert ok(ctx, "edit_file", {"path": "alias.txt", "old_string": "bye", "new_string": "hi"})
    assert (root / "src" / "real.txt").read_text() == "hi\n"
    assert "hi" in ok(ctx, "read_file", {"path": "missing/../src/real.txt"})
    assert "hi" in ok(ctx, "read_file", {"path": str(root / "src" / "real.txt")})
    assert "hi" in ok(ctx, "read_file", {"path": str(root / "x" / ".." / "alias.txt")})
    assert ok(ctx, "write_file", {"path": "gone/../top.txt", "content": "t\n"}) == (
        "created top.txt (1 lines)"
    )
    assert not (root / "gone").exists()
    # A symlink into .git does not make writing there allowed.
    (root / "gitdir").symlink_to(".git", target_is_directory=True)
    before = (root / ".git" / "config").read_text()
    for target in ("gitdir/config", "gitdir/new/x"):
        assert "inside .git" in err(ctx, "write_file", {"path": target, "content": "evil"})
    assert (root / ".git" / "config").read_text() == before
    assert not (root / ".git" / "new").exists()


def test_symlink_loop_and_dangling_symlink(ctx: ToolContext, root: Path) -> None:
    (root / "loop1").symlink_to("loop2")
    (root / "loop2").symlink_to("loop1")
    assert "cannot be resolved" in err(ctx, "read_file", {"path": "loop1"})
    assert "cannot be resolved" in err(ctx, "write_file", {"path": "loop1", "content": "x"})
    (root / "dangling.txt").symlink_to("made/by/write.txt")
    assert "file not found" in err(ctx, "read_file", {"path": "dangling.txt"})
    ok(ctx, "write_file", {"path": "dangling.txt", "content": "w\n"})
    assert (root / "made" / "by" / "write.txt").read_text() == "w\n"


def test_special_files_refused_without_hanging(ctx: ToolContext, root: Path) -> None:
    os.mkfifo(root / "pipe")
    assert "'pipe' is not a regular file" in err(ctx, "read_file", {"path": "pipe"})
    assert "'pipe' is not a regular file" in err(
        ctx, "write_file", {"path": "pipe", "content": "x"}
    )
    write(root, "f.txt", "x\n")
    assert "is a file, not a directory" in err(ctx, "ls", {"path": "f.txt"})
    assert "file not found" in err(ctx, "read_file", {"path": "f.txt/below"})
    assert "Not a directory" in err(ctx, "write_file", {"path": "f.txt/below", "content": "x"})
    assert "is a directory" in err(ctx, "write_file", {"path": ".", "content": "x"})
    assert "is a directory; use ls" in err(ctx, "read_file", {"path": "."})


# --- bash --------------------------------------------------------------------------------------


def test_bash_success(ctx: ToolContext, root: Path) -> None:
    out = call(ctx, "bash", {"command": "echo hello; pwd"})
    assert not out.is_error
    lines = out.content.splitlines()
    assert lines[0] == "exit code: 0"
    assert lines[1] == "hello"
    assert Path(lines[2]) == root.resolve()
    assert out.command_s > 0


def test_bash_failing_command_shows_exit_code_and_is_not_a_tool_error(ctx: ToolContext) -> None:
    out = call(ctx, "bash", {"command": "echo oops >&2; exit 7"})
    assert not out.is_error
    assert out.content == "exit code: 7\noops\n"


def test_bash_no_output(ctx: ToolContext) -> None:
    assert ok(ctx, "bash", {"command": "true"}) == "exit code: 0\n(no output)"


def test_bash_uses_ctx_env(root: Path) -> None:
    ctx = ToolContext(root=root, env={"PATH": os.environ["PATH"], "MY_VAR": "42"})
    assert ok(ctx, "bash", {"command": 'echo "v=$MY_VAR h=${HOME:-none}"'}) == (
        "exit code: 0\nv=42 h=none\n"
    )


def test_bash_stdin_is_closed(ctx: ToolContext) -> None:
    assert ok(ctx, "bash", {"command": "cat"}) == "exit code: 0\n(no output)"


def test_bash_timeout(ctx: ToolContext) -> None:
    out = call(ctx, "bash", {"command": "echo start; sleep 60", "timeout_s": 0.3})
    assert not out.is_error
    assert out.content.startswith(
        "exit code: 124 (timed out after 0.3 s; process group killed)\nstart"
    )
    assert out.command_s < 10


def test_bash_timeout_capped_at_max(root: Path) -> None:
    ctx = make_ctx(root, max_bash_timeout_s=2)
    out = ok(ctx, "bash", {"command": "echo hi", "timeout_s": 9999})
    assert "(timeout_s capped at 2)" in out
    assert out.endswith("hi\n")


def test_bash_default_timeout_from_ctx(root: Path) -> None:
    ctx = make_ctx(root, bash_timeout_s=0.3)
    assert ok(ctx, "bash", {"command": "sleep 60"}).startswith(
        "exit code: 124 (timed out after 0.3 s"
    )


@pytest.mark.parametrize(
    "args", [{"command": ""}, {"command": "  "}, {"command": "true", "timeout_s": 0}]
)
def test_bash_bad_arguments(ctx: ToolContext, args: dict) -> None:
    assert "tool 'bash'" in err(ctx, "bash", args)


def test_bash_output_truncated_keeps_head_and_tail(root: Path) -> None:
    ctx = make_ctx(root, max_result_chars=2000)
    out = call(ctx, "bash", {"command": "seq 1 100000; echo failing >&2; exit 3"})
    assert not out.is_error
    text = out.content
    assert text.startswith("exit code: 3\n")
    assert "bytes dropped from the middle" in text  # capture limit hit
    assert "characters cut from the middle" in text  # then cut to the result cap
    assert "\n1\n2\n3\n" in text
    assert text.endswith("99999\n100000\nfailing\n")
    assert len(text) <= 2100


def test_bash_moderate_output_truncated_once(root: Path) -> None:
    ctx = make_ctx(root, max_result_chars=2000)
    text = ok(ctx, "bash", {"command": "seq 1 2000"})
    assert text.startswith("exit code: 0\n1\n2\n")
    assert "bytes dropped" not in text
    assert "characters cut from the middle" in text
    assert text.endswith("1999\n2000\n")


def test_bash_cancelled(root: Path) -> None:
    cancel = threading.Event()
    cancel.set()
    ctx = make_ctx(root, cancel=cancel)
    out = call(ctx, "bash", {"command": "sleep 60"})
    assert out.is_error
    assert out.content.startswith("exit code: 130 (cancelled")


# --- read_file ---------------------------------------------------------------------------------


def test_read_file_small_file(ctx: ToolContext, root: Path) -> None:
    write(root, "a.py", "import os\n\nprint(1)\n")
    assert ok(ctx, "read_file", {"path": "a.py"}) == "     1\timport os\n     2\t\n     3\tprint(1)"


def test_read_file_default_window_and_footer(ctx: ToolContext, root: Path) -> None:
    write(root, "big.txt", "".join(f"line {i}\n" for i in range(1, 1001)))
    out = ok(ctx, "read_file", {"path": "big.txt"})
    lines = out.splitlines()
    assert lines[0] == "     1\tline 1"
    assert lines[399] == "   400\tline 400"
    assert lines[-1] == "(lines 1-400 of 1000; use offset=401 to read more)"
    assert len(lines) == 401


def test_read_file_offset_and_limit(ctx: ToolContext, root: Path) -> None:
    write(root, "big.txt", "".join(f"line {i}\n" for i in range(1, 1001)))
    lines = ok(ctx, "read_file", {"path": "big.txt", "offset": 401, "limit": 10}).splitlines()
    assert lines[0] == "   401\tline 401"
    assert lines[9] == "   410\tline 410"
    assert lines[-1] == "(lines 401-410 of 1000; use offset=411 to read more)"
    lines = ok(ctx, "read_file", {"path": "big.txt", "offset": 995}).splitlines()
    assert lines[0] == "   995\tline 995"
    assert lines[-1] == "(lines 995-1000 of 1000)"


def test_read_file_offset_errors(ctx: ToolContext, root: Path) -> None:
    write(root, "a.txt", "1\n2\n3\n")
    assert "past the end" in err(ctx, "read_file", {"path": "a.txt", "offset": 4})
    assert "(3 lines)" in err(ctx, "read_file", {"path": "a.txt", "offset": 4})
    assert "offset" in err(ctx, "read_file", {"path": "a.txt", "offset": -1})
    assert "limit" in err(ctx, "read_file", {"path": "a.txt", "limit": 0})
    assert ok(ctx, "read_file", {"path": "a.txt", "offset": 0}).startswith("     1\t1")


def test_read_file_long_lines_cut(ctx: ToolContext, root: Path) -> None:
    write(root, "long.txt", "x" * 5000 + "\nshort\n")
    lines = ok(ctx, "read_file", {"path": "long.txt"}).splitlines()
    assert lines[0] == "     1\t" + "x" * 2000 + "... [3000 more characters]"
    assert lines[1] == "     2\tshort"


def test_read_file_window_fits_result_cap(root: Path) -> None:
    ctx = make_ctx(root, max_result_chars=3000)
    write(root, "wide.txt", "".join(f"{i:04d} " + "y" * 95 + "\n" for i in range(1, 401)))
    out = ok(ctx, "read_file", {"path": "wide.txt"})
    assert len(out) <= 3000
    assert "characters cut" not in out
    last_line = out.splitlines()[-2]
    shown = int(last_line.split("\t")[0])
    assert 10 < shown < 400
    assert out.splitlines()[-1] == f"(lines 1-{shown} of 400; use offset={shown + 1} to read more)"


def test_read_file_crlf_and_no_trailing_newline(ctx: ToolContext, root: Path) -> None:
    write(root, "w.txt", b"a\r\nb\r\nc")
    assert ok(ctx, "read_file", {"path": "w.txt"}) == "     1\ta\n     2\tb\n     3\tc"


def test_read_file_errors(ctx: ToolContext, root: Path) -> None:
    write(root, "bin.dat", b"\x00\x01\x02binary")
    (root / "adir").mkdir()
    assert "binary" in err(ctx, "read_file", {"path": "bin.dat"})
    assert "use ls" in err(ctx, "read_file", {"path": "adir"})
    assert "not found" in err(ctx, "read_file", {"path": "nope.txt"})


def test_read_file_empty(ctx: ToolContext, root: Path) -> None:
    write(root, "empty.txt", "")
    assert "empty file" in ok(ctx, "read_file", {"path": "empty.txt"})


def test_read_file_non_utf8_replaced(ctx: ToolContext, root: Path) -> None:
    write(root, "latin.txt", b"caf\xe9\n")
    assert ok(ctx, "read_file", {"path": "latin.txt"}) == "     1\tcaf\ufffd"


# --- write_file --------------------------------------------------------------------------------


def test_write_file_creates(ctx: ToolContext, root: Path) -> None:
    out = ok(ctx, "write_file", {"path": "src/pkg/new.py", "content": "a = 1\nb = 2\n"})
    assert out == "created src/pkg/new.py (2 lines)"
    assert (root / "src/pkg/new.py").read_text() == "a = 1\nb = 2\n"


def test_write_file_exact_bytes(ctx: ToolContext, root: Path) -> None:
    ok(ctx, "write_file", {"path": "crlf.txt", "content": "a\r\nb"})
    assert (root / "crlf.txt").read_bytes() == b"a\r\nb"
    ok(ctx, "write_file", {"path": "u.txt", "content": "héllo €\n"})
    assert (root / "u.txt").read_bytes() == "héllo €\n".encode()


def test_write_file_overwrite_shows_diff(ctx: ToolContext, root: Path) -> None:
    write(root, "a.txt", "one\ntwo\nthree\n")
    out = ok(ctx, "write_file", {"path": "a.txt", "content": "one\nTWO\nthree\n"})
    assert out.startswith("updated a.txt\n--- a/a.txt\n+++ b/a.txt\n")
    assert "-two" in out and "+TWO" in out
    assert (root / "a.txt").read_text() == "one\nTWO\nthree\n"


def test_write_file_same_content(ctx: ToolContext, root: Path) -> None:
    write(root, "a.txt", "same\n")
    assert ok(ctx, "write_file", {"path": "a.txt", "content": "same\n"}) == (
        "a.txt unchanged (same content)"
    )


def test_write_file_long_diff_capped(ctx: ToolContext, root: Path) -> None:
    write(root, "a.txt", "".join(f"old {i}\n" for i in range(200)))
    out = ok(
        ctx, "write_file", {"path": "a.txt", "content": "".join(f"new {i}\n" for i in range(200))}
    )
    assert "(diff cut:" in out
    assert len(out.splitlines()) <= 83


def test_write_file_errors(ctx: ToolContext, root: Path) -> None:
    (root / "adir").mkdir()
    write(root, "afile", "x")
    assert "is a directory" in err(ctx, "write_file", {"path": "adir", "content": "x"})
    assert "is a directory" in err(ctx, "write_file", {"path": ".", "content": "x"})
    assert "cannot write 'afile/child.txt'" in err(
        ctx, "write_file", {"path": "afile/child.txt", "content": "x"}
    )


# --- edit_file ---------------------------------------------------------------------------------


def test_edit_file_unique(ctx: ToolContext, root: Path) -> None:
    write(root, "m.py", "def f():\n    return 1\n\n\ndef g():\n    return 2\n")
    out = ok(
        ctx,
        "edit_file",
        {"path": "m.py", "old_string": "    return 1\n", "new_string": "    return 10\n"},
    )
    assert out.startswith("edited m.py (1 replacement)\n--- a/m.py\n+++ b/m.py")
    assert "-    return 1" in out and "+    return 10" in out
    assert (root / "m.py").read_text() == "def f():\n    return 10\n\n\ndef g():\n    return 2\n"


def test_edit_file_not_found(ctx: ToolContext, root: Path) -> None:
    write(root, "m.py", "x = 1\n")
    msg = err(ctx, "edit_file", {"path": "m.py", "old_string": "x  = 1", "new_string": "x = 2"})
    assert "old_string not found in 'm.py'" in msg
    assert (root / "m.py").read_text() == "x = 1\n"


def test_edit_file_ambiguous_and_replace_all(ctx: ToolContext, root: Path) -> None:
    write(root, "m.py", "a = 1\nb = 1\nc = 1\n")
    msg = err(ctx, "edit_file", {"path": "m.py", "old_string": "= 1", "new_string": "= 2"})
    assert "matches 3 times" in msg and "replace_all" in msg
    assert (root / "m.py").read_text() == "a = 1\nb = 1\nc = 1\n"
    out = ok(
        ctx,
        "edit_file",
        {"path": "m.py", "old_string": "= 1", "new_string": "= 2", "replace_all": True},
    )
    assert out.startswith("edited m.py (3 replacements)")
    assert (root / "m.py").read_text() == "a = 2\nb = 2\nc = 2\n"


def test_edit_file_argument_errors(ctx: ToolContext, root: Path) -> None:
    write(root, "m.py", "x = 1\n")
    assert "identical" in err(
        ctx, "edit_file", {"path": "m.py", "old_string": "x", "new_string": "x"}
    )
    assert "must not be empty" in err(
        ctx, "edit_file", {"path": "m.py", "old_string": "", "new_string": "y"}
    )
    assert "not found" in err(
        ctx, "edit_file", {"path": "missing.py", "old_string": "a", "new_string": "b"}
    )
    write(root, "b.bin", b"\x00abc")
    assert "binary" in err(
        ctx, "edit_file", {"path": "b.bin", "old_string": "a", "new_string": "b"}
    )


def test_edit_file_crlf_file_with_lf_old_string(ctx: ToolContext, root: Path) -> None:
    write(root, "w.txt", b"one\r\ntwo\r\nthree\r\n")
    ok(ctx, "edit_file", {"path": "w.txt", "old_string": "one\ntwo\n", "new_string": "1\n2\n"})
    assert (root / "w.txt").read_bytes() == b"1\r\n2\r\nthree\r\n"


def test_edit_file_preserves_undecodable_bytes(ctx: ToolContext, root: Path) -> None:
    write(root, "l.txt", b"caf\xe9\nx = 1\n")
    ok(ctx, "edit_file", {"path": "l.txt", "old_string": "x = 1", "new_string": "x = 2"})
    assert (root / "l.txt").read_bytes() == b"caf\xe9\nx = 2\n"


def test_edit_file_deletion(ctx: ToolContext, root: Path) -> None:
    write(root, "m.py", "keep\ndrop\nkeep2\n")
    ok(ctx, "edit_file", {"path": "m.py", "old_string": "drop\n", "new_string": ""})
    assert (root / "m.py").read_text() == "keep\nkeep2\n"


# --- grep (both engines) -----------------------------------------------------------------------


@pytest.fixture
def tree(root: Path) -> Path:
    write(root, "src/app.py", "import os\ndef main():\n    return 'Needle'\n")
    write(root, "src/util/helpers.py", "needle = 1\nother = 2\nneedle_two = 3\n")
    write(root, "docs/readme.md", "find the needle here\n")
    write(root, ".github/ci.yml", "run: needle\n")
    write(root, "build/out.txt", "needle in build\n")
    write(root, "image.bin", b"needle\x00\x01\x02")
    write(root, ".gitignore", "build/\n")
    _git(root, "add", "src/app.py")
    return root


def test_grep_content(gctx: ToolContext, tree: Path) -> None:
    out = ok(gctx, "grep", {"pattern": "needle"})
    assert out.splitlines() == [
        ".github/ci.yml:1:run: needle",
        "docs/readme.md:1:find the needle here",
        "src/util/helpers.py:1:needle = 1",
        "src/util/helpers.py:3:needle_two = 3",
    ]


def test_grep_ignore_case(gctx: ToolContext, tree: Path) -> None:
    out = ok(gctx, "grep", {"pattern": "needle", "ignore_case": True, "path": "src"})
    assert out.splitlines() == [
        "src/app.py:3:    return 'Needle'",
        "src/util/helpers.py:1:needle = 1",
        "src/util/helpers.py:3:needle_two = 3",
    ]


def test_grep_files_with_matches_and_count(gctx: ToolContext, tree: Path) -> None:
    files = ok(gctx, "grep", {"pattern": "needle", "output_mode": "files_with_matches"})
    assert files.splitlines() == [".github/ci.yml", "docs/readme.md", "src/util/helpers.py"]
    counts = ok(gctx, "grep", {"pattern": "needle", "output_mode": "count"})
    assert counts.splitlines() == [".github/ci.yml:1", "docs/readme.md:1", "src/util/helpers.py:2"]


def test_grep_glob(gctx: ToolContext, tree: Path) -> None:
    out = ok(
        gctx,
        "grep",
        {
            "pattern": "needle",
            "glob": "*.py",
            "ignore_case": True,
            "output_mode": "files_with_matches",
        },
    )
    assert out.splitlines() == ["src/app.py", "src/util/helpers.py"]
    out = ok(
        gctx,
        "grep",
        {
            "pattern": "needle",
            "glob": "src/*.py",
            "ignore_case": True,
            "output_mode": "files_with_matches",
        },
    )
    assert out.splitlines() == ["src/app.py"]
    out = ok(
        gctx,
        "grep",
        {"pattern": "needle", "glob": "*.{md,yml}", "output_mode": "files_with_matches"},
    )
    assert out.splitlines() == [".github/ci.yml", "docs/readme.md"]


def test_grep_single_file(gctx: ToolContext, tree: Path) -> None:
    out = ok(gctx, "grep", {"pattern": "needle", "path": "src/util/helpers.py"})
    assert out.splitlines() == [
        "src/util/helpers.py:1:needle = 1",
        "src/util/helpers.py:3:needle_two = 3",
    ]
    out = ok(gctx, "grep", {"pattern": "needle", "path": "build/out.txt"})  # explicit: searched
    assert out == "build/out.txt:1:needle in build"


def test_grep_explicit_ignored_dir_is_searched(gctx: ToolContext, tree: Path) -> None:
    assert (
        ok(gctx, "grep", {"pattern": "needle", "path": "build"})
        == "build/out.txt:1:needle in build"
    )


def test_grep_negated_glob(gctx: ToolContext, tree: Path) -> None:
    out = ok(
        gctx, "grep", {"pattern": "needle", "glob": "!*.py", "output_mode": "files_with_matches"}
    )
    assert out.splitlines() == [".github/ci.yml", "docs/readme.md"]


def test_grep_anchors_and_blank_lines(gctx: ToolContext, root: Path) -> None:
    write(root, "b.txt", "one\n\nthree\n")
    assert ok(gctx, "grep", {"pattern": "^$", "output_mode": "count"}) == "b.txt:1"
    assert ok(gctx, "grep", {"pattern": "^t.*e$"}) == "b.txt:3:three"


def test_grep_skips_git_dir_ignored_and_binary(gctx: ToolContext, tree: Path) -> None:
    assert ok(gctx, "grep", {"pattern": "repositoryformatversion"}) == "no matches"
    out = ok(gctx, "grep", {"pattern": "needle", "output_mode": "files_with_matches"})
    assert "build/out.txt" not in out
    assert "image.bin" not in out


def test_grep_does_not_follow_symlinks_out(gctx: ToolContext, tree: Path, outside: Path) -> None:
    (tree / "leak.txt").symlink_to(outside / "secret.txt")
    (tree / "leakdir").symlink_to(outside, target_is_directory=True)
    assert "TOPSECRET" not in ok(gctx, "grep", {"pattern": "TOPSECRET|needle"})


def test_grep_no_matches_is_not_an_error(gctx: ToolContext, tree: Path) -> None:
    assert ok(gctx, "grep", {"pattern": "zzz_not_there"}) == "no matches"


def test_grep_invalid_regex(gctx: ToolContext, tree: Path) -> None:
    assert "invalid regex" in err(gctx, "grep", {"pattern": "(unclosed"})


def test_grep_caps_results(gctx: ToolContext, root: Path) -> None:
    write(root, "many.txt", "".join(f"hit {i}\n" for i in range(300)))
    lines = ok(gctx, "grep", {"pattern": "hit"}).splitlines()
    assert len(lines) == 201
    assert lines[0] == "many.txt:1:hit 0"
    assert lines[-1].startswith("(showing first 200 of 300 results")


def test_grep_long_lines_cut(gctx: ToolContext, root: Path) -> None:
    write(root, "min.js", "needle" + "x" * 3000 + "\n")
    out = ok(gctx, "grep", {"pattern": "needle"})
    assert out.startswith("min.js:1:needle")
    assert out.endswith("more characters]")
    assert len(out) < 700


def test_grep_path_errors(gctx: ToolContext, tree: Path) -> None:
    assert "outside the worktree" in err(gctx, "grep", {"pattern": "x", "path": "../"})
    assert "not found" in err(gctx, "grep", {"pattern": "x", "path": "nope"})
    assert "binary" in err(gctx, "grep", {"pattern": "x", "path": "image.bin"})
    assert "must not be empty" in err(gctx, "grep", {"pattern": ""})


def test_grep_without_git_repo(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    write(plain, "a/b.txt", "needle\n")
    write(plain, "c.txt", "no\n")
    for use_rg in (False, True):
        ctx = make_ctx(plain, use_ripgrep=use_rg)
        assert ok(ctx, "grep", {"pattern": "needle"}) == "a/b.txt:1:needle"


@pytest.mark.parametrize(
    "args",
    [
        {"pattern": "needle"},
        {"pattern": "NEEDLE", "ignore_case": True},
        {"pattern": "ne+dle", "output_mode": "count"},
        {"pattern": "needle", "glob": "**/*.py", "output_mode": "files_with_matches"},
        {"pattern": "^other", "path": "src"},
        {"pattern": "nothing-here"},
    ],
)
def test_grep_engines_agree(tree: Path, args: dict) -> None:
    rg = ok(make_ctx(tree, use_ripgrep=True), "grep", args)
    py = ok(make_ctx(tree, use_ripgrep=False), "grep", args)
    assert rg == py


def test_grep_ripgrep_requested_but_missing(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(root, "a.txt", "needle\n")
    monkeypatch.setattr(search, "find_rg", lambda: None)  # a platform without the wheel
    assert "not installed" in err(make_ctx(root, use_ripgrep=True), "grep", {"pattern": "x"})
    # The default falls back to the pure-Python engine.
    assert ok(make_ctx(root), "grep", {"pattern": "needle"}) == "a.txt:1:needle"


def _engine_must_not_run(*args: object) -> list[str]:
    raise AssertionError("this grep engine must not run")


def test_grep_default_engine_is_ripgrep(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(root, "a.txt", "needle\n")
    monkeypatch.setattr(search, "_grep_py", _engine_must_not_run)
    assert ok(make_ctx(root), "grep", {"pattern": "needle"}) == "a.txt:1:needle"


def test_grep_python_engine_never_runs_rg(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(root, "a.txt", "needle\n")
    monkeypatch.setattr(search, "_grep_rg", _engine_must_not_run)
    assert ok(make_ctx(root, use_ripgrep=False), "grep", {"pattern": "needle"}) == "a.txt:1:needle"


@pytest.fixture
def fresh_find_rg() -> Iterator[None]:
    search.find_rg.cache_clear()
    yield
    search.find_rg.cache_clear()


@pytest.mark.usefixtures("fresh_find_rg")
def test_find_rg_beside_the_interpreter_without_path(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`venv/bin/hero` run directly (venv not on PATH) still finds the wheel's rg."""
    monkeypatch.setenv("PATH", str(root / "no-bin"))
    rg = search.find_rg()
    assert rg is not None
    beside = {Path(sysconfig.get_path("scripts")), Path(sys.executable).parent}
    assert Path(rg).parent in beside
    write(root, "a.txt", "needle\n")
    assert ok(make_ctx(root, use_ripgrep=True), "grep", {"pattern": "needle"}) == "a.txt:1:needle"


@pytest.mark.usefixtures("fresh_find_rg")
def test_find_rg_falls_back_to_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty-scripts"
    empty.mkdir()
    on_path = tmp_path / "on-path"
    write(on_path, "rg", "#!/bin/sh\n").chmod(0o755)
    monkeypatch.setattr(sysconfig, "get_path", lambda *a, **k: str(empty))
    monkeypatch.setattr(sys, "executable", str(empty / "python"))
    monkeypatch.setenv("PATH", str(on_path))
    assert search.find_rg() == str(on_path / "rg")
    search.find_rg.cache_clear()
    monkeypatch.setenv("PATH", str(empty))
    assert search.find_rg() is None


# --- find --------------------------------------------------------------------------------------


def test_find_recursive_glob(ctx: ToolContext, tree: Path) -> None:
    write(tree, "top.py", "")
    out = ok(ctx, "find", {"pattern": "**/*.py"})
    assert out.splitlines() == ["src/app.py", "src/util/helpers.py", "top.py"]


def test_find_basename_pattern_matches_any_depth(ctx: ToolContext, tree: Path) -> None:
    assert ok(ctx, "find", {"pattern": "*.md"}) == "docs/readme.md"
    assert ok(ctx, "find", {"pattern": "helpers.py"}) == "src/util/helpers.py"


def test_find_pattern_with_slash_is_anchored(ctx: ToolContext, tree: Path) -> None:
    assert ok(ctx, "find", {"pattern": "src/*.py"}) == "src/app.py"
    assert ok(ctx, "find", {"pattern": "src/**"}).splitlines() == [
        "src/app.py",
        "src/util/helpers.py",
    ]


def test_find_under_path(ctx: ToolContext, tree: Path) -> None:
    assert ok(ctx, "find", {"pattern": "*.py", "path": "src/util"}) == "src/util/helpers.py"
    assert ok(ctx, "find", {"pattern": "util/*.py", "path": "src"}) == "src/util/helpers.py"


def test_find_skips_git_and_ignored(ctx: ToolContext, tree: Path) -> None:
    out = ok(ctx, "find", {"pattern": "*"})
    assert ".gitignore" in out.splitlines()
    assert ".github/ci.yml" in out.splitlines()
    assert not any(line.startswith(".git/") for line in out.splitlines())
    assert "build/out.txt" not in out


def test_find_in_explicit_ignored_dir(ctx: ToolContext, tree: Path) -> None:
    assert ok(ctx, "find", {"pattern": "*", "path": "build"}) == "build/out.txt"


def test_find_without_git_repo_skips_dot_git(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    write(plain, ".git/HEAD", "ref\n")  # looks like a git dir but is not a repo
    write(plain, "a/b.txt", "")
    ctx = make_ctx(plain)
    assert ok(ctx, "find", {"pattern": "*"}) == "a/b.txt"


def test_find_no_match_and_errors(ctx: ToolContext, tree: Path) -> None:
    assert "no files match '*.rs'" in ok(ctx, "find", {"pattern": "*.rs"})
    assert "outside the worktree" in err(ctx, "find", {"pattern": "*", "path": ".."})
    assert "not a directory" in err(ctx, "find", {"pattern": "*", "path": "src/app.py"})
    assert "not found" in err(ctx, "find", {"pattern": "*", "path": "nope"})


def test_find_caps_results(ctx: ToolContext, root: Path) -> None:
    for i in range(250):
        write(root, f"gen/f{i:03d}.txt", "")
    lines = ok(ctx, "find", {"pattern": "*.txt"}).splitlines()
    assert len(lines) == 201
    assert lines[0] == "gen/f000.txt"
    assert lines[-1].startswith("(showing first 200 of 250 paths")


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("*.py", "a.py", True),
        ("*.py", "a/b.py", False),
        ("**/*.py", "a.py", True),
        ("**/*.py", "a/b/c.py", True),
        ("a/**/c.py", "a/c.py", True),
        ("a/**/c.py", "a/x/y/c.py", True),
        ("a/**", "a/x/y", True),
        ("?.txt", "a.txt", True),
        ("?.txt", "ab.txt", False),
        ("[ab].txt", "b.txt", True),
        ("[!ab].txt", "b.txt", False),
        ("*.{js,ts}", "x.ts", True),
        ("*.{js,ts}", "x.py", False),
        ("a+b(1).txt", "a+b(1).txt", True),
    ],
)
def test_glob_to_regex(pattern: str, path: str, expected: bool) -> None:
    assert (glob_to_regex(pattern).match(path) is not None) is expected


# --- ls ----------------------------------------------------------------------------------------


def test_ls_sorted_dirs_marked_git_skipped(ctx: ToolContext, root: Path) -> None:
    write(root, "b.txt", "")
    write(root, "a/x.txt", "")
    write(root, ".hidden", "")
    write(root, "C.md", "")
    assert ok(ctx, "ls", {}).splitlines() == [".hidden", "C.md", "a/", "b.txt"]
    assert ok(ctx, "ls", {"path": "a"}) == "x.txt"


def test_ls_never_stats_through_a_symlink_and_skips_any_git_case(
    ctx: ToolContext, root: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside-dir"
    outside.mkdir(exist_ok=True)
    (root / "link").symlink_to(outside)
    (root / ".GIT").mkdir()
    write(root, "a/x.txt", "")
    assert ok(ctx, "ls", {}).splitlines() == ["a/", "link"]


def test_ls_empty_and_errors(ctx: ToolContext, root: Path) -> None:
    (root / "empty").mkdir()
    write(root, "f.txt", "")
    assert "empty directory" in ok(ctx, "ls", {"path": "empty"})
    assert "use read_file" in err(ctx, "ls", {"path": "f.txt"})
    assert "not found" in err(ctx, "ls", {"path": "missing"})
    assert "outside the worktree" in err(ctx, "ls", {"path": "/tmp"})


def test_ls_caps_entries(ctx: ToolContext, root: Path) -> None:
    for i in range(520):
        write(root, f"many/{i:03d}", "")
    lines = ok(ctx, "ls", {"path": "many"}).splitlines()
    assert len(lines) == 501
    assert lines[-1].startswith("(... 20 more entries")
