"""Secrets: every key or token hero knows stays out of what the model reads and what hero writes.

The key is a provider's API key, read from an environment variable of hero's process (as a
user sets OPENAI_API_KEY). The end-to-end tests run `hero run` in-process against the
scripted model over real HTTP, on real git repositories in tmp_path, with a worker that
prints the key every way a command trivially can and tries to commit it; then they look at
the requests the model received and at every file under the home's runs/.
"""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import git
from helpers import SUB_IMPL, VERIFY_SUB, is_review, load_state
from run_support import policy, run_hero

from hero.daemon.logsetup import configure
from hero.llm.scripted import ScriptedModel, call, text
from hero.redact import REDACTED, Redactor

KEY_ENV = "HERO_TEST_PROVIDER_KEY"
KEY = "sk-hero-test-4f9Qz7LmX2vB8nR1tY6wK3pJ0aE5dH"  # not a real key, long enough for encodings


# --------------------------------------------------------------------------- helpers


def forms(value: str = KEY) -> list[str]:
    """The key as a command trivially prints it, computed here independently of hero: the
    value, its hex, and the part of its base64 that encodes only its bytes at each of the
    three byte alignments (``base64 .env`` puts it at any)."""
    raw = value.encode()
    out = [value, raw.hex(), raw.hex().upper()]
    for pad in range(3):
        encoded = base64.b64encode(b"\0" * pad + raw).decode()
        out.append(encoded[-(-8 * pad // 6) : 8 * (pad + len(raw)) // 6])
    return out


def exposed(text: str) -> list[str]:
    """The forms of the key in ``text``, line breaks ignored (``fold``, ``base64`` wrapping)."""
    flat = text.replace("\r", "").replace("\n", "")
    return [f for f in forms() if f in flat]


def strings(value: Any) -> Iterator[str]:
    """Every string in a decoded JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)


def leaks_under(root: Path) -> dict[str, list[str]]:
    """file -> the forms of the key it holds: in its bytes, and in every string of every JSON
    value it holds (a whole JSON file, or JSONL lines), where escapes would hide them."""
    found: dict[str, list[str]] = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        content = path.read_bytes().decode("utf-8", errors="replace")
        texts = [content]
        for chunk in [content, *content.splitlines()]:
            try:
                texts.extend(strings(json.loads(chunk)))
            except ValueError:
                pass
        hits = sorted({f for t in texts for f in exposed(t)})
        if hits:
            found[str(path.relative_to(root))] = hits
    return found


def keyed_home(make_home: Callable[..., Path], model: ScriptedModel, **knobs: object) -> Path:
    """A home whose provider takes its API key from ``$KEY_ENV``."""
    home = make_home(model, **knobs)
    provider = home / "config" / "providers" / "scripted.yaml"
    provider.write_text(provider.read_text() + f"api_key_env: {KEY_ENV}\n")
    return home


@pytest.fixture
def key_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The key in hero's environment: as the provider's variable, under another name with
    the same value, and inside a longer value (which child_env cannot know to drop)."""
    monkeypatch.setenv(KEY_ENV, KEY)
    monkeypatch.setenv("COPY_OF_THE_KEY", KEY)
    monkeypatch.setenv("LEAKY_URL", f"https://bot:{KEY}@db.invalid/app")


@pytest.fixture
def keyed_repo(target_repo: Path) -> Path:
    """The target repository with a committed file holding the key (a checked-in .env)."""
    (target_repo / "deploy.env").write_text(f"# deploy settings\nAPI_KEY={KEY}\nREGION=eu\n")
    git(target_repo, "add", "deploy.env")
    git(target_repo, "commit", "-q", "-m", "deploy settings")
    return target_repo


def tool_results(model: ScriptedModel) -> dict[str, str]:
    """tool_call_id -> the tool result the model last saw for it."""
    out: dict[str, str] = {}
    for r in model.requests:
        for m in r.body["messages"]:
            if m.get("role") == "tool":
                out[m["tool_call_id"]] = str(m["content"])
    return out


def result_of(model: ScriptedModel, command: str) -> str:
    """The result of the worker's bash call running ``command``."""
    calls_by_id: dict[str, str] = {}
    for r in model.requests:
        for m in r.body["messages"]:
            for c in m.get("tool_calls") or ():
                calls_by_id[c["id"]] = json.loads(c["function"]["arguments"]).get("command", "")
    results = tool_results(model)
    matching = [results[i] for i, cmd in calls_by_id.items() if cmd == command and i in results]
    assert matching, f"no result for {command!r}"
    return matching[-1]


def branch_patch(repo: Path, branch: str = "hero/s1") -> str:
    """Every commit hero's branch adds to main: messages and patches, binary files as text."""
    return git(repo, "log", "-p", "--text", "--format=%H%n%B", f"main..{branch}")


# ------------------------------------------------------------------------ the Redactor


def test_redactor_finds_the_forms_a_command_prints() -> None:
    other = "tok_" + "9" * 30
    r = Redactor([KEY, other, "abc", ""])  # too short or empty: not secrets
    env_file = f"API_KEY={KEY}\n".encode()
    wrapped = subprocess.run(["base64"], input=env_file * 3, capture_output=True).stdout.decode()
    assert "\n" in wrapped.rstrip("\n")  # base64 wraps at 76 columns: the key spans lines
    cases = {
        f"key: {KEY}\n": "key: [redacted]\n",
        f"{KEY[:10]}\n{KEY[10:30]}\r\n{KEY[30:]}!": "[redacted]!",  # broken over lines
        f"{other}{KEY}": "[redacted]",  # two secrets side by side: one span
        f"x {KEY.encode().hex()} {KEY.encode().hex().upper()} y": "x [redacted] [redacted] y",
        "no secret here, abc": "no secret here, abc",
    }
    for given, expected in cases.items():
        assert r.redact(given) == expected, given
    for pad in (b"", b"A", b"AB"):  # each alignment of the key inside what is encoded
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            out = r.redact(encode(pad + KEY.encode() + b"\n").decode())
            assert REDACTED in out and not exposed(out), (pad, out)
    out = r.redact(wrapped)
    assert out.count(REDACTED) == 3 and not exposed(out)
    clean = "nothing to see\n" * 1000
    assert r.redact(clean) is clean and not r.holds(clean)
    assert r.redact_value({"a": [KEY, 1, (f"x{KEY}",)], KEY: None}) == {
        "a": ["[redacted]", 1, ("x[redacted]",)],
        "[redacted]": None,
    }
    record = {"a": [KEY[:20], {"b": KEY[20:]}], "c": f"{KEY[:5]}\n{KEY[5:9]}"}
    assert r.redact_value(record) is record  # parts of it in separate strings: no secret
    assert r.redact_value({"a": {"b": [f"{KEY[:5]}\n{KEY[5:]}"]}}) == {"a": {"b": ["[redacted]"]}}
    assert (
        not Redactor([])
        and not Redactor(["abc"])
        and Redactor(["abcd"]).redact("xabcdx") == ("x[redacted]x")
    )
    assert KEY not in repr(r)


def test_a_secret_split_across_two_chunks_of_a_stream_is_found() -> None:
    r = Redactor([KEY])
    data = b"x" * (1000 - 7) + KEY.encode() + b"y" * 500
    assert r.holds_stream(io.BytesIO(data), chunk_bytes=1000)
    assert not r.holds_stream(io.BytesIO(data.replace(KEY.encode(), b"z" * len(KEY))), 1000)


# ----------------------------------------------------------------- the model and the trace


@pytest.mark.slow
def test_secret_printed_by_env_and_cat_is_redacted_before_the_model_and_in_the_trace(
    scripted, make_home, write_story, keyed_repo: Path, key_env: None
) -> None:
    printing = [
        "env",
        "cat deploy.env",
        "base64 deploy.env",
        "fold -w 16 deploy.env",
        "od -An -v -tx1 deploy.env | tr -d ' \\n'",
        "printenv LEAKY_URL",
    ]
    worker = [
        *(call("bash", command=c) for c in printing),
        call("read_file", path="deploy.env"),
        call("write_file", path="calc/__init__.py", content=SUB_IMPL),
        call("bash", command="git add calc && git commit -q -m add-sub"),
        text("Done."),
    ]
    model = scripted(policy(worker))
    home = keyed_home(make_home, model)
    # a story file (and so the worker's task and the reviewer's) mentioning the key
    story = write_story(
        home,
        "s1",
        verify=VERIFY_SUB,
        body=f"## Goal\nAdd `sub(a, b)` to calc. Never use the token {KEY}.\n",
    )

    assert run_hero(home, story) == 0
    assert load_state(home)["status"] == "passed"

    # the requests the model received: not the key in any form, in any message
    assert any(is_review(r.body) for r in model.requests)
    for r in model.requests:
        for message in r.body["messages"]:
            assert not exposed(str(message.get("content") or "")), message
    assert model.requests[0].headers["authorization"] == f"Bearer {KEY}"  # only where it goes

    # child_env: the provider's variable, any variable equal to the key and any value that
    # holds it are not there at all
    env_out = result_of(model, "env")
    assert KEY_ENV not in env_out and "COPY_OF_THE_KEY" not in env_out
    assert "LEAKY_URL" not in env_out
    assert "db.invalid" not in result_of(model, "printenv LEAKY_URL")
    assert "API_KEY=[redacted]\n" in result_of(model, "cat deploy.env")
    for command in printing[2:5]:
        assert REDACTED in result_of(model, command), command
    read = [v for v in tool_results(model).values() if "REGION=eu" in v and "# deploy" in v]
    assert read and all("API_KEY=[redacted]" in v for v in read)

    # the trace: the same results, redacted; nothing under runs/ holds the key
    trace = (home / "runs" / "s1" / "round-1.jsonl").read_text()
    assert "LEAKY_URL=" not in trace and "db.invalid" not in trace
    assert leaks_under(home / "runs") == {}


# --------------------------------------------------------------------- commits and files


@pytest.mark.slow
def test_a_worker_that_commits_the_key_fails_the_round_and_nothing_under_runs_holds_it(
    scripted, make_home, write_story, keyed_repo: Path, key_env: None
) -> None:
    leak = "grep API_KEY deploy.env > leaked.txt && git add -A && git commit -q -m 'add notes'"
    worker = {
        1: [
            call("bash", command="cat deploy.env"),
            call("bash", command='echo "$(cut -d= -f2 deploy.env | sed -n 2p)" > notes.txt'),
            call("bash", command=leak),
            text("Done."),
        ],
        2: [
            call("bash", command="rm leaked.txt notes.txt && echo notes > NOTES.md"),
            call("bash", command="git add -A && git commit -q -m notes"),
            text("Done."),
        ],
        3: [
            call("write_file", path="calc/__init__.py", content=SUB_IMPL),
            call("bash", command="git add -A && git commit -q -m add-sub"),
            text("Done."),
        ],
    }
    model = scripted(policy(worker))
    home = keyed_home(make_home, model, max_retries=3)
    # the checks print the key too (their log, the feedback and the story file get it)
    verify = [f"cat deploy.env && {VERIFY_SUB[1]}", VERIFY_SUB[0]]
    story = write_story(home, "s1", verify=verify)

    assert run_hero(home, story) == 0
    state = load_state(home)
    assert state["status"] == "passed"
    r1, r2, r3 = state["rounds"]
    # round 1: the commit came off the branch, the round failed naming the file, not the key
    assert r1["review"]["short_circuited"] is True
    assert "leaked.txt" in r1["review"]["summary"] and "notes.txt" in r1["review"]["summary"]
    assert r1["head_sha"] == state["base_sha"]
    # round 2: the checks ran (red: no sub yet) and printed the key, redacted in the feedback
    assert r2["verify"]["passed"] is False
    assert "API_KEY=[redacted]" in r2["verify"]["commands"][0]["tail"]
    assert "API_KEY=[redacted]" in r2["feedback"]
    assert r3["review"]["verdict"] == "APPROVED"

    # nothing hero wrote holds the key: runs/ (state, traces, verify logs), the story file
    assert leaks_under(home / "runs") == {}
    assert (home / "runs" / "s1" / "verify-r3.log").read_text().count("API_KEY=[redacted]") == 1
    done = (home / "done" / "s1.md").read_text()
    assert "API_KEY=[redacted]" in done and not exposed(done)
    # and no commit on the story branch holds it (the base's own deploy.env aside)
    assert not exposed(branch_patch(keyed_repo))
    assert git(keyed_repo, "log", "--format=%s", "main..hero/s1").split() == ["add-sub", "notes"]


@pytest.mark.slow
def test_a_worktree_file_holding_the_key_is_not_committed_and_the_round_fails_naming_it(
    scripted, make_home, write_story, keyed_repo: Path, key_env: None
) -> None:
    worker = [
        call("write_file", path="calc/__init__.py", content=SUB_IMPL),
        call("bash", command="git add calc && git commit -q -m add-sub"),
        call("bash", command="mkdir -p backup && cp deploy.env backup/settings.txt"),
        text("Done."),
    ]
    model = scripted(policy(worker))
    home = keyed_home(make_home, model, max_retries=1)
    story = write_story(home, "s1", verify=VERIFY_SUB)

    assert run_hero(home, story) == 1
    state = load_state(home)
    assert state["status"] == "gave_up"
    summary = state["rounds"][0]["review"]["summary"]
    assert state["rounds"][0]["review"]["short_circuited"] is True
    assert "backup/settings.txt" in summary and "secret" in summary and not exposed(summary)
    assert not any(is_review(r.body) for r in model.requests)  # never reviewed
    # the worker's own clean commit stays; the file was not committed, and is still there
    assert git(keyed_repo, "log", "--format=%s", "main..hero/s1").split() == ["add-sub"]
    assert not exposed(branch_patch(keyed_repo))
    worktree = home / "worktrees" / "s1"
    assert (worktree / "backup" / "settings.txt").read_text() == (
        keyed_repo / "deploy.env"
    ).read_text()
    assert "?? backup/" in git(worktree, "status", "--porcelain")
    assert leaks_under(home / "runs") == {}


def test_leftovers_flags_new_secrets_only(tmp_path: Path) -> None:
    from hero.git.guard import leftovers

    repo = tmp_path / "r"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "had.env").write_text(f"KEY={KEY}\n")
    (repo / "plain.txt").write_text("x\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    base = git(repo, "rev-parse", "HEAD").strip()
    r = Redactor([KEY])
    (repo / "had.env").write_text(f"KEY={KEY}\nMORE=1\n")  # held it at the base already
    (repo / "plain.txt").write_text(f"x\n{base64.b64encode(KEY.encode()).decode()}\n")
    (repo / "blob.bin").write_bytes(b"\0\1\2" + KEY.encode() + b"\xff")  # binary: still read
    os.symlink(KEY, repo / "link")  # git commits a symlink's target: the key itself
    os.mkfifo(repo / "pipe")  # never opened (it would block)
    (repo / f"name-{KEY}.txt").write_text("nothing\n")  # a name holding it is named redacted
    (repo / "clean.txt").write_text("clean\n")

    left = leftovers(repo, base, r)
    assert sorted(left.with_secrets) == ["blob.bin", "link", "plain.txt"]
    assert left.committable
    assert leftovers(repo, base).with_secrets == ()  # no secrets known: nothing flagged
    (repo / f"name-{KEY}.txt").write_text(KEY)
    again = leftovers(repo, base, r)
    assert "name-[redacted].txt" in again.with_secrets
    assert "name-[redacted].txt" in again.problems()[0] and not exposed(str(again.problems()))


def test_commits_adding_a_secret_are_taken_off_the_branch_their_work_kept(tmp_path: Path) -> None:
    from hero.git.guard import secret_commits, uncommit_secrets

    repo = tmp_path / "r"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "work")
    (repo / "had.env").write_text(f"KEY={KEY}\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    start = git(repo, "rev-parse", "HEAD").strip()
    r = Redactor([KEY])

    def commit(message: str, **files: bytes) -> str:
        for name, data in files.items():
            (repo / name).write_bytes(data)
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", message)
        return git(repo, "rev-parse", "HEAD").strip()[:12]

    commit("edit a file that held it at the base", **{"had.env": f"KEY={KEY}\nX=1\n".encode()})
    commit("clean", **{"a.txt": b"a\n"})
    assert secret_commits(repo, start, start, r) == []
    assert uncommit_secrets(repo, start, start, r) == []
    assert git(repo, "rev-list", "--count", f"{start}..HEAD").strip() == "2"

    binary = commit("binary", **{"b.bin": b"\0\1" + KEY.encode() + b"\0"})
    removed = commit("remove it again", **{"b.bin": b"\0\1\0"})  # still in the history
    message = commit(f"use {KEY[:20]}\n\n{KEY}", **{"c.txt": b"c\n"})
    found = secret_commits(repo, start, start, r)
    assert found == [f"{message} (message)", f"{binary} b.bin"], (found, removed)

    problems = uncommit_secrets(repo, start, start, r)
    assert len(problems) == 1 and "b.bin" in problems[0] and not exposed(problems[0])
    assert git(repo, "rev-parse", "HEAD").strip() == start  # the branch is back at the start
    assert git(repo, "symbolic-ref", "HEAD").strip() == "refs/heads/work"
    # ... and the round's work is still in the worktree, uncommitted
    assert (repo / "a.txt").read_text() == "a\n" and (repo / "c.txt").read_text() == "c\n"
    assert "X=1" in (repo / "had.env").read_text()
    assert not exposed(git(repo, "log", "-p", "--text", "--all", "--format=%B", f"^{start}"))


def test_state_files_are_written_redacted(tmp_path: Path) -> None:
    from hero.state import Round, RunState, save_state

    state = RunState(id="s1", error=f"git error: fatal: auth failed for {KEY}")
    state.rounds.append(Round(round=1, feedback=f"output:\n{KEY[:9]}\n{KEY[9:]}"))
    save_state(tmp_path, state, Redactor([KEY]))
    written = (tmp_path / "runs" / "state" / "s1.json").read_text()
    assert not exposed(json.loads(written)["rounds"][0]["feedback"]) and not exposed(written)
    assert json.loads(written)["error"] == "git error: fatal: auth failed for [redacted]"
    assert state.error.endswith(KEY)  # the record in memory is left as it is


# ------------------------------------------------------------------------------ logs


@pytest.fixture
def _structlog_reset() -> Iterator[None]:
    yield
    import structlog

    structlog.reset_defaults()


@pytest.mark.usefixtures("_structlog_reset")
def test_the_log_processor_redacts_every_field_and_exceptions() -> None:
    for as_json in (True, False):
        out = io.StringIO()
        log = configure(out, json=as_json, secrets=[KEY])
        log.info("model retry", detail=f"401 for key {KEY}", nested={"k": [KEY]})
        try:
            raise RuntimeError(f"bad key {KEY}")
        except RuntimeError:
            log.exception("crashed", story="s1")
        written = out.getvalue()
        assert not exposed(written), written
        assert written.count(REDACTED) >= 3 and "401 for key" in written
    # without secrets the processor is left out, and events are as they were
    out = io.StringIO()
    configure(out, json=True).info("x", detail=KEY)
    assert json.loads(out.getvalue())["detail"] == KEY


@pytest.mark.slow
def test_hero_watch_log_redacts_the_key(
    make_home, write_story, scripted, keyed_repo: Path, tmp_path: Path
) -> None:
    model = scripted([text("unused")])
    home = keyed_home(make_home, model)
    # a story hero refuses, its error quoting the field's value: the key
    path = write_story(home, "s1", verify=["true"], priority=KEY)
    old = time.time() - 60
    os.utime(path, (old, old))
    env = {**os.environ, KEY_ENV: KEY}
    proc = subprocess.run(
        [sys.executable, "-m", "hero", "watch", "--home", str(home), "--exit-when-idle"]
        + ["--log-format", "json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{")]
    rejected = [e for e in events if e["event"] == "rejected"]
    assert rejected and "priority" in rejected[0]["reason"] and REDACTED in rejected[0]["reason"]
    assert not exposed(proc.stderr + proc.stdout)
    note = (home / "runs" / "rejected" / f"{path.name}.error.txt").read_text()
    assert "priority" in note and REDACTED in note and not exposed(note)
