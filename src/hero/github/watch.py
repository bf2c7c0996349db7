"""`hero github watch`: issues in, reports out, every interval, as a service.

One sweep is the intake (:func:`hero.github.intake.intake_sweep`: new labelled issues
become inbox stories), the cancelling of stories whose issue was closed or lost the label
(:func:`hero.github.cancel.cancel_sweep`), and then the report-back
(:func:`hero.github.report.report_sweep`: labels, pull requests and comments for the
stories' endings), and the follow-ups of hero's pull requests
(:func:`hero.github.followups.followup_sweep`: review comments and failing checks become
follow-up stories on the same branch). The watcher runs a sweep,
waits ``interval_s`` and runs the next, until SIGTERM or Ctrl-C (``--once``: one sweep).

Nothing GitHub does stops it: the client waits out rate limits and tries 5xx answers and
dropped connections again with backoff (:mod:`hero.github.api`); a sweep that still fails
is logged and the next one comes at its time; a failure of the report-back is logged and
never stops the intake. A stop ends a rate-limit wait at once.

``hero watch`` runs the same watcher on a thread when ``config/roles.yaml`` has a
``github:`` block (:func:`start_in_process`), so one service takes issues and runs them.
One watcher per home at a time (``runs/github/watch.lock``): a second is refused, so no
two report the same ending at once. ``--dry-run`` (``settings.dry_run``) takes no lock and
changes nothing, on GitHub or in the home: every step logs what it would do.

The command (its arguments, the logging, the exit code) is :mod:`hero.commands.github`.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hero.config.home import Config
from hero.config.schema import ConfigError
from hero.config.sections import GitHubSettings
from hero.errors import EXIT_INTERRUPTED, UsageError
from hero.github.cancel import cancel_sweep
from hero.github.intake import intake_sweep
from hero.github.settings import require_token, settings_for
from hero.locks import PidLock
from hero.redact import Redactor

if TYPE_CHECKING:
    from hero.github.api import GitHub, Retry

#: The watcher's lock, relative to the home: one watcher of GitHub per home.
LOCK_FILE = Path("runs") / "github" / "watch.lock"
#: Seconds ``hero watch`` waits for its GitHub thread to end at shutdown.
STOP_JOIN_S = 5.0


class Stopped(BaseException):
    """The watcher was asked to stop during a wait. A BaseException, so that no ``except
    Exception`` on the way up (the report-back's, per issue) takes it for a failure."""


class WatcherBusy(UsageError):
    """Another watcher of GitHub holds this home."""


class Watcher:
    """The sweep every ``settings.interval_s`` until :meth:`stop`."""

    def __init__(
        self,
        home: Path,
        settings: GitHubSettings,
        config: Config,
        log: Any,
        *,
        retry: Retry | None = None,
    ) -> None:
        self.home = Path(home)
        self.retry = retry
        """How the client tries again (None: hero.github.api's default)."""
        self.settings = settings
        self.config = config
        self.log = log
        self.first_sweep = threading.Event()
        """Set once the first sweep has ended (well or not)."""
        self._stop = threading.Event()
        self._redactor = Redactor((*config.secrets, *(s for s in (settings.token,) if s)))

    def stop(self) -> None:
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def client(self) -> GitHub:
        """The REST client of this watcher: its waits end when the watcher stops."""
        from hero.github.api import DEFAULT_RETRY, GitHub

        return GitHub(
            self.settings.api_url,
            self.settings.token,
            self.settings.repo,
            retry=self.retry or DEFAULT_RETRY,
            sleep=self._sleep,
            on_wait=lambda message: self.log.info("github wait", detail=message),
        )

    def run(self, *, once: bool = False) -> bool:
        """Sweep until stopped (``once``: one sweep); whether the last sweep reached GitHub."""
        ok = True
        self.log.info(
            "github watching",
            repo=self.settings.repo,
            label=self.settings.label,
            interval_s=self.settings.interval_s,
            api=self.settings.api_url,
        )
        try:
            with self.client() as gh:
                while not self._stop.is_set():
                    ok = self.sweep(gh)
                    self.first_sweep.set()
                    if once or self._stop.wait(self.settings.interval_s):
                        break
        except Stopped:
            pass
        finally:
            self.first_sweep.set()
        return ok

    def sweep(self, gh: GitHub) -> bool:
        """Intake, then report-back; whether the intake reached GitHub. Raises only Stopped."""
        from hero.github.api import GitHubError

        ok = True
        written: list[Path] = []
        self._fetch_base()
        try:
            issues = gh.open_issues(self.settings.label)
            written = intake_sweep(self.home, gh, self.settings, self.config, self.log, issues)
            cancel_sweep(self.home, gh, self.settings, issues, self.log)
        except GitHubError as exc:
            ok = False
            self.log.warning(
                "github unreachable",
                error=self.scrub(exc),
                note=f"tried again in {self.settings.interval_s:g} s",
            )
        except Exception as exc:  # noqa: BLE001 - one bad sweep must not stop the watcher; logged
            ok = False
            self.log.error("intake failed", error=self.scrub(f"{type(exc).__name__}: {exc}"))
        else:
            if written and not self.settings.dry_run:
                self.log.info("intake", written=[str(p.relative_to(self.home)) for p in written])
        self._report(gh)
        cap = self.settings.max_per_sweep
        self._followups(gh, None if not cap else max(0, cap - len(written)))
        if ok and self.config.housekeeping.after_pr_merged and not self.settings.dry_run:
            self._merged(gh)
        return ok

    def _fetch_base(self) -> None:
        """Fetch the branch stories start from when it is the remote's (``target_base_ref:
        origin/main``): new stories start from, and passing ones keep up with (hero.run.keepup),
        the remote's branch as of this sweep, not as the repository last fetched it. A failed
        fetch is logged; the sweep goes on with what was fetched before."""
        from hero.git.ops import GitError
        from hero.git.remote import fetch_branch

        base, remote = self.config.target_base_ref or "", self.settings.remote
        if self.settings.dry_run or not base.startswith(f"{remote}/"):
            return
        try:
            fetch_branch(self.config.target_repo, remote, base[len(remote) + 1 :])
        except GitError as exc:
            self.log.warning("base not fetched", ref=base, error=self.scrub(exc))

    def _followups(self, gh: GitHub, room: int | None) -> None:
        """The follow-up sweep; ``room``: the new stories it may write (max_per_sweep)."""
        settings = self.settings
        if not (settings.followup_max_per_pull or settings.ci_followup_max_per_pull):
            return
        try:
            from hero.github.followups import followup_sweep

            followup_sweep(self.home, gh, settings, self.config, self.log, room=room)
        except Exception as exc:  # noqa: BLE001 - never stops the watcher; logged
            self.log.error("follow-ups failed", error=self.scrub(f"{type(exc).__name__}: {exc}"))

    def _merged(self, gh: GitHub) -> None:
        """Which passed stories' pull requests are merged, for housekeeping to act on."""
        try:
            from hero.github.merged import merged_sweep

            merged_sweep(self.home, gh, self.log)
        except Exception as exc:  # noqa: BLE001 - never stops the watcher; logged
            self.log.warning(
                "merged pulls not read", error=self.scrub(f"{type(exc).__name__}: {exc}")
            )

    def _report(self, gh: GitHub) -> None:
        try:
            from hero.github.report import report_sweep

            report_sweep(self.home, gh, self.settings, self.config, self.log)
        except Exception as exc:  # noqa: BLE001 - the report-back never stops the watcher; logged
            self.log.error("report failed", error=self.scrub(f"{type(exc).__name__}: {exc}"))

    def _sleep(self, seconds: float) -> None:
        if self._stop.wait(seconds):
            raise Stopped

    def scrub(self, text: object) -> str:
        """``text`` on one line, without any secret."""
        return self._redactor.redact(" ".join(str(text).split()))


# ----------------------------------------------------------------------------- the lock


class WatcherLock(PidLock):
    """One GitHub watcher per home: an flock on ``runs/github/watch.lock`` (holding its pid)."""

    def __init__(self, home: Path) -> None:
        path = Path(home) / LOCK_FILE
        super().__init__(
            path,
            lambda pid: WatcherBusy(f"GitHub is already watched for {path.parents[2]} (pid {pid})"),
        )


# ----------------------------------------------------------------------------- hero github watch


def run(watcher: Watcher, *, once: bool = False) -> bool:
    """Hold the home's watcher lock (WatcherBusy when another watcher has it) and run
    ``watcher`` until SIGTERM or SIGINT stops it (``once``: one sweep); a second signal
    exits at once. Whether the last sweep reached GitHub."""
    lock = None if watcher.settings.dry_run else WatcherLock(watcher.home)  # writes nothing
    if lock is not None:
        lock.acquire()
    try:
        ok = _serve(watcher, watcher.log, once=once)
    finally:
        if lock is not None:
            lock.release()
    watcher.log.info("github stopped")
    return ok


def _serve(watcher: Watcher, log: Any, *, once: bool) -> bool:
    """Run ``watcher``, SIGTERM and SIGINT stopping it; a second signal exits at once."""
    signals = {"count": 0}

    def on_signal(signum: int, frame: Any) -> None:
        signals["count"] += 1
        if signals["count"] == 1:
            log.info("stopping", signal=signal.Signals(signum).name)
            watcher.stop()
        else:
            os._exit(EXIT_INTERRUPTED)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        return watcher.run(once=once)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


# ----------------------------------------------------------------------------- in hero watch


class InProcess:
    """The watcher on a thread of ``hero watch``; :meth:`stop` ends it."""

    def __init__(self, watcher: Watcher, lock: WatcherLock) -> None:
        self.watcher = watcher
        self._lock = lock
        self.thread = threading.Thread(target=self._run, name="hero-github", daemon=True)

    def _run(self) -> None:
        try:
            self.watcher.run()
        except BaseException as exc:  # noqa: BLE001 - logged; the daemon goes on without it
            self.watcher.log.error(
                "github watcher stopped", error=self.watcher.scrub(f"{type(exc).__name__}: {exc}")
            )
        finally:
            self.watcher.first_sweep.set()

    def stop(self, *, final_report: bool = True) -> None:
        """End the watcher; then, with ``final_report``, report once more on the stories
        that ended since its last sweep (``hero watch --exit-when-idle`` ends right after
        them), best effort: no wait for a rate limit or a retry."""
        self.watcher.stop()
        self.thread.join(STOP_JOIN_S)
        try:
            if final_report and not self.thread.is_alive():
                with self.watcher.client() as gh:
                    self.watcher._report(gh)
        except BaseException as exc:  # noqa: BLE001 - Stopped, or GitHub gone: said, not raised
            self.watcher.log.warning(
                "github report skipped at stop", error=self.watcher.scrub(repr(exc))
            )
        finally:
            self._lock.release()


def github_problem(config: Config) -> str | None:
    """Why ``hero watch`` cannot watch GitHub with this configuration (None: it can, or
    there is no github block)."""
    if config.github is None:
        return None
    try:
        settings = settings_for(config)
        require_token(settings)
        Watcher(config.home, settings, config, None).client().close()
    except ConfigError as exc:
        return str(exc)
    except ValueError as exc:  # an API URL or a token the client cannot use
        return Redactor(config.secrets).redact(f"github: {exc}")
    return None


def start_in_process(
    config: Config, log: Any, *, wait_first_sweep: bool = False
) -> InProcess | None:
    """Start the watcher of the ``github:`` block on a thread (None without one, or when
    another watcher holds the home: logged). ``wait_first_sweep``: return once its first
    sweep has ended, so that ``--exit-when-idle`` sees the stories it wrote."""
    if config.github is None:
        return None
    settings = settings_for(config)
    watcher = Watcher(config.home, settings, config, log)
    lock = WatcherLock(config.home)
    try:
        lock.acquire()
    except WatcherBusy as exc:
        log.warning("github intake not started", reason=str(exc))
        return None
    running = InProcess(watcher, lock)
    running.thread.start()
    if wait_first_sweep:
        watcher.first_sweep.wait()
    return running
