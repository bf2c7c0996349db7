"""What MCP servers cost a worker's round: a server's start, one tool call through hero's
client, the memory a 10 MB answer makes hero hold, and whether `hero --help` imports the SDK.
A report, not a test: it prints a table and exits 0.

    python bench/mcp_tools.py              # about 1 min on 2 cores
    python bench/mcp_tools.py --calls 50   # fewer calls

The server is tests/agent/mcp/mcp_test_server.py (the SDK's server side) as a real
subprocess, started by hero's ``McpServers`` as a round starts it, without and with the
sandbox (bubblewrap, where it works). The memory is measured in a process of its own
(VmHWM, Linux /proc).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from report import Report, env_line, median, print_report, run_sections

HERE = Path(__file__).resolve()
SERVER = HERE.parents[1] / "tests" / "agent" / "mcp" / "mcp_test_server.py"
#: Targets: a call's overhead through hero (the portal thread, the JSON-RPC round trip) in
#: milliseconds; what a 10 MB answer adds to hero's peak memory, in MB (the read cap is 1 MB).
CALL_MS = 20.0
BIG_ADDED_MB = 32.0


def servers(tmp: Path, sandboxed: bool):  # type: ignore[no-untyped-def]
    from hero.agent.mcp.servers import McpServers
    from hero.config.mcp import McpServer
    from hero.sandbox.bwrap import build

    box = build(tmp, None) if sandboxed else None
    server = McpServer("t", command=(sys.executable, "mcp_test_server.py"))
    return McpServers([server], cwd=tmp, env=dict(os.environ), sandbox=box)


def start_and_calls(report: Report, calls: int, sandboxed: bool) -> None:
    report.section(
        f"{'2' if sandboxed else '1'}. a stdio server, sandbox {'on' if sandboxed else 'off'}"
    )
    with tempfile.TemporaryDirectory(prefix="hero-bench-mcp-") as name:
        tmp = Path(name)
        shutil.copy(SERVER, tmp / "mcp_test_server.py")
        running = servers(tmp, sandboxed)
        began = time.monotonic()
        running.start()
        started = time.monotonic() - began
        try:
            assert not running.problems, running.problems
            echo = next(t for t in running.tools if t.name == "t__echo")
            took = []
            for _ in range(calls):
                t0 = time.monotonic()
                echo.call('{"text": "hi"}')
                took.append((time.monotonic() - t0) * 1000)
        finally:
            t0 = time.monotonic()
            running.close()
            closed = time.monotonic() - t0
    report.add("  start: spawn, initialize, list tools", f"{started:.2f} s")
    ms = median(took)
    report.add(
        f"  one echo call (median of {calls})", f"{ms:.1f} ms", f"< {CALL_MS:g} ms", ms < CALL_MS
    )
    report.add("  close: the server's process group ended", f"{closed:.2f} s")


def big_answer() -> int:
    """In a process of its own: a 10 MB answer asked for; prints the memory it added."""
    with tempfile.TemporaryDirectory(prefix="hero-bench-mcp-") as name:
        tmp = Path(name)
        shutil.copy(SERVER, tmp / "mcp_test_server.py")
        with servers(tmp, False) as running:
            running.start()
            big = next(t for t in running.tools if t.name == "t__big")
            before = status_kb("VmRSS")
            outcome = big.call('{"megabytes": 10}')
            after = status_kb("VmHWM")
    print(json.dumps({"rss_kb": before, "hwm_kb": after, "error": outcome.is_error}))
    return 0


def status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return -1


def memory(report: Report) -> None:
    report.section("3. a 10 MB answer: hero's memory (VmHWM of a process of its own)")
    done = subprocess.run(
        [sys.executable, str(HERE), "--big"],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    got = json.loads(done.stdout.strip().splitlines()[-1])
    added = (got["hwm_kb"] - got["rss_kb"]) / 1024
    report.add("  the call", "a tool error" if got["error"] else "answered")
    report.add(
        "  peak added by the answer",
        f"{added:.1f} MB",
        f"< {BIG_ADDED_MB:g} MB",
        added < BIG_ADDED_MB,
    )


def launch(report: Report) -> None:
    report.section("4. start-up: the SDK is not imported by `hero --help`")
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "hero", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    names = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in done.stderr.splitlines()}
    loaded = sorted(names & {"mcp", "mcp_types", "anyio"})
    report.add("  SDK modules imported", ", ".join(loaded) or "none", "none", not loaded)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--big", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.big:
        return big_answer()
    from hero.sandbox.bwrap import bwrap_problem

    started = time.monotonic()
    report = Report()
    bwrap = shutil.which("bwrap")
    sections = [("stdio, no sandbox", lambda: start_and_calls(report, args.calls, False))]
    if bwrap is not None and bwrap_problem(bwrap) is None:
        sections.append(("stdio, sandbox", lambda: start_and_calls(report, args.calls, True)))
    else:
        report.notes.append("bubblewrap does not work here: the sandboxed section is left out")
    sections += [("10 MB answer", lambda: memory(report)), ("launch", lambda: launch(report))]
    print(env_line("mcp", "anyio"))
    run_sections(report, sections)
    print_report(report, started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
