"""No input stops the daemon: hostile files in the inbox, stories that cannot start.

The real `hero watch` as a child process (see test_watch.py for its helpers), real files
(FIFOs, a symlink to /dev/zero, YAML nested a thousand levels deep), a real git repository
and the scripted model. Each bad input ends refused (``runs/rejected/<file>.error.txt``) or
in ``error``, with one log line and no traceback; it is not tried again until it changes;
the daemon goes on with the next story and stops on SIGTERM within 10 s.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import git
from helpers import FAST_RESCAN_S, RESCAN_PROBE, backlog, load_state, rescans_done
from watch_support import STOP_SPEC_S, Daemon, Policy, Procs, set_age, wait_for

from hero.cli import main

pytestmark = pytest.mark.slow  # end to end: every test here runs hero for real

NESTED = "[" * 1000 + "]" * 1000  # about 2 KB of YAML that ended in RecursionError
MAX_DAEMON_RSS_KB = 400_000  # the daemon never holds anything near this; /dev/zero would


def no_tracebacks(daemon: Daemon) -> None:
    """Every line the daemon logged is one JSON event: no traceback, no crash."""
    err = daemon.err.read_text(errors="replace")
    assert "Traceback" not in err, err
    for line in err.splitlines():
        assert line.startswith("{") and json.loads(line), line
    assert daemon.events("crashed") == []


def stop(daemon: Daemon) -> None:
    daemon.proc.send_signal(signal.SIGTERM)
    assert daemon.wait_exit(STOP_SPEC_S) == 0, daemon.output()


def peak_rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def status_json(home: Path) -> dict[str, Any]:
    """`hero status --json` in a child process: a hang fails the test instead of hanging it."""
    out = subprocess.run(
        [sys.executable, "-m", "hero", "status", "--json", "--home", str(home)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    report: dict[str, Any] = json.loads(out.stdout)
    return report


def rejected_reasons(home: Path) -> dict[str, str]:
    return {r["path"]: r["reason"] for r in status_json(home)["rejected"]}


# --------------------------------------------------------------------------- 1. nested YAML


def test_deeply_nested_yaml_is_refused_and_the_daemon_carries_on(
    scripted, make_home, write_story, drop_story, procs: Procs
) -> None:
    """Before: RecursionError ended the daemon, and again on every restart."""
    model = scripted(Policy())
    home = make_home(model)
    nested = write_story(home, "nested", verify=["true"], scope="PLACEHOLDER")
    nested.write_text(nested.read_text().replace("PLACEHOLDER", NESTED))
    assert nested.stat().st_size < 2500
    backlog(nested)

    for attempt in (1, 2):  # a restart finds it again, and refuses it again
        daemon = procs.start(home)
        event = daemon.wait_event("rejected", file="nested.md")
        assert event["reason"].startswith(f"{nested}: frontmatter: invalid YAML at line ")
        assert "levels of nested lists and mappings" in event["reason"]
        note = home / "runs" / "rejected" / "nested.md.error.txt"
        assert "levels of nested" in note.read_text()
        drop_story(home, f"good-{attempt}")
        assert daemon.wait_event("finished", story=f"good-{attempt}")["status"] == "passed"
        assert len(daemon.events("rejected", file="nested.md")) == 1
        stop(daemon)
        no_tracebacks(daemon)
    assert not (home / "runs" / "state" / "nested.json").exists()
    assert "levels of nested" in rejected_reasons(home)["inbox/nested.md"]


def test_file_names_too_long_for_a_refusal_note_do_not_stop_the_daemon(
    scripted, make_home, write_story, drop_story, procs: Procs
) -> None:
    """A story file named with 253 bytes is fine, but its refusal note's name would be too
    long for the file system: before, writing (or clearing) that note ended the daemon."""
    model = scripted(Policy())
    home = make_home(model)
    inbox = home / "inbox"
    bad = inbox / ("b" * 250 + ".md")
    write_story(home, "bad", verify=["true"], priority="urgent").rename(bad)
    good = inbox / ("g" * 250 + ".md")
    write_story(home, "long-name", verify=["true"]).rename(good)
    backlog(bad, good)

    daemon = procs.start(home)
    event = daemon.wait_event("rejected", file=bad.name)
    assert "priority" in event["reason"] and "File name too long" in event["note_error"]
    assert daemon.wait_event("finished", story="long-name")["status"] == "passed"
    assert (home / "done" / good.name).is_file()
    drop_story(home, "after")
    assert daemon.wait_event("finished", story="after")["status"] == "passed"
    assert len(daemon.events("rejected")) == 1
    stop(daemon)
    no_tracebacks(daemon)


# --------------------------------------------------------------------------- 2. special files


def test_fifos_and_a_symlink_to_dev_zero_are_refused_and_never_block(
    scripted, make_home, write_story, drop_story, procs: Procs
) -> None:
    """Before: a FIFO named like a story blocked the daemon in open() (at start-up, and the
    watcher on its event), and a symlink to /dev/zero was read without limit, both while
    checking whether hero had written the file itself (which needs a story run before)."""
    model = scripted(Policy())
    home = make_home(model)
    backlog(write_story(home, "first", verify=["true"]))
    first = procs.start(home, "--exit-when-idle", name="first")
    assert first.wait_exit() == 0, first.output()
    assert load_state(home, "first")["story_digest"]  # hero now compares files it sees

    inbox = home / "inbox"
    os.mkfifo(inbox / "fifo-at-start.md")
    set_age(inbox / "fifo-at-start.md", -60)  # fresh: looked at closely at start-up
    daemon = procs.start(home)
    daemon.wait_event("watching")
    (inbox / "zero.md").symlink_to("/dev/zero")
    os.mkfifo(inbox / "fifo.md")
    drop_story(home, "good")
    assert daemon.wait_event("finished", story="good")["status"] == "passed"

    expected = {
        "fifo-at-start.md": "found a FIFO (named pipe)",
        "fifo.md": "found a FIFO (named pipe)",
        "zero.md": "found a character device",
    }
    for name, words in expected.items():
        event = daemon.wait_event("rejected", file=name)
        assert event["reason"] == (
            f"{inbox / name}: file: expected a regular markdown file; {words}"
        )
        assert words in (home / "runs" / "rejected" / f"{name}.error.txt").read_text()
    assert peak_rss_kb(daemon.pid) < MAX_DAEMON_RSS_KB

    reasons = rejected_reasons(home)  # `hero status` does not hang on them either
    for name, words in expected.items():
        assert reasons[f"inbox/{name}"] == f"file: expected a regular markdown file; {words}"

    drop_story(home, "after")  # the watcher still works
    assert daemon.wait_event("finished", story="after")["status"] == "passed"
    for name in expected:
        assert len(daemon.events("rejected", file=name)) == 1
    stop(daemon)
    no_tracebacks(daemon)


# --------------------------------------------------------------------------- 3. cannot start


def test_story_that_cannot_start_ends_in_error_and_is_tried_once(
    scripted, make_home, write_story, drop_story, procs: Procs, target_repo: Path
) -> None:
    """Before: a base_ref naming no commit "started" and "crashed" with a traceback on every
    rescan, forever, and `hero status` said queued. Now: `error`, once, with the reason,
    until the file is edited or `hero retry`."""
    model = scripted(Policy())
    home = make_home(model)
    daemon = procs.start(home, rescan_s=FAST_RESCAN_S)
    daemon.wait_event("watching")
    drop_story(home, "bad-base", base_ref="no-such-branch")
    finished = daemon.wait_event("finished", story="bad-base")
    reason = f"base_ref 'no-such-branch' is not a branch, tag or commit in {target_repo}"
    assert (finished["status"], finished["error"]) == ("error", reason)

    drop_story(home, "good")  # the daemon goes on
    assert daemon.wait_event("finished", story="good")["status"] == "passed"
    daemon.wait_rescans(3)

    assert len(daemon.events("started", story="bad-base")) == 1
    state = load_state(home, "bad-base")
    assert (state["status"], state["error"], state["runs"]) == ("error", reason, 1)
    rows = {r["id"]: r for r in status_json(home)["stories"]}
    assert (rows["bad-base"]["status"], rows["bad-base"]["error"]) == ("error", reason)
    assert not (home / "runs" / "bad-base" / "error.log").exists()  # not a bug
    assert git(target_repo, "branch", "--list", "hero/bad-base") == ""

    # like any error: `hero retry` (here once the branch exists) runs it again
    git(target_repo, "branch", "no-such-branch", "main")
    assert main(["retry", "bad-base", "--home", str(home)]) == 0
    assert daemon.wait_event("finished", story="bad-base", count=2)["status"] == "passed"
    assert load_state(home, "bad-base")["runs"] == 2
    stop(daemon)
    no_tracebacks(daemon)


INTERNAL_BUG = """
import sys
from pathlib import Path

import hero.run.pipeline

real_start, real_run = hero.run.pipeline.StoryRun._start, hero.run.pipeline.StoryRun.run


def start(self):
    if self.story.id == "bug-in-start":
        raise ZeroDivisionError("a bug while starting")
    return real_start(self)


def run(self):
    if self.story.id == "bug-in-run":
        raise KeyError("a bug outside the pipeline's own guard")
    return real_run(self)


hero.run.pipeline.StoryRun._start, hero.run.pipeline.StoryRun.run = start, run
from hero.cli import main

sys.exit(main(["watch", "--home", sys.argv[1], "--log-format", "json"]))
"""


def test_an_internal_bug_writes_its_traceback_once_and_is_not_retried(
    scripted, make_home, write_story, drop_story, tmp_path: Path
) -> None:
    """A genuine bug (staged by a wrapper: hero has none to offer) is the one case with a
    traceback, written once to runs/<id>/error.log; the log has one line for it."""
    model = scripted(Policy())
    home = make_home(model)
    for sid in ("bug-in-start", "bug-in-run"):
        backlog(write_story(home, sid, verify=["true"]))
    err = tmp_path / "bug.err"
    with open(err, "wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-c", RESCAN_PROBE + INTERNAL_BUG, str(FAST_RESCAN_S), str(home)],
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=fh,
        )
    try:

        def events(name: str) -> list[dict[str, Any]]:
            lines = err.read_text(errors="replace").splitlines()
            return [e for e in map(json.loads, lines) if e.get("event") == name]

        def both_ended() -> bool:
            assert proc.poll() is None, err.read_text()
            finished = [e["story"] for e in events("finished")]
            refused = [e["file"] for e in events("rejected")]
            return "bug-in-start" in finished and "bug-in-run.md" in refused

        assert wait_for(both_ended), err.read_text()
        rescans = rescans_done(len(events("rescanned")), 1)  # a rescan after both ended
        drop_story(home, "good")
        assert wait_for(lambda: any(e["story"] == "good" for e in events("finished")))
        assert wait_for(lambda: len(events("rescanned")) >= rescans), err.read_text()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(STOP_SPEC_S) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    log = err.read_text()
    assert "Traceback" not in log
    assert all(line.startswith("{") for line in log.splitlines()), log
    started = [e["story"] for e in events("started")]
    assert sorted(started) == ["bug-in-run", "bug-in-start", "good"]  # each once

    state = load_state(home, "bug-in-start")
    assert state["status"] == "error" and state["runs"] == 1
    assert state["error"] == (
        "internal error while starting: ZeroDivisionError: a bug while starting "
        "(see runs/bug-in-start/error.log)"
    )
    trace = (home / "runs" / "bug-in-start" / "error.log").read_text()
    assert trace.count("Traceback") == 1 and "ZeroDivisionError" in trace

    (refusal,) = events("rejected")
    assert refusal["file"] == "bug-in-run.md"
    assert "story 'bug-in-run' crashed: KeyError" in refusal["reason"]
    trace = (home / "runs" / "bug-in-run" / "error.log").read_text()
    assert trace.count("Traceback") == 1 and "a bug outside" in trace
    assert (home / "runs" / "rejected" / "bug-in-run.md.error.txt").is_file()


# --------------------------------------------------------------------------- fixtures


@pytest.fixture
def drop_story(tmp_path: Path, write_story):
    """drop_story(home, id, **frontmatter) -> inbox/<id>.md, written a while ago elsewhere
    (so that a rescan finds it settled), renamed in."""
    drafts = tmp_path / "drafts"

    def dropper(home: Path, sid: str, **front: Any) -> Path:
        draft = backlog(write_story(drafts, sid, verify=["true"], **front))
        dest = home / "inbox" / f"{sid}.md"
        os.rename(draft, dest)
        return dest

    return dropper
