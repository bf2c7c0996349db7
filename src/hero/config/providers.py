"""Model providers and roles: a provider file (config/providers/<name>.yaml, :class:`Provider`) and a
role's block of config/roles.yaml resolved against it (:class:`RoleConfig`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from hero.config.schema import OUTPUT_TOKENS_PARAMS, check_http_url, choices_of
from hero.config.settings import Setting, declare, knob
from hero.config.tools import DOC as TOOLS_DOC
from hero.config.tools import SHOWN as TOOLS_SHOWN


@dataclass(frozen=True)
class Provider:
    """One OpenAI-compatible Chat Completions endpoint: config/providers/<name>.yaml."""

    name: str = field(
        metadata=declare("name", "Must equal the file name without .yaml.", shown="the file name")
    )
    base_url: str = field(
        metadata=declare(
            "base_url",
            "Base URL of the API: the part before /chat/completions.",
            required="expected the endpoint's base URL like https://api.openai.com/v1",
            check=check_http_url,
        )
    )
    default_model: str = field(
        metadata=declare(
            "default_model",
            "Model used by a role that does not set `model:` in config/roles.yaml.",
            required="expected the model name used when a role sets no model",
        )
    )
    default_reasoning_effort: str | None = knob(
        "default_reasoning_effort",
        None,
        "Reasoning effort sent to the model (e.g. minimal, low, medium, high) when a role "
        "does not set `reasoning_effort:`; null: not sent (needed for non-reasoning models).",
    )
    api_key_env: str | None = knob(
        "api_key_env",
        None,
        "Name of the environment variable holding the API key; null: a keyless endpoint.",
        note="A key in config.local.yaml (keys: {<name>: ...}) takes precedence. Never put "
        "the key itself in this file.",
        type_doc="environment variable name or null",
        custom=True,  # its errors must never echo a key pasted in by mistake
    )
    insecure_tls: bool = knob(
        "insecure_tls",
        False,
        "true = do not verify the server's TLS certificate (self-signed gateways only).",
    )
    headers: Mapping[str, str] = field(
        default_factory=dict,
        metadata=declare(
            "headers",
            "Extra HTTP headers sent with every request, e.g. {OpenAI-Organization: org-...}.",
            type_doc="mapping of header name -> value",
            shown="{}",
            value="{}",
            custom=True,  # values may be secrets: never shown in an error
        ),
    )
    input_usd_per_mtok: float | None = knob(
        "input_usd_per_mtok",
        None,
        "Price of a million input tokens in US dollars, for cost reports and USD budgets; "
        "null = unknown.",
        note="A USD budget (max_story_cost_usd, max_round_cost_usd) refuses to start a story "
        "whose model's provider has no prices (0 is a price: a model that costs nothing); "
        "a cost the provider reports with an answer still wins.",
    )
    output_usd_per_mtok: float | None = knob(
        "output_usd_per_mtok",
        None,
        "Price of a million output tokens in US dollars, for cost reports and USD budgets; "
        "null = unknown.",
        note="See input_usd_per_mtok.",
    )
    context_window: int | None = knob(
        "context_window",
        None,
        "The model's context window in tokens: a Worker round's conversation is condensed "
        "before it outgrows it.",
        note="null = context_window_default in config/roles.yaml.",
        minimum=1024,
    )
    send_reasoning: bool = knob(
        "send_reasoning",
        False,
        "true = send the reasoning text the model returns back with its message in later "
        "requests (some providers require it); false keeps it in the trace only.",
    )
    output_tokens_param: str = knob(
        "output_tokens_param",
        "max_tokens",
        "The request field a role's max_output_tokens is sent as.",
        choices=choices_of(
            OUTPUT_TOKENS_PARAMS,
            {"max_completion_tokens": "OpenAI's reasoning models refuse max_tokens"},
        ),
    )


@dataclass(frozen=True)
class RoleConfig:
    role: str
    provider: Provider
    model: str
    reasoning_effort: str | None
    api_key: str | None = field(default=None, repr=False)
    max_output_tokens: int | None = None
    """The cap on one answer's tokens, sent as the provider's output_tokens_param; None:
    not sent (and roles.yaml's output_reserve_default is kept free for the answer)."""
    key_source: str = ""
    """Where ``api_key`` came from, never the key: ``config.local.yaml: keys.<provider>``
    or ``$VARIABLE``; "" when no key is sent. A refused key's error names it."""
    chosen_by: str = ""
    """Who chose this model instead of config/roles.yaml: ``story field model`` (the story
    file), ``--model`` (`hero run`); "". A model the story chose that the provider refuses
    is the story's error, not an outage of the provider (see hero.llm.client)."""
    tools: tuple[str, ...] | None = None
    """The role's ``tools`` patterns (hero.config.tools), narrowed by the story's ``tools:``
    once the story is known (hero.llm.models.story_config); None: the role's default."""

    @property
    def context_window(self) -> int | None:
        """The provider's context window in tokens; None when its file gives none."""
        return self.provider.context_window


#: The keys of a role's block in config/roles.yaml (``worker: {provider: local}``); a
#: RoleConfig holds them resolved against the provider.
ROLE_SETTINGS = (
    Setting(
        "provider",
        "The provider: a file name in config/providers/, without .yaml.",
        type="str",
        required="expected the name of a provider file in config/providers/ (without .yaml)",
        custom=True,
    ),
    Setting(
        "model",
        "The model.",
        type="str | None",
        shown="the provider's default_model",
    ),
    Setting(
        "reasoning_effort",
        "The reasoning effort sent with each request (null = not sent).",
        type="str | None",
        shown="the provider's default_reasoning_effort",
    ),
    Setting(
        "max_output_tokens",
        "The cap on one answer's tokens, sent as the provider's output_tokens_param; less "
        "than half its context_window.",
        type="int | None",
        shown="not sent (output_reserve_default is kept free)",
    ),
    Setting(
        "tools",
        TOOLS_DOC,
        type="tuple[str, ...] | None",
        type_doc="list of tool names",
        shown=TOOLS_SHOWN,
        custom=True,
    ),
)
