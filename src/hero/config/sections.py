"""The records of config/roles.yaml's sections, each setting declared on its field (``knob(...)``,
see :mod:`hero.config.settings`): the worker's limits, what it may do, budgets, housekeeping,
model requests, the context window, the engine, alerts, memory and GitHub."""

from __future__ import annotations

from dataclasses import dataclass, field

from hero.config.schema import (
    ALERTS_SECTION,
    BUDGETS_SECTION,
    CONTEXT_SECTION,
    DEFAULT_PROTECTED,
    ENGINE_KEY_HOWTO,
    ENGINE_KEY_MIN_CHARS,
    ENGINE_SECTION,
    ENGINES,
    GITHUB_API_URL,
    GITHUB_ASSOCIATIONS,
    HOUSEKEEPING_SECTION,
    MEMORY_SECTION,
    NOTIFY_EVENTS,
    POLICY_SECTION,
    REQUESTS_SECTION,
    SANDBOX_CGROUPS,
    SANDBOX_MODES,
    SANDBOX_SECTION,
    WORKER_SECTION,
    check_api_url,
    check_associations,
    check_env_names,
    check_github_repo,
    check_notify_events,
    check_queue_name,
    check_rules,
    check_toolchain_dirs,
    check_webhook_url,
    choices_of,
    with_builtin,
)
from hero.config.settings import declare, knob, settings_of
from hero.sandbox.limits import Limits


@dataclass(frozen=True)
class WorkerLimits:
    """The worker's limits in one round: the agent loop's guardrails and the bash timeout."""

    max_turns: int = knob(
        "worker_max_turns",
        100,
        "Model turns (requests) in one Worker round.",
        section=WORKER_SECTION,
    )
    max_tool_calls: int = knob(
        "worker_max_tool_calls", 300, "Tool calls in one Worker round.", section=WORKER_SECTION
    )
    max_wall_s: float = knob(
        "worker_max_wall_s",
        3600.0,
        "Wall-clock limit of one Worker round, in seconds, checked before each model call "
        "and each tool call.",
        section=WORKER_SECTION,
    )
    bash_timeout_s: float = knob(
        "bash_timeout_s",
        600.0,
        "Default timeout of one bash tool call, in seconds (the model may ask for longer, "
        "within limits).",
        section=WORKER_SECTION,
    )
    loop_repeats: int = knob(
        "loop_repeats",
        4,
        "Identical consecutive tool calls that count as the Worker being stuck in a loop.",
        minimum=2,
        section=WORKER_SECTION,
    )
    max_tool_errors: int = knob(
        "worker_max_tool_errors",
        10,
        "Tool errors in a row that stop a Worker round (0: no limit).",
        note="A tool error is a call made wrongly: an unknown tool, arguments that are not "
        "JSON or do not fit the tool, or a call the tool refused (a path outside the "
        "worktree, a missing file, an edit whose old text is not found, a command the "
        "policy forbids). A bash command that exits non-zero is not one. Any other call "
        "resets the count.",
        minimum=0,
        section=WORKER_SECTION,
    )
    review_tool_calls: int = knob(
        "reviewer_max_tool_calls",
        12,
        "Tool calls the Reviewer may make in one review before it must give its verdict.",
        note="Only with tools in the reviewer's `tools:` (its default: read_file, ls, grep, "
        "find, git_log, git_show); each result is cut to 8000 characters. Once they are "
        "used up the Reviewer is asked for its verdict without tools.",
        section=WORKER_SECTION,
    )
    plan_tool_calls: int = knob(
        "planner_max_tool_calls",
        12,
        "Tool calls the Planner may make in one `hero plan` before it must give its plan.",
        note="Only with tools in the planner's `tools:` (its default: read_file, ls, grep, "
        "find, git_log, git_show), which read the target repository read-only; each result "
        "is cut to 8000 characters. Once they are used up the Planner is asked for its plan "
        "without tools.",
        section=WORKER_SECTION,
    )


@dataclass(frozen=True)
class Safety:
    """What confines the worker's and the checks' commands (roles.yaml)."""

    sandbox: str = knob(
        "sandbox",
        "auto",
        "Where the Worker's bash commands and the verify commands run:",
        choices=choices_of(
            SANDBOX_MODES,
            {
                "auto": "bubblewrap (bwrap) when it works on this machine, else no sandbox, "
                "with a warning",
                "bwrap": "bubblewrap, required: without it a story ends in error before any "
                "command runs",
                "none": "no sandbox: commands run with your user's rights",
            },
        ),
        note="In the sandbox a command sees the system read-only, the story's worktree "
        "writable, the repository's git objects and refs but not its config or hooks, a "
        "private /tmp and HOME, only its own processes (all of them end with it), and not "
        "the hero home or your home. Needs the system package bubblewrap (apt-get install "
        "bubblewrap).",
        section=SANDBOX_SECTION,
    )
    toolchain_dirs: tuple[str, ...] = knob(
        "toolchain_dirs",
        (),
        "Toolchain directories under a home that commands may use, bound read-only.",
        note="No directory under your home (or any in /home, /root) is shown to a command, "
        "on PATH or not: a ~/bin holds your own scripts and often secrets. Name here the "
        "toolchains commands need (absolute, or ~/...), e.g. ~/.pyenv, ~/.nvm, ~/.cargo; "
        "`hero doctor` names the tools on PATH that commands do not see. The Python hero "
        "itself runs on is always shown.",
        check=check_toolchain_dirs,
        example="toolchain_dirs:\n  - ~/.pyenv\n  - ~/.cargo",
        section=SANDBOX_SECTION,
    )
    sandbox_cgroups: str = knob(
        "sandbox_cgroups",
        "auto",
        "Whether the sandbox's process and memory limits use cgroups:",
        choices=choices_of(
            SANDBOX_CGROUPS,
            {
                "auto": "the pids and memory controllers (cgroup v2 or v1) hero can write",
                "off": "none: rlimits only, and as root the commands run as an unprivileged "
                "uid so that the process limit holds",
            },
        ),
        note="`hero doctor` says which mechanism holds the limits on this machine.",
        section=SANDBOX_SECTION,
    )
    sandbox_network: bool = knob(
        "sandbox_network",
        False,
        "Whether the Worker's commands may reach the network from the sandbox.",
        section=SANDBOX_SECTION,
    )
    verify_network: bool = knob(
        "verify_network",
        False,
        "Whether the verify commands may reach the network from the sandbox.",
        note="A test the Worker wrote runs in the checks, and with the network it could send "
        "what it reads anywhere. Set true for test suites that fetch dependencies.",
        section=SANDBOX_SECTION,
    )
    pass_env: tuple[str, ...] = knob(
        "pass_env",
        (),
        "Names of hero's environment variables the commands may see beside the safe ones.",
        note="The Worker's and the verify commands see of hero's environment only PATH, HOME, "
        "USER, the language and time zone (LANG, LC_*, TZ), TMPDIR, certificates (SSL_CERT_*) "
        "and toolchain homes (VIRTUAL_ENV, JAVA_HOME, GOPATH, CARGO_HOME, ...). A variable "
        "whose value holds a key or token hero knows is never passed on, nor any HERO_*.",
        check=check_env_names,
        section=SANDBOX_SECTION,
    )
    protected_files: tuple[str, ...] = knob(
        "protected_files",
        DEFAULT_PROTECTED,
        "Files the Worker never changes, whatever a story's scope says: .gitignore-style globs.",
        note="`*.pem` and `.env` match at any depth, `secrets/` or `config/prod/**` from the "
        "repository's root. hero always protects .env, .env.*, *.pem, *.key, id_rsa* and "
        ".git/**; these add to them. write_file and edit_file refuse a protected file; a bash "
        "command that changes one has it put back (or deleted, if it is new) before its "
        "result reaches the Worker.",
        check=with_builtin,
        value="[]",
        shown="[] (the built-in list only)",
        example='protected_files:\n  - secrets/\n  - "*.p12"\n  - config/production.yaml',
        section=POLICY_SECTION,
    )
    allow_commands: tuple[str, ...] = knob(
        "allow_commands",
        (),
        "Commands the Worker's bash tool may run; a non-empty list refuses every part of a "
        "command it does not name.",
        note="A rule is a command and its first words, matched as whole words on every part "
        "of the parsed command: `rm` refuses `make && rm -rf build`, `bash -c 'rm x'`, `sudo "
        "rm x`, `/bin/rm x`, but not `rmdir x` or `echo rm`. With an allow list, list `cd`, "
        "`echo`, ... too, and both a wrapper and what it wraps (`timeout` and `pytest`). A "
        "refused command is not run; the Worker is told the rule. The rules hold for the "
        "Worker's commands and the verify commands a planner model wrote (a plan's stories); "
        "verify commands you wrote run as written. A guard-rail against accidents, not a "
        "security boundary (a script the Worker writes, or `python -c`, is not looked into): "
        "the sandbox is that.",
        check=check_rules,
        shown="[] (no policy)",
        example="allow_commands:\n  - git\n  - python\n  - pytest\n  - ls\n  - cat\n  - echo"
        "\n  - cd",
        section=POLICY_SECTION,
    )
    deny_commands: tuple[str, ...] = knob(
        "deny_commands",
        (),
        "Commands the Worker's bash tool must not run, as rules like allow_commands'; deny "
        "wins over allow.",
        check=check_rules,
        shown="[] (no policy)",
        example="deny_commands:\n  - git push\n  - npm publish\n  - curl\n  - wget",
        section=POLICY_SECTION,
    )
    model_verify: bool = knob(
        "model_verify",
        True,
        "Whether the verify commands a planner model wrote (`hero plan`) run at all.",
        note="true: they run, checked by allow_commands and deny_commands (`hero plan` asks "
        "the planner again, and `hero run-plan` and `hero watch` refuse a story, when one "
        "breaks them); false: they never run, and default_verify runs in their place.",
        section=POLICY_SECTION,
    )
    limits: Limits = Limits()
    """What each sandboxed command may use (the ``limit_*`` keys; see hero.sandbox.limits)."""


@dataclass(frozen=True)
class Budget:
    """One budget as hero checks it: its key, what it limits and its limit."""

    key: str
    """Its key in config/roles.yaml, ``max_<scope>_<measure>``: the name errors give."""
    scope: str
    """``story`` (all its runs together) or ``round``."""
    measure: str
    """What is counted: ``tokens``, ``cost_usd`` or ``wall_s`` (hero.run.budget.Spend's fields)."""
    limit: float | None
    """None: no limit."""


@dataclass(frozen=True)
class Budgets:
    """Spend limits per story and per round; None: no limit. The one table of budget
    names: each field's key is ``max_<field>``; :meth:`each` lists them as hero checks them."""

    story_tokens: int | None = knob(
        "max_story_tokens",
        None,
        "Tokens (prompt + completion) a story may spend in all.",
        note="An answer that carries no token counts (no usage) is counted by hero's estimate "
        "of the request's and the answer's sizes, said as an estimate in hero status.",
        shown="null (no limit)",
        section=BUDGETS_SECTION,
    )
    story_cost_usd: float | None = knob(
        "max_story_cost_usd",
        None,
        "Dollars a story may spend in all.",
        note="The provider's reported cost when it sends one, else the prices in its file "
        "(input_usd_per_mtok, output_usd_per_mtok). A story whose worker or reviewer model "
        "has no prices is refused at its start (hero doctor and hero run --dry-run say so).",
        shown="null (no limit)",
        section=BUDGETS_SECTION,
    )
    story_wall_s: float | None = knob(
        "max_story_wall_s",
        None,
        "Seconds a story may spend in its rounds, all runs together, rounds cut short by a "
        "stop or a budget included (time between runs does not count).",
        shown="null (no limit)",
        section=BUDGETS_SECTION,
    )
    round_tokens: int | None = knob(
        "max_round_tokens",
        None,
        "Tokens one round (its worker turns and the reviewer's call) may spend.",
        shown="null (no limit)",
        section=BUDGETS_SECTION,
    )
    round_cost_usd: float | None = knob(
        "max_round_cost_usd",
        None,
        "Dollars one round may spend.",
        note="Counted as max_story_cost_usd is; it too needs the models' prices.",
        shown="null (no limit)",
        section=BUDGETS_SECTION,
    )
    round_wall_s: float | None = knob(
        "max_round_wall_s",
        None,
        "Seconds one round may take.",
        shown="null (no limit)",
        section=BUDGETS_SECTION,
    )

    def each(self) -> tuple[Budget, ...]:
        """Every budget, story budgets first, in declaration order."""
        out = []
        for s in settings_of(Budgets):
            scope, _, measure = s.attr.partition("_")
            out.append(Budget(s.key, scope, measure, getattr(self, s.attr)))
        return tuple(out)

    def named(self) -> dict[str, float | None]:
        """The budgets under their names in config/roles.yaml; None: no limit."""
        return {budget.key: budget.limit for budget in self.each()}


@dataclass(frozen=True)
class Housekeeping:
    """What the daemon and the workers remove by themselves (see hero.run.housekeeping); None:
    that rule is off. Nothing of an unfinished story is ever removed."""

    after_days: float | None = knob(
        "housekeeping_after_days",
        14.0,
        "Days after a story finished when its repository (worktrees/<id>) is removed.",
        note="0 removes it as soon as the story finishes; null keeps it (but for the two "
        "limits below).",
        minimum=0,
        shown="14; null (never by age)",
        section=HOUSEKEEPING_SECTION,
    )
    max_worktrees_mb: float | None = knob(
        "housekeeping_max_worktrees_mb",
        None,
        "Megabytes worktrees/ and envs/ (the project environments) may take together: over "
        "it, the repositories of finished stories are removed, the longest finished first, "
        "then the environments no story uses, until it fits.",
        note="Measured as disk use (like du) by walking worktrees/ at each look: on a large "
        "tree, a longer housekeeping_interval_s.",
        minimum=0,
        shown="null (no limit)",
        section=HOUSEKEEPING_SECTION,
    )
    min_free_mb: float | None = knob(
        "housekeeping_min_free_mb",
        1024.0,
        "Megabytes to keep free on the disk of worktrees/: below it, the repositories of "
        "finished stories are removed, the longest finished first, until there is.",
        minimum=0,
        shown="1024; null (no check)",
        section=HOUSEKEEPING_SECTION,
    )
    logs_after_days: float | None = knob(
        "housekeeping_logs_after_days",
        30.0,
        "Days after a story finished when its run logs (runs/<id>/: round traces, check "
        "output) are removed; its run record is kept.",
        minimum=0,
        shown="30; null (kept)",
        section=HOUSEKEEPING_SECTION,
    )
    after_pr_merged: bool = knob(
        "housekeeping_after_pr_merged",
        True,
        "With the github block: a passed story's repository is removed once its pull "
        "request is merged, whatever its age.",
        section=HOUSEKEEPING_SECTION,
    )
    interval_s: float = knob(
        "housekeeping_interval_s",
        600.0,
        "Seconds between two looks of `hero watch` at the rules above, besides one after "
        "each story that ends.",
        section=HOUSEKEEPING_SECTION,
    )


@dataclass(frozen=True)
class LlmSettings:
    timeout_s: float = knob(
        "llm_timeout_s",
        600.0,
        "Deadline of one model request, in seconds: all of it, from connecting to the last "
        "byte of the answer, however slowly the provider sends it; each attempt has its own.",
        section=REQUESTS_SECTION,
    )
    max_attempts: int = knob(
        "llm_max_attempts",
        6,
        "Attempts per model request on rate limits, timeouts and server errors.",
        section=REQUESTS_SECTION,
    )
    backoff_base_s: float = knob(
        "llm_backoff_base_s",
        2.0,
        "First wait between attempts, in seconds; it doubles after each failed attempt (a "
        "server's Retry-After is honoured).",
        minimum=0,
        section=REQUESTS_SECTION,
    )
    backoff_max_s: float = knob(
        "llm_backoff_max_s",
        60.0,
        "Longest backoff between attempts, in seconds, at least llm_backoff_base_s (a "
        "server's Retry-After is honoured up to llm_retry_after_max_s).",
        minimum=0,
        section=REQUESTS_SECTION,
    )
    retry_after_max_s: float = knob(
        "llm_retry_after_max_s",
        120.0,
        "Longest wait a server's Retry-After (on a 429 or 503) is honoured for, in seconds; "
        "on a longer ask hero waits this long, then tries again.",
        section=REQUESTS_SECTION,
    )
    max_response_mb: float = knob(
        "llm_max_response_mb",
        8.0,
        "Largest answer of one model request, in MB (1 MB = 1,048,576 bytes), unpacked if it "
        "came compressed: a larger one is read no further and ends the story in error (not "
        "the provider).",
        note="See docs/reliability.md (time and size).",
        section=REQUESTS_SECTION,
    )
    outage_backoff_s: float = knob(
        "outage_backoff_s",
        30.0,
        "How long `hero watch` holds a provider's stories back after an outage (its attempts "
        "ran out on refused connections, timeouts, 5xx or 429), in seconds, before one story "
        "tries it again; it doubles after each try that fails, with jitter.",
        note="See docs/reliability.md (model outages).",
        section=REQUESTS_SECTION,
    )
    outage_backoff_max_s: float = knob(
        "outage_backoff_max_s",
        900.0,
        "Longest wait between two tries of a provider that is down, in seconds, at least "
        "outage_backoff_s.",
        section=REQUESTS_SECTION,
    )


@dataclass(frozen=True)
class ContextSettings:
    """How a round's conversation is kept inside the model's context window (roles.yaml)."""

    condense_at: float = knob(
        "context_condense_at",
        0.75,
        "The share of the usable window (the window minus the answer's room) at which a "
        "round's history is condensed.",
        above=0.1,
        maximum=0.95,
        section=CONTEXT_SECTION,
    )
    keep_turns: int = knob(
        "context_keep_turns",
        6,
        "The most recent Worker turns whose tool results are kept whole while eliding and "
        "summarizing older turns is enough (the last turn's are cut only as a last resort).",
        section=CONTEXT_SECTION,
    )
    window_default: int = knob(
        "context_window_default",
        128_000,
        "The context window in tokens assumed when a provider file gives no context_window.",
        minimum=1024,
        section=CONTEXT_SECTION,
    )
    reserve_default: int = knob(
        "output_reserve_default",
        4096,
        "Tokens kept free for the answer when a role sets no max_output_tokens (less than "
        "half the window).",
        minimum=256,
        section=CONTEXT_SECTION,
    )


@dataclass(frozen=True)
class EngineSettings:
    """Where stories run (roles.yaml): in this process's threads (``local``), or on
    ``hero worker`` processes through Celery (``celery``, see hero.engine)."""

    kind: str = knob(
        "engine",
        "local",
        "Where stories run:",
        choices=choices_of(
            ENGINES,
            {
                "local": "in this process's threads",
                "celery": "on `hero worker` processes, sent through Celery (see hero.engine)",
            },
        ),
        written=False,  # shown commented out: the Celery steps set it (docs/celery.md)
        section=ENGINE_SECTION,
    )
    broker_url: str = knob(
        "broker_url",
        "",
        "Celery's broker (and result backend), like redis://host:6379/0.",
        note="In config/roles.yaml it may not hold a password: put such a URL in "
        "config.local.yaml or the environment.",
        env="HERO_BROKER_URL",
        local=True,
        written=False,
        example="redis://10.0.0.1:6379/0",
        shown="none",
        repr=False,
        section=ENGINE_SECTION,
    )
    state_url: str = knob(
        "state_url",
        "",
        "The Redis that holds hero's leases and the mirrored records.",
        note="Required when broker_url is not a Redis URL.",
        env="HERO_STATE_URL",
        local=True,
        written=False,
        example="redis://10.0.0.1:6379/1",
        shown="broker_url, when that is a Redis URL",
        repr=False,
        section=ENGINE_SECTION,
    )
    target_remote: str = knob(
        "target_remote",
        "",
        "A git URL every worker can reach: workers clone it and push story branches to it.",
        written=False,
        example="ssh://git@git.example/app.git",
        shown="none",
        repr=False,
        section=ENGINE_SECTION,
    )
    lease_s: float = knob(
        "lease_s",
        30.0,
        "A running story's lease, in seconds: renewed every third of it; a dead worker's "
        "story is sent again once it has expired for as long again.",
        section=ENGINE_SECTION,
    )
    queue: str = knob(
        "engine_queue",
        "hero",
        "The Celery queue, and the prefix of hero's keys in Redis.",
        check=check_queue_name,
        section=ENGINE_SECTION,
    )
    visibility_timeout_s: float = knob(
        "broker_visibility_timeout_s",
        43200.0,
        "Redis's redelivery of a task taken but not acknowledged, in seconds.",
        note="hero acknowledges a story when a worker starts it, so it never applies to a "
        "running one.",
        section=ENGINE_SECTION,
    )
    key: str = knob(
        "engine_key",
        "",
        "The secret the coordinator and every worker share, that authenticates each story "
        "sent and everything a worker publishes (HMAC-SHA256, see hero.engine.seal).",
        note=f"At least {ENGINE_KEY_MIN_CHARS} characters; make one with {ENGINE_KEY_HOWTO}. "
        "Required with celery.",
        env="HERO_ENGINE_KEY",
        local=True,
        secret=True,
        shown="none",
        repr=False,
        section=ENGINE_SECTION,
    )

    @property
    def remote(self) -> bool:
        return self.kind == "celery"


@dataclass(frozen=True)
class NotifySettings:
    """Alerts (roles.yaml's notify_* keys): what hero runs or calls on an event (see
    hero.run.notify, which sends them)."""

    command: str | tuple[str, ...] = knob(
        "notify_command",
        (),
        "A command run on each event, with the event's JSON on its stdin and the event's "
        "name as its last argument.",
        note="A string runs in sh (the name is $1); a list is the program and its arguments, "
        "run as they are. It runs in the hero home with the safe environment of the Worker's "
        "commands (no key; pass_env adds names), within notify_timeout_s; its output goes to "
        "runs/notify.log, and what it leaves running is ended.",
        type_doc="string or list of strings",
        shown="none",
        custom=True,
        written=False,
        example="[notify-send, hero]",
        section=ALERTS_SECTION,
    )
    webhook: str = knob(
        "notify_webhook",
        "",
        "A URL the event's JSON is POSTed to (Content-Type: application/json).",
        note="One attempt per event, no redirects followed. A URL that carries a token (in "
        "its path or query, like a chat webhook's) belongs in config.local.yaml: from there "
        "the whole URL is a secret, and hero only ever shows its scheme and host; "
        "config/roles.yaml refuses one with a password (https://user:password@host).",
        check=check_webhook_url,
        local=True,
        written=False,
        example="https://hooks.example.com/hero",
        shown="none",
        repr=False,
        section=ALERTS_SECTION,
    )
    events: tuple[str, ...] = knob(
        "notify_events",
        NOTIFY_EVENTS,
        "The events that are sent: story_end, breaker_open.",
        check=check_notify_events,
        section=ALERTS_SECTION,
    )
    timeout_s: float = knob(
        "notify_timeout_s",
        10.0,
        "How long the command may run, and how long the webhook is waited for, in seconds.",
        maximum=600,
        section=ALERTS_SECTION,
    )

    @property
    def enabled(self) -> bool:
        """Whether anything is sent at all."""
        return bool(self.command or self.webhook) and bool(self.events)


@dataclass(frozen=True)
class MemorySettings:
    """A repository's memory (roles.yaml's memory keys; see hero.memory)."""

    enabled: bool = knob(
        "memory_enabled",
        True,
        "Whether stories learn facts about the target repository and later stories are "
        "told them; false: nothing is stored and prompts are as without memory.",
        note="On by default: what is learned without a model costs nothing and stays in "
        "this home, and a memory with nothing in it changes no prompt. A story turns it off "
        "for itself with `memory: false`. (The key `memory:` itself is kept for the model "
        "role that distills what a story learned.)",
        section=MEMORY_SECTION,
    )
    max_facts: int = knob(
        "memory_max_facts",
        200,
        "Facts kept per repository: over it, the least kept go first (the least trusted "
        "first: an outside story's, then a model's or a command's, then a person's; without "
        "evidence before with; seen once before seen often; older before newer; a person's "
        "always-on conventions last).",
        section=MEMORY_SECTION,
    )
    max_bytes: int = knob(
        "memory_max_bytes",
        65536,
        "Bytes the memory file of a repository may take: over it, facts go as above until it fits.",
        minimum=1024,
        section=MEMORY_SECTION,
    )
    recall_tokens: int = knob(
        "memory_recall_tokens",
        800,
        "Tokens (estimated as the context window estimates) the facts told to a round's "
        "worker may take: the always-on conventions, then the facts most relevant to the "
        "story, while they fit; 0: none.",
        minimum=0,
        section=MEMORY_SECTION,
    )
    recap_tokens: int = knob(
        "memory_recap_tokens",
        400,
        "Tokens the recap of the last stories told to the planner and the reviewer may "
        "take, newest story first; 0: none.",
        minimum=0,
        section=MEMORY_SECTION,
    )
    recap_stories: int = knob(
        "memory_recap_stories",
        5,
        "The last stories on the repository whose recap (status, rounds, what changed, what "
        "failed) is kept; 0: none.",
        minimum=0,
        section=MEMORY_SECTION,
    )


@dataclass(frozen=True)
class GitHubLabels:
    """The labels hero puts on an issue while and after its story runs."""

    in_progress: str = knob("in_progress", "hero: in progress", "While its story runs.")
    done: str = knob("done", "hero: done", "Once its story passed.")
    failed: str = knob("failed", "hero: failed", "Once its story gave up or failed.")


@dataclass(frozen=True)
class GitHubSettings:
    """GitHub issues as stories (``github:`` in roles.yaml, or ``hero github watch``).

    Defined here so that config (a record) need not import hero.github (the outside world);
    ``hero.github.settings`` re-exports it."""

    repo: str = field(
        metadata=declare(
            "repo",
            "OWNER/NAME of the repository whose issues become stories.",
            required="expected the repository as OWNER/NAME (e.g. octo-org/app)",
            check=check_github_repo,
            value="OWNER/NAME",
        )
    )
    label: str = field(
        metadata=declare(
            "label",
            "Open issues with this label are taken.",
            required="expected the label that marks issues for hero (e.g. hero)",
            value="hero",
        )
    )
    interval_s: float = knob("interval_s", 60.0, "Seconds between two looks at the issues.")
    allowed_associations: tuple[str, ...] = knob(
        "allowed_associations",
        ("OWNER", "MEMBER", "COLLABORATOR"),
        "Whose issues are taken, by the author's author_association on GitHub; by default, "
        "people with write access.",
        note=f"Any of {', '.join(GITHUB_ASSOCIATIONS)}.",
        check=check_associations,
    )
    labels: GitHubLabels = knob(
        "labels",
        GitHubLabels(),
        "The labels hero sets on the issue as its story runs and ends.",
        type_doc="mapping: in_progress, done, failed",
        shown="the three below",
        custom=True,
    )
    remote: str = knob(
        "remote", "origin", "The target repository's git remote story branches are pushed to."
    )
    cancel_when_closed: bool = knob(
        "cancel_when_closed",
        True,
        "true = a story whose issue is closed, or no longer has the label, is cancelled "
        "(status cancelled): a queued one is moved to cancelled/, a running one stops before "
        "its next step, and nothing (no pull request, no comment) is said on the issue; "
        "false = it runs and is reported as if the issue were open.",
    )
    api_url: str = knob(
        "api_url",
        GITHUB_API_URL,
        "The REST API's base URL; GitHub Enterprise: https://HOST/api/v3.",
        env="GITHUB_API_URL",
        check=check_api_url,
    )
    token: str | None = field(default=None, repr=False)
    """env GITHUB_TOKEN, else config.local.yaml github_token."""
    verify: tuple[str, ...] = knob(
        "verify", (), "verify of every story from an issue.", shown="[] (default_verify)"
    )
    scope: tuple[str, ...] = knob(
        "scope", (), "scope of every story from an issue.", shown="[] (no scope)"
    )
    followup_max_per_pull: int = knob(
        "followup_max_per_pull",
        3,
        "Follow-ups started by review comments on one of hero's pull requests (a review "
        "requesting changes and its line comments, a comment starting with followup_command "
        "or mentioning followup_mention), at most; 0 = none.",
        minimum=0,
    )
    ci_followup_max_per_pull: int = knob(
        "ci_followup_max_per_pull",
        2,
        "Follow-ups started by failing checks (check runs, commit statuses) on the head "
        "commit of one of hero's pull requests, at most; 0 = none.",
        minimum=0,
    )
    followup_command: str = knob(
        "followup_command",
        "/hero",
        "A pull request comment starting with this addresses hero.",
    )
    followup_mention: str = knob(
        "followup_mention",
        "",
        'A pull request comment mentioning @<this> addresses hero; "" = mentions do not.',
        shown='"" (none)',
    )
    followup_permission: str = knob(
        "followup_permission",
        "write",
        "Who may steer a follow-up: the least repository role a commenter needs; others' "
        "comments are ignored and never shown to the model.",
        choices=choices_of(("read", "triage", "write", "maintain", "admin")),
    )
    max_per_sweep: int = knob(
        "max_per_sweep",
        0,
        "New stories one sweep takes from issues, at most (the rest wait for later sweeps, "
        "oldest first); 0 = no cap. `hero github watch --max-per-sweep N` overrides it.",
        minimum=0,
    )
    dry_run: bool = field(default=False, repr=False)
    """``hero github watch --dry-run``: say what a sweep would do, change nothing."""
