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
there (median of turns 10..50), hero with the round's sandbox and scope check, mini with its
local environment; (b) launch to first model request (process start -> first request at the
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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
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
        "hero with the round's sandbox and scope check)"
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
            super().__init__(turns, Path(__file__).resolve())
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
            one_turn_run(server, sandbox="round", scoped=True)  # as in a story's round
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


def cpu_of(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` and of the children it has waited for,
    from /proc; NaN when it cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return float("nan")
    # fields[0] is the state (the 3rd field); utime, stime, cutime, cstime are 14..17
    ticks = sum(int(x) for x in fields[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


@dataclass
class Launch:
    wall: float  # process start -> first request at the server
    cpu: float  # the process's CPU time (and its waited-for children's) at that request


def launch_once(
    make_argv: Callable[[str], list[str]],
    env: dict[str, str],
    cwd: Path,
    handler: Any,
    timeout: float,
) -> tuple[Launch | None, str]:
    """Start ``make_argv(base_url)`` against a scripted server answering with ``handler``;
    the server reads the process's CPU time when its first request arrives. The launch, or
    None and why not."""
    from hero.llm.scripted import ScriptedModel

    pid: list[int] = []
    cpu: list[float] = []

    def first(body: dict) -> Any:
        if not cpu and pid:
            cpu.append(cpu_of(pid[0]))
        return handler(body)

    with ScriptedModel(first) as server:
        argv = make_argv(server.base_url)
        t0 = time.monotonic()
        proc = subprocess.Popen(
            argv,
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        pid.append(proc.pid)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        if proc.returncode != 0 or not server.requests:
            return None, f"exit {proc.returncode}: {(err or out)[-400:]}"
        return Launch(server.requests[0].received_at - t0, cpu[0] if cpu else float("nan")), ""


def hero_launch(base: Path, i: int, base_url: str) -> list[str]:
    """`hero run` on a quick-pass story in a new home under ``base``."""
    from run import _hero_home, hero_executable

    story = _hero_home(base, base_url, f"side{i}")
    return [*hero_executable(), "--home", str(base / "home"), "run", str(story)]


def mini_launch(mini: Path, base: Path, base_url: str) -> list[str]:
    """`mini` on a new repo under ``base``."""
    return mini_argv(mini, base_url, make_repo(base / "repo"), base / "traj.json")


def launch_rows(report: Report, mini: Path, launches: int, failures: list[str]) -> None:
    from run import _quick_pass_handler

    got: dict[str, list[Launch]] = {"hero": [], "mini": []}
    for i in range(launches):  # taking turns, so a noisy neighbour slows both alike
        with tempfile.TemporaryDirectory(prefix="hero-bench-mini-") as tmp:
            base = Path(tmp)

            runs = {
                "hero": (partial(hero_launch, base / "hero", i), hero_env(), _quick_pass_handler),
                "mini": (
                    partial(mini_launch, mini, base / "mini"),
                    mini_env(base / "mini" / "cfg"),
                    echo_handler(0),
                ),
            }
            for name, (make_argv, env, handler) in runs.items():
                launch, why = launch_once(make_argv, env, base, handler, 120)
                if launch is None:
                    failures.append(f"{name} launch {i}: {why}")
                else:
                    got[name].append(launch)
    h = median([x.wall for x in got["hero"]])
    m = median([x.wall for x in got["mini"]])
    for name, xs in got.items():
        what = "hero `hero run`" if name == "hero" else "`mini`"
        report.add(
            f"launch -> first model request, {what} (median of {len(xs)})",
            f"{median([x.wall for x in xs]) * 1e3:.0f} ms "
            f"({', '.join(f'{x.wall * 1e3:.0f}' for x in xs)})",
        )
    for name, xs in got.items():
        report.add(
            f"  CPU time at the first request, {name} (process + waited children, median)",
            f"{median([x.cpu for x in xs]) * 1e3:.0f} ms",
        )
    pairs = sum(
        a.wall <= b.wall * LAUNCH_GOAL for a, b in zip(got["hero"], got["mini"], strict=False)
    )
    report.add(
        f"  launch ratio mini / hero (medians; goal met in {pairs} of "
        f"{min(len(got['hero']), len(got['mini']))} pairs)",
        f"{m / h:.2f}x",
        f">= {1 / LAUNCH_GOAL:g}x",
        h <= m * LAUNCH_GOAL,
    )
    hc = median([x.cpu for x in got["hero"]])
    mc = median([x.cpu for x in got["mini"]])
    report.add("  launch CPU ratio mini / hero (medians)", f"{mc / hc:.2f}x")


#: The modules `hero run` imports before it builds its model clients (bench/run.py's probe).
HERO_MODULES = "hero.cli, hero.commands.run, hero.config.loader, hero.llm.client, hero.run.pipeline"

# Each prints "<wall> <cpu>" per step (seconds), in a fresh interpreter.
_OPENAI_THEN_HERO = f"""
import time
def now(): return time.perf_counter(), time.process_time()
t0 = now()
import openai
t1 = now()
import {HERO_MODULES}
t2 = now()
print(t1[0] - t0[0], t1[1] - t0[1], t2[0] - t1[0], t2[1] - t1[1])
"""
_HERO_ALONE = f"""
import sys, time
def now(): return time.perf_counter(), time.process_time()
t0 = now()
import {HERO_MODULES}
t1 = now()
print(t1[0] - t0[0], t1[1] - t0[1], int("openai" in sys.modules))
"""


def imports_rows(report: Report, n: int = 5) -> None:
    """`import openai` and hero's own imports (hero's modules with openai already loaded,
    and alone: what `hero run` imports before its clients), each in a fresh interpreter,
    taking turns; medians of n, wall and CPU time."""
    cols: dict[str, list[float]] = {k: [] for k in ("oa", "oa_cpu", "own", "own_cpu")}
    alone: list[float] = []
    alone_cpu: list[float] = []
    eager = False
    for _ in range(n):
        out = subprocess.run(
            [sys.executable, "-c", _OPENAI_THEN_HERO], capture_output=True, text=True, check=True
        ).stdout.split()
        for key, value in zip(cols, out, strict=True):
            cols[key].append(float(value))
        out = subprocess.run(
            [sys.executable, "-c", _HERO_ALONE], capture_output=True, text=True, check=True
        ).stdout.split()
        alone.append(float(out[0]))
        alone_cpu.append(float(out[1]))
        eager = eager or out[2] == "1"

    def both(wall: list[float], cpu: list[float]) -> str:
        return f"{median(wall) * 1e3:.0f} ms / {median(cpu) * 1e3:.0f} ms"

    report.add(
        f"  launch imports, wall / CPU (medians of {n}): `import openai`",
        both(cols["oa"], cols["oa_cpu"]),
    )
    report.add(
        "  launch imports: hero's own with openai loaded (cli, commands.run, config, llm, "
        "pipeline)",
        both(cols["own"], cols["own_cpu"]),
    )
    report.add(
        "  launch imports: the same alone (what `hero run` imports before its clients)",
        both(alone, alone_cpu) + (" (openai included!)" if eager else ""),
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
