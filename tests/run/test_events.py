"""The event stream (`hero run --events`, `hero watch --events`, hero.run.events): real `hero`
processes against the scripted model over real HTTP, their stdout validated line by line
against the JSON Schema shipped in the package."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from helpers import (
    COMMIT,
    PY,
    SUB_IMPL,
    VERIFY_SUB,
    backlog,
    is_review,
    step_of,
    verdict,
    worker_round,
)

from hero.cli import main
from hero.llm.client import Completion, ToolCallRequest
from hero.llm.scripted import HttpError, Reply, ScriptedModel, call, text
from hero.redact import Redactor
from hero.run.events import (
    CUT_CHARS,
    EventSink,
    EventType,
    StopReason,
    StoryEvents,
    cut,
    schema,
)
from hero.trace import Trace, read_trace

KEY_ENV = "HERO_TEST_EVENTS_KEY"
KEY = "sk-hero-events-9Jq2Lm7Xv4Bn8Rt1Yw6Kp3Ze5Dh0Fa"  # not a real key
BIG = 5_000  # characters of one tool's output, more than the cut
TIMEOUT_S = 180.0  # a generous "did not hang" bound, not a speed check

VALIDATOR = jsonschema.Draft202012Validator(schema())


# --------------------------------------------------------------------------- helpers


def good_worker(msg: str) -> list[Reply]:
    return [
        call("write_file", path="calc/__init__.py", content=SUB_IMPL),
        call("bash", command=COMMIT.format(msg=msg)),
        text("Added calc.sub."),
    ]


#: Round 1: a big output, the key echoed and said, a commit without sub (verify fails);
#: round 2: the work done, approved.
ROUND_1 = [
    call("bash", command=f"{PY} -c \"print('x' * {BIG})\""),
    call("bash", command=f"echo the key is {KEY}"),
    call("write_file", path="notes.txt", content="notes\n"),
    call("bash", command=COMMIT.format(msg="notes")),
    text(f"Wrote notes; the token was {KEY}."),
]


def two_rounds(body: dict[str, Any]) -> Reply:
    if is_review(body):
        return verdict("APPROVED", "All good.")
    plan = ROUND_1 if worker_round(body) == 1 else good_worker("add-sub")
    return plan[min(step_of(body), len(plan) - 1)]


def keyed(home: Path) -> dict[str, str]:
    """The provider takes its key from ``$KEY_ENV``; the environment a hero process gets."""
    provider = home / "config" / "providers" / "scripted.yaml"
    provider.write_text(provider.read_text() + f"api_key_env: {KEY_ENV}\n")
    return {**os.environ, KEY_ENV: KEY}


def parse(stdout: str) -> list[dict[str, Any]]:
    """Every line of ``stdout`` as an event, each valid against the schema."""
    assert stdout.endswith("\n"), "the stream ends with a whole line"
    events = []
    for n, line in enumerate(stdout.splitlines(), start=1):
        event = json.loads(line)  # nothing but events on stdout
        errors = sorted(VALIDATOR.iter_errors(event), key=str)
        assert not errors, f"line {n}: {[e.message for e in errors]}\n{line}"
        events.append(event)
    return events


def hero(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hero", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        timeout=TIMEOUT_S,
    )


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


# --------------------------------------------------------------------------- hero run --events


@pytest.mark.slow
def test_two_round_story_streams_valid_events_in_order_ending_with_the_result(
    scripted: Callable[..., ScriptedModel], make_home, write_story, tmp_path: Path
) -> None:
    model = scripted(two_rounds)
    home = make_home(model, max_retries=2)
    env = keyed(home)
    story = write_story(home, "s1", verify=VERIFY_SUB)

    done = hero("run", str(story), "--home", str(home), "--events", "-v", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    events = parse(done.stdout)
    kinds = types(events)

    # the shape of the stream: run_start, round 1, round 2, the result last
    assert kinds[0] == "run_start" and kinds[-1] == "result"
    assert kinds.count("result") == 1 and kinds.count("run_start") == 1
    assert [e["round"] for e in events if e["type"] == "round_start"] == [1, 2]
    assert [e["round"] for e in events if e["type"] == "round_end"] == [1, 2]
    start1, end1 = kinds.index("round_start"), kinds.index("round_end")
    start2 = kinds.index("round_start", end1)
    end2 = kinds.index("round_end", start2)
    assert 0 < start1 < end1 < start2 < end2 < len(kinds) - 1
    assert all(e["round"] == 1 for e in events[start1 : end1 + 1])
    assert all(e["round"] == 2 for e in events[start2 : end2 + 1])
    assert events[0]["round"] is None and events[-1]["round"] is None
    assert {e["story"] for e in events} == {"s1"}
    assert events[0]["id"] == "s1" and events[0]["branch"] == "hero/s1"

    # round 1: five worker turns, four tool calls each with its result, the checks failed,
    # a short-circuited verdict (no reviewer)
    r1 = events[start1 : end1 + 1]
    assert types(r1) == [
        "round_start",
        *["turn", "tool_call", "tool_result"] * 4,
        "turn",
        "verify_command",
        "verify_command",
        "verify",
        "verdict",
        "round_end",
    ]
    turns = [e for e in r1 if e["type"] == "turn"]
    assert [t["turn"] for t in turns] == [1, 2, 3, 4, 5]
    assert turns[0]["tool_calls"] == ["bash"] and turns[-1]["tool_calls"] == []
    assert all(t["role"] == "worker" and t["tokens_in"] > 0 for t in turns)
    assert turns[-1]["finish_reason"] == "stop" and turns[0]["finish_reason"] == "tool_calls"
    calls = [e for e in r1 if e["type"] == "tool_call"]
    assert [c["name"] for c in calls] == ["bash", "bash", "write_file", "bash"]
    assert json.loads(calls[2]["arguments"]) == {"path": "notes.txt", "content": "notes\n"}
    results = [e for e in r1 if e["type"] == "tool_result"]
    assert [r["id"] for r in results] == [c["id"] for c in calls]
    assert not any(r["is_error"] for r in results)
    checks = [e for e in r1 if e["type"] == "verify_command"]
    assert [c["command"] for c in checks] == VERIFY_SUB
    assert checks[1]["exit_code"] != 0 and "sub" in checks[1]["output"]
    assert r1[-3]["passed"] is False
    assert r1[-2]["verdict"] == "CHANGES_REQUESTED" and r1[-2]["short_circuited"] is True
    assert r1[-1]["verdict"] == "CHANGES_REQUESTED" and r1[-1]["turns"] == 5

    # round 2: verified, then the reviewer's answer is a turn of its own, then approved
    r2 = events[start2 : end2 + 1]
    assert types(r2)[-6:] == [
        "verify_command",
        "verify_command",
        "verify",
        "turn",
        "verdict",
        "round_end",
    ]
    assert r2[-3]["role"] == "reviewer" and r2[-2]["verdict"] == "APPROVED"

    # a long tool result is cut, with the full text in the round's trace
    big = results[0]["content"]
    assert len(big) < CUT_CHARS + 100 and "more characters cut" in big
    trace = read_trace(home / "runs" / "s1" / "round-1.jsonl")
    full = [e for e in trace if e["event"] == "tool_result" and e["id"] == results[0]["id"]]
    assert full[0]["content"].count("x") >= BIG

    # the result: the --json object, grown
    result = events[-1]["result"]
    assert result["id"] == "s1" and result["status"] == "passed" and result["rounds"] == 2
    assert result["verdicts"] == ["CHANGES_REQUESTED", "APPROVED"]
    assert result["final_text"] == "Added calc.sub."
    assert result["transcripts"] == [str(home / "runs" / "s1" / f"round-{n}.jsonl") for n in (1, 2)]
    assert result["turns"] == 5 + 3 and result["tool_calls"] == 4 + 2

    # the key never appears, in any event; its places say [redacted]
    assert KEY not in done.stdout and KEY not in done.stderr
    said = [e for e in events if e["type"] in ("tool_call", "tool_result", "turn")]
    assert sum("[redacted]" in json.dumps(e) for e in said) >= 3
    # progress stays on stderr; no event failed to be built
    assert "hero: round 1/2: worker" in done.stderr
    assert "event stream:" not in done.stderr


@pytest.mark.slow
def test_events_and_json_together_are_refused(
    scripted: Callable[..., ScriptedModel], make_home, write_story, tmp_path: Path
) -> None:
    model = scripted([text("unused")])
    home = make_home(model)
    story = write_story(home, "s1", verify=VERIFY_SUB)
    env = dict(os.environ)
    done = hero("run", str(story), "--home", str(home), "--events", "--json", env=env, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert "--events and --json" in done.stderr and not model.requests


@pytest.mark.slow
def test_a_reader_that_goes_away_does_not_break_the_story(
    scripted: Callable[..., ScriptedModel], make_home, write_story, tmp_path: Path
) -> None:
    """The reader takes the first line and closes the pipe while the worker's first model
    call is held back: every later event meets a closed pipe, and the story passes."""
    closed = threading.Event()

    def handler(body: dict[str, Any]) -> Reply:
        if is_review(body):
            return verdict("APPROVED", "All good.")
        if step_of(body) == 0:
            assert closed.wait(TIMEOUT_S)
        plan = good_worker("add-sub")
        return plan[min(step_of(body), len(plan) - 1)]

    model = scripted(handler)
    home = make_home(model)
    story = write_story(home, "s1", verify=VERIFY_SUB)
    err = tmp_path / "run.err"
    with open(err, "wb") as err_fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "hero", "run", str(story), "--home", str(home), "--events"],
            stdout=subprocess.PIPE,
            stderr=err_fh,
            stdin=subprocess.DEVNULL,
            cwd=tmp_path,
        )
    try:
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())
        assert first["type"] == "run_start"
        proc.stdout.close()
        closed.set()
        assert proc.wait(timeout=TIMEOUT_S) == 0, err.read_text()
    finally:
        closed.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    state = json.loads((home / "runs" / "state" / "s1.json").read_text())
    assert state["status"] == "passed"
    assert "Traceback" not in err.read_text() and "BrokenPipe" not in err.read_text()


# --------------------------------------------------------------------------- hero watch --events


@pytest.mark.slow
def test_watch_streams_each_story_whole_lines_one_result_each(
    scripted: Callable[..., ScriptedModel], make_home, write_story, tmp_path: Path
) -> None:
    def handler(body: dict[str, Any]) -> Reply:
        if is_review(body):
            return verdict("APPROVED", "All good.")
        task = str(body["messages"][1]["content"])
        plan = good_worker("two" if "Story s2" in task else "one")
        return plan[min(step_of(body), len(plan) - 1)]

    model = scripted(handler)
    home = make_home(model, max_parallel=2)
    env = keyed(home)
    backlog(
        write_story(home, "s1", verify=VERIFY_SUB),
        write_story(home, "s2", verify=VERIFY_SUB),
    )
    done = hero(
        "watch",
        "--home",
        str(home),
        "--exit-when-idle",
        "--log-format",
        "json",
        "--events",
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    events = parse(done.stdout)  # whole lines, every one valid: none interleaved
    for sid in ("s1", "s2"):
        mine = [e for e in events if e["story"] == sid]
        assert mine[0]["type"] == "run_start" and mine[-1]["type"] == "result", sid
        assert types(mine).count("result") == 1
        assert mine[-1]["result"]["status"] == "passed"
        assert [e["round"] for e in mine if e["type"] == "round_start"] == [1]
    # the logs are on stderr, as JSON lines of their own (never on stdout)
    logs = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    assert any(e.get("event") == "finished" for e in logs)
    assert "event stream:" not in done.stderr
    assert not any("event" in e and "type" not in e for e in events)
    assert KEY not in done.stdout and KEY not in done.stderr


# --------------------------------------------------------------------------- the pieces


class Gone(io.StringIO):
    def write(self, s: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


def test_sink_stops_quietly_once_its_reader_is_gone() -> None:
    told: list[bool] = []
    sink = EventSink(Gone(), on_gone=lambda: told.append(True))
    events = StoryEvents(sink, "s1")
    events.error("first")
    events.error("second")  # nothing written, nothing raised, told once
    assert told == [True] and not sink.open and not events


@pytest.mark.slow
def test_sink_writes_whole_lines_from_many_threads() -> None:
    stream = io.StringIO()
    sink = EventSink(stream)
    long = "y" * 50_000

    def story(n: int) -> None:
        events = StoryEvents(sink, f"s{n}")
        for _ in range(50):
            events.error(long)

    threads = [threading.Thread(target=story, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    events = parse(stream.getvalue())
    assert len(events) == 8 * 50
    assert all(e["message"] == cut(long) for e in events)


def test_secrets_are_redacted_before_long_texts_are_cut() -> None:
    """A secret across the cut would leave half of it in the event if the text were cut
    first: it is redacted first."""
    stream = io.StringIO()
    events = StoryEvents(EventSink(stream), "s1", Redactor([KEY]))
    events.error("a" * (CUT_CHARS - 10) + KEY)
    (event,) = parse(stream.getvalue())
    assert KEY[:10] not in event["message"]
    assert event["message"].endswith("[redacted]")


def test_cut_says_how_much_was_left_out() -> None:
    assert cut("abc", 5) == "abc"
    assert cut("abcdefgh", 5) == "abcde... [3 more characters cut; the trace has all]"


def test_the_schema_ships_in_the_package_and_names_every_type() -> None:
    loaded = schema()
    jsonschema.Draft202012Validator.check_schema(loaded)
    refs = {ref["$ref"].rsplit("/", 1)[1] for ref in loaded["oneOf"]}
    assert refs == {t.value for t in EventType}
    # an event of no known type, or with a field of no type's, is refused
    bad = {"type": "nope", "story": "s1", "round": None, "time": "2026-01-01T00:00:00.000Z"}
    assert not VALIDATOR.is_valid(bad)
    extra = {**bad, "type": "error", "message": "m", "surprise": 1}
    assert not VALIDATOR.is_valid(extra)
    assert VALIDATOR.is_valid({**bad, "type": "error", "message": "m"})


# --------------------------------------------------------------------------- stops, in process


def run_events(home: Path, story: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list]:
    """`hero run STORY --events` in this process: its exit code and its events."""
    code = main(["run", str(story), "--home", str(home), "--events"])
    return code, parse(capsys.readouterr().out)


@pytest.mark.slow
def test_a_guardrail_and_the_rounds_running_out_are_stops_naming_their_setting(
    scripted: Callable[..., ScriptedModel],
    make_home,
    write_story,
    capsys: pytest.CaptureFixture[str],
) -> None:
    busy = call("bash", command="true")  # never ends its turn
    model = scripted(lambda body: verdict("APPROVED") if is_review(body) else busy)
    home = make_home(model, max_retries=1, worker_max_turns=2)
    code, events = run_events(home, write_story(home, "s1", verify=VERIFY_SUB), capsys)
    assert code == 1
    stops = [e for e in events if e["type"] == "stop"]
    assert [(s["reason"], s["setting"], s["round"]) for s in stops] == [
        ("guardrail", "worker_max_turns", 1),
        ("gave_up", "max_retries", None),
    ]
    assert stops[0]["guardrail"] == "max_turns"
    kinds = types(events)
    assert kinds.index("stop") < kinds.index("verdict") < kinds.index("round_end")
    assert kinds[-2:] == ["stop", "result"] and events[-1]["result"]["status"] == "gave_up"


@pytest.mark.slow
def test_a_budget_stop_names_the_budget(
    scripted: Callable[..., ScriptedModel],
    make_home,
    write_story,
    capsys: pytest.CaptureFixture[str],
) -> None:
    model = scripted(lambda body: call("bash", command="true"))
    home = make_home(model, max_story_tokens=1)
    code, events = run_events(home, write_story(home, "s1", verify=VERIFY_SUB), capsys)
    assert code == 1
    stop = next(e for e in events if e["type"] == "stop")
    assert stop["reason"] == "budget" and stop["setting"] == "max_story_tokens"
    assert stop["round"] == 1 and "max_story_tokens" in stop["detail"]
    assert types(events)[-1] == "result"
    assert events[-1]["result"]["status"] == "budget_exceeded"


def test_an_outage_is_a_stop_then_the_result_of_a_paused_story(
    scripted: Callable[..., ScriptedModel],
    make_home,
    write_story,
    capsys: pytest.CaptureFixture[str],
) -> None:
    model = scripted(lambda body: HttpError(503, "down for maintenance"))
    home = make_home(model)
    code, events = run_events(home, write_story(home, "s1", verify=VERIFY_SUB), capsys)
    assert code == 75
    # the checks ran on the starting commit first: the baseline, no model call needed
    assert types(events) == ["run_start", "baseline", "round_start", "stop", "result"]
    stop = events[3]
    assert stop["reason"] == "outage" and stop["kind"] == "transient"
    assert stop["provider"] == "scripted" and stop["setting"] is None
    result = events[-1]["result"]
    assert result["status"] == "interrupted" and result["outage"]["provider"] == "scripted"
    assert result["transcripts"] == [str(home / "runs" / "s1" / "round-1.jsonl")]


@pytest.mark.slow
def test_sigterm_mid_round_ends_the_stream_with_a_stop_and_the_result(
    scripted: Callable[..., ScriptedModel], make_home, write_story, tmp_path: Path
) -> None:
    asked = threading.Event()
    release = threading.Event()

    def handler(body: dict[str, Any]) -> Reply:
        asked.set()
        release.wait(TIMEOUT_S)  # held until hero was told to stop
        return call("bash", command="true")

    model = scripted(handler)
    home = make_home(model)
    story = write_story(home, "s1", verify=VERIFY_SUB)
    out, err = tmp_path / "run.out", tmp_path / "run.err"
    with open(out, "wb") as out_fh, open(err, "wb") as err_fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "hero", "run", str(story), "--home", str(home), "--events"],
            stdout=out_fh,
            stderr=err_fh,
            stdin=subprocess.DEVNULL,
            cwd=tmp_path,
        )
    try:
        assert asked.wait(TIMEOUT_S), err.read_text()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=TIMEOUT_S) == 130, err.read_text()
    finally:
        release.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    events = parse(out.read_text())
    assert types(events)[-2:] == ["stop", "result"]
    assert events[-2]["reason"] == "interrupted" and events[-2]["round"] == 1
    assert events[-1]["result"]["status"] == "interrupted"


def test_every_kind_of_event_validates_and_a_trace_feeds_the_stream(tmp_path: Path) -> None:
    """Each method of StoryEvents, and each trace record the stream translates (written
    through a real Trace with the tap), gives an event the schema accepts."""
    stream = io.StringIO()
    events = StoryEvents(EventSink(stream), "plan-a/s1", Redactor([KEY]))
    events.run_start(story_id="s1", plan="plan-a", file=tmp_path / "s1.md", branch="hero/s1")
    events.overlap(others=["plan-a/s0", "s9 (hero home /h)"], scope=("/src",), mode="serial")
    events.round_start(1, max_rounds=3, part=2)
    trace = Trace(tmp_path / "round-1.jsonl", redact=Redactor([KEY]), tap=events.tap)
    with trace:
        trace.message("user", f"the task, {KEY}")  # not an event
        reply = Completion(
            content=f"calling {KEY}",
            tool_calls=(ToolCallRequest("c1", "bash", json.dumps({"command": "x" * 3000})),),
            message={},
            tokens_in=10,
            tokens_out=2,
            http_s=0.5,
            finish_reason="tool_calls",
            tokens_cached=4,
        )
        trace.assistant(1, reply, estimate=None)
        trace.tool_start(1, reply.tool_calls[0])
        trace.tool_result(1, "c1", "bash", "boom", is_error=True, duration_s=0.1)
        trace.tool_result(1, "c2", "bash", "hero was restarted", is_error=True, lost="running")
        trace.condense(
            {"turn": 2, "tokens_before": 900, "tokens_after": 300, "elided": [1], "summary": {}}
        )
        trace.agent_end({"stop_reason": "loop", "detail": "the same call 4 times"})
        trace.verify({"passed": False, "commands": [], "skipped_tiers": ["slow"], "log": "v.log"})
        trace.verdict({"verdict": "CHANGES_REQUESTED", "summary": "no", "short_circuited": True})
    events.verify_command(
        {"tier": "unit", "command": "pytest", "exit_code": 1, "duration_s": 1.0, "tail": "F"}
    )
    events.round_end({"round": 1, "duration_s": 2.0, "worker": {}, "review": {}})
    for reason in StopReason:
        events.stop(reason, f"why {KEY}")
    events.stop(StopReason.OUTAGE, "down", provider="p", kind="permanent")
    events.error(f"bad {KEY}")
    events.result({"id": "s1"})
    out = stream.getvalue()
    lines = [json.loads(line) for line in out.splitlines()]
    for line in lines:  # the result's object is the run's own: checked by the e2e tests
        if line["type"] != "result":
            assert VALIDATOR.is_valid(line), line
    assert KEY not in out
    assert types(lines) == [
        "run_start",
        "overlap",
        "round_start",
        "turn",
        "tool_call",
        "tool_result",
        "tool_result",
        "condense",
        "stop",
        "verify",
        "verdict",
        "verify_command",
        "round_end",
        *["stop"] * (len(StopReason) + 1),
        "error",
        "result",
    ]
    overlap = lines.pop(1)
    assert overlap["with"] == ["plan-a/s0", "s9 (hero home /h)"] and overlap["round"] is None
    assert overlap["scope"] == ["/src"] and overlap["mode"] == "serial"
    assert not VALIDATOR.is_valid({**overlap, "with": []})  # names at least one story
    turn, call_, lost = lines[2], lines[3], lines[5]
    assert turn["tokens_cached"] == 4 and turn["duration_s"] == 0.5
    assert "more characters cut" in call_["arguments"]
    assert lost["lost"] == "running" and lost["duration_s"] is None
    assert lines[6]["elided"] == 1 and lines[6]["summarized"] is False
    assert lines[7]["setting"] == "loop_repeats" and lines[7]["guardrail"] == "loop"
    assert lines[11]["round"] == 1 and lines[12]["round"] is None  # round_end closes it


def test_an_event_that_cannot_be_built_is_said_once_and_never_raised(
    capsys: pytest.CaptureFixture[str],
) -> None:
    stream = io.StringIO()
    events = StoryEvents(EventSink(stream), "s1")
    events.stop(StopReason.OUTAGE, "down", reason="twice")  # a bug's call: a clash
    events.round_end(None)  # type: ignore[arg-type]
    events.error("still written")
    assert [e["type"] for e in parse(stream.getvalue())] == ["error"]
    assert capsys.readouterr().err.count("hero: event stream:") == 1


@pytest.mark.slow
def test_a_second_run_of_a_running_story_streams_its_refusal_and_a_result(
    scripted: Callable[..., ScriptedModel], make_home, write_story, tmp_path: Path
) -> None:
    """Two `hero run --events` of one story at once: the second is refused by the first's
    lock (exit 2) and says so in its stream, ending with a result; the first passes."""
    asked = threading.Event()
    release = threading.Event()

    def handler(body: dict[str, Any]) -> Reply:
        if is_review(body):
            return verdict("APPROVED", "All good.")
        if step_of(body) == 0:
            asked.set()
            assert release.wait(TIMEOUT_S)
        plan = good_worker("add-sub")
        return plan[min(step_of(body), len(plan) - 1)]

    model = scripted(handler)
    home = make_home(model)
    story = write_story(home, "s1", verify=VERIFY_SUB)
    out, err = tmp_path / "first.out", tmp_path / "first.err"
    with open(out, "wb") as out_fh, open(err, "wb") as err_fh:
        first = subprocess.Popen(
            [sys.executable, "-m", "hero", "run", str(story), "--home", str(home), "--events"],
            stdout=out_fh,
            stderr=err_fh,
            stdin=subprocess.DEVNULL,
            cwd=tmp_path,
        )
    try:
        assert asked.wait(TIMEOUT_S), err.read_text()
        second = hero(
            "run", str(story), "--home", str(home), "--events", env=dict(os.environ), cwd=tmp_path
        )
        release.set()
        assert first.wait(timeout=TIMEOUT_S) == 0, err.read_text()
    finally:
        release.set()
        if first.poll() is None:
            first.kill()
            first.wait()
    assert second.returncode == 2, second.stderr
    refused = parse(second.stdout)
    assert types(refused) == ["run_start", "error", "result"]
    result = refused[-1]["result"]
    assert result["status"] == "running" and result["error"] == refused[1]["message"]
    ran = parse(out.read_text())
    assert ran[-1]["result"]["status"] == "passed"


def test_whatever_a_worker_wrote_is_one_line_of_ascii() -> None:
    """Line separators str.splitlines honours, a lone surrogate (unencodable in UTF-8),
    control characters: each event stays one line, and the stream stays open."""
    stream = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    sink = EventSink(stream)
    events = StoryEvents(sink, "s1")
    hostile = "a\u2028b\u2029c\x85d\x1ce\ud800f\r\ng\u00e9"
    events.error(hostile)
    events.error("after")
    stream.flush()
    raw = stream.buffer.getvalue()  # type: ignore[attr-defined]
    assert raw.isascii() and sink.open
    lines = raw.decode().splitlines()
    assert [json.loads(line)["message"] for line in lines] == [hostile, "after"]


def test_a_dry_run_has_no_events_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused before any file is read: --events would otherwise be ignored in silence."""
    code = main(["run", str(tmp_path / "s.md"), "--dry-run", "--events"])
    assert code == 2
    assert "use --dry-run --json" in capsys.readouterr().err
