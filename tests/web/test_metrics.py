"""hero serve's /metrics (hero.web.metrics): the numbers of a real run, read from its run
record and traces; incremental reading of the traces; hostile files.

The run is real (the scripted model over loopback HTTP, a real git repository, real verify
commands); the other tests lay out a home's files with hero's own writers (``save_state``,
``Trace``) and then attack them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("prometheus_client", reason="the serve extra is not installed")

from helpers import COMMIT, SUB_AC, SUB_IMPL, VERIFY_SUB, verdict
from prometheus_client.parser import text_string_to_metric_families

from hero.cli import main
from hero.llm.client import Completion, error_kind
from hero.llm.scripted import HttpError, Reply, ToolCall
from hero.locks import DaemonLock
from hero.state import Round, RunState, Status, save_state
from hero.trace import Trace, read_trace
from hero.web.metrics import LABEL_CHARS, LABEL_VALUES, Metrics, exposition

MODELS = {
    "worker": {"provider": "local", "model": "w-1", "reasoning_effort": None},
    "reviewer": {"provider": "local", "model": "r-1", "reasoning_effort": None},
}

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(body: bytes) -> Samples:
    """Every sample of an exposition by (name, sorted labels), parsed by prometheus_client."""
    out: Samples = {}
    for family in text_string_to_metric_families(body.decode("utf-8")):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of ``name`` over the samples whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= set(ls))


def worker_reply(*calls: ToolCall, content: str | None = None, n: int = 1) -> Reply:
    return Reply(
        content=content,
        tool_calls=calls,
        prompt_tokens=100 * n,
        completion_tokens=10 * n,
        cached_tokens=20 * n,
        cost=0.001 * n,
    )


# ----------------------------------------------------------------------------- a real run


@pytest.mark.slow
def test_a_real_run_is_counted_as_its_record_and_traces_say(
    scripted, make_home, write_story, target_repo: Path
) -> None:
    script = [
        HttpError(503),  # retried: the answer after it carries the error's kind
        worker_reply(ToolCall("write_file", {"path": "calc/__init__.py", "content": SUB_IMPL})),
        worker_reply(ToolCall("bash", {"command": COMMIT.format(msg="add-sub")}), n=2),
        worker_reply(content="Added calc.sub.", n=3),
        verdict("CHANGES_REQUESTED", "Looked.", ac=SUB_AC, cached_tokens=7),
        worker_reply(ToolCall("write_file", {"path": "calc/more.py", "content": "X = 1\n"})),
        worker_reply(ToolCall("bash", {"command": COMMIT.format(msg="more")})),
        worker_reply(content="Done.", n=2),
        verdict("APPROVED", "Looked.", ac=SUB_AC, cached_tokens=7),
    ]
    model = scripted(script)
    home = make_home(model)
    story = write_story(home, "s1", verify=VERIFY_SUB)
    assert main(["run", str(story), "--home", str(home)]) == 0
    assert model.remaining == 0

    record = json.loads((home / "runs" / "state" / "s1.json").read_text())
    assert record["status"] == "passed" and len(record["rounds"]) == 2
    events = [
        e for p in sorted((home / "runs" / "s1").glob("round-*.jsonl")) for e in read_trace(p)
    ]
    worker = [e for e in events if e["event"] == "assistant"]
    reviewer = [e for e in events if e["event"] == "review_answer"]
    assert len(worker) == 6 and len(reviewer) == 2
    assert worker[0]["errors"] == ["http_503"]  # the retried error, kept in the trace
    assert "errors" not in worker[1]

    s = scrape(Metrics(home).exposition()[0])
    assert value(s, "hero_stories", status="passed") == 1
    assert value(s, "hero_stories", status="running") == 0
    assert value(s, "hero_rounds_total") == 2
    assert value(s, "hero_verdicts_total", verdict="changes_requested", source="reviewer") == 1
    assert value(s, "hero_verdicts_total", verdict="approved", source="reviewer") == 1
    # the record's totals, fleet-wide
    usage = record["usage"]
    assert value(s, "hero_story_model_calls_total") == usage["llm_calls"] == 8
    assert value(s, "hero_story_tokens_total", kind="in") == usage["tokens_in"]
    assert value(s, "hero_story_tokens_total", kind="out") == usage["tokens_out"]
    assert value(s, "hero_story_tokens_total", kind="cached") == usage["tokens_cached"]
    assert value(s, "hero_story_cost_usd_total") == pytest.approx(usage["cost_usd"])
    # the traces' calls, by role and model (the scripted provider's default model)
    w = {"role": "worker", "provider": "scripted", "model": "scripted-test"}
    r = {"role": "reviewer", "provider": "scripted", "model": "scripted-test"}
    assert value(s, "hero_model_calls_total", **w) == 6
    assert value(s, "hero_model_calls_total", **r) == 2
    assert value(s, "hero_model_tokens_total", **w, kind="in") == sum(
        e["tokens_in"] for e in worker
    )
    assert value(s, "hero_model_tokens_total", **w, kind="out") == 10 * (1 + 2 + 3 + 1 + 1 + 2)
    assert value(s, "hero_model_tokens_total", **w, kind="cached") == 20 * 10
    assert value(s, "hero_model_cost_usd_total", **w) == pytest.approx(0.010)
    assert value(s, "hero_model_tokens_total", **r, kind="in") == sum(
        e["tokens_in"] for e in reviewer
    )
    assert value(s, "hero_model_tokens_total", **r, kind="cached") == 14  # the reviewer's too
    assert value(s, "hero_model_latency_seconds_count", **w) == 6
    assert value(s, "hero_model_latency_seconds_sum", **w) == pytest.approx(
        sum(e["http_s"] for e in worker)
    )
    assert value(s, "hero_model_errors_total", **w, kind="http_503") == 1
    # the roles together are the record's count
    assert total(s, "hero_model_calls_total") == usage["llm_calls"]
    # verify: two commands a round, both passed
    durations = [c["duration_s"] for rd in record["rounds"] for c in rd["verify"]["commands"]]
    assert total(s, "hero_verify_command_duration_seconds_count", result="passed") == 4
    assert total(s, "hero_verify_command_duration_seconds_sum") == pytest.approx(sum(durations))
    # the home: no daemon, nothing queued, no breaker
    assert value(s, "hero_daemon_up") == 0
    assert value(s, "hero_queue_length") == 0
    assert value(s, "hero_metrics_trace_lines_skipped_total") == 0


def test_error_kind_is_a_short_fixed_vocabulary() -> None:
    assert error_kind("HTTP 503") == "http_503"
    assert error_kind("HTTP 429 (rate limited)") == "http_429"
    assert error_kind("HTTP weird") == "http"
    assert error_kind("timed out after 30 s") == "timeout"
    assert error_kind("connection failed (refused)") == "connection"
    assert error_kind("unusable answer (not JSON)") == "unusable"


# ----------------------------------------------------------------------------- a home by hand


def completion(tokens_in: int = 100, tokens_out: int = 10, **extra: Any) -> Completion:
    return Completion(
        content="ok",
        tool_calls=(),
        message={"role": "assistant", "content": "ok"},
        tokens_in=tokens_in,
        tokens_out=tokens_out,
        http_s=0.2,
        finish_reason="stop",
        **extra,
    )


def story(home: Path, story_id: str = "s1", **fields: Any) -> RunState:
    state = RunState(id=story_id, title=f"Story {story_id}", models=MODELS, **fields)
    save_state(home, state)
    return state


def trace_path(home: Path, story_id: str = "s1", n: int = 1) -> Path:
    return home / "runs" / story_id / f"round-{n}.jsonl"


def write_calls(path: Path, worker: int = 0, reviewer: int = 0, **extra: Any) -> int:
    """Append model calls with hero's own writer; returns the bytes appended."""
    before = path.stat().st_size if path.exists() else 0
    with Trace(path) as trace:
        for turn in range(worker):
            trace.assistant(turn + 1, completion(**extra), estimate=None)
            trace.tool_result(turn + 1, "c", "bash", "x" * 5000, is_error=False, duration_s=1)
        for _ in range(reviewer):
            trace.review_answer(completion(tokens_in=50, tokens_out=5))
    return path.stat().st_size - before


W = {"role": "worker", "provider": "local", "model": "w-1"}
R = {"role": "reviewer", "provider": "local", "model": "r-1"}


def test_only_new_bytes_are_read_and_nothing_is_counted_twice(tmp_path: Path) -> None:
    home = tmp_path / "home"
    story(home)
    path = trace_path(home)
    size = write_calls(path, worker=3, reviewer=1, cost_usd=0.5, errors=("timeout",))
    m = Metrics(home)

    s = scrape(m.exposition()[0])
    assert m.trace_bytes_read == size
    assert value(s, "hero_model_calls_total", **W) == 3
    assert value(s, "hero_model_calls_total", **R) == 1
    assert value(s, "hero_model_tokens_total", **W, kind="in") == 300
    assert value(s, "hero_model_cost_usd_total", **W) == pytest.approx(1.5)
    assert value(s, "hero_model_errors_total", **W, kind="timeout") == 3

    s = scrape(m.exposition()[0])  # nothing changed: no byte read, the same numbers
    assert m.trace_bytes_read == size
    assert value(s, "hero_model_calls_total", **W) == 3

    more = write_calls(path, worker=2)
    s = scrape(m.exposition()[0])
    assert m.trace_bytes_read == size + more  # only what was appended
    assert value(s, "hero_model_calls_total", **W) == 5
    assert value(s, "hero_model_tokens_total", **W, kind="in") == 500
    assert value(s, "hero_model_latency_seconds_count", **W) == 5

    # a second round's trace joins in
    write_calls(trace_path(home, n=2), reviewer=2)
    s = scrape(m.exposition()[0])
    assert value(s, "hero_model_calls_total", **R) == 3

    # replaced by another file (another inode): read again from its start, not added
    fresh = path.with_name("new.tmp")
    write_calls(fresh, worker=1)
    os.replace(fresh, path)
    s = scrape(m.exposition()[0])
    assert value(s, "hero_model_calls_total", **W) == 1

    # cut short in place: read again from the start
    write_calls(path, worker=4)
    scrape(m.exposition()[0])
    with open(path, "r+b") as fh:
        fh.truncate(0)
    write_calls(path, worker=2)
    s = scrape(m.exposition()[0])
    assert value(s, "hero_model_calls_total", **W) == 2

    # the exposition(home) cache keeps one reader per home: the second call reads nothing
    exposition(home)
    body, content_type = exposition(home)
    assert content_type.startswith("text/plain; version=0.0.4")
    assert value(scrape(body), "hero_model_calls_total", **W) == 2


def test_a_record_is_parsed_again_only_when_it_changed(tmp_path: Path) -> None:
    home = tmp_path / "home"
    for i in range(60):
        rounds = [Round(round=1), Round(round=2)]
        story(home, f"s{i}", status=Status.PASSED, rounds=rounds)
        write_calls(trace_path(home, f"s{i}"), worker=2, reviewer=1)
    m = Metrics(home)
    s = scrape(m.exposition()[0])
    assert m.records_parsed == 60
    read = m.trace_bytes_read
    assert value(s, "hero_stories", status="passed") == 60
    assert value(s, "hero_rounds_total") == 120
    assert value(s, "hero_model_calls_total", **W) == 120

    opened = m.files_opened
    assert opened == 120
    s = scrape(m.exposition()[0])
    assert m.records_parsed == 60 and m.trace_bytes_read == read  # nothing re-read,
    assert m.files_opened == opened  # nor even opened
    assert value(s, "hero_rounds_total") == 120

    state = story(home, "s7", status=Status.RUNNING, rounds=[Round(round=1)])
    assert state.status == Status.RUNNING
    s = scrape(m.exposition()[0])
    assert m.records_parsed == 61
    assert value(s, "hero_stories", status="running") == 1
    assert value(s, "hero_running_stories") == 1
    assert value(s, "hero_rounds_total") == 119


def test_what_a_removed_file_counted_stays_counted(tmp_path: Path) -> None:
    home = tmp_path / "home"
    story(home, "a", status=Status.PASSED, rounds=[Round(round=1)])
    story(home, "b", status=Status.PASSED, rounds=[Round(round=1)])
    write_calls(trace_path(home, "a"), worker=2)
    m = Metrics(home)
    s = scrape(m.exposition()[0])
    assert value(s, "hero_rounds_total") == 2 and value(s, "hero_model_calls_total", **W) == 2
    # hero clean removes a's record and traces: the counters do not go down
    (home / "runs" / "state" / "a.json").unlink()
    trace_path(home, "a").unlink()
    s = scrape(m.exposition()[0])
    assert value(s, "hero_stories", status="passed") == 1  # a gauge: what is there now
    assert value(s, "hero_rounds_total") == 2
    assert value(s, "hero_model_calls_total", **W) == 2


def test_torn_and_foreign_lines_are_skipped_and_a_torn_end_is_read_once_whole(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    story(home)
    path = trace_path(home)
    write_calls(path, worker=1)
    whole = path.read_bytes().splitlines(keepends=True)[0]  # one assistant line
    with open(path, "ab") as fh:
        fh.write(b"not json at all\n")
        fh.write(b'{"t": 1, "ts": 2, "event": "assistant", "tokens_in": \n')  # cut mid-way
        fh.write(b"\xff\xfe binary \x00\n")
        fh.write(
            b'{"t": 1, "ts": 2, "event": "assistant", "tokens_in": "lots", "http_s": -4,'
            b' "tokens_out": 1e999, "errors": ["<script>", 5, "http_99999"]}\n'
        )
        fh.write(whole[:40])  # a line being written
    m = Metrics(home)
    s = scrape(m.exposition()[0])
    # the first line, and the odd one whose numbers count 0 (its errors are "other")
    assert value(s, "hero_model_calls_total", **W) == 2
    assert value(s, "hero_model_tokens_total", **W, kind="in") == 100
    assert value(s, "hero_model_tokens_total", **W, kind="out") == 10
    assert value(s, "hero_model_latency_seconds_count", **W) == 1  # -4 s is no latency
    assert value(s, "hero_model_errors_total", **W, kind="other") == 3
    assert value(s, "hero_metrics_trace_lines_skipped_total") == 3
    with open(path, "ab") as fh:  # the line being written ends
        fh.write(whole[40:])
    s = scrape(m.exposition()[0])
    assert value(s, "hero_model_calls_total", **W) == 3  # counted once, whole
    assert value(s, "hero_metrics_trace_lines_skipped_total") == 3


def test_hostile_label_values_stay_valid_and_bounded(tmp_path: Path) -> None:
    home = tmp_path / "home"
    evil = 'x"} 1\n# TYPE evil counter\nevil_total{a="'
    for i in range(LABEL_VALUES + 30):
        models = {
            "worker": {"provider": evil, "model": f"m{i}" + "y" * 500},
            "reviewer": {"provider": "\x1b[31mred", "model": "<script>alert(1)</script>"},
            "stranger": {"provider": "z", "model": "z"},
        }
        verify = {
            "passed": False,
            "commands": [
                {"tier": f"tier\n{i}", "duration_s": 1.5, "exit_code": 1, "timed_out": False},
                {"tier": "t", "duration_s": "soon", "exit_code": 0},
                "not a command",
            ],
        }
        state = RunState(
            id=f"s{i}",
            status=Status.INTERRUPTED,
            models=models,
            rounds=[Round(round=1, verify=verify)],
            outage={"provider": evil, "kind": "weird", "reason": "r"},
        )
        save_state(home, state)
        write_calls(trace_path(home, f"s{i}"), worker=1, reviewer=1)
    body, _ = Metrics(home).exposition()
    s = scrape(body)  # parses: nothing a file says breaks the format
    # a label value cannot end its sample nor start a line of its own
    assert not any(line.startswith((b"evil", b"# TYPE evil")) for line in body.splitlines())
    assert all(name.startswith("hero_") for name, _ in s)
    for label in ("provider", "model", "tier"):
        values = {dict(ls).get(label) for _, ls in s} - {None}
        assert len(values) <= LABEL_VALUES + 1  # and "other"
        assert all(len(v) <= LABEL_CHARS and v.isprintable() for v in values)
    assert "other" in {dict(ls).get("model") for _, ls in s}
    assert value(s, "hero_stories", status="interrupted") == LABEL_VALUES + 30
    assert total(s, "hero_stories_paused_on_outage", kind="other") == LABEL_VALUES + 30
    assert total(s, "hero_verify_command_duration_seconds_count", result="failed") == (
        LABEL_VALUES + 30
    )
    assert total(s, "hero_model_calls_total", role="stranger") == 0


def test_links_and_odd_files_are_not_followed(tmp_path: Path) -> None:
    home = tmp_path / "home"
    outside = tmp_path / "outside"
    write_calls(outside / "round-1.jsonl", worker=5)
    story(home, "linked")
    (home / "runs" / "linked").symlink_to(outside)  # a run folder swapped for a link
    story(home, "tracelink")
    (home / "runs" / "tracelink").mkdir()
    trace_path(home, "tracelink").symlink_to(outside / "round-1.jsonl")
    story(home, "fifo")
    (home / "runs" / "fifo").mkdir()
    os.mkfifo(trace_path(home, "fifo"))  # would block a reader that opened it plainly
    # a record that is a link to another story's, and one that is not JSON
    (home / "runs" / "state" / "copy.json").symlink_to(home / "runs" / "state" / "fifo.json")
    (home / "runs" / "state" / "junk.json").write_text("{not json")
    (home / "runs" / "state" / "bad name!.json").write_text("{}")

    m = Metrics(home)
    s = scrape(m.exposition()[0])
    assert m.trace_bytes_read == 0
    assert total(s, "hero_model_calls_total") == 0
    assert value(s, "hero_stories", status="unreadable") == 2  # copy, junk; not "bad name!"
    assert value(s, "hero_stories", status="queued") == 3


def test_overlapping_scrapes_agree(tmp_path: Path) -> None:
    home = tmp_path / "home"
    for i in range(10):
        story(home, f"s{i}", status=Status.PASSED, rounds=[Round(round=1)])
        write_calls(trace_path(home, f"s{i}"), worker=3)
    m = Metrics(home)
    results: list[float] = []
    errors: list[BaseException] = []

    def scraper() -> None:
        try:
            for _ in range(5):
                results.append(value(scrape(m.exposition()[0]), "hero_model_calls_total", **W))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=scraper) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors
    assert results == [30.0] * 30


def test_breakers_daemon_and_queue(tmp_path: Path, write_story) -> None:
    home = tmp_path / "home"
    (home / "runs").mkdir(parents=True)
    (home / "runs" / "breakers.json").write_text(
        json.dumps(
            {"breakers": {"acme": {"provider": "acme", "state": "open", "reason": "HTTP 503"}}}
        )
    )
    write_story(home, "q1")
    write_story(home, "q2")
    m = Metrics(home)
    s = scrape(m.exposition()[0])
    assert value(s, "hero_breaker_state", provider="acme", state="open") == 1
    assert value(s, "hero_breaker_state", provider="acme", state="closed") == 0
    assert value(s, "hero_queue_length") == 2
    assert value(s, "hero_daemon_up") == 0
    lock = DaemonLock(home)  # the lock hero watch holds while it runs
    lock.acquire()
    try:
        assert value(scrape(m.exposition()[0]), "hero_daemon_up") == 1
    finally:
        lock.release()
    assert value(scrape(m.exposition()[0]), "hero_daemon_up") == 0
    # a breakers file that is none: that part says unreadable, the rest is still scraped
    (home / "runs" / "breakers.json").write_text("[1, 2")
    s = scrape(m.exposition()[0])
    assert value(s, "hero_breaker_state", provider="?", state="unreadable") == 1
    assert value(s, "hero_queue_length") == 2


def test_a_plan_s_stories_count_too(tmp_path: Path) -> None:
    home = tmp_path / "home"
    state = RunState(id="s1", plan="p1", status=Status.GAVE_UP, models=MODELS)
    state.rounds = [Round(round=1)]
    save_state(home, state)
    write_calls(home / "runs" / "plans" / "p1" / "s1" / "round-1.jsonl", worker=2)
    story(home, "s1", status=Status.PASSED)  # a loose story of the same id
    write_calls(trace_path(home, "s1"), worker=1)
    s = scrape(Metrics(home).exposition()[0])
    assert value(s, "hero_stories", status="gave_up") == 1
    assert value(s, "hero_stories", status="passed") == 1
    assert value(s, "hero_rounds_total") == 1
    assert value(s, "hero_model_calls_total", **W) == 3


def test_hero_help_imports_no_serve_dependency() -> None:
    code = (
        "import sys, contextlib, io\n"
        "from hero.cli import main\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['--help'])\n"
        "bad = [m for m in ('prometheus_client', 'starlette', 'uvicorn', 'hero.web') "
        "if m in sys.modules]\n"
        "print(bad)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]"


def test_an_overlong_line_is_passed_over_not_held(tmp_path: Path) -> None:
    home = tmp_path / "home"
    story(home)
    path = trace_path(home)
    write_calls(path, worker=1)
    with open(path, "ab") as fh:
        fh.write(b'{"t": 1, "ts": 2, "event": "assistant", "content": "' + b"x" * 5000)
    m = Metrics(home, max_line=1000)
    s = scrape(m.exposition()[0])
    assert value(s, "hero_model_calls_total", **W) == 1
    assert value(s, "hero_metrics_trace_lines_skipped_total") == 1
    read = m.trace_bytes_read
    scrape(m.exposition()[0])
    assert m.trace_bytes_read == read  # what was passed over is not read again
    with open(path, "ab") as fh:  # the long line ends; a whole call follows
        fh.write(b"x" * 3000 + b'", "tokens_in": 7}\n')
    write_calls(path, worker=1)
    s = scrape(m.exposition()[0])
    assert value(s, "hero_model_calls_total", **W) == 2  # the long line's end is no call
    assert value(s, "hero_model_tokens_total", **W, kind="in") == 200
    assert value(s, "hero_metrics_trace_lines_skipped_total") == 1


def test_runs_itself_may_be_a_link(tmp_path: Path) -> None:
    """runs/ is the user's to place (another disk); below it nothing is a link."""
    elsewhere = tmp_path / "disk" / "home"
    story(elsewhere)
    write_calls(trace_path(elsewhere), worker=2)
    home = tmp_path / "home"
    home.mkdir()
    (home / "runs").symlink_to(elsewhere / "runs")
    s = scrape(Metrics(home).exposition()[0])
    assert value(s, "hero_stories", status="queued") == 1
    assert value(s, "hero_model_calls_total", **W) == 2


def test_a_record_broken_by_hand_keeps_what_it_counted(tmp_path: Path) -> None:
    home = tmp_path / "home"
    story(home, "a", status=Status.PASSED, rounds=[Round(round=1), Round(round=2)])
    m = Metrics(home)
    assert value(scrape(m.exposition()[0]), "hero_rounds_total") == 2
    (home / "runs" / "state" / "a.json").write_text("{broken")
    s = scrape(m.exposition()[0])
    assert value(s, "hero_stories", status="unreadable") == 1
    assert value(s, "hero_stories", status="passed") == 0
    assert value(s, "hero_rounds_total") == 2
    story(home, "a", status=Status.PASSED, rounds=[Round(round=1), Round(round=2), Round(round=3)])
    assert value(scrape(m.exposition()[0]), "hero_rounds_total") == 3
