"""hero's own traffic with a remote of the user's repository: fetching the branch stories
start from, and the environment that lets hero's own push past the refusal every git hero
starts carries (hero.runner.PUSH_REFUSED_URL)."""

from __future__ import annotations

import os
from pathlib import Path

from hero.git.ops import GitError, git
from hero.runner import PUSH_REFUSED_URL


def fetch_branch(repo: Path, remote: str, branch: str, *, timeout_s: float = 300) -> None:
    """Fetch ``branch`` of ``remote`` into ``refs/remotes/<remote>/<branch>`` of ``repo``
    (forced, as a fetch moves a remote-tracking branch). GitError for a name that is no
    branch name (an option, ``..``, a refspec) and for a fetch that fails or times out."""
    if not branch or branch.startswith("-") or not remote or remote.startswith("-"):
        raise GitError(f"{remote}/{branch}: not a remote branch hero fetches")
    git(repo, "check-ref-format", f"refs/heads/{branch}")  # GitError for a name git refuses
    spec = f"+refs/heads/{branch}:refs/remotes/{remote}/{branch}"
    git(repo, "fetch", "--quiet", "--no-tags", "--", remote, spec, timeout_s=timeout_s)


def push_env(repo: Path, remote: str) -> dict[str, str]:
    """What lets hero's own push through the refusal every git hero starts carries.

    ``runner.child_env`` gives every child, hero's own git included, a ``pushInsteadOf``
    that turns every push URL into one that fails (``PUSH_REFUSED_URL``): the worker must
    not push. That rewrite applies to push URLs derived from ``remote.<name>.url``, never
    to an explicit ``remote.<name>.pushurl``. So for this one push the remote's own URLs
    (``insteadOf`` applied, as git would push to them) are given as its push URLs, through
    ``GIT_CONFIG_*`` (not ``-c``: a URL may hold a credential, and a command line is seen
    by every user of the machine). A remote with push URLs of its own, or one that a rule
    of the user's ``pushInsteadOf`` already sends elsewhere, is pushed to as it is.
    """
    pushes = git(repo, "remote", "get-url", "--push", "--all", remote).splitlines()
    if not any(url.startswith(PUSH_REFUSED_URL) for url in pushes):
        return {}
    fetches = git(repo, "remote", "get-url", "--all", remote).splitlines()
    if len(fetches) != len(pushes):
        raise GitError(f"remote {remote!r} of {repo}: its push URLs do not match its URLs")
    urls = [
        f if p.startswith(PUSH_REFUSED_URL) else p for p, f in zip(pushes, fetches, strict=True)
    ]
    try:  # after the GIT_CONFIG_* entries hero's git inherits (see git_env)
        n = max(0, int(os.environ.get("GIT_CONFIG_COUNT", "0")))
    except ValueError:
        n = 0
    env: dict[str, str] = {}
    for i, url in enumerate(urls, start=n):
        env[f"GIT_CONFIG_KEY_{i}"] = f"remote.{remote}.pushurl"
        env[f"GIT_CONFIG_VALUE_{i}"] = url
    env["GIT_CONFIG_COUNT"] = str(n + len(urls))
    return env
