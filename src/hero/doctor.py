"""Pre-flight checks: what would make stories fail, found before any story runs.

``hero doctor`` runs them all and prints a line each (:class:`Finding`); ``hero watch`` and
``hero worker`` run the cheap ones (:func:`cheap_checks`) at start (:func:`preflight`) and
stop when one fails, since then every story they took would fail the same way.

The checks, in order: the configuration loads; git is new enough; the target repository
and its base ref; the sandbox works when it is on; ripgrep; free disk in the home. Then,
unless ``quick``, the ones that talk to something else: each configured role's model
answers one tiny request with a tool call; the push remote answers ``git ls-remote``; the
GitHub token can reach the repository with the scopes hero needs; Redis answers a PING.
Each of those is one attempt with a short timeout (never the story's retry policy): a
doctor that hangs for minutes on a dead endpoint is no help.

Nothing here prints: the command prints the findings. No finding holds a secret: the
details are passed through the configuration's redactor, and a key is named by where it
came from (``RoleConfig.key_source``), never by value.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit, urlunsplit

from hero.config import (
    LOCAL_FILE,
    PROVIDERS_DIR,
    ROLE_NAMES,
    ROLES_FILE,
    Config,
    ConfigError,
    RoleConfig,
    load_config,
)
from hero.errors import HeroError
from hero.git.ops import GitError, git
from hero.redact import Redactor

if TYPE_CHECKING:
    from hero.llm import LlmError  # imported where a model is asked: openai is heavy

Status = Literal["ok", "warn", "FAIL"]
OK: Status = "ok"
WARN: Status = "warn"
FAIL: Status = "FAIL"
#: The first check's ``what``: a failure there is a configuration error (exit 2).
CONFIGURATION = "configuration"

#: The oldest git hero supports: merging a plan's branches needs `git merge-tree
#: --write-tree` (git 2.38, see hero.git.ops).
MIN_GIT = (2, 38)
#: Seconds one model request of the doctor may take (a reasoning model thinks a while even
#: about a tiny request); ``hero doctor --timeout`` changes it.
MODEL_TIMEOUT_S = 60.0
#: Seconds `git ls-remote`, the GitHub request and the Redis PING may take.
NETWORK_TIMEOUT_S = 20.0
#: The most of an error's text a finding quotes.
DETAIL_MAX_CHARS = 300
#: The tool the model is asked to call: the smallest a tool-calling model can answer.
PROBE_TOOL = "hero_doctor_ping"
PROBE_TOOLS = (
    {
        "type": "function",
        "function": {
            "name": PROBE_TOOL,
            "description": "Tells hero doctor that tool calling works.",
            "parameters": {
                "type": "object",
                "properties": {"ok": {"type": "boolean"}},
                "required": ["ok"],
            },
        },
    },
)
PROBE_MESSAGES = (
    {
        "role": "user",
        "content": f"This is a connectivity check. Call the function {PROBE_TOOL} with "
        '{"ok": true}. Do not answer with text.',
    },
)
#: The scopes of a classic GitHub token that let hero read issues and write comments,
#: labels and pull requests (public_repo: public repositories only).
GITHUB_SCOPES = ("repo", "public_repo")


class PreflightFailed(HeroError):
    """A cheap check failed at the start of `hero watch` or `hero worker`: every story
    would fail the same way, so none is taken."""


@dataclass(frozen=True)
class Finding:
    """One check's outcome: ``status``, what was checked, what was found, and for a
    failure or a warning what to do about it."""

    status: Status
    what: str
    detail: str = ""
    fix: str = ""

    def line(self) -> str:
        """``ok   git: 2.43.0``; a failure or warning says its fix after ``->``."""
        text = f"{self.status:<4} {self.what}"
        if self.detail:
            text += f": {self.detail}"
        if self.fix and self.status != OK:
            text += f" -> {self.fix}"
        return text


# ----------------------------------------------------------------------------- entry points


def run_all(
    home: Path,
    *,
    quick: bool = False,
    model_timeout_s: float = MODEL_TIMEOUT_S,
    env: Mapping[str, str] | None = None,
) -> Iterator[Finding]:
    """Every check for the home, one finding at a time (so the command prints each as it
    comes: a model request may take a while). ``quick``: none of those that send anything
    over the network (the models, the remote, GitHub, Redis)."""
    env = os.environ if env is None else env
    config, found = load(home, env)
    yield from found
    if config is None:  # what needs no configuration is still worth knowing
        yield git_version()
        yield ripgrep()
        return
    for notice in config.notices:
        yield Finding(WARN, CONFIGURATION, notice)
    yield from cheap_checks(config, repository=True)
    if quick:
        return
    yield from models(config, model_timeout_s)
    yield from push_remotes(config)
    if config.github is not None:
        yield github_token(config, env)
    if config.engine.remote:
        yield from redis_servers(config)


def cheap_checks(config: Config, *, repository: bool) -> Iterator[Finding]:
    """The checks that cost nothing and ask no one: git, the target repository and its base
    ref (``repository``: a worker's clone is made when it starts, so not there), the
    sandbox, ripgrep, free disk in the home."""
    yield git_version()
    if repository:
        yield target_repository(config)
    yield sandbox(config)
    yield ripgrep()
    yield free_disk(config.home, config.min_free_disk_mb)


def preflight(config: Config, warn: Callable[[str], None], *, repository: bool) -> None:
    """The cheap checks at the start of a service: each warning said through ``warn``, and
    PreflightFailed naming every failure (with its fix) when one failed."""
    failures: list[Finding] = []
    for finding in cheap_checks(config, repository=repository):
        if finding.status == WARN:
            warn(finding.line())
        elif finding.status == FAIL:
            failures.append(finding)
    if failures:
        lines = "; ".join(f.line() for f in failures)
        raise PreflightFailed(f"pre-flight check failed, no story taken: {lines}")


# ----------------------------------------------------------------------------- the checks


def load(home: Path, env: Mapping[str, str]) -> tuple[Config | None, list[Finding]]:
    """The home's configuration with every role it configures, and its findings. A planner
    block that is there and wrong fails on its own line, and the worker's and reviewer's
    configuration is still checked."""
    fix = "fix what it names, then run again"
    try:
        config = load_config(home, roles=("worker", "reviewer"), env=env)
    except ConfigError as exc:
        return None, [Finding(FAIL, CONFIGURATION, str(exc), fix)]
    found: list[Finding] = []
    try:
        config = load_config(home, roles=ROLE_NAMES, env=env)
    except ConfigError as exc:  # the planner is optional: not configured is fine
        if not (exc.key == "planner" and exc.message.startswith("role not configured")):
            found.append(Finding(FAIL, CONFIGURATION, str(exc), fix))
    roles = ", ".join(config.roles)
    found.insert(0, Finding(OK, CONFIGURATION, f"{ROLES_FILE} loads; roles {roles}"))
    return config, found


def git_version() -> Finding:
    """git is installed and at least MIN_GIT."""
    need = ".".join(map(str, MIN_GIT))
    fix = f"install git {need} or newer"
    try:
        said = git(Path("/"), "--version", timeout_s=30)  # anywhere: the cwd may be gone
    except GitError as exc:
        return Finding(FAIL, "git", str(exc), fix)
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", said)
    if match is None:
        return Finding(WARN, "git", f"cannot read its version from {said.strip()!r}", fix)
    found = match.group(0)
    if (int(match.group(1)), int(match.group(2))) < MIN_GIT:
        return Finding(FAIL, "git", f"{found} is older than {need}, hero's minimum", fix)
    return Finding(OK, "git", found)


def target_repository(config: Config) -> Finding:
    """The target repository is a git repository hero can read, and the base ref names a
    commit in it."""
    repo = config.target_repo
    what = "target repository"
    worker_clone = config.home / "worker" / "repo"
    if config.engine.remote and repo == worker_clone and not (repo / ".git").exists():
        # a `hero worker` home: no target_repo, its clone is made as the worker starts
        return Finding(OK, what, f"none: `hero worker` clones target_remote to {repo}")
    if not repo.is_dir():
        return Finding(FAIL, what, f"{repo} does not exist", f"set target_repo in {ROLES_FILE}")
    try:
        top = git(repo, "rev-parse", "--show-toplevel", timeout_s=30).strip()
    except GitError as exc:
        return Finding(FAIL, what, f"{repo} is no git repository ({_one_line(exc)})", _repo_fix())
    ref = config.target_base_ref or "HEAD"
    sha = git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False)
    if not sha.strip():
        if config.target_base_ref:
            fix = f"set target_base_ref in {ROLES_FILE} to a branch, tag or commit of {top}"
            return Finding(FAIL, what, f"base ref {ref!r} names no commit in {top}", fix)
        return Finding(FAIL, what, f"{top} has no commit yet", "commit something there first")
    return Finding(OK, what, f"{top}, base {ref} at {sha.strip()[:12]}")


def sandbox(config: Config) -> Finding:
    """bubblewrap runs a sandboxed ``true`` here, when the sandbox is on."""
    from hero.sandbox import bwrap_problem

    mode = config.safety.sandbox
    if mode == "none":
        return Finding(OK, "sandbox", "off (sandbox: none): commands run with your user's rights")
    bwrap = shutil.which("bwrap")
    problem = "bwrap is not installed (not on PATH)" if bwrap is None else bwrap_problem(bwrap)
    if problem is None:
        return Finding(OK, "sandbox", f"bubblewrap works ({bwrap})")
    fix = (
        "install bubblewrap (e.g. apt-get install bubblewrap; it needs unprivileged user "
        f"namespaces, or hero run as root), or set sandbox: none in {ROLES_FILE}"
    )
    if mode == "bwrap":
        return Finding(FAIL, "sandbox", f"sandbox: bwrap is set, but {problem}", fix)
    return Finding(
        WARN, "sandbox", f"sandbox: auto, and {problem}: commands run WITHOUT a sandbox", fix
    )


def ripgrep() -> Finding:
    """``rg`` for the worker's grep tool."""
    from hero.agent.tools.search import find_rg

    return rg_finding(find_rg())


def rg_finding(found: str | None) -> Finding:
    """The ripgrep line for ``found``, rg's path or None."""
    if found:
        return Finding(OK, "ripgrep", found)
    return Finding(
        WARN,
        "ripgrep",
        "rg not found: the worker's grep tool uses hero's own, slower search",
        "pip install ripgrep, or install the system package ripgrep",
    )


def free_disk(home: Path, min_mb: int) -> Finding:
    """Free space in the home's file system, against ``min_free_disk_mb``."""
    try:
        free_mb = shutil.disk_usage(home).free // (1 << 20)
    except OSError as exc:
        return Finding(FAIL, "free disk", f"cannot read it for {home}: {exc.strerror or exc}")
    if min_mb and free_mb < min_mb:
        return Finding(
            FAIL,
            "free disk",
            f"{free_mb} MiB free in {home}, below min_free_disk_mb ({min_mb} MiB)",
            "free some space (`hero clean` removes old worktrees), or lower min_free_disk_mb "
            f"in {ROLES_FILE}",
        )
    return Finding(OK, "free disk", f"{free_mb} MiB free in {home}")


def models(config: Config, timeout_s: float) -> Iterator[Finding]:
    """One request per distinct endpoint, model and key among the roles."""
    probed: dict[tuple[str, str, str], list[str]] = {}
    roles: dict[tuple[str, str, str], RoleConfig] = {}
    for name, role in config.roles.items():
        key = (role.provider.base_url, role.model, role.key_source)
        probed.setdefault(key, []).append(name)
        roles.setdefault(key, role)
    redactor = Redactor(config.secrets)
    for key, names in probed.items():
        yield model(roles[key], ", ".join(names), timeout_s, redactor)


def model(role: RoleConfig, names: str, timeout_s: float, redactor: Redactor) -> Finding:
    """One chat completion with one tool, expecting a tool call back; a failure sorted into
    what the user fixes: the endpoint, the key, the model name, or tool calling."""
    from hero.config import LlmSettings
    from hero.llm import LlmClient, LlmError

    what = f"model ({names}): '{role.model}' at {role.provider.base_url}"
    settings = replace(LlmSettings(), timeout_s=timeout_s, max_attempts=1)
    client = LlmClient(role, settings)
    try:
        answer = client.complete(list(PROBE_MESSAGES), list(PROBE_TOOLS))
    except LlmError as exc:
        return _failure(role, what, exc, timeout_s, redactor)
    finally:
        client.http_client.close()
    if not answer.tool_calls:
        return Finding(
            FAIL,
            what,
            "no tool calling: it answered with text, not the tool call asked for",
            "use a model that supports tool (function) calling, and turn it on in the server "
            "(vLLM: --enable-auto-tool-choice --tool-call-parser ...; Ollama: a model tagged "
            "'tools')",
        )
    return Finding(OK, what, "answers with tool calls")


def _failure(
    role: RoleConfig, what: str, exc: LlmError, timeout_s: float, redactor: Redactor
) -> Finding:
    """What a failed probe means, from the openai exception under ``exc``."""
    import openai

    provider_file = f"{PROVIDERS_DIR}/{role.provider.name}.yaml"
    cause = exc.__cause__
    if isinstance(cause, openai.APITimeoutError):
        return Finding(
            FAIL,
            what,
            f"no answer within {timeout_s:g} s",
            "check that the server runs and is not overloaded (or pass a longer --timeout)",
        )
    if isinstance(cause, openai.APIConnectionError):
        return Finding(
            FAIL,
            what,
            f"endpoint unreachable ({redactor.redact(_one_line(cause.__cause__ or cause))})",
            f"start the server, or fix base_url in {provider_file}",
        )
    said = redactor.redact(_one_line(exc))
    if isinstance(cause, openai.APIStatusError):
        return _status_finding(role, what, cause.status_code, said, provider_file)
    return Finding(FAIL, what, said, f"check base_url in {provider_file}")


def _status_finding(
    role: RoleConfig, what: str, status: int, said: str, provider_file: str
) -> Finding:
    lowered = said.lower()
    if status in (401, 403):
        source = role.key_source
        where = f"the key from {source}" if source else "no key (the provider has no api_key_env)"
        fix = (
            f"put a valid key in {_key_place(role)}"
            if source
            else f"set api_key_env in {provider_file}, or keys.{role.provider.name} in {LOCAL_FILE}"
        )
        return Finding(FAIL, what, f"key refused (HTTP {status}) with {where}", fix)
    if status == 404 or (
        "model" in lowered and any(w in lowered for w in ("not found", "does not exist", "unknown"))
    ):
        return Finding(
            FAIL,
            what,
            f"model unknown (HTTP {status}): {said}",
            f"fix model in {ROLES_FILE} or default_model in {provider_file} (the server "
            "lists its models at <base_url>/models); or base_url, if it lacks a path like /v1",
        )
    return Finding(FAIL, what, said, f"check {provider_file} and the server's logs")


def _key_place(role: RoleConfig) -> str:
    source = role.key_source
    if source.startswith("$"):
        return f"the environment variable {source[1:]}"
    return source


def push_remotes(config: Config) -> Iterator[Finding]:
    """The remote story branches are pushed to answers ``git ls-remote``: the github
    block's remote of the target repository, the Celery engine's target_remote."""
    redactor = Redactor(config.secrets)
    if config.github is not None:
        yield _ls_remote(
            config.target_repo,
            config.github.remote,
            f"push remote '{config.github.remote}'",
            f"add it (`git remote add {config.github.remote} URL` in {config.target_repo}) "
            "and make sure this user can fetch and push it",
            redactor,
        )
    if config.engine.remote and config.engine.target_remote:
        shown = _without_password(config.engine.target_remote)
        yield _ls_remote(
            config.home,
            config.engine.target_remote,
            f"target_remote {shown}",
            f"check target_remote in {ROLES_FILE} and this machine's access to it",
            redactor,
        )


def _ls_remote(cwd: Path, remote: str, what: str, fix: str, redactor: Redactor) -> Finding:
    try:
        git(
            cwd if cwd.is_dir() else Path("/"),
            "ls-remote",
            "--heads",
            remote,
            env={"GIT_TERMINAL_PROMPT": "0", "GIT_SSH_COMMAND": _batch_ssh()},
            timeout_s=NETWORK_TIMEOUT_S,
            max_output=1 << 20,
            cut_ok=True,
        )
    except GitError as exc:
        return Finding(FAIL, what, redactor.redact(_one_line(exc)), fix)
    return Finding(OK, what, "reachable")


def _batch_ssh() -> str:
    """ssh that never asks for a password or a host key (the doctor runs unattended too):
    the user's own GIT_SSH_COMMAND, else ssh, in batch mode."""
    return f"{os.environ.get('GIT_SSH_COMMAND') or 'ssh'} -o BatchMode=yes"


def github_token(config: Config, env: Mapping[str, str]) -> Finding:
    """The token reaches the github block's repository, with the scopes hero needs."""
    import httpx2

    assert config.github is not None
    repo = config.github.repo
    what = f"GitHub token for {repo}"
    source = (
        "$GITHUB_TOKEN"
        if (env.get("GITHUB_TOKEN") or "").strip()
        else f"{LOCAL_FILE}: github_token"
    )
    token = config.github_token
    if not token:
        return Finding(FAIL, what, "no token", f"set GITHUB_TOKEN, or github_token in {LOCAL_FILE}")
    url = f"{config.github_api_url.rstrip('/')}/repos/{repo}"
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/vnd.github+json",
        "X-GitHub-Api-Version": "2022-11-28",
    }
    redactor = Redactor(config.secrets)
    try:
        with httpx2.Client(timeout=NETWORK_TIMEOUT_S, follow_redirects=False) as client:
            response = client.get(url, headers=headers)
    except (httpx2.HTTPError, ValueError) as exc:  # ValueError: a token no header can hold
        return Finding(
            FAIL,
            what,
            f"cannot reach {config.github_api_url}: {redactor.redact(_one_line(exc))}",
            "check the network, or api_url in the github block",
        )
    status = response.status_code
    if status == 401:
        return Finding(
            FAIL, what, f"token refused (HTTP 401), the token from {source}", "make a new token"
        )
    if status in (403, 404):
        return Finding(
            FAIL,
            what,
            f"HTTP {status}: the repository does not exist, or the token from {source} "
            "cannot see it",
            f"check github.repo in {ROLES_FILE}, and give the token access to {repo}",
        )
    if status != 200:
        return Finding(FAIL, what, f"HTTP {status} from {url}", "try again later")
    scopes_header = response.headers.get("x-oauth-scopes")
    if scopes_header is None:  # a fine-grained or app token: GitHub does not list its rights
        return Finding(
            WARN,
            what,
            "reaches the repository; its permissions are not reported (a fine-grained token)",
            "make sure it has Issues and Pull requests: read and write",
        )
    scopes = {s.strip() for s in scopes_header.split(",") if s.strip()}
    if not scopes & set(GITHUB_SCOPES):
        shown = ", ".join(sorted(scopes)) or "none"
        return Finding(
            FAIL,
            what,
            f"scopes {shown}: hero needs repo (public_repo for a public repository) to "
            "comment, label and open pull requests",
            "make a token with the repo scope",
        )
    return Finding(OK, what, f"scopes {', '.join(sorted(scopes))}")


def redis_servers(config: Config) -> Iterator[Finding]:
    """The Celery engine's Redis (hero's store, and the broker when it is a Redis) PINGs."""
    from hero.engine.app import missing

    problem = missing()
    if problem is not None:
        yield Finding(FAIL, "redis", problem)
        return
    urls = [config.engine.state_url]
    if config.engine.broker_url.startswith(("redis://", "rediss://", "unix://")):
        urls.append(config.engine.broker_url)
    redactor = Redactor(config.secrets)
    for url in dict.fromkeys(u for u in urls if u):
        yield _ping(url, redactor)


def _ping(url: str, redactor: Redactor) -> Finding:
    import redis

    what = f"redis {_without_password(url)}"
    try:
        client = redis.Redis.from_url(
            url, socket_timeout=NETWORK_TIMEOUT_S, socket_connect_timeout=NETWORK_TIMEOUT_S
        )
        try:
            client.ping()
        finally:
            client.close()
    except (redis.RedisError, OSError, ValueError) as exc:
        return Finding(
            FAIL,
            what,
            f"unreachable: {redactor.redact(_one_line(exc))}",
            "start it, or fix broker_url / state_url (config.local.yaml or the environment)",
        )
    return Finding(OK, what, "answers PING")


# ----------------------------------------------------------------------------- helpers


def _without_password(url: str) -> str:
    """``url`` with any password in it replaced by ``***``, for a finding's line."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "(unreadable URL)"
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))


def _one_line(exc: BaseException) -> str:
    """An error's text as one short line of printable characters: it may hold what a server
    sent (a model's or a proxy's error message), which must not move the cursor or colour
    the terminal, nor fill it."""
    text = "".join(c if c.isprintable() else " " for c in str(exc))
    text = " ".join(text.split()) or type(exc).__name__
    return text if len(text) <= DETAIL_MAX_CHARS else text[:DETAIL_MAX_CHARS] + "..."


def _repo_fix() -> str:
    return f"point target_repo in {ROLES_FILE} at a git repository (or run `git init` there)"
