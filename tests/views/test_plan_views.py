"""Plans in the views: `hero status`, `hero logs` and `hero retry` with `<plan>/<id>` keys.

A plan is a folder `inbox/<plan>/` with a `_manifest.yaml`; its stories' records live in
`runs/state/plans/<plan>/<id>.json` and their traces in `runs/plans/<plan>/<id>/`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from hero.cli import main
from hero.state import RunState, file_digest, load_state, save_state
from hero.trace import Trace
from hero.views.logs import follow
from hero.views.status import WIDTH, collect_status, format_status

NOW = 1_800_000_000.0
WAIT_S = 30.0  # a "did not hang" bound, not a speed check


def write_story(
    home: Path, story_id: str, *, plan: str = "", manifest: bool = True, **fm: str
) -> Path:
    """A story file: loose in inbox/, or in the plan's folder (with its manifest)."""
    folder = home / "inbox" / plan if plan else home / "inbox"
    folder.mkdir(parents=True, exist_ok=True)
    if plan and manifest:
        (folder / "_manifest.yaml").write_text(f"name: {plan}\n", encoding="utf-8")
    front = {"id": story_id, "title": f"Story {story_id}", **fm}
    text = "---\n" + "".join(f"{k}: {v}\n" for k, v in front.items()) + "---\n\n## Goal\nx\n"
    path = folder / f"{story_id}.md"
    path.write_text(text, encoding="utf-8")
    return path


def set_age(path: Path, seconds_ago: float) -> None:
    t = time.time() - seconds_ago
    os.utime(path, (t, t))


def record(home: Path, story_id: str, plan: str = "", status: str = "passed", **kw: Any) -> None:
    save_state(
        home,
        RunState(
            id=story_id,
            plan=plan,
            status=status,  # type: ignore[arg-type]
            title=f"Story {story_id}",
            branch=f"hero/plans/{plan}/{story_id}" if plan else f"hero/{story_id}",
            **kw,
        ),
    )


def status_json(home: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["status", "--json", "--home", str(home)]) == 0
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    return report


def status_text(home: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["status", "--home", str(home)]) == 0
    return capsys.readouterr().out


def status_in_a_child(home: Path, *args: str) -> str:
    """`hero status` as a child process: a hang fails the test instead of hanging it."""
    out = subprocess.run(
        [sys.executable, "-m", "hero", "status", "--home", str(home), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (out.returncode, out.stderr) == (0, ""), out.stderr
    return out.stdout


def queue_item(report: dict[str, Any], key: str) -> dict[str, Any]:
    return next(item for item in report["queue"] if item["key"] == key)


# --------------------------------------------------------------------------- status: rows


def test_plan_rows_are_grouped_by_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    record(tmp_path, "loose-one", current_round=1, started_at=NOW - 30, finished_at=NOW)
    record(tmp_path, "s1", plan="auth", status="gave_up", current_round=2)
    record(tmp_path, "s1", plan="billing", status="passed", current_round=1)
    record(
        tmp_path,
        "s2",
        plan="billing",
        status="skipped",
        error="skipped: story 'billing/s0' gave up (through 'billing/s1')",
    )

    report = status_json(tmp_path, capsys)

    rows = [(r["plan"], r["id"], r["key"], r["status"]) for r in report["stories"]]
    assert rows[0] == ("", "loose-one", "loose-one", "passed")  # loose stories first
    assert sorted(rows[1:]) == [
        ("auth", "s1", "auth/s1", "gave_up"),
        ("billing", "s1", "billing/s1", "passed"),
        ("billing", "s2", "billing/s2", "skipped"),
    ]
    assert [r["plan"] for r in report["stories"]] == ["", "auth", "billing", "billing"]
    billing_s1 = next(r for r in report["stories"] if r["key"] == "billing/s1")
    assert billing_s1["branch"] == "hero/plans/billing/s1"

    lines = status_text(tmp_path, capsys).splitlines()
    auth, billing = lines.index("plan auth:"), lines.index("plan billing:")
    loose_row = next(i for i, x in enumerate(lines) if x.startswith("loose-one "))
    queue = lines.index("queue: empty")
    assert loose_row < auth < billing < queue
    # each plan has its own table, its rows under it, by id
    assert lines[auth + 1].startswith("STORY") and lines[billing + 1].startswith("STORY")
    assert lines[auth + 2].split()[:2] == ["s1", "gave_up"]
    billing_rows = [x.split()[:2] for x in lines[billing + 2 : queue] if x and x[0] != " "]
    assert sorted(billing_rows) == [["s1", "passed"], ["s2", "skipped"]]
    # a skipped story says which ancestor failed, as errors are shown
    assert "    error: skipped: story 'billing/s0' gave up (through 'billing/s1')" in lines
    assert lines[auth - 1] == "" and lines[billing - 1] == ""


def test_only_plan_rows_and_loose_json_unchanged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record(tmp_path, "s1", plan="p")

    text = status_text(tmp_path, capsys)

    assert "stories: none" not in text
    assert text.splitlines()[2] == "plan p:"
    (row,) = status_json(tmp_path, capsys)["stories"]
    assert (row["plan"], row["key"]) == ("p", "p/s1")


def test_two_plans_may_use_one_id(tmp_path: Path) -> None:
    record(tmp_path, "build", plan="alpha", status="passed")
    record(tmp_path, "build", plan="beta", status="error", error="boom in beta")
    record(tmp_path, "build", status="running", started_at=NOW - 5)  # and a loose one
    write_story(tmp_path, "fix", plan="alpha")
    write_story(tmp_path, "fix", plan="beta")

    report = collect_status(tmp_path, now=NOW)

    assert sorted(r["key"] for r in report["stories"]) == ["alpha/build", "beta/build", "build"]
    assert sorted(q["key"] for q in report["queue"]) == ["alpha/fix", "beta/fix"]
    assert report["rejected"] == []  # not duplicates: they are of two plans
    text = format_status(report)
    assert "plan alpha:" in text and "plan beta:" in text
    beta = text.split("plan beta:")[1]
    assert "build" in beta and "error: boom in beta" in beta
    assert "boom in beta" not in text.split("plan beta:")[0]
    assert max(len(line) for line in text.splitlines()) <= WIDTH


@pytest.mark.slow
def test_unreadable_plan_records_are_rows_and_odd_folders_ignored(tmp_path: Path) -> None:
    record(tmp_path, "fine", plan="p")
    plan_dir = tmp_path / "runs" / "state" / "plans" / "p"
    (plan_dir / "garbled.json").write_text("{not json", encoding="utf-8")
    (plan_dir / "loose-record.json").write_text(
        json.dumps({"id": "loose-record", "status": "passed"})  # says no plan: not this one
    )
    os.mkfifo(plan_dir / "fifo.json")
    (plan_dir / "sub").mkdir()  # not a record
    odd = tmp_path / "runs" / "state" / "plans" / "not.a.plan"  # no plan has this name
    odd.mkdir()
    (odd / "x.json").write_text(json.dumps({"id": "x", "plan": "not.a.plan"}))
    (tmp_path / "runs" / "state" / "plans" / "stray.json").write_text("{}")

    report = json.loads(status_in_a_child(tmp_path, "--json"))

    rows = {r["key"]: r for r in report["stories"]}
    assert set(rows) == {"p/fine", "p/garbled", "p/loose-record", "p/fifo"}
    assert rows["p/fine"]["status"] == "passed"
    for key in ("p/garbled", "p/loose-record", "p/fifo"):
        story_id = key.split("/")[1]
        assert rows[key]["status"] == "unreadable"
        assert rows[key]["plan"] == "p" and rows[key]["id"] == story_id
        assert rows[key]["error"].startswith(f"runs/state/plans/p/{story_id}.json: ")
    assert "not a state record" in rows["p/loose-record"]["error"]
    assert "FIFO" in rows["p/fifo"]["error"]
    text = status_in_a_child(tmp_path)
    assert "error: runs/state/plans/p/garbled.json: Expecting property name" in text


def test_a_plans_path_that_is_a_file_is_no_error(tmp_path: Path) -> None:
    record(tmp_path, "s1")
    (tmp_path / "runs" / "state" / "plans").write_text("not a folder")
    (tmp_path / "inbox").mkdir()
    (tmp_path / "inbox" / "p").write_text("not a folder either")

    report = json.loads(status_in_a_child(tmp_path, "--json"))

    assert [r["key"] for r in report["stories"]] == ["s1"]
    assert report["queue"] == [] and report["rejected"] == []


# --------------------------------------------------------------------------- status: queue


def test_plan_stories_are_queued_with_their_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    set_age(write_story(tmp_path, "s1", plan="p", priority="high"), 100)
    set_age(write_story(tmp_path, "loose"), 200)
    write_story(tmp_path, "hidden", plan="no-manifest", manifest=False)  # not a plan
    (tmp_path / "inbox" / "bad.name").mkdir()
    (tmp_path / "inbox" / "bad.name" / "_manifest.yaml").write_text("x: 1\n")
    (tmp_path / "inbox" / "bad.name" / "z.md").write_text("---\nid: z\ntitle: Z\n---\nx\n")
    copy = write_story(tmp_path, "s1-copy", plan="p")  # one key twice within a plan
    copy.write_text(copy.read_text().replace("id: s1-copy", "id: s1"))

    report = status_json(tmp_path, capsys)

    assert [(q["key"], q["plan"], q["id"]) for q in report["queue"]] == [
        ("p/s1", "p", "s1"),  # high first
        ("loose", "", "loose"),
    ]
    s1 = report["queue"][0]
    assert s1["path"] == "inbox/p/s1.md"
    assert (s1["gate"], s1["gate_reason"], s1["waits_for"]) == ("ready", "", [])
    assert report["rejected"] == [
        {
            "path": "inbox/p/s1-copy.md",
            "reason": "id: story id 'p/s1' is already queued from inbox/p/s1.md",
        }
    ]
    text = status_text(tmp_path, capsys)
    first = text.split("queue (2)")[1].splitlines()[2]
    assert first.split()[:3] == ["1", "high", "p/s1"]
    assert "inbox/p/s1.md" in first


def test_plan_dependencies_decide_the_gate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """dep passed -> ready; dep running -> wait; dep gave up, its file unchanged -> skip."""
    write_story(tmp_path, "after-pass", plan="p", depends_on="[passed]")
    write_story(tmp_path, "after-run", plan="p", depends_on="[runs, later]")
    write_story(tmp_path, "later", plan="p")
    gave_up = write_story(tmp_path, "failed", plan="p")
    write_story(tmp_path, "after-fail", plan="p", depends_on="[failed]")
    write_story(tmp_path, "after-skip", plan="p", depends_on="[after-fail]")
    record(tmp_path, "passed", plan="p", status="passed")
    record(tmp_path, "runs", plan="p", status="running", started_at=time.time())
    record(
        tmp_path,
        "failed",
        plan="p",
        status="gave_up",
        story_path=str(gave_up),
        story_digest=file_digest(gave_up),
    )
    # the same ids outside the plan say otherwise: a plan's stories depend on its own only
    record(tmp_path, "runs", status="passed")
    record(tmp_path, "failed", status="passed")

    report = status_json(tmp_path, capsys)

    assert "p/failed" not in [q["key"] for q in report["queue"]]  # waits for an edit
    ready = queue_item(report, "p/after-pass")
    assert (ready["gate"], ready["waits_for"], ready["waits_for_detail"]) == ("ready", [], [])
    wait = queue_item(report, "p/after-run")
    assert wait["gate"] == "wait"
    assert wait["waits_for"] == ["runs", "later"]
    assert wait["waits_for_detail"] == ["runs (running)", "later (not run yet)"]
    assert wait["gate_reason"] == "waits for runs (running), later (not run yet)"
    skip = queue_item(report, "p/after-fail")
    assert (skip["gate"], skip["waits_for"]) == ("skip", [])
    assert skip["gate_reason"] == "story 'p/failed' gave up"
    above = queue_item(report, "p/after-skip")  # through a story that has not run yet
    assert above["gate"] == "skip"
    assert above["gate_reason"] == "story 'p/failed' gave up (through 'p/after-fail')"

    notes = {
        line.split()[2]: line for line in status_text(tmp_path, capsys).splitlines() if "p/" in line
    }
    assert notes["p/after-run"].endswith("waits for runs (running), later (not run yet)")
    assert notes["p/after-fail"].endswith("skipped: story 'p/failed' gave up")
    assert notes["p/after-pass"].endswith("inbox/p/after-pass.md")  # no note

    # edited, the failed story runs again: its dependents wait for it instead
    with open(gave_up, "a", encoding="utf-8") as fh:
        fh.write("\nA clarification.\n")
    report = status_json(tmp_path, capsys)
    assert queue_item(report, "p/failed")["gate"] == "ready"
    skip = queue_item(report, "p/after-fail")
    assert (skip["gate"], skip["waits_for_detail"]) == ("wait", ["failed (gave_up)"])


def test_loose_story_with_an_unknown_dependency(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_story(tmp_path, "top", depends_on="[ghost, base]")
    write_story(tmp_path, "base")
    record(tmp_path, "ghost", plan="p")  # a plan's story is no loose story's dependency

    report = status_json(tmp_path, capsys)

    top = queue_item(report, "top")
    assert top["gate"] == "unknown"
    assert "'ghost'" in top["gate_reason"] and "fix depends_on" in top["gate_reason"]
    assert top["waits_for"] == ["base", "ghost"]
    assert top["waits_for_detail"] == ["base (not run yet)", "ghost (unknown)"]
    line = next(x for x in status_text(tmp_path, capsys).splitlines() if " top " in x)
    assert line.endswith("unknown dependency: ghost (fix depends_on)")
    assert len(line) <= WIDTH


# --------------------------------------------------------------------------- logs


def write_round(home: Path, run_dir: Path, n: int, text: str) -> None:
    with Trace(run_dir / f"round-{n}.jsonl") as trace:
        trace.event("round_start", round=n, run=1)
        trace.event("tool_result", name="bash", content=text)


def logs(home: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["logs", *args, "--home", str(home)])
    out, err = capsys.readouterr()
    return code, out, err


def test_logs_of_a_plan_story(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    record(tmp_path, "s1", plan="p", status="gave_up", current_round=2)
    write_round(tmp_path, tmp_path / "runs" / "plans" / "p" / "s1", 1, "plan round one")
    write_round(tmp_path, tmp_path / "runs" / "plans" / "p" / "s1", 2, "plan round two")
    record(tmp_path, "s1", status="passed")  # a loose story of that id: not this one
    write_round(tmp_path, tmp_path / "runs" / "s1", 1, "the loose story's round")

    code, out, err = logs(tmp_path, capsys, "p/s1")

    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == 'story p/s1 "Story s1": gave_up; round 2, 0 finished; branch hero/plans/p/s1'
    assert [x for x in lines if x.startswith("===")] == [
        "=== round 1 === runs/plans/p/s1/round-1.jsonl",
        "=== round 2 === runs/plans/p/s1/round-2.jsonl",
    ]
    assert "plan round one" in out and "plan round two" in out
    assert "the loose story's round" not in out

    code, out, _ = logs(tmp_path, capsys, "p/s1", "--round", "2")
    assert code == 0 and "plan round two" in out and "plan round one" not in out
    code, out, _ = logs(tmp_path, capsys, "s1")
    assert code == 0 and "the loose story's round" in out and "plan round" not in out


def test_logs_refuse_keys_that_name_no_story(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record(tmp_path, "s1")
    record(tmp_path, "s1", plan="p")
    # what a key made into a path naively would reach: runs/plans/a/../../b = runs/b
    (tmp_path / "runs" / "plans" / "a").mkdir(parents=True)
    write_round(tmp_path, tmp_path / "runs" / "b", 1, "outside")
    (tmp_path / "runs" / "etc").mkdir()
    for key in ("../etc", "a/../../b", "p/../s1", "/s1", "p/", "p.x/s1", "a/b/s1", "p/.."):
        code, out, err = logs(tmp_path, capsys, key)
        assert (code, out) == (2, ""), key
        assert f"no story '{key}'" in err
        assert "expected a story id, or <plan>/<id>" in err
        code, out, err = logs(tmp_path, capsys, key, "-f")
        assert (code, out) == (2, "") and f"no story '{key}'" in err

    code, out, err = logs(tmp_path, capsys, "q/s1")  # valid, but no such story
    assert (code, out) == (2, "")
    assert err == (
        f"hero: no story 'q/s1' in {tmp_path}: "
        "neither runs/state/plans/q/s1.json nor runs/plans/q/s1/ exists\n"
    )


def test_follow_a_plan_story_until_it_is_skipped(tmp_path: Path) -> None:
    record(tmp_path, "s1", plan="p", status="queued")
    chunks: list[str] = []

    class Sink:
        def write(self, text: str) -> int:
            chunks.append(text)
            return len(text)

        def flush(self) -> None:
            pass

    result: list[str | None] = []
    stop = threading.Event()
    thread = threading.Thread(
        target=lambda: result.append(
            follow(tmp_path, "p/s1", Sink(), poll_s=0.01, stop=stop)  # type: ignore[arg-type]
        ),
        daemon=True,
    )
    thread.start()
    time.sleep(0.1)
    assert thread.is_alive()  # queued: more may come
    record(tmp_path, "s1", plan="p", status="skipped", error="story 'p/a' gave up")
    thread.join(WAIT_S)
    stop.set()

    assert result == ["skipped"]
    assert "".join(chunks).endswith("--- p/s1: skipped\n")


# --------------------------------------------------------------------------- retry


def retry(home: Path, capsys: pytest.CaptureFixture[str], key: str) -> tuple[int, str, str]:
    code = main(["retry", key, "--home", str(home)])
    out, err = capsys.readouterr()
    return code, out, err


def test_retry_a_plan_story(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_story(tmp_path, "s1", plan="p")
    set_age(path, 1000)
    rounds = [{"round": 1}, {"round": 2}]
    record(tmp_path, "s1", plan="p", status="gave_up", story_path=str(path), rounds=rounds)
    record(tmp_path, "s1", status="gave_up")  # a loose story of that id is left alone

    code, out, err = retry(tmp_path, capsys, "p/s1")

    assert (code, err) == (0, "")
    assert out == "p/s1: queued again; `hero watch` picks it up, or run `hero run-plan p`\n"
    state = load_state(tmp_path, "p/s1")
    assert state is not None
    assert (state.status, state.plan, state.round_offset) == ("queued", "p", 2)
    assert time.time() - path.stat().st_mtime < 60  # touched: the daemon takes it again
    loose = load_state(tmp_path, "s1")
    assert loose is not None and loose.status == "gave_up"

    code, _, err = retry(tmp_path, capsys, "p/nope")
    assert code == 2
    assert err == f"hero: no story 'p/nope' in {tmp_path / 'runs' / 'state' / 'plans' / 'p'}\n"


def test_retry_of_a_skipped_story_names_the_story_to_retry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    error = "skipped: story 'p/a' gave up (through 'p/b')"  # as the dispatcher writes it
    record(tmp_path, "c", plan="p", status="skipped", error=error)

    code, out, err = retry(tmp_path, capsys, "p/c")

    assert (code, out) == (2, "")
    assert err == (
        "hero: story 'p/c' was skipped because story 'p/a' gave up (through 'p/b'); it becomes "
        "eligible by itself once 'p/a' passes: run `hero retry p/a` (or edit that story's "
        "file)\n"
    )
    state = load_state(tmp_path, "p/c")
    assert state is not None and state.status == "skipped"  # untouched

    # named by its id alone, the ancestor is of the same plan
    record(tmp_path, "d", plan="p", status="skipped", error="story 'a' ended in error")
    code, _, err = retry(tmp_path, capsys, "p/d")
    assert code == 2 and "`hero retry p/a`" in err

    record(tmp_path, "e", status="skipped", error="story 'base' gave up")
    code, _, err = retry(tmp_path, capsys, "e")
    assert code == 2 and "once 'base' passes: run `hero retry base`" in err


def test_retry_refuses_keys_that_name_no_story(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record(tmp_path, "s1", status="gave_up")
    record(tmp_path, "s1", plan="p", status="gave_up")
    for key in ("../s1", "p/../s1", "a/../../s1", "/s1", "p.x/s1", "p/"):
        code, out, err = retry(tmp_path, capsys, key)
        assert (code, out) == (2, ""), key
        assert f"no story '{key}'" in err and "expected a story id, or <plan>/<id>" in err
    for key in ("s1", "p/s1"):
        state = load_state(tmp_path, key)
        assert state is not None and state.status == "gave_up"
