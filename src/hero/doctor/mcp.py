"""``hero doctor``'s look at the home's MCP servers: each started as a worker's round starts
it (a stdio server in the sandbox, over the target repository, with its network rule; an
HTTP server at its URL), its tools listed, what fails said. One finding per server; nothing
of a secret in it (the details go through the configuration's redactor)."""

from __future__ import annotations

from collections.abc import Iterator

from hero.config.home import Config
from hero.config.schema import ROLES_FILE
from hero.doctor.finding import FAIL, OK, Finding
from hero.redact import Redactor
from hero.runner import child_env

#: Tools named in a finding, at most (the rest counted).
SHOWN_TOOLS = 12


def mcp_servers(config: Config, *, quick: bool = False) -> Iterator[Finding]:
    """Start each server of ``mcp_servers`` (``quick``: the stdio ones only, no HTTP), list
    its tools, stop it."""
    servers = [s for s in config.mcp_servers if not (quick and s.url)]
    if not servers:
        return
    from hero.agent.mcp.servers import McpServers
    from hero.sandbox.bwrap import SandboxUnavailable
    from hero.sandbox.bwrap import resolve as resolve_sandbox

    redactor = Redactor(config.secrets)
    safety = config.safety
    try:
        box = resolve_sandbox(
            safety.sandbox,
            worktree=config.target_repo,
            objects=None,
            hide=(config.home,),
            toolchains=safety.toolchain_dirs,
        )
    except SandboxUnavailable as exc:  # the sandbox finding says it already
        for server in servers:
            yield Finding(FAIL, f"MCP server {server.name}", "not started: no sandbox", str(exc))
        return
    env = child_env(secret_values=config.secrets)
    with McpServers(
        servers, cwd=config.target_repo, env=env, sandbox=box, secrets=config.secrets
    ) as running:
        running.start()
        for server in servers:
            what = f"MCP server {server.name}"
            why = running.problems.get(server.name)
            if why is not None:
                where = (
                    "its url" if server.url else "its command (run it by hand in the repository)"
                )
                fix = f"check mcp_servers.{server.name} in {ROLES_FILE}: {where}"
                yield Finding(FAIL, what, redactor.redact(why), fix)
                continue
            names = [t.name for t in running.tools if t.server == server.name]
            listed = ", ".join(names[:SHOWN_TOOLS])
            more = f" and {len(names) - SHOWN_TOOLS} more" if len(names) > SHOWN_TOOLS else ""
            how = server.url if server.url else "stdio" + (" in the sandbox" if box else "")
            detail = f"{how}: {len(names)} tools: {listed}{more}" if names else f"{how}: no tools"
            yield Finding(OK, what, redactor.redact(detail))
