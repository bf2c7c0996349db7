#!/usr/bin/env python
"""hero benchmark: a long round under a small context window.

    python bench/context.py              # a 200-turn round, about 15 s on 2 cores
    python bench/context.py --turns 120  # shorter

A scripted worker reads ten 20 kB files over and over (``read_file`` and ``bash cat`` in
turn) under a 32,000-token window. The report shows the largest request the model server
received (measured on the server, two ways), how often hero condensed the history, what
the condensation costs per turn (the overhead of bench/run.py: wall - the model's HTTP
round trip - the command's own run time, target 2 ms), and the same round without
context management for comparison.

No key, no network: the scripted model runs on loopback in a child process (as in
bench/run.py), behind the real ``LlmClient``. A report, not a test: it prints a table and
exits 0 even when a target is missed. See bench/README.md for what each row means.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from report import GIT_ISOLATION, Report, env_line, make_repo, median, print_report, run_sections
from run import TURN_TARGET_MS, HttpTimer, ServerProcess, TimedModel, _worker_system, ms

from hero.agent.loop import AgentResult, run_agent
from hero.agent.tools import ToolContext, tool_schemas
from hero.agent.window import Context, Window
from hero.config.providers import Provider, RoleConfig
from hero.config.sections import LlmSettings, WorkerLimits
from hero.llm.client import LlmClient
from hero.llm.scripted import Answer, Reply, ToolCall, text
from hero.llm.usage import estimate_message, estimate_text
from hero.roles.worker import condense_prompt
from hero.runner import child_env
from hero.trace import Trace, read_trace

TURNS = 200
#: The window of the issue's bench, and hero's defaults for the rest.
WINDOW = Window(window=32_000, reserve=4096, condense_at=0.75, keep_turns=6)
FILES = 10
FILE_BYTES = 20_000
SUMMARY = (
    "**Files changed**: none.\n**Commands run**: `cat` of src/mod0.py .. src/mod9.py, "
    "all exit 0.\n**Findings**: each module defines plain functions f_<i>_<j>.\n"
    "**Open to-dos**: keep reading the modules, then answer done."
)


# --------------------------------------------------------------------------- the model


def _turn_of(messages: Sequence[dict[str, Any]]) -> int:
    """The turn the last tool call in the history belongs to (its id is ``t<turn>``); 0
    before the first. The recent turns survive condensation, so this needs no state."""
    for m in reversed(messages):
        for c in m.get("tool_calls") or ():
            cid = str(c.get("id", ""))
            if cid.startswith("t") and cid[1:].isdigit():
                return int(cid[1:])
    return 0


def _measure(messages: Sequence[dict[str, Any]], tools: Any) -> list[int]:
    """[worker turn (1) or summary (0), hero's estimate, len(json)/4, messages] of one
    request as received. hero's estimate is Context's raw one (before the provider's
    counts scale it): estimate_message of each message plus the tool schemas."""
    tools_json = json.dumps(tools) if tools else ""
    hero = sum(estimate_message(m) for m in messages) + (estimate_text(tools_json) if tools else 0)
    chars = len(json.dumps(messages)) + len(tools_json)
    return [1 if tools else 0, hero, chars // 4, len(messages)]


def _handler(turns: int, log: list[list[int]]) -> Callable[[dict[str, Any]], Answer]:
    """Worker turn t reads src/mod<t % 10>.py, with read_file on odd turns and `bash cat`
    on even ones, until `turns` turns are done; then "done". A request without tools is
    Context's summary request: a short summary."""

    def handler(body: dict[str, Any]) -> Answer:
        messages = body.get("messages") or []
        tools = body.get("tools")
        log.append(_measure(messages, tools))
        if not tools:
            return text(SUMMARY)
        turn = _turn_of(messages) + 1
        if turn > turns:
            return text("done")
        path = f"src/mod{(turn - 1) % FILES}.py"
        if turn % 2:
            call = ToolCall("read_file", {"path": path}, id=f"t{turn}")
        else:
            call = ToolCall("bash", {"command": f"cat {path}"}, id=f"t{turn}")
        return Reply(tool_calls=(call,))

    return handler


def serve_main(turns: int) -> int:
    """`context.py --serve N`: the scripted model in its own process, speaking run.py's
    ServerProcess protocol (a JSON line with base_url; then `dump` on stdin prints the
    request records so far and clears them, `quit` or EOF stops)."""
    from hero.llm.scripted import ScriptedModel

    log: list[list[int]] = []
    with ScriptedModel(_handler(turns, log)) as m:
        print(json.dumps({"base_url": m.base_url}), flush=True)
        for line in sys.stdin:
            if line.strip() == "dump":
                print(json.dumps(log), flush=True)
                log.clear()
            elif line.strip() == "quit":
                break
    return 0


class ContextServer(ServerProcess):
    """run.py's server process (dump, close), serving this bench's script (no echo server:
    the loopback rows are run.py's)."""

    def __init__(self, turns: int) -> None:
        super().__init__(turns, Path(__file__).resolve())


# --------------------------------------------------------------------------- one round


class KindModel(TimedModel):
    """run.py's TimedModel, also noting which calls were worker turns (with tools) and
    which were Context's summary requests (without)."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.is_turn: list[bool] = []

    def complete(self, messages: Sequence[dict[str, Any]], tools: Any = None) -> Any:
        self.is_turn.append(bool(tools))
        return super().complete(messages, tools)


class TimedContext(Context):
    """Context whose fit() is timed: (entered, returned) per call, monotonic."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fits: list[tuple[float, float]] = []

    def fit(self, messages: list[dict[str, Any]], model: Any, turn: int) -> Any:
        t0 = time.monotonic()
        try:
            return super().fit(messages, model, turn)
        finally:
            self.fits.append((t0, time.monotonic()))


@dataclass
class Round:
    result: AgentResult
    overhead: list[float]  # per worker turn: wall - HTTP round trips in it - command_s
    condensed_turns: list[int]  # 0-based worker turns whose next request was condensed
    fit: list[float]  # per Context.fit call, less the summary calls' HTTP round trips
    requests: list[list[int]]  # the server's records (see _measure), in order
    events: list[dict[str, Any]]
    context: TimedContext | None


def _write_files(root: Path) -> None:
    """Ten modules of FILE_BYTES each, every line different."""
    (root / "src").mkdir()
    for i in range(FILES):
        lines: list[str] = []
        size, j = 0, 0
        while size < FILE_BYTES:
            line = f"def f_{i}_{j}(x):\n    return x * {j} + {i}  # step {j} of module {i}\n"
            lines.append(line)
            size += len(line)
            j += 1
        (root / "src" / f"mod{i}.py").write_text("".join(lines)[:FILE_BYTES])


def one_round(server: ContextServer, turns: int, condense: bool) -> Round:
    with tempfile.TemporaryDirectory(prefix="hero-bench-context-") as tmp:
        root = make_repo(Path(tmp) / "repo")
        _write_files(root)
        server.dump()  # start with an empty request record
        role = RoleConfig(
            role="worker",
            provider=Provider(name="scripted", base_url=server.base_url, default_model="scripted"),
            model="scripted",
            reasoning_effort=None,
        )
        llm = LlmClient(role, LlmSettings(timeout_s=120.0, max_attempts=1))
        timer = HttpTimer(llm.http_client)
        model = KindModel(llm)
        ctx = ToolContext(root=root, env=child_env(extra=GIT_ISOLATION))
        # the files are read again and again: the loop guard would stop the round
        limits = WorkerLimits(
            max_turns=turns + 5, max_tool_calls=turns + 5, max_wall_s=3600.0, loop_repeats=10**6
        )
        context = (
            TimedContext(
                WINDOW, tool_schemas(), head=2, render_summary_prompt=condense_prompt(None)
            )
            if condense
            else None
        )
        messages = [
            {"role": "system", "content": _worker_system()},
            {
                "role": "user",
                "content": "# Story bench: context\n\nRead every module in src/, many times.",
            },
        ]
        cmd: list[float] = []
        seen = [0.0]

        def on_turn(result: AgentResult) -> None:  # per-turn command_s from the running total
            cmd.append(result.command_s - seen[0])
            seen[0] = result.command_s

        trace_path = Path(tmp) / "runs" / "round-1.jsonl"
        with Trace(trace_path) as trace:
            result = run_agent(
                model, messages, ctx, limits, trace, on_turn=on_turn, context=context
            )
        requests = [[int(x) for x in rec] for rec in server.dump()]
        events = read_trace(trace_path)
    calls = len(model.starts)
    if not timer.complete(calls):
        raise RuntimeError(
            f"httpx event hooks saw {len(timer.req)} requests for {calls} model calls "
            "(is LlmClient.http_client still the client the SDK sends through?)"
        )
    rt = [timer.send_end[i] - timer.req[i] for i in range(calls)]  # HTTP round trip per call
    turn_calls = [i for i, t in enumerate(model.is_turn) if t]
    overhead = []
    for k in range(min(len(cmd), len(turn_calls) - 1)):
        # turn k: its request -> the next turn's request; any summary call lies between
        a, b = turn_calls[k], turn_calls[k + 1]
        overhead.append(model.starts[b] - model.starts[a] - sum(rt[a:b]) - cmd[k])
    fit = []
    if context is not None:
        for t0, t1 in context.fits:
            inside = sum(rt[i] for i in range(calls) if t0 <= model.starts[i] <= t1)
            fit.append(t1 - t0 - inside)
    # a condense event's turn is the turns done before it: it precedes turn `turn + 1`'s
    # request, so it falls in the window of worker turn `turn` (0-based: turn - 1)
    condensed = [int(e["turn"]) - 1 for e in events if e.get("event") == "condense"]
    return Round(result, overhead, condensed, fit, requests, events, context)


# --------------------------------------------------------------------------- the report


def p95(xs: Sequence[float]) -> float:
    """Nearest rank."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[max(0, math.ceil(0.95 * len(s)) - 1)]


def tok(n: int) -> str:
    return f"{n:,} tok"


def _largest(r: Round, col: int) -> tuple[int, int, bool]:
    """(size, 1-based request number, was a worker turn) of the largest request by `col`."""
    i, rec = max(enumerate(r.requests), key=lambda x: x[1][col])
    return rec[col], i + 1, bool(rec[0])


def _check_round(report: Report, r: Round, turns: int, label: str) -> None:
    if r.result.stop_reason != "done" or r.result.turns != turns + 1:
        report.notes.append(
            f"WARNING: the round {label} did not end as scripted (stop_reason="
            f"{r.result.stop_reason}, {r.result.turns} model calls, {r.result.detail})"
        )


def bench_condensed(report: Report, server: ContextServer, turns: int) -> None:
    limit = WINDOW.limit
    report.section(
        f"1. {turns} turns of 20 kB tool results, window {WINDOW.window:,} tokens (reserve "
        f"{WINDOW.reserve:,}, condense at {WINDOW.condense_at:g}, keep {WINDOW.keep_turns} turns)"
    )
    r = one_round(server, turns, condense=True)
    _check_round(report, r, turns, "with context management")
    assert r.context is not None
    res = r.result
    summaries = sum(1 for rec in r.requests if not rec[0])
    report.add(
        "turns: model calls (+ summary calls), tool calls",
        f"{res.turns} (+{summaries}), {res.tool_calls}, {res.stop_reason}",
    )
    tgt = f"< {limit:,}"
    for col, name in ((1, "hero's estimate (chars/3 + framing)"), (2, "len(json)/4 as sent")):
        size, n, is_turn = _largest(r, col)
        report.add(f"largest request, {name}", tok(size), tgt, size < limit)
        kind = "a turn" if is_turn else "a summary"
        report.add("  which request", f"{n} of {len(r.requests)} ({kind})")
    report.add("  largest as hero judged it when sending (Context.largest)", tok(r.context.largest))
    cond = [e for e in r.events if e.get("event") == "condense"]
    every = f"every ~{turns / len(cond):.0f} turns" if cond else "none"
    report.add("condensations (condense events in the trace)", f"{len(cond)} ({every})")
    report.add(
        "  summaries (model calls) / tool results elided / cut",
        f"{sum(1 for e in cond if e.get('summary'))} / "
        f"{sum(len(e.get('elided') or ()) for e in cond)} / "
        f"{sum(len(e.get('cut') or ()) for e in cond)}",
    )
    if cond:
        before = [int(e["tokens_before"]) for e in cond]
        after = [int(e["tokens_after"]) for e in cond]
        report.add(
            "  history at a condensation, before -> after (median)",
            f"{median(before):,.0f} -> {median(after):,.0f} tok",
        )
    t_ms = f"<= {TURN_TARGET_MS:g} ms"
    o = r.overhead
    report.add(
        f"per-turn overhead with condensation, median of {len(o)}",
        ms(median(o)),
        t_ms,
        median(o) * 1e3 <= TURN_TARGET_MS,
    )
    report.add(
        "per-turn overhead with condensation, p95", ms(p95(o)), t_ms, p95(o) * 1e3 <= TURN_TARGET_MS
    )
    on = [o[k] for k in r.condensed_turns if k < len(o)]
    if on:
        report.add(
            f"  on the {len(on)} turns that condensed, median / max",
            f"{median(on) * 1e3:.2f} / {max(on) * 1e3:.2f} ms",
        )
    report.add(
        "  read_file turns / bash turns, median",
        f"{median(o[0::2]) * 1e3:.2f} / {median(o[1::2]) * 1e3:.2f} ms",
    )
    report.add("  worst turn", ms(max(o)))
    report.add(
        "Context.fit per turn, median / max (less summary HTTP)",
        f"{median(r.fit) * 1e3:.3f} / {max(r.fit) * 1e3:.2f} ms",
    )
    report.add("  Context.fit, sum over the round", ms(sum(r.fit)))
    report.notes.append(
        "overhead = wall (this turn's request -> the next turn's request) - the HTTP round "
        "trips in it (the turn's and any summary request's, httpx request hook -> send() "
        "returned) - command_s; as bench/run.py, so read_file's own work counts as harness"
    )


def bench_unmanaged(report: Report, server: ContextServer, turns: int) -> None:
    limit = WINDOW.limit
    report.section(f"2. the same {turns} turns WITHOUT context management (for comparison)")
    r = one_round(server, turns, condense=False)
    _check_round(report, r, turns, "without context management")
    for col, name in ((1, "hero's estimate"), (2, "len(json)/4 as sent")):
        size, _, _ = _largest(r, col)
        report.add(f"largest request, {name}", tok(size))  # info: how far past is the point
        report.add(f"  = x the window ({WINDOW.window:,})", f"{size / WINDOW.window:.1f}x")
    over = [i for i, rec in enumerate(r.requests) if rec[2] >= limit]
    report.add(
        f"requests at or over {limit:,} tok (len(json)/4)",
        f"{len(over)} of {len(r.requests)}, first: request {over[0] + 1}" if over else "none",
    )
    o = r.overhead
    report.add("per-turn overhead, median / p95", f"{median(o) * 1e3:.2f} / {p95(o) * 1e3:.2f} ms")
    report.add("  last turn (the largest history)", ms(o[-1]) if o else "?")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=TURNS, help=f"tool turns (default {TURNS})")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)  # internal: server child
    args = parser.parse_args(argv)
    if args.serve:
        return serve_main(args.serve)
    turns = max(1, args.turns)

    started = time.monotonic()
    print(env_line("hero", "openai"), flush=True)
    report = Report()
    server = ContextServer(turns)
    try:
        run_sections(
            report,
            [
                ("condensed round", lambda: bench_condensed(report, server, turns)),
                ("unmanaged round", lambda: bench_unmanaged(report, server, turns)),
            ],
        )
    finally:
        server.close()
    print_report(report, started)
    return 0  # a report, not a test: missed targets show as NO in the table


if __name__ == "__main__":
    raise SystemExit(main())
