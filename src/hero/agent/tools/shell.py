"""The bash tool: one shell command in the worktree through hero's command runner."""

from __future__ import annotations

from hero.agent.tools.context import ToolContext, ToolError, ToolOutcome
from hero.agent.tools.scope import check_after_command
from hero.redact import Redactor
from hero.runner import run_command, truncate_middle


def tool_bash(ctx: ToolContext, command: str, timeout_s: float | None = None) -> ToolOutcome:
    if not command.strip():
        raise ToolError("tool 'bash': command must not be empty")
    if ctx.policy is not None:  # roles.yaml allow_commands / deny_commands (tools.policy)
        refusal = ctx.policy.refusal(command)
        if refusal:
            raise ToolError(refusal)
    timeout = ctx.bash_timeout_s if timeout_s is None else float(timeout_s)
    if timeout <= 0:
        raise ToolError("tool 'bash': timeout_s must be > 0")
    notes = []
    if timeout > ctx.max_bash_timeout_s:
        timeout = ctx.max_bash_timeout_s
        notes.append(f"(timeout_s capped at {timeout:g})")
    result = run_command(
        command,
        ctx.root,
        timeout_s=timeout,
        env=ctx.env,
        cancel=ctx.cancel,
        max_output_bytes=max(4 * ctx.max_result_chars, 1 << 16),
        sandbox=ctx.sandbox,
    )
    if scope_note := check_after_command(ctx):  # changes outside the scope, put back
        notes.append(scope_note)
    if result.limit_note:
        notes.append(f"(sandbox limit: {result.limit_note})")
    if result.sandbox_note:
        notes.append(f"({result.sandbox_note})")
    header = f"exit code: {result.exit_code}"
    if result.timed_out:
        header += f" (timed out after {timeout:g} s; process group killed)"
    elif result.cancelled:
        header += " (cancelled; process group killed)"
    if result.output_truncated_bytes:
        notes.append(
            f"({result.output_truncated_bytes} bytes dropped from the middle of the output)"
        )
    head = "\n".join([header, *notes]) + "\n"
    output = result.output if result.output.strip() else "(no output)"
    if ctx.secrets:  # before the cut: a key across the cut must not leave a piece of itself
        output = Redactor(ctx.secrets).redact(output)
    body = truncate_middle(output, max(200, ctx.max_result_chars - len(head)))
    return ToolOutcome(head + body, is_error=result.cancelled, command_s=result.duration_s)
