"""hero side by side with mini-swe-agent, in one run, on the same scripted echo workload.

Called from bench/run.py's main(); ``python bench/mini.py`` runs this section alone.

mini-swe-agent (``MINI_VERSION``, pinned) is installed by the bench into a throw-away venv,
cached under ``$HERO_BENCH_CACHE`` (default: ``<tmp>/hero-bench-cache``) keyed by version and
Python, so reruns are quick. When it cannot be installed the rows say so and the bench goes on.

mini runs as a user runs it: its ``mini`` command (yolo, exit at once), its default config
(``mini.yaml``: litellm, the ``bash`` tool call), the model ``openai/mini`` with ``api_base``
on hero's scripted server and a dummy key; litellm's bundled cost map, so no network.
Both get the same script: ``bash`` ``echo hi`` for ``TURNS`` turns; then hero gets "done",
mini its submit command (``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``).

Rows: (a) the gap between a tool answer written by the server and the next request arriving
there (median of turns 10..50), hero with the round's sandbox on, mini with its local
environment; (b) launch to first model request (process start -> first request at the
server), several launches each, taking turns; (c) what hero's launch spends on imports:
``import openai`` against hero's own modules.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from report import GIT_ISOLATION, Report, hero_env, make_repo, median

MINI_VERSION = "2.4.6"
TURNS = 50
LATE_FROM = 10  # gaps of turns LATE_FROM..TURNS are "late turns"
MINI_MODEL = "mini"  # the model name mini sends (litellm strips "openai/")
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
GAP_GOAL = 1 / 3  # hero's gap at most a third of mini's
LAUNCH_GOAL = 1 / 4  # hero's launch at most a quarter of mini's


# --------------------------------------------------------------------------- install


def cache_dir() -> Path:
    root = os.environ.get("HERO_BENCH_CACHE") or os.path.join(
        tempfile.gettempdir(), "hero-bench-cache"
    )
    py = f"py{sys.version_info.major}{sys.version_info.minor}"
    return Path(root) / f"mini-swe-agent-{MINI_VERSION}-{py}"


def install_mini() -> tuple[Path | None, str]:
    """The ``mini`` command of a venv holding mini-swe-agent MINI_VERSION (made once, then
    reused), or None and why not."""
    venv = cache_dir()
    mini = venv / "bin" / "mini"
    if (venv / ".complete").is_file() and mini.is_file():
        return mini, "cached"
    # venvs are not relocatable (their scripts name their interpreter): made in place,
    # marked complete only at the end, so a half-made one is made again
    subprocess.run(["rm", "-rf", str(venv)], check=False)
    venv.parent.mkdir(parents=True, exist_ok=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    for argv in (
        [sys.executable, "-m", "venv", str(venv)],
        [*pip, f"mini-swe-agent=={MINI_VERSION}"],
    ):
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=900)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return None, f"{' '.join(argv[-2:])}: {exc}"
        if proc.returncode != 0:
            return None, f"{' '.join(argv[-2:])}: exit {proc.returncode}: {proc.stderr[-300:]}"
    if not mini.is_file():
        return None, f"mini-swe-agent=={MINI_VERSION} installed no `mini` command"
    (venv / ".complete").write_text(MINI_VERSION + "\n")
    return mini, "installed now"


def mini_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "HERO_HOME"}
    env.update(GIT_ISOLATION)
    env.update(
        MSWEA_CONFIGURED="1",  # no first-run questions
        MSWEA_GLOBAL_CONFIG_DIR=str(home),
        MSWEA_COST_TRACKING="ignore_errors",  # a scripted model has no price
        OPENAI_API_KEY="sk-bench-dummy",
        LITELLM_LOCAL_MODEL_COST_MAP="True",  # no download of the cost map
    )
    return env


def mini_argv(mini: Path, base_url: str, repo: Path, out: Path) -> list[str]:
    return [
        str(mini),
        "-y",
        "--exit-immediately",
        "-m",
        f"openai/{MINI_MODEL}",
        "-t",
        "Run `echo hi` fifty times.",
        "-o",
        str(out),
        "-c",
        "mini.yaml",
        "-c",
        f"model.model_kwargs.api_base={base_url}",
        "-c",
        f"environment.cwd={repo}",
    ]


# --------------------------------------------------------------------------- the server


def echo_handler(turns: int) -> Any:
    """`bash echo hi` until the history holds `turns` assistant messages; then "done" for
    hero, the submit command for mini (its model name)."""
    from hero.llm.scripted import call, text

    def handler(body: dict) -> Any:
        done = sum(1 for m in body.get("messages", ()) if m.get("role") == "assistant")
        if done < turns:
            return call("bash", command="echo hi")
        return call("bash", command=SUBMIT) if body.get("model") == MINI_MODEL else text("done")

    return handler


@contextlib.contextmanager
def sent_times(log: list[float]) -> Iterator[None]:
    """Appends, on the scripted server's thread, the time each answer was written."""
    import hero.llm.scripted as hs

    cls = hs._RequestHandler
    orig = cls._send_json

    def _send_json(self: Any, status: int, payload: dict, headers: Any = None) -> None:
        orig(self, status, payload, headers)
        log.append(time.monotonic())

    cls._send_json = _send_json  # type: ignore[method-assign]
    try:
        yield
    finally:
        cls._send_json = orig  # type: ignore[method-assign]


def serve_main(turns: int) -> int:
    """`mini.py --serve N`: the scripted echo model in a process of its own. Prints a JSON
    line with base_url; on stdin `dump` prints [[arrived, answered], ...] since the last
    dump, `quit` (or EOF) stops."""
    from hero.llm.scripted import ScriptedModel

    sent: list[float] = []
    with sent_times(sent), ScriptedModel(echo_handler(turns)) as m:
        print(json.dumps({"base_url": m.base_url}), flush=True)
        taken = 0
        for line in sys.stdin:
            if line.strip() == "dump":
                arrived = [r.received_at for r in m.requests[taken:]]
                taken = len(m.requests)
                pairs = list(zip(arrived, sent, strict=False))
                sent.clear()
                print(json.dumps(pairs), flush=True)
            elif line.strip() == "quit":
                break
    return 0


def gaps(pairs: list[tuple[float, float]]) -> list[float]:
    """Answer written -> next request arrived, for the late turns."""
    return [pairs[k + 1][0] - pairs[k][1] for k in range(LATE_FROM - 1, len(pairs) - 1)]


# --------------------------------------------------------------------------- the rows


def bench_mini(report: Report, runs: int = 3, launches: int = 5) -> None:
    from run import SANDBOX_MODES, ServerProcess, one_turn_run

    report.section(
        f"4. side by side with mini-swe-agent {MINI_VERSION} (same echo script, one run; "
        "hero with the round's sandbox)"
    )
    mini, how = install_mini()
    if mini is None:
        report.add("mini-swe-agent", "skipped", "-", None)
        report.notes.append(f"4. mini-swe-agent could not be installed, rows skipped: {how}")
        imports_rows(report)
        return
    report.notes.append(f"4. mini-swe-agent {MINI_VERSION} ({how}): {mini}")

    class Server(ServerProcess):
        def __init__(self, turns: int) -> None:  # run.py's protocol, this module's script
            self.proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), "--serve", str(turns)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert self.proc.stdout is not None
            self.base_url = json.loads(self.proc.stdout.readline())["base_url"]
            self.dumps: list[list[tuple[float, float]]] = []

        def dump(self) -> list[tuple[float, float]]:  # type: ignore[override]
            pairs = super().dump()
            self.dumps.append(pairs)  # type: ignore[arg-type]
            return pairs  # type: ignore[return-value]

    assert "round" in SANDBOX_MODES
    server = Server(TURNS)
    hero_gaps: list[float] = []
    mini_gaps: list[float] = []
    failures: list[str] = []
    try:
        for i in range(runs):
            one_turn_run(server, sandbox="round")
            hero_gaps += gaps(server.dumps[-1])
            with tempfile.TemporaryDirectory(prefix="hero-bench-mini-") as tmp:
                repo = make_repo(Path(tmp) / "repo")
                proc = subprocess.run(
                    mini_argv(mini, server.base_url, repo, Path(tmp) / "traj.json"),
                    env=mini_env(Path(tmp) / "cfg"),
                    cwd=tmp,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    text=True,
                    timeout=300,
                )
                pairs = server.dump()
                if proc.returncode != 0 or len(pairs) < TURNS:
                    failures.append(
                        f"mini run {i}: exit {proc.returncode}, {len(pairs)} requests: "
                        f"{(proc.stderr or proc.stdout)[-400:]}"
                    )
                mini_gaps += gaps(pairs)
    finally:
        server.close()
    h, m = median(hero_gaps), median(mini_gaps)
    label = f"gap: tool answer -> next request at the server (median, turns {LATE_FROM}..{TURNS})"
    report.add(f"{label}, hero", f"{h * 1e3:.2f} ms")
    report.add(f"{label}, mini", f"{m * 1e3:.2f} ms")
    report.add(
        "  gap ratio mini / hero", f"{m / h:.2f}x", f">= {1 / GAP_GOAL:g}x", h <= m * GAP_GOAL
    )
    launch_rows(report, mini, launches, failures)
    for f in failures:
        report.notes.append("4. " + f)
    imports_rows(report)


def launch_rows(report: Report, mini: Path, launches: int, failures: list[str]) -> None:
    from run import _launch_runs

    from hero.llm.scripted import ScriptedModel

    hero_t: list[float] = []
    mini_t: list[float] = []
    for i in range(launches):  # taking turns, so a noisy neighbour slows both alike
        req, _, fail = _launch_runs(hero_env(), 1, f"side{i}-")
        hero_t += req
        failures += fail
        with (
            tempfile.TemporaryDirectory(prefix="hero-bench-mini-") as tmp,
            ScriptedModel(echo_handler(0)) as server,
        ):
            repo = make_repo(Path(tmp) / "repo")
            t0 = time.monotonic()
            proc = subprocess.run(
                mini_argv(mini, server.base_url, repo, Path(tmp) / "traj.json"),
                env=mini_env(Path(tmp) / "cfg"),
                cwd=tmp,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=120,
            )
            if proc.returncode != 0 or not server.requests:
                failures.append(f"mini launch {i}: exit {proc.returncode}: {proc.stderr[-400:]}")
                continue
            mini_t.append(server.requests[0].received_at - t0)
    h, m = median(hero_t), median(mini_t)
    report.add(
        f"launch -> first model request, hero `hero run` (median of {len(hero_t)})",
        f"{h * 1e3:.0f} ms ({', '.join(f'{x * 1e3:.0f}' for x in hero_t)})",
    )
    report.add(
        f"launch -> first model request, `mini` (median of {len(mini_t)})",
        f"{m * 1e3:.0f} ms ({', '.join(f'{x * 1e3:.0f}' for x in mini_t)})",
    )
    pairs = sum(a <= b * LAUNCH_GOAL for a, b in zip(hero_t, mini_t, strict=False))
    report.add(
        f"  launch ratio mini / hero (medians; goal met in {pairs} of {len(hero_t)} pairs)",
        f"{m / h:.2f}x",
        f">= {1 / LAUNCH_GOAL:g}x",
        h <= m * LAUNCH_GOAL,
    )


#: hero's own imports on the way to `hero run`'s first request, openai apart.
_IMPORTS = r"""
import sys, time
t0 = time.perf_counter()
import openai
t1 = time.perf_counter()
import hero.cli, hero.commands.run, hero.config.loader, hero.llm.client, hero.run.pipeline
t2 = time.perf_counter()
print(t1 - t0, t2 - t1)
"""

_HERO_FIRST = r"""
import sys, time
t0 = time.perf_counter()
import hero.cli, hero.commands.run, hero.config.loader, hero.llm.client, hero.run.pipeline
t1 = time.perf_counter()
print(t1 - t0, int('openai' in sys.modules))
"""


def imports_rows(report: Report, n: int = 5) -> None:
    """`import openai` and hero's own imports (hero's modules, with openai already loaded),
    each in a fresh interpreter; medians of n."""
    oa: list[float] = []
    own: list[float] = []
    total: list[float] = []
    eager = False
    for _ in range(n):
        out = subprocess.run(
            [sys.executable, "-c", _IMPORTS], capture_output=True, text=True, check=True
        ).stdout.split()
        oa.append(float(out[0]))
        own.append(float(out[1]))
        out = subprocess.run(
            [sys.executable, "-c", _HERO_FIRST], capture_output=True, text=True, check=True
        ).stdout.split()
        total.append(float(out[0]))
        eager = eager or out[1] == "1"
    report.add(f"  launch imports: `import openai` (median of {n})", f"{median(oa) * 1e3:.0f} ms")
    report.add(
        "  launch imports: hero's own (cli, commands.run, config, llm, pipeline; openai loaded)",
        f"{median(own) * 1e3:.0f} ms",
    )
    report.add(
        "  launch imports: the same in a fresh interpreter (what `hero run` imports eagerly)",
        f"{median(total) * 1e3:.0f} ms" + (" (openai included!)" if eager else ""),
    )


def main(argv: list[str] | None = None) -> int:
    import argparse

    from report import env_line, print_report

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="echo runs each (default 3)")
    parser.add_argument("--launches", type=int, default=5, help="launches each (default 5)")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        return serve_main(args.serve)
    started = time.monotonic()
    print(env_line("hero", "openai"), flush=True)
    report = Report()
    bench_mini(report, args.runs, args.launches)
    print_report(report, started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
