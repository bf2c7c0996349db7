"""``hero serve``: the status page, a story's page, a plan's DAG and the JSON API behind them.

Read-only over the files of a home (``runs/``, ``inbox/``, ``done/``) and the target
repository, like ``hero status`` and ``hero logs``; it takes no lock and changes nothing.
Its modules need the optional extra ``serve`` (Starlette, uvicorn, Jinja2,
prometheus_client): :func:`require` says what to install when it is missing, and nothing of
hero imports them otherwise.

- :mod:`hero.web.data`: the data behind the pages and the API (plain dicts, redacted);
- :mod:`hero.web.dag`: a plan's DAG drawn as SVG;
- :mod:`hero.web.metrics`: ``/metrics``, the Prometheus text, from the home's files;
- :mod:`hero.web.app`: the Starlette application, its guard (token, read-only, headers);
- :mod:`hero.web.server`: the address bound, uvicorn in the foreground (``hero serve``);
- :mod:`hero.web.apart`: ``hero watch --serve``'s server, in a process of its own.
"""

from __future__ import annotations

import importlib.util

from hero.errors import UsageError

#: What the extra brings, by module name.
EXTRA_MODULES = ("starlette", "uvicorn", "jinja2", "prometheus_client")
INSTALL_HINT = "pip install 'hero[serve]' (in a checkout of hero: pip install -e '.[serve]')"


class ServeError(UsageError):
    """``hero serve`` cannot start: the extra is missing, an address or the token is bad."""


def require() -> None:
    """ServeError naming what to install when a module of the ``serve`` extra is missing."""
    missing = [m for m in EXTRA_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        raise ServeError(
            f"the web server needs {', '.join(missing)} (the optional extra `serve`): "
            f"{INSTALL_HINT}"
        )
