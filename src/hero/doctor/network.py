"""The checks that ask something else over the network: each role's model, the push
remote, GitHub, Redis. Each is one attempt with a short timeout."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from hero.config.home import Config
from hero.config.providers import RoleConfig
from hero.config.schema import LOCAL_FILE, PROVIDERS_DIR, ROLES_FILE
from hero.doctor.finding import FAIL, OK, WARN, Finding, one_line, without_password
from hero.git.ops import GitError, git
from hero.redact import Redactor

if TYPE_CHECKING:
    from hero.llm.client import LlmError  # imported where a model is asked: openai is heavy

#: Seconds one model request of the doctor may take (a reasoning model thinks a while even
#: about a tiny request); ``hero doctor --timeout`` changes it.
MODEL_TIMEOUT_S = 60.0
#: Seconds `git ls-remote`, the GitHub request and the Redis PING may take.
NETWORK_TIMEOUT_S = 20.0
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
        yield model(config, roles[key], ", ".join(names), timeout_s, redactor)


def model(
    config: Config, role: RoleConfig, names: str, timeout_s: float, redactor: Redactor
) -> Finding:
    """One chat completion with one tool, expecting a tool call back; a failure sorted into
    what the user fixes: the endpoint, the key, the model name, or tool calling."""
    from hero.config.sections import LlmSettings
    from hero.llm.client import LlmError, make_client

    what = f"model ({names}): '{role.model}' at {role.provider.base_url}"
    settings = replace(LlmSettings(), timeout_s=timeout_s, max_attempts=1)
    client = make_client(config, role, settings=settings)
    try:
        answer = client.complete(list(PROBE_MESSAGES), list(PROBE_TOOLS))
    except LlmError as exc:
        return _failure(role, what, exc, timeout_s, redactor)
    finally:
        client.http_client.close()
    if not answer.tool_calls and answer.finish_reason == "length":
        # a reasoning model may spend a small output cap thinking: no verdict on tools
        return Finding(
            WARN,
            what,
            "its answer was cut at the output cap before any tool call: tool calling unknown",
            f"raise max_output_tokens of the role in {ROLES_FILE}, or run hero doctor again",
        )
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
            f"endpoint unreachable ({redactor.redact(one_line(cause.__cause__ or cause))})",
            f"start the server, or fix base_url in {provider_file}",
        )
    said = redactor.redact(one_line(exc))
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


def push_remotes(config: Config, *, github: bool = True) -> Iterator[Finding]:
    """The remote story branches are pushed to answers ``git ls-remote``: the github
    block's remote of the target repository (``github``: not on a worker, which pushes to
    target_remote only), the Celery engine's target_remote."""
    redactor = Redactor(config.secrets)
    if github and config.github is not None:
        yield _ls_remote(
            config.target_repo,
            config.github.remote,
            f"push remote '{config.github.remote}'",
            f"add it (`git remote add {config.github.remote} URL` in {config.target_repo}) "
            "and make sure this user can fetch and push it",
            redactor,
        )
    if config.engine.remote and config.engine.target_remote:
        shown = without_password(config.engine.target_remote)
        yield _ls_remote(
            config.home,
            config.engine.target_remote,
            f"target_remote {shown}",
            f"check target_remote in {ROLES_FILE} and this machine's access to it",
            redactor,
            empty=(
                "it has no branch yet: a worker starts each story from the base branch as "
                "the remote has it",
                "push the base branch there (docs/celery.md)",
            ),
        )


def _ls_remote(
    cwd: Path,
    remote: str,
    what: str,
    fix: str,
    redactor: Redactor,
    *,
    empty: tuple[str, str] | None = None,
) -> Finding:
    """``git ls-remote --heads``'s finding; ``empty``: the warning (what, fix) when it lists
    no branch."""
    try:
        heads = git(
            cwd if cwd.is_dir() else Path("/"),
            "ls-remote",
            "--heads",
            "--",  # a remote named like an option (--upload-pack=...) stays a remote
            remote,
            env={"GIT_TERMINAL_PROMPT": "0", "GIT_SSH_COMMAND": _batch_ssh()},
            timeout_s=NETWORK_TIMEOUT_S,
            max_output=1 << 20,
            cut_ok=True,
        )
    except GitError as exc:
        return Finding(FAIL, what, redactor.redact(one_line(exc)), fix)
    if empty is not None and not heads.strip():
        return Finding(WARN, what, f"reachable, but {empty[0]}", empty[1])
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
            f"cannot reach {config.github_api_url}: {redactor.redact(one_line(exc))}",
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

    what = f"redis {without_password(url)}"
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
            f"unreachable: {redactor.redact(one_line(exc))}",
            "start it, or fix broker_url / state_url (config.local.yaml or the environment)",
        )
    return Finding(OK, what, "answers PING")
