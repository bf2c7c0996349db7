"""What hero's safety costs: the sandbox per command (a sandbox of its own, and the worker's
round sandbox, started at its first command or early, while the first model request is in
flight), a verification's checks (a sandbox each, or one for all of them),
redaction, the command policy and the scope check per bash call. A report, not a test: it
prints a table and exits 0.

    python bench/safety.py            # about 30 s on 2 cores (a minute when loaded)
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from hero.agent.tools.policy import Policy
from hero.agent.tools.scope import path_rules, undo_outside
from hero.redact import Redactor
from hero.roles import verifier
from hero.roles.verifier import run_verify
from hero.runner import run_command
from hero.sandbox.bwrap import Sandbox, build, bwrap_problem
from hero.sandbox.limits import Limits
from hero.sandbox.session import SandboxSession
from hero.story.record import VerifyTier

#: Targets: a command in the round's sandbox adds at most this much over a bare one (issue
#: 17); the in-process checks of one tool result (redaction, policy) stay within the per-turn
#: overhead budget (2 ms).
SANDBOX_ADDED_MS = 1.0
TARGET = f"<= {SANDBOX_ADDED_MS:g} ms"
#: Commands per variant of section 1 (after 10 of each to warm up), taking turns.
SANDBOX_RUNS = 200
#: Rounds whose first command (which starts the round's sandbox) is timed.
SESSION_STARTS = 20
IN_PROCESS_MS = 1.0
SCOPE_CHECK_MS = 25.0  # a git status in a small repository
#: Seconds the round's first model request is taken to be in flight (a fast local model's).
FIRST_REQUEST_S = 0.1
#: Checks per verification, and verifications timed per variant, taking turns.
CHECKS = (1, 3, 5, 10, 20)
VERIFICATIONS = 10


def median_ms(fn: Callable[[], object], n: int) -> float:
    times = []
    for _ in range(n):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def interleaved(variants: dict[str, Callable[[], object]], n: int) -> dict[str, list[float]]:
    """Each variant's times in ms over ``n`` rounds (after 10 to warm up), the variants
    taking turns within a round so that other load on the machine slows them alike."""
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for i in range(n + 10):
        for name, fn in variants.items():
            started = time.perf_counter()
            result = fn()
            took = (time.perf_counter() - started) * 1000
            if getattr(result, "exit_code", 0) != 0:
                raise RuntimeError(f"{name}: `true` did not exit 0: {result}")
            if i >= 10:
                samples[name].append(took)
    return samples


def p90(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=10)[-1]


def ms_pair(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} / {p90(xs):.2f} ms"


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def make_repo(root: Path, files: int) -> tuple[Path, str]:
    repo = root / "repo"
    (repo / "src").mkdir(parents=True)
    for i in range(files):
        (repo / "src" / f"m{i}.py").write_text(f"x = {i}\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-q", "-m", "base")
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True, text=True
    ).stdout.strip()
    return repo, head


def cpu_s() -> float:
    """CPU seconds of this process and of its children waited for (the sandboxes)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def first_commands(box: Sandbox, repo: Path, env: dict[str, str], early: bool) -> list[float]:
    """ms of each round's first command, after a model request of FIRST_REQUEST_S; with
    ``early``, the round's sandbox started as the round began (``SandboxSession.start``)."""
    firsts = []
    for _ in range(SESSION_STARTS):
        with SandboxSession(box, repo) as fresh:
            if early:
                fresh.start()
            time.sleep(FIRST_REQUEST_S)  # the round's first model request, in flight
            started = time.perf_counter()
            run_command("true", repo, timeout_s=30, env=env, sandbox=fresh)
            firsts.append((time.perf_counter() - started) * 1000)
    return firsts


def verifications(box: Sandbox, repo: Path, env: dict[str, str], log: Path) -> None:
    """Section 4: a verification of n `true` checks, each in a sandbox of its own (as before)
    and all in one sandbox (run_verify now); wall ms and CPU ms (hero and the sandboxes)."""
    row(f"[4. a verification of n `true` checks, {VERIFICATIONS} each, taking turns]", "")

    def apart(n: int) -> None:  # what run_verify did before: a sandbox per check
        for _ in range(n):
            run_command("true", repo, timeout_s=30, env=env, sandbox=box)

    def together(n: int) -> None:
        tiers = (VerifyTier("checks", ("true",) * n),)
        result = run_verify(tiers, repo, timeout_s=30, env=env, log_path=log, sandbox=box)
        if not result.passed:
            raise RuntimeError(f"the checks failed: {result.summary()}")

    threshold, verifier.ONE_SANDBOX_FROM = verifier.ONE_SANDBOX_FROM, 1  # one, whatever n
    try:
        for n in CHECKS:
            verification(n, apart, together)
    finally:
        verifier.ONE_SANDBOX_FROM = threshold
    row("  run_verify shares one sandbox from (ONE_SANDBOX_FROM)", f"{threshold} checks")


def verification(n: int, apart: Callable[[int], None], together: Callable[[int], None]) -> None:
    """One row pair of section 4: ``n`` checks, a sandbox each and one for all."""
    wall: dict[str, list[float]] = {"apart": [], "together": []}
    cpu: dict[str, list[float]] = {"apart": [], "together": []}
    for i in range(VERIFICATIONS + 1):
        for name, fn in (("apart", apart), ("together", together)):
            started, used = time.perf_counter(), cpu_s()
            fn(n)
            if i:  # the first of each: to warm up
                wall[name].append((time.perf_counter() - started) * 1000)
                cpu[name].append((cpu_s() - used) * 1000)
    for name, what in (("apart", "a sandbox per check (before)"), ("together", "one")):
        row(
            f"  {n} checks, {what}: wall / CPU, median",
            f"{statistics.median(wall[name]):.1f} / {statistics.median(cpu[name]):.1f} ms",
        )
    ratio = statistics.median(wall["apart"]) / statistics.median(wall["together"])
    row(f"  {n} checks: one sandbox is faster by (wall)", f"{ratio:.2f}x")


def row(metric: str, value: str, target: str = "-", ok: str = "info") -> None:
    print(f"{metric:<62} | {value:>16} | {target:>9} | {ok}")


def main() -> int:
    print(
        f"environment: python {sys.version.split()[0]}, {os.cpu_count()} cpus, "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    print(f"{'metric':<62} | {'value':>16} | {'target':>9} | ok?")
    print("-" * 100)
    tmp = Path(tempfile.mkdtemp(prefix="hero-bench-safety-"))
    try:
        repo, base = make_repo(tmp, 200)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        bwrap = shutil.which("bwrap")
        problem = bwrap_problem(bwrap) if bwrap else "bwrap is not installed"
        variants: dict[str, Callable[[], object]] = {
            "without the sandbox": lambda: run_command("true", repo, timeout_s=30, env=env),
        }
        session = None
        if not problem:
            # as the pipeline builds them: the story's limits, no network for the worker
            box = build(repo, repo / ".git", network=False, limits=Limits())
            session = SandboxSession(box, repo)
            variants["a sandbox per command (the checks'; the worker's before)"] = lambda: (
                run_command("true", repo, timeout_s=30, env=env, sandbox=box)
            )
            variants["the round's sandbox (the worker's: SandboxSession)"] = lambda: run_command(
                "true", repo, timeout_s=30, env=env, sandbox=session
            )
        try:
            samples = interleaved(variants, SANDBOX_RUNS)
        finally:
            if session is not None:
                session.close()
        row(f"[1. a command: `true` through run_command, {SANDBOX_RUNS} runs each]", "")
        bare = samples.pop("without the sandbox")
        row("  without the sandbox: median / p90", f"{ms_pair(bare)}")
        if problem:
            row("  in the sandbox", "n/a", ok=f"skipped: {problem}")
        for name, xs in samples.items():
            row(f"  {name}: median / p90", ms_pair(xs))
        for name, xs in samples.items():
            added = (statistics.median(xs) - statistics.median(bare), p90(xs) - p90(bare))
            value = f"{added[0]:.2f} / {added[1]:.2f} ms"
            if "round" in name:
                ok = "yes" if added[0] <= SANDBOX_ADDED_MS else "NO"
                row("  added by the round's sandbox: median / p90", value, TARGET, ok)
            else:
                row("  added by a sandbox per command: median / p90", value)
        if session is not None:
            row("  sandboxes the round's session made", str(session.started))
            late, early = [], []
            for _ in range(2):  # taking turns
                late += first_commands(box, repo, env, early=False)
                early += first_commands(box, repo, env, early=True)
            rounds = 2 * SESSION_STARTS
            row(f"  a round's first command (starts its sandbox), {rounds} rounds", ms_pair(late))
            row(
                f"  the same, its sandbox started as the round began, {rounds} rounds",
                ms_pair(early),
            )

        row("[2. in-process checks of one tool result, median of 200]", "")
        secrets = ("sk-test-0123456789abcdef", "tok_ABCDEFGH12345678", "hdr-secret-value")
        redactor = Redactor(secrets)
        clean = ("hello world, nothing to see here\n" * 640)[:20_000]
        dirty = clean[:10_000] + secrets[0] + clean[10_000:]
        r_clean = median_ms(lambda: redactor.redact(clean), 200)
        r_dirty = median_ms(lambda: redactor.redact(dirty), 200)
        ok = "yes" if r_clean <= IN_PROCESS_MS else "NO"
        row(
            "  redact 20 kB holding no secret (3 secrets known)",
            f"{r_clean:.3f} ms",
            f"<= {IN_PROCESS_MS:g} ms",
            ok,
        )
        row("  redact 20 kB holding one secret", f"{r_dirty:.3f} ms")
        policy = Policy.from_rules(allow=(), deny=("rm", "git push", "curl"))
        assert policy is not None
        command = "cd src && python -m pytest -q tests/ 2>&1 | tail -n 20 && git status --short"
        p_ms = median_ms(lambda: policy.refusal(command), 200)
        ok = "yes" if p_ms <= IN_PROCESS_MS else "NO"
        row(
            "  command policy: a 6-part compound command",
            f"{p_ms:.3f} ms",
            f"<= {IN_PROCESS_MS:g} ms",
            ok,
        )

        row("[3. the scope check after a bash call (200 files), median of 30]", "")
        rules = path_rules(("src/**",), (".env", "*.pem", ".git/**"))
        s_ms = median_ms(lambda: undo_outside(repo, base, rules), 30)
        ok = "yes" if s_ms <= SCOPE_CHECK_MS else "NO"
        row("  nothing to undo", f"{s_ms:.2f} ms", f"<= {SCOPE_CHECK_MS:g} ms", ok)

        if session is not None:
            verifications(box, repo, env, tmp / "verify.log")
        else:
            row("[4. a verification's checks]", "n/a", ok=f"skipped: {problem}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
