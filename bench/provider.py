"""What a provider can make hero hold: memory for a 200 MB answer, time for an answer
trickled one byte every half second. A report, not a test: it prints a table and exits 0.

    python bench/provider.py               # about 40 s on 2 cores
    python bench/provider.py --no-uncapped # without the 200 MB read whole (the old way)

Each measurement is its own pair of processes: the scripted model (``hero.llm.scripted``,
answering with a ``Huge`` or ``Trickle``) and a client process that makes hero's real
``LlmClient`` (the ``openai`` SDK over real HTTP) and asks once. The client process reports
its resident memory before the call (VmRSS) and its peak (VmHWM, from /proc/self/status),
how long the call took and how it ended. Linux only (/proc).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from report import Report, env_line, print_report, run_sections

HERE = Path(__file__).resolve()
#: The answer the attack sent (issue 32): 200 MB.
HUGE_MB = 200
#: Targets: the memory a 200 MB answer adds to hero stays within a few caps (what the SDK
#: holds of the capped body: its chunks, then the joined bytes), not the answer's size; a
#: trickled answer holds the call no longer than llm_timeout_s and a second of slack.
CAP_MB = 8.0
CAP_TIMES = 5
TIMEOUT_S = 5.0
SLACK_S = 1.0


# --------------------------------------------------------------------------- the processes


def serve(kind: str) -> int:
    """The scripted model answering every request with ``kind``, until stdin closes."""
    from hero.llm.scripted import Huge, Raw, ScriptedModel, Trickle

    answer = {"choices": [{"message": {"role": "assistant", "content": "ok"}}]}
    body = Raw(json.dumps(answer) + " " * 1000)  # 1 KB: 8 minutes at 2 bytes a second
    script = {
        "huge": lambda _body: Huge(HUGE_MB << 20),
        "trickle-body": lambda _body: Trickle(body, interval_s=0.5),
        "trickle-head": lambda _body: Trickle(body, interval_s=0.5, head=True),
    }[kind]
    with ScriptedModel(script) as model:
        print(model.base_url, flush=True)
        sys.stdin.read()  # until the bench closes it
    return 0


def status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return -1


def ask(base_url: str, timeout_s: float, max_mb: float, attempts: int) -> int:
    """One model call of hero's client; prints what it cost as JSON."""
    from hero.config.providers import Provider, RoleConfig
    from hero.config.sections import LlmSettings
    from hero.llm.client import LlmClient

    provider = Provider(name="bench", base_url=base_url, default_model="m")
    settings = LlmSettings(
        timeout_s=timeout_s,
        max_attempts=attempts,
        backoff_base_s=0.01,
        backoff_max_s=0.01,
        max_response_mb=max_mb,
    )
    client = LlmClient(
        RoleConfig(role="worker", provider=provider, model="m", reasoning_effort=None), settings
    )
    before = status_kb("VmRSS")
    started = time.monotonic()
    try:
        answer = client.complete([{"role": "user", "content": "hi"}])
        ended = f"answered: {len(answer.content)} characters"
    except Exception as exc:  # noqa: BLE001 - a report: say how it ended
        ended = f"{type(exc).__name__}: {exc}"
    took = time.monotonic() - started
    out = {"took_s": took, "rss_kb": before, "hwm_kb": status_kb("VmHWM"), "ended": ended}
    print(json.dumps(out), flush=True)
    return 0


def measure(kind: str, timeout_s: float, max_mb: float, attempts: int = 1) -> dict[str, object]:
    """Start the server answering ``kind`` and one client process against it."""
    me = [sys.executable, str(HERE)]
    server = subprocess.Popen(
        [*me, "--serve", kind], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None and server.stdin is not None
        base_url = server.stdout.readline().strip()
        args = ["--ask", base_url, "--timeout", str(timeout_s), "--max-mb", str(max_mb)]
        done = subprocess.run(
            [*me, *args, "--attempts", str(attempts)],
            capture_output=True,
            text=True,
            timeout=600,
            check=True,
        )
        result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
        return result
    finally:
        if server.stdin is not None:
            server.stdin.close()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


# --------------------------------------------------------------------------- the sections


def mb(kb: object) -> float:
    return float(kb) / 1024 if isinstance(kb, int | float) else float("nan")


def memory(report: Report, uncapped: bool) -> None:
    report.section(f"1. a {HUGE_MB} MB answer: hero's memory (client process, VmHWM)")
    capped = measure("huge", 600.0, CAP_MB)
    added = mb(capped["hwm_kb"]) - mb(capped["rss_kb"])
    report.add("  resident before the call", f"{mb(capped['rss_kb']):.0f} MB")
    report.add(
        f"  peak with llm_max_response_mb {CAP_MB:g} (the default)",
        f"{mb(capped['hwm_kb']):.0f} MB",
    )
    report.add(
        "  added by the call",
        f"{added:.0f} MB",
        f"<= {CAP_TIMES} x {CAP_MB:g} MB",
        added <= CAP_TIMES * CAP_MB,
    )
    report.add("  the call took", f"{capped['took_s']:.2f} s")
    report.add("  it ended in", str(capped["ended"]).split(":", 1)[0])
    if uncapped:
        whole = measure("huge", 600.0, 1024.0)
        report.add(
            "  peak read whole (llm_max_response_mb 1024: as before)",
            f"{mb(whole['hwm_kb']):.0f} MB",
        )
        report.add("  the call took", f"{whole['took_s']:.2f} s")


def trickle(report: Report) -> None:
    report.section(f"2. an answer trickled 1 byte / 0.5 s, llm_timeout_s {TIMEOUT_S:g}")
    target = f"<= {TIMEOUT_S + SLACK_S:g} s"
    for kind, what in (("trickle-body", "its body"), ("trickle-head", "its status and headers")):
        result = measure(kind, TIMEOUT_S, CAP_MB)
        took = float(str(result["took_s"]))
        report.add(
            f"  {what}: the call held for", f"{took:.2f} s", target, took <= TIMEOUT_S + SLACK_S
        )
    result = measure("trickle-body", TIMEOUT_S, CAP_MB, attempts=3)
    report.add(
        "  its body, llm_max_attempts 3: all attempts", f"{float(str(result['took_s'])):.2f} s"
    )
    report.add("  the answer would have taken (1 KB at 2 bytes/s)", "about 500 s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--no-uncapped", action="store_true", help="skip the 200 MB read whole")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--ask", help=argparse.SUPPRESS)
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S, help=argparse.SUPPRESS)
    parser.add_argument("--max-mb", type=float, default=CAP_MB, help=argparse.SUPPRESS)
    parser.add_argument("--attempts", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        return serve(args.serve)
    if args.ask:
        return ask(args.ask, args.timeout, args.max_mb, args.attempts)
    started = time.monotonic()
    print(env_line("openai", "httpx2", "httpcore2"))
    if not os.path.exists("/proc/self/status"):
        print("bench/provider.py needs Linux (/proc/self/status)")
        return 0
    report = Report()
    run_sections(
        report,
        [
            ("memory", lambda: memory(report, not args.no_uncapped)),
            ("time", lambda: trickle(report)),
        ],
    )
    print_report(report, started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
