#!/usr/bin/env python
"""Run hero's command line under cProfile, every thread included, for the benchmarks.

    python bench/profile_hero.py OUT.prof watch --home H ...

Each thread gets a profiler of its own (threading.setprofile); at exit (SIGTERM included)
their stats are merged into OUT.prof, readable with `python -m pstats OUT.prof`.
bench/daemon.py uses it with `--profile`. A bench tool: hero itself never imports it.
"""

from __future__ import annotations

import cProfile
import pstats
import signal
import sys
import threading
from typing import Any

_profiles: list[cProfile.Profile] = []
_lock = threading.Lock()


def _start_thread_profile(*_: Any) -> None:
    sys.setprofile(None)
    prof = cProfile.Profile()
    with _lock:
        _profiles.append(prof)
    prof.enable()


def main() -> int:
    out, argv = sys.argv[1], sys.argv[2:]
    from hero.cli import main as hero_main

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    threading.setprofile(_start_thread_profile)
    main_prof = cProfile.Profile()
    _profiles.append(main_prof)
    rc = 1
    main_prof.enable()
    try:
        rc = hero_main(argv)
    except KeyboardInterrupt:
        rc = 130
    finally:
        main_prof.disable()
        with _lock:
            for prof in _profiles:
                prof.disable()
            stats = pstats.Stats(_profiles[0])
            for prof in _profiles[1:]:
                try:
                    stats.add(prof)
                except TypeError:  # a thread that never ran a call
                    pass
        stats.dump_stats(out)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
