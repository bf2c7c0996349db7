"""What hero needs to know to take issues from GitHub and answer on them.

:class:`GitHubSettings` and :class:`GitHubLabels` live in :mod:`hero.config.loader` (a record
hero reads, which may not import the outside world) and are re-exported here. They come
from the ``github:`` block of ``config/roles.yaml``; ``hero github watch`` may give the
repository, the label and the interval on its command line instead (:func:`settings_for`).

The token: ``GITHUB_TOKEN`` in the environment, else ``github_token:`` in
``config.local.yaml`` (not ``keys: {github: ...}``: the names under ``keys:`` are provider
names, and a provider may well be called ``github``). Either way it is one of
``Config.secrets``, so it is redacted from everything hero writes and kept out of the
environment of every command a story runs.

The API's base URL: ``GITHUB_API_URL`` in the environment, else the block's ``api_url``,
else ``https://api.github.com`` (GitHub Enterprise: ``https://HOST/api/v3``).
"""

from __future__ import annotations

from dataclasses import replace

from hero.config.home import Config
from hero.config.schema import GITHUB_REPO_RE, LOCAL_FILE, ROLES_FILE, ConfigError
from hero.config.sections import GitHubLabels, GitHubSettings

__all__ = ["GitHubLabels", "GitHubSettings", "require_token", "settings_for"]


def settings_for(
    config: Config,
    *,
    repo: str | None = None,
    label: str | None = None,
    interval_s: float | None = None,
) -> GitHubSettings:
    """The settings of a watcher: the ``github:`` block of roles.yaml, with what the command
    line gave in its place. ConfigError when no repository or label is given anywhere, or a
    value is not usable."""
    block = config.github
    chosen_repo = repo if repo is not None else (block.repo if block else None)
    chosen_label = label if label is not None else (block.label if block else None)
    if chosen_repo is None:
        raise ConfigError(
            ROLES_FILE,
            "github.repo",
            "no repository to watch: pass --repo OWNER/NAME or add `github: {repo: OWNER/NAME, "
            "label: hero}` to config/roles.yaml",
        )
    chosen_repo = chosen_repo.strip()
    if not GITHUB_REPO_RE.match(chosen_repo):
        raise ConfigError(
            "--repo" if repo is not None else ROLES_FILE,
            "github.repo",
            f"expected OWNER/NAME (e.g. octo-org/app); found {chosen_repo!r}",
        )
    if chosen_label is None or not chosen_label.strip():
        raise ConfigError(
            "--label" if label is not None else ROLES_FILE,
            "github.label",
            "no label: pass --label LABEL or set `label:` in the github block of "
            "config/roles.yaml (open issues with that label become stories)",
        )
    if interval_s is not None and not interval_s > 0:
        raise ConfigError(
            "--interval", "github.interval_s", f"expected seconds > 0; found {interval_s}"
        )
    base = block or GitHubSettings(repo=chosen_repo, label=chosen_label)
    return replace(
        base,
        repo=chosen_repo,
        label=chosen_label.strip(),
        interval_s=base.interval_s if interval_s is None else float(interval_s),
        api_url=config.github_api_url,
        token=config.github_token,
    )


def require_token(settings: GitHubSettings) -> str:
    """The token, or ConfigError saying where to put one."""
    if not settings.token:
        raise ConfigError(
            LOCAL_FILE,
            "github_token",
            f"no GitHub token: set GITHUB_TOKEN, or put `github_token: <token>` in {LOCAL_FILE} "
            f"(a token that can read issues of {settings.repo}, and for the report-back write "
            "issues and pull requests)",
        )
    return settings.token
