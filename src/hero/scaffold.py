"""`hero init`: create a hero home (config files and folders), never overwriting anything."""

from __future__ import annotations

from pathlib import Path

GITIGNORE_LINES = ("config.local.yaml", "worktrees/", "runs/")
HOME_DIRS = ("config", "config/providers", "inbox", "done", "runs", "worktrees")
KEEP_DIRS = ("inbox", "done")  # get a .gitkeep so an empty home can be committed
DEFAULT_TARGET_REPO = "../my-project"

OPENAI_PROVIDER = """\
# Provider "openai": the OpenAI API (https://platform.openai.com).
#
# A provider file describes one OpenAI-compatible Chat Completions endpoint. Its file name
# (without .yaml) is the provider's name, which config/roles.yaml refers to. Copy this file
# to add another endpoint (OpenRouter, Azure, a company gateway, ...).

# Must equal the file name without .yaml.
name: openai

# Base URL of the API: the part before /chat/completions.
base_url: https://api.openai.com/v1

# Model used by a role that does not set `model:` in config/roles.yaml.
default_model: gpt-5-mini

# Reasoning effort sent to the model (e.g. minimal, low, medium, high) when a role does
# not set `reasoning_effort:`. null = do not send it (needed for non-reasoning models).
default_reasoning_effort: medium

# Name of the environment variable holding the API key. A key in config.local.yaml
# (keys: {openai: ...}) takes precedence. Never put the key itself in this file.
# Remove this line for an endpoint that needs no key.
api_key_env: OPENAI_API_KEY

# true = do not verify the server's TLS certificate (self-signed gateways only).
insecure_tls: false

# Extra HTTP headers sent with every request, e.g. {OpenAI-Organization: org-...}.
headers: {}

# Optional prices in US dollars per million tokens, for cost reports. null = unknown.
input_usd_per_mtok: null
output_usd_per_mtok: null

# The model's context window in tokens (at least 1024): a Worker round's conversation is
# condensed before it outgrows it. null = context_window_default in config/roles.yaml.
context_window: null

# true = send the reasoning text the model returns back with its message in later requests
# (some providers require it). false (the default) keeps it in the trace only.
send_reasoning: false

# The request field a role's max_output_tokens is sent as: max_tokens (the default) or
# max_completion_tokens (OpenAI's reasoning models refuse max_tokens).
output_tokens_param: max_completion_tokens
"""

LOCAL_PROVIDER = """\
# Provider "local": a model served on this machine, no API key needed.
#
# Works with any OpenAI-compatible server:
#   Ollama     http://127.0.0.1:11434/v1   (`ollama pull qwen2.5-coder:14b`, then `ollama serve`)
#   vLLM       http://127.0.0.1:8000/v1    (`vllm serve <model>`)
#   llama.cpp  http://127.0.0.1:8080/v1    (`llama-server -m model.gguf --jinja`)
#   LM Studio  http://127.0.0.1:1234/v1
# The model must support tool calling (function calling).

# Must equal the file name without .yaml.
name: local

# Base URL of the API: the part before /chat/completions.
base_url: http://127.0.0.1:11434/v1

# Model used by a role that does not set `model:` in config/roles.yaml (as the server
# names it: `ollama list`, or GET <base_url>/models).
default_model: qwen2.5-coder:14b

# Reasoning effort sent to the model when a role does not set one.
# null = do not send it (most local models ignore or reject it).
default_reasoning_effort: null

# No api_key_env: this endpoint is keyless. If your server wants a key, add
#   api_key_env: LOCAL_LLM_API_KEY
# or put it in config.local.yaml under keys.local.

# true = do not verify the server's TLS certificate (only matters for https URLs).
insecure_tls: false

# Extra HTTP headers sent with every request.
headers: {}

# Optional prices in US dollars per million tokens, for cost reports. null = unknown.
input_usd_per_mtok: null
output_usd_per_mtok: null

# The model's context window in tokens (at least 1024): a Worker round's conversation is
# condensed before it outgrows it. Set it to what the server runs the model with (Ollama:
# num_ctx / OLLAMA_CONTEXT_LENGTH; llama.cpp: -c; vLLM: --max-model-len), e.g. 32768.
# null = context_window_default in config/roles.yaml.
context_window: null

# true = send the reasoning text the model returns back with its message in later requests
# (some servers require it). false (the default) keeps it in the trace only.
send_reasoning: false

# The request field a role's max_output_tokens is sent as: max_tokens (the default) or
# max_completion_tokens.
output_tokens_param: max_tokens
"""

ROLES_TEMPLATE = """\
# hero roles and settings.
#
# Roles: each names a provider (a file in config/providers/, without .yaml) and may
# override its model and reasoning effort:
#   provider:          required
#   model:             default: the provider's default_model
#   reasoning_effort:  default: the provider's default_reasoning_effort (null = not sent)
#   max_output_tokens: the cap on one answer's tokens, sent as the provider's
#                      output_tokens_param; less than half its context_window.
#                      Default: not sent (output_reserve_default below is kept free)
# API keys never go here: see config.local.yaml.example.

# The Worker edits code in the story's worktree with tools (bash, read/write/edit files, ...).
worker:
  provider: local
  # model: qwen2.5-coder:32b
  # reasoning_effort: high
# Alternative, the OpenAI API (needs OPENAI_API_KEY or keys.openai in config.local.yaml):
# worker:
#   provider: openai
#   model: gpt-5
#   reasoning_effort: medium

# The Reviewer reads the diff and the checks' output and approves or asks for changes.
reviewer:
  provider: local
  # model: qwen2.5-coder:32b
# Alternative:
# reviewer:
#   provider: openai
#   model: gpt-5-mini
#   reasoning_effort: low

# The Planner turns a rough idea into story files (only used by planning commands).
planner:
  provider: local
# Alternative:
# planner:
#   provider: openai
#   model: gpt-5

# ---------------------------------------------------------------- target repository

# The git repository hero works on: absolute, or relative to this hero home. Required.
# Each story gets its own branch and worktree (in worktrees/) made from it.
target_repo: {target_repo}

# Branch, tag or commit that story branches start from. null = the repository's current HEAD.
# A story can override it with `base_ref:` in its frontmatter.
target_base_ref: null

# ---------------------------------------------------------------- rounds

# Retry budget per story: how many Worker -> Verifier -> Reviewer rounds hero runs before
# giving up on it. Default 3.
# A story can override it with `max_retries:` in its frontmatter.
max_retries: 3

# Stories worked on at the same time, each in its own worktree. Default 2.
max_parallel: 2

# Time limit for each verify command, in milliseconds. Default 120000 (2 minutes).
verify_timeout_ms: 120000

# Checks run after each Worker round for stories without `verify:` in their frontmatter.
# Shell commands run in the worktree; all must exit 0. Default [] (no checks).
default_verify: []
# default_verify:
#   - ruff check .
#   - python -m pytest -q

# ---------------------------------------------------------------- sandbox

# Where the Worker's bash commands and the verify commands run:
#   auto   bubblewrap (bwrap) when it works on this machine, else no sandbox, with a warning
#   bwrap  bubblewrap, required: without it a story ends in error before any command runs
#   none   no sandbox: commands run with your user's rights
# In the sandbox a command sees the system read-only, the story's worktree writable, the
# repository's git objects and refs but not its config or hooks, a private /tmp and HOME,
# only its own processes (all of them end with it), and not the hero home or your home.
# Needs the system package bubblewrap (apt-get install bubblewrap). Default auto.
sandbox: auto

# Whether the Worker's commands may reach the network from the sandbox. Default false.
sandbox_network: false

# Whether the verify commands may reach the network from the sandbox. Default false: a
# test the Worker wrote runs in the checks, and with the network it could send what it reads
# anywhere. Set true for test suites that fetch dependencies.
verify_network: false

# The Worker's and the verify commands see of hero's environment only PATH, HOME, USER, the
# language and time zone (LANG, LC_*, TZ), TMPDIR, certificates (SSL_CERT_*) and toolchain
# homes (VIRTUAL_ENV, JAVA_HOME, GOPATH, CARGO_HOME, ...). Name others they need here; a
# variable whose value holds a key or token hero knows is never passed on, nor any HERO_*.
pass_env: []

# ---------------------------------------------------------------- sandbox limits

# What each command in the sandbox (a Worker's bash call, a verify command) may use, so
# that a fork bomb, a full /tmp or a runaway test ends that command and not the machine.
# A command that hits one fails, and the Worker is told which limit and which setting.
# Processes and memory are held by a cgroup where hero can make one (all the command's
# processes together), else by per-process rlimits; `hero` logs which at start. As root
# without a writable cgroup, the number of processes is not limited.

# Size of each of the sandbox's /tmp, /var/tmp and /dev/shm, in MB. They are kept in RAM;
# writing beyond fails with "No space left on device". Default 1024.
limit_tmpfs_mb: 1024

# Processes and threads one command may have at once (from 16). Default 1024.
limit_processes: 1024

# Memory one command may use, in MB (from 64): all its processes together with a cgroup,
# else each process's data. Default 4096.
limit_memory_mb: 4096

# The largest file a command may write, in MB; beyond, "File too large". Default 2048.
limit_file_size_mb: 2048

# CPU seconds each process of a command may use; beyond, it is stopped. Default 3600.
limit_cpu_s: 3600

# Files each process of a command may have open at once (from 32). Default 2048.
limit_open_files: 2048

# ---------------------------------------------------------------- what the worker may do

# Files the Worker never changes, whatever a story's scope says: .gitignore-style globs
# (`*.pem` and `.env` match at any depth, `secrets/` or `config/prod/**` from the repository's
# root). hero always protects .env, .env.*, *.pem, *.key, id_rsa* and .git/**; these add to
# them. write_file and edit_file refuse a protected file; a bash command that changes one
# has it put back (or deleted, if it is new) before its result reaches the Worker.
# Default [] (the built-in list only).
protected_files: []
# protected_files:
#   - secrets/
#   - "*.p12"
#   - config/production.yaml

# Commands the Worker's bash tool may run (allow) or must not run (deny). A rule is a
# command and its first words, matched as whole words on every part of the parsed command:
# `rm` refuses `make && rm -rf build`, `bash -c 'rm x'`, `sudo rm x`, `/bin/rm x`, but not
# `rmdir x` or `echo rm`. Deny wins over allow; a non-empty allow list refuses every part it
# does not name (list `cd`, `echo`, ... too, and both a wrapper and what it wraps:
# `timeout` and `pytest`). A refused command is not run; the Worker is told the rule.
# The Worker's commands, and the verify commands a planner model wrote (a plan's stories);
# verify commands you wrote run as written. A guard-rail against accidents, not a security
# boundary (a script the Worker writes, or `python -c`, is not looked into): the sandbox is
# that. Default [] for both (no policy).
allow_commands: []
deny_commands: []
# deny_commands:
#   - git push
#   - npm publish
#   - curl
#   - wget
# allow_commands:
#   - git
#   - python
#   - pytest
#   - ls
#   - cat
#   - echo
#   - cd

# Whether the verify commands a planner model wrote (`hero plan`) run at all. true: they run,
# checked by the rules above (`hero plan` asks the planner again, and `hero run-plan` and
# `hero watch` refuse a story, when one breaks them); false: they never run, and
# default_verify runs in their place. Default true.
model_verify: true

# ---------------------------------------------------------------- budgets

# Spend limits per story and per round; null (the default) = no limit. They are checked
# before every model call (each worker turn and the reviewer's call): when one is used up,
# the story stops as `budget_exceeded` with its work committed on its branch, and the error
# names the budget. Raise it here and run `hero retry ID` to continue; `hero status` shows
# each story's spend against its budgets.
# A story's spend adds up over all its runs and retries.

# Tokens (prompt + completion) a story may spend in all.
max_story_tokens: null
# Dollars a story may spend in all: the provider's reported cost when it sends one, else the
# prices in its file (input_usd_per_mtok, output_usd_per_mtok); without either, cost is 0.
max_story_cost_usd: null
# Seconds a story may spend in its rounds, all runs together (time between runs does not count).
max_story_wall_s: null

# The same for one round (worker turns and the reviewer's call).
max_round_tokens: null
max_round_cost_usd: null
max_round_wall_s: null

# ---------------------------------------------------------------- GitHub issues

# Open issues with a label become stories inbox/gh-<number>.md, and their endings are
# reported on the issues (a pull request, comments, labels). `hero watch` does it in the same
# process when this block is set; `hero github watch` does it alone. The token comes from
# GITHUB_TOKEN or `github_token:` in config.local.yaml, never from this file.
# github:
#   repo: OWNER/NAME            # required: the repository whose issues to take
#   label: hero                 # required: open issues with this label are taken
#   interval_s: 60              # seconds between two looks at the issues. Default 60.
#   # Whose issues are taken, by the author's author_association on GitHub. Default: people
#   # with write access. Others: CONTRIBUTOR, FIRST_TIME_CONTRIBUTOR, FIRST_TIMER, NONE, ...
#   allowed_associations: [OWNER, MEMBER, COLLABORATOR]
#   labels:                     # set on the issue as its story runs and ends
#     in_progress: "hero: in progress"
#     done: "hero: done"
#     failed: "hero: failed"
#   remote: origin              # the target repository's remote story branches are pushed to
#   # The API's base URL (GITHUB_API_URL overrides it). GitHub Enterprise: https://HOST/api/v3
#   api_url: https://api.github.com
#   # verify and scope of every story from an issue. Default: default_verify above; no scope.
#   verify: []
#   scope: []

# ---------------------------------------------------------------- worker limits

# Model turns (requests) in one Worker round. Default 100.
worker_max_turns: 100

# Tool calls in one Worker round. Default 300.
worker_max_tool_calls: 300

# Wall-clock limit of one Worker round, in seconds. Default 3600.
worker_max_wall_s: 3600

# Default timeout of one bash tool call, in seconds (the model may ask for longer, within
# limits). Default 600.
bash_timeout_s: 600

# Identical consecutive tool calls that count as the Worker being stuck in a loop. Default 4.
loop_repeats: 4

# ---------------------------------------------------------------- model requests

# Timeout of one model request, in seconds. Default 600.
llm_timeout_s: 600

# Attempts per model request on rate limits, timeouts and server errors. Default 6.
llm_max_attempts: 6

# First wait between attempts, in seconds; it doubles after each failed attempt (a server's
# Retry-After is honoured). Default 2.
llm_backoff_base_s: 2

# Longest backoff between attempts, in seconds (a server's Retry-After is honoured up to
# llm_retry_after_max_s). Default 60.
llm_backoff_max_s: 60

# Longest wait a server's Retry-After (on a 429 or 503) is honoured for, in seconds; on a
# longer ask hero waits this long, then tries again. A positive number. Default 120.
llm_retry_after_max_s: 120

# ---------------------------------------------------------------- context window

# A Worker round's conversation never outgrows the model's context window (the provider
# file's context_window) minus the room kept for the answer (the role's max_output_tokens,
# else output_reserve_default). As it nears that limit hero condenses it: old tool results
# become a short note of what they were, then, if that is not enough, the oldest turns
# become one summary written by the model. The system prompt, the task and the reviewer's
# feedback are always kept; assistant messages are kept until a summary replaces them.

# The share of the usable window (the window minus the answer's room) at which a round's
# history is condensed: more than 0.1, at most 0.95. Default 0.75.
context_condense_at: 0.75

# The most recent Worker turns whose tool results are kept whole while eliding and
# summarizing older turns is enough (the last turn's are cut only as a last resort). Default 6.
context_keep_turns: 6

# The context window in tokens assumed when a provider file gives no context_window
# (at least 1024). Default 128000.
context_window_default: 128000

# Tokens kept free for the answer when a role sets no max_output_tokens (at least 256, and
# less than half the window). Default 4096.
output_reserve_default: 4096
"""

LOCAL_EXAMPLE = """\
# Copy this file to config.local.yaml and fill in your keys.
# config.local.yaml is git-ignored: never commit API keys.
#
# A key here takes precedence over the provider's api_key_env environment variable.
# The names under `keys:` are provider names (file names in config/providers/ without .yaml).

keys:
  openai: sk-your-key-here
  # local: only if your local server wants a key

# The GitHub token for `hero github watch` and the github: block of config/roles.yaml
# (GITHUB_TOKEN in the environment wins). It needs to read issues; the report-back also
# writes issues and pull requests.
# github_token: ghp_your-token-here

# engine: celery only: the secret the coordinator and every `hero worker` share (the same
# value on each machine; HERO_ENGINE_KEY in the environment wins). Every story sent and
# everything a worker publishes through Redis is authenticated with it. Make one with
#   python -c "import secrets; print(secrets.token_hex(32))"
# engine_key: your-64-hex-characters-here
"""


def init_home(home: Path, *, target_repo: str | None = None) -> list[Path]:
    """Create a hero home in ``home``; return the paths created (or appended to).

    Existing files are never overwritten: rerunning creates only what is missing. An
    existing ``.gitignore`` gets the missing hero lines appended. ``target_repo`` is written
    to config/roles.yaml as given (a relative path is relative to the home).
    """
    home = Path(home)
    if home.exists() and not home.is_dir():
        raise NotADirectoryError(f"{home}: cannot create a hero home: it is a file")
    created: list[Path] = []
    if not home.exists():
        home.mkdir(parents=True)
        created.append(home)
    for rel in HOME_DIRS:
        directory = home / rel
        if not directory.is_dir():
            directory.mkdir(parents=True)
            created.append(directory)

    roles = ROLES_TEMPLATE.replace(
        "{target_repo}", _yaml_string(target_repo or DEFAULT_TARGET_REPO)
    )
    if not target_repo:
        roles = roles.replace(
            "# The git repository hero works on:",
            "# CHANGE THIS. The git repository hero works on:",
        )
    files = {
        "config/providers/openai.yaml": OPENAI_PROVIDER,
        "config/providers/local.yaml": LOCAL_PROVIDER,
        "config/roles.yaml": roles,
        "config.local.yaml.example": LOCAL_EXAMPLE,
    }
    for rel in KEEP_DIRS:
        files[f"{rel}/.gitkeep"] = ""
    for rel, content in files.items():
        path = home / rel
        if _create(path, content):
            created.append(path)

    gitignore = home / ".gitignore"
    if _ensure_gitignore(gitignore):
        created.append(gitignore)
    return created


def _yaml_string(value: str) -> str:
    """A double-quoted YAML scalar (JSON strings are valid YAML)."""
    import json

    return json.dumps(value)


def _create(path: Path, content: str) -> bool:
    """Write a new file; False (and no change) if something is already there."""
    try:
        with path.open("x", encoding="utf-8", newline="\n") as fh:
            fh.write(content)
    except FileExistsError:
        return False
    return True


def _ensure_gitignore(path: Path) -> bool:
    """Create .gitignore or append the missing hero lines; True if the file changed."""
    if not path.exists():
        return _create(path, "".join(line + "\n" for line in GITIGNORE_LINES))
    raw = path.read_bytes()
    text = raw.decode("utf-8", errors="replace")
    present = {line.strip().strip("/") for line in text.splitlines()}
    missing = [line for line in GITIGNORE_LINES if line.strip("/") not in present]
    if not missing:
        return False
    newline = "\r\n" if "\r\n" in text else "\n"
    addition = ""
    if text and not text.endswith("\n"):
        addition += "\n"
    addition += "# hero\n" + "".join(line + "\n" for line in missing)
    with path.open("ab") as fh:
        fh.write(addition.replace("\n", newline).encode("utf-8"))
    return True
