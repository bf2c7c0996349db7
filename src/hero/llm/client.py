"""One client for OpenAI-compatible Chat Completions endpoints: retries, usage, cost.

An answer without token counts (no ``usage``, or one without a prompt count) is counted by
hero's estimate of the request's and the answer's sizes (hero.llm.usage), said as such
(``Completion.tokens_estimated``): a budget never sees a call as free because its endpoint
did not count it.

It knows nothing of roles or stories: it is built from a provider, a model and settings,
and handed to whoever needs it (so tests hand in the same client pointed at a scripted
model on loopback).
"""

from __future__ import annotations

import email.utils
import json
import math
import random
import re
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard

from hero.config.providers import RoleConfig
from hero.config.sections import LlmSettings
from hero.errors import HeroError, Interrupted
from hero.llm.transport import ResponseTooLarge, bound_http_client, bounded
from hero.llm.usage import Usage, estimate_message, estimate_request

if TYPE_CHECKING:
    import openai

    from hero.config.home import Config

#: HTTP statuses worth another try: rate limits, timeouts and the server's own failures.
#: A server's Retry-After is honoured as given, up to ``LlmSettings.retry_after_max_s`` (a
#: longer ask is likely a quota reset that retrying soon will not fix, and the attempts run
#: out anyway).
RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 520, 522, 524, 529})
#: HTTP statuses that refuse one story's request, not the provider: the story ends in
#: ``error`` (its request is too large), the other stories still run. Any other status that
#: is not retried refuses every request alike (a key, a model name, the provider's
#: settings) and is a ModelRefused, which stops the provider's queue (hero.llm.breaker).
STORY_STATUS = frozenset({413})
#: A 400 or 422 that refuses the size of one story's conversation (too long for the
#: window), not hero's requests as such: the story's own error.
_STORY_REFUSAL = re.compile(
    r"context[ _-]?(?:length|window|size)|maximum context|too many tokens|too long",
    re.IGNORECASE,
)
#: The statuses a refusal of one story's content comes with: OpenAI's moderation and
#: Azure's content filter answer 400, some gateways 422, OpenRouter's moderation 403, a
#: proxy 451 (unavailable for legal reasons).
_CONTENT_STATUS = frozenset({400, 403, 422, 451})
#: The words of a refusal of what one story's conversation holds, as the providers put it
#: (in an error's code, type or message): OpenAI's ``invalid_prompt`` ("flagged as
#: potentially violating our usage policy") and ``content_policy_violation``; Azure
#: OpenAI's ``content_filter`` and its inner ``ResponsibleAIPolicyViolation`` ("content
#: management policy"); Anthropic's "blocked by content filtering policy" and ``refusal``;
#: the guard models and guardrails that gateways put in front of vLLM and llama.cpp's
#: server ("guardrail", "jailbreak", "prompt injection", "unsafe", "Llama Guard"). What
#: the worker writes (a tool's output, a file it read) must never stop every story of
#: the provider: such a refusal ends its own story only.
_CONTENT_REFUSAL = re.compile(
    r"invalid[ _-]?prompt|content[ _-]?(?:filter|polic|management|moderation|safety)|"
    r"responsible[ _-]?ai|\bflagged\b|moderation|usage[ _-]?polic|"
    r"safety[ _-]?(?:system|polic|filter|check|guard|setting|violation)|"
    r"guard[ _-]?rail|jailbreak|prompt[ _-]?(?:injection|shield|guard|attack)|"
    r"llama[ _-]?guard|\bunsafe\b|harmful|\brefusal\b",
    re.IGNORECASE,
)
#: A 403 that names the account, key or place is about every request, whatever else it
#: says (a key or an organization suspended for its use of the service): the provider's.
_ACCOUNT_WORDS = re.compile(
    r"\b(?:account|organi[sz]ation|billing|api[ _-]?key|key|project|region|country|"
    r"territor\w*|suspend\w*|deactivat\w*|disabled|banned)\b",
    re.IGNORECASE,
)
#: The finish reasons of an answer that the provider's filter withheld or the model
#: refused: OpenAI's and Azure's ``content_filter``, Anthropic's ``refusal`` (as its
#: compatible gateways pass it on), ``safety`` as some gateways map Gemini's.
_FILTERED_FINISH = frozenset({"content_filter", "content-filter", "refusal", "safety"})


#: A refusal of what the request names (its model, its reasoning effort), not of the key:
#: when a story chose them (RoleConfig.chosen_by), the story's own error.
_CHOSEN_MODEL_STATUS = frozenset({400, 404, 422})


class LlmError(HeroError):
    """The model could not be reached or answered unusably; retries (if any) ran out."""


class ModelOutage(LlmError):
    """The endpoint of a provider failed every story alike, not this story's request:
    the story pauses (it is not in error) and the provider's breaker (hero.llm.breaker) decides
    when stories are sent to it again. ``provider`` is the role's provider name, ``reason``
    the cause in a few words (``HTTP 503``, ``connection failed (...)``)."""

    kind = ""  # "transient" or "permanent", as the breaker and the run record say it

    def __init__(self, message: str, *, provider: str, reason: str) -> None:
        super().__init__(message)
        self.provider = provider
        self.reason = reason


class ModelUnavailable(ModelOutage):
    """Retries ran out on a cause that heals by itself: the endpoint refused or dropped
    the connection, timed out, answered 5xx, 429, 408 or with a body that was no answer."""

    kind = "transient"


class ModelRefused(ModelOutage):
    """The endpoint refused the request in a way that retrying never fixes (401, 403, an
    unknown model's 404, a 400 or 422): the user has to change the key, the model or the
    provider's settings."""

    kind = "permanent"


class ContentRefused(LlmError):
    """The provider refused what this story's conversation holds (moderation, a content
    filter, a safety system, a guard model): the story ends in ``error`` with this as its
    reason, and is not run again until it is edited or retried; the provider's breaker
    neither opens nor counts it, and the provider's other stories run on. ``provider`` is
    the provider's name."""

    def __init__(self, message: str, *, provider: str) -> None:
        super().__init__(message)
        self.provider = provider


class ContentFiltered(ContentRefused):
    """The endpoint answered, but its content filter withheld the answer (``finish_reason``
    ``content_filter``, ``refusal`` or ``safety``, or only a ``refusal`` text, and no tool
    call): what this story's conversation holds is refused, as a 400 from a content filter
    is."""


class AnswerTooLarge(LlmError):
    """The answer passed ``llm_max_response_mb`` and was read no further: the call's error,
    and so its story's (one conversation's answer), not the provider's; not retried, since
    asking again asks for the same answer."""


@dataclass(frozen=True)
class ToolCallRequest:
    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Completion:
    content: str
    tool_calls: tuple[ToolCallRequest, ...]
    message: dict[str, Any]  # the assistant message, ready to append to the history
    tokens_in: int
    tokens_out: int
    http_s: float  # time inside the HTTP request(s) that succeeded
    finish_reason: str
    cost_usd: float = 0.0  # the provider's reported cost, else from its prices; 0 unknown
    tokens_cached: int = 0  # of tokens_in, those the provider read from its prompt cache
    reasoning: str = ""  # the reasoning text the endpoint returned; in `message` only when
    # the provider's send_reasoning is set
    # the kinds of the errors retried before this answer (``error_kind``: ``http_503``,
    # ``timeout``, ...), in order; the trace keeps them, and hero serve's metrics count them
    errors: tuple[str, ...] = ()
    # of tokens_in + tokens_out, those hero estimated: the answer carried no count of them
    tokens_estimated: int = 0

    @property
    def usage(self) -> Usage:
        """What this one call spent."""
        return Usage(
            self.tokens_in,
            self.tokens_out,
            1,
            self.cost_usd,
            self.tokens_cached,
            estimated_calls=1 if self.tokens_estimated else 0,
            estimated_tokens=self.tokens_estimated,
        )


class Model(Protocol):
    """What hero asks of a model: the client below, the budget meter's and the redactor's
    wrappers, the demo's scripted model, a test's own. Passed in, never imported as a
    global, so tests swap in a deterministic model without patching anything."""

    def complete(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None
    ) -> Completion: ...


@dataclass
class ClientUsage(Usage):
    """A client's usage over all its calls, and its retries; ``lock`` guards both."""

    retries: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)


def request_params(
    role: RoleConfig,
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The body of one Chat Completions request of ``role``: what :class:`LlmClient` sends,
    and what `hero run --dry-run` shows (one code path, so the two cannot drift apart)."""
    params: dict[str, Any] = {"model": role.model, "messages": messages}
    if role.reasoning_effort:
        params["reasoning_effort"] = role.reasoning_effort
    if role.max_output_tokens is not None:
        params[role.provider.output_tokens_param] = role.max_output_tokens
    if tools:
        params["tools"] = tools
    return params


class LlmClient:
    """Chat Completions with tools, over the real ``openai`` SDK."""

    def __init__(
        self,
        role: RoleConfig,
        settings: LlmSettings,
        *,
        cancel: threading.Event | None = None,
        on_retry: Callable[[str], None] | None = None,
        share_http_with: LlmClient | None = None,
    ) -> None:
        import openai  # heavy: imported when a client is made, not when hero starts

        self.role = role
        self.settings = settings
        self.usage = ClientUsage()
        self._cancel = cancel
        self._on_retry = on_retry
        self._openai = openai
        # TLS verification means nothing for a plain-http endpoint (a local server, the
        # scripted model), and loading the CA bundle costs ~45 ms of start-up per client.
        self.verify_tls = not role.provider.insecure_tls and role.provider.base_url.startswith(
            "https:"
        )
        self.http_client: openai.DefaultHttpxClient
        if share_http_with is not None and share_http_with.verify_tls == self.verify_tls:
            self.http_client = share_http_with.http_client
        else:
            self.http_client = openai.DefaultHttpxClient(verify=self.verify_tls)
            # llm_timeout_s for the whole call, llm_max_response_mb for its answer
            bound_http_client(self.http_client)
        self._client = openai.OpenAI(
            base_url=role.provider.base_url,
            api_key=role.api_key or "no-key",
            max_retries=0,  # retries are ours: backoff with jitter, Retry-After, cancellable
            timeout=settings.timeout_s,
            default_headers=dict(role.provider.headers) or None,
            http_client=self.http_client,
        )
        # The SDK works out platform headers on its first request (a `uname`); do it now,
        # at start-up, rather than inside the first turn.
        warm = getattr(self._client, "platform_headers", None)
        if callable(warm):
            warm()

    def complete(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None
    ) -> Completion:
        params = request_params(self.role, messages, tools)
        attempt = 0
        errors: list[str] = []  # the kinds of the failed attempts before an answer
        while True:
            attempt += 1
            if self._cancel is not None and self._cancel.is_set():
                raise Interrupted("stopped before a model request")
            started = time.monotonic()
            try:
                # post() rather than chat.completions.create(): the same request through the
                # same SDK, minus a per-call walk over the whole history that made each turn
                # cost more than the last (~0.3 ms per message on a 2-core machine).
                # cast_to=bytes: the body as sent, parsed here, so that a body that is not
                # JSON (a proxy's HTML page, a cut-off answer) is a fault retried like a 5xx.
                # Inside bounded(): llm_timeout_s is the deadline of the whole call (a body
                # trickled byte by byte included), and no more than llm_max_response_mb of
                # the answer is read (hero.llm.transport).
                with bounded(self.settings.timeout_s, self._max_bytes):
                    raw = self._client.post("/chat/completions", body=params, cast_to=bytes)
                completion = self._record(self._parse(raw), time.monotonic() - started, params)
                return replace(completion, errors=tuple(errors)) if errors else completion
            except Exception as exc:  # noqa: BLE001 - sorted into retryable or not below
                error: Exception = exc
            if self._cancel is not None and self._cancel.is_set():
                raise Interrupted("stopped during a model request") from error
            delay, reason = self._classify(error)
            if attempt >= self.settings.max_attempts:
                raise ModelUnavailable(
                    f"{self._where()}: {reason}; gave up after {attempt} attempts",
                    provider=self.role.provider.name,
                    reason=reason,
                ) from error
            errors.append(error_kind(reason))
            wait = self._backoff(attempt) if delay is None else delay
            with self.usage.lock:
                self.usage.retries += 1
            if self._on_retry:
                self._on_retry(f"{reason}; retry {attempt} in {wait:.1f} s")
            self._sleep(wait)

    @property
    def _max_bytes(self) -> int:
        return max(1, int(self.settings.max_response_mb * 1024 * 1024))

    def _classify(self, exc: Exception) -> tuple[float | None, str]:
        """(delay the server asked for or None, reason) for a retryable error; raise otherwise."""
        oa = self._openai
        if _caused_by(exc, ResponseTooLarge):
            raise AnswerTooLarge(
                f"{self._where()}: the answer passed llm_max_response_mb "
                f"({self.settings.max_response_mb:g} MB) and was read no further"
            ) from exc
        if isinstance(exc, oa.APIStatusError):
            status = exc.status_code
            if status in _CONTENT_STATUS and _refuses_content(status, _error_words(exc)):
                provider = self.role.provider.name
                raise ContentRefused(
                    self._describe(exc, f"HTTP {status}")
                    + f" -- provider '{provider}' refused this story's content; the story "
                    f"ends here (the provider's other stories run on): change what it asks, "
                    "then `hero retry` it",
                    provider=provider,
                ) from exc
            if status in STORY_STATUS or (
                status in (400, 422) and _STORY_REFUSAL.search(_error_words(exc))
            ):
                raise LlmError(self._describe(exc, f"HTTP {status}")) from exc
            if status in _CHOSEN_MODEL_STATUS and self.role.chosen_by:
                # a model (or effort) the story chose that the provider refuses is the
                # story's error: one story's frontmatter must not stop the provider's queue
                raise LlmError(
                    self._describe(exc, f"HTTP {status}")
                    + f" (the model was chosen by {self.role.chosen_by})"
                ) from exc
            if status not in RETRYABLE_STATUS:
                raise ModelRefused(
                    self._describe(exc, f"HTTP {status}"),
                    provider=self.role.provider.name,
                    reason=f"HTTP {status}",
                ) from exc
            return self._retry_after(exc), f"HTTP {status}"
        if isinstance(exc, oa.APITimeoutError):
            return None, (
                f"timed out: no whole answer within llm_timeout_s "
                f"({self.settings.timeout_s:g} s, the deadline of the whole request)"
            )
        if isinstance(exc, oa.APIConnectionError):
            return None, f"connection failed ({exc.__cause__ or exc})"
        if isinstance(exc, oa.APIResponseValidationError | _BadReply):
            return None, f"unusable answer ({exc})"
        if isinstance(exc, LlmError):  # the answer was read, and refuses this story
            raise exc
        raise LlmError(f"{self._where()}: {type(exc).__name__}: {exc}") from exc

    # -- helpers -----------------------------------------------------------------------

    def _parse(self, raw: bytes) -> dict[str, Any]:
        """The body of a 200 as a JSON object; _BadReply (retried) when it is not one."""
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):  # JSONDecodeError, UnicodeDecodeError; nested
            # past the parser's depth (a model's tool arguments sent as an object)
            raise _BadReply(
                f"HTTP 200 but the body was not JSON: {len(raw)} bytes {self._excerpt(raw)}"
            ) from None
        if not isinstance(data, dict):
            raise _BadReply(
                f"HTTP 200 but the body was not a JSON object: {_kind(data)}, "
                f"{len(raw)} bytes {self._excerpt(raw)}"
            )
        return data

    def _excerpt(self, raw: bytes) -> str:
        """The start of a body for an error message: one line, short, with the role's key,
        its provider's header values and anything that looks like a key or token masked."""
        text = self._masked(raw)
        if not text:
            return "(empty)" if not raw else "(blank)"
        return f"starting {text!r}"

    def _masked(self, raw: bytes, limit: int | None = None) -> str:
        """``raw`` as one line of at most ``limit`` characters (default _EXCERPT_CHARS),
        secrets masked (see _excerpt)."""
        limit = _EXCERPT_CHARS if limit is None else limit
        text = raw[:_EXCERPT_SCAN_BYTES].decode("utf-8", errors="replace")
        secrets = [self.role.api_key or "", *self.role.provider.headers.values()]
        for secret in sorted((s for s in secrets if len(s) >= 4), key=len, reverse=True):
            text = text.replace(secret, "***")
        text = _SECRET_LIKE.sub(lambda m: f"{m.group(1)}***", text)
        text = " ".join("".join(c if c.isprintable() else " " for c in text).split())
        if len(text) > limit:
            text = text[:limit] + "..."
        return text

    def _record(
        self, response: dict[str, Any], http_s: float, params: dict[str, Any]
    ) -> Completion:
        """Read the answer (a plain dict: parsing it into the SDK's pydantic models costs
        ~15 ms on a process's first call and buys nothing here) to the request ``params``."""
        choices = response.get("choices")
        if not choices or not isinstance(choices, list):
            err = response.get("error")  # OpenRouter: an upstream's failure, under a 200
            if isinstance(err, dict):
                err = err.get("message") or json.dumps(err)
            said = f": {self._masked(str(err).encode(), _MESSAGE_CHARS)}" if err else ""
            raise _BadReply(f"the model's answer held no choices{said}")
        choice = choices[0]
        if not isinstance(choice, dict):
            raise _BadReply(f"the model's answer held a malformed choice ({_kind(choice)})")
        msg = choice.get("message")
        if not isinstance(msg, dict):
            raise _BadReply(f"the model's answer held a malformed message ({_kind(msg)})")
        content = _text_of(msg.get("content"))
        raw_calls = msg.get("tool_calls") or []
        if not raw_calls and isinstance(msg.get("function_call"), dict):
            raw_calls = [{"function": msg["function_call"]}]  # the legacy shape: one call
        if not isinstance(raw_calls, list) or not all(
            isinstance(tc, dict) and isinstance(tc.get("function"), dict) for tc in raw_calls
        ):
            raise _BadReply("the model's answer held malformed tool calls")
        calls = tuple(
            ToolCallRequest(
                # a server that gives no id: one of hero's, unique in the round (results are
                # matched to their calls by id, when they are sent and when they are condensed)
                str(tc.get("id") or f"call_{uuid.uuid4().hex[:16]}"),
                str(fn.get("name") or ""),
                _arguments_text(fn.get("arguments")),
            )
            for tc in raw_calls
            if isinstance(fn := tc["function"], dict)
        )
        finish_reason = str(choice.get("finish_reason") or "")
        reasoning = msg.get("reasoning_content") or msg.get("reasoning")
        if not isinstance(reasoning, str):  # reasoning only informs: an odd one is dropped
            reasoning = ""
        sent = reasoning if reasoning and self.role.provider.send_reasoning else None
        message = assistant_message(content, calls, sent)
        usage = response.get("usage")
        if not isinstance(usage, dict):
            usage = {}  # usage only counts: a missing or odd one is no reason to ask again
        tokens_in = _count(usage.get("prompt_tokens"))
        tokens_out = _count(usage.get("completion_tokens"))
        estimated = 0
        if tokens_in == 0:  # no request is 0 tokens: the endpoint did not count it
            tokens_in = estimate_request(params["messages"], params.get("tools"))
            estimated += tokens_in
            if tokens_out == 0:  # nor its answer (a usage of zeros counts nothing)
                tokens_out = _estimate_answer(message, reasoning)
                estimated += tokens_out
        elif not _is_count(usage.get("completion_tokens")):
            tokens_out = _estimate_answer(message, reasoning)
            estimated += tokens_out
        tokens_cached = _cached_tokens(usage)
        cost = _reported_cost(usage)
        if cost is None:  # priced from the provider file, if it has prices
            provider = self.role.provider
            cost = 0.0
            if provider.input_usd_per_mtok:
                cost += tokens_in * provider.input_usd_per_mtok / 1e6
            if provider.output_usd_per_mtok:
                cost += tokens_out * provider.output_usd_per_mtok / 1e6
        completion = Completion(
            content=content,
            tool_calls=calls,
            message=message,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            http_s=http_s,
            finish_reason=finish_reason,
            cost_usd=cost,
            tokens_cached=tokens_cached,
            reasoning=reasoning,
            tokens_estimated=estimated,
        )
        with self.usage.lock:
            self.usage.add(completion.usage)
        refusal = msg.get("refusal")
        refused = isinstance(refusal, str) and refusal.strip() and not content
        if (finish_reason in _FILTERED_FINISH or refused) and not calls:
            # no answer to go on with, and asking again sends what was refused again
            name = self.role.provider.name
            why = f"finish_reason '{finish_reason}'" if finish_reason else "no answer"
            if refused:
                why += f", refusal {self._masked(str(refusal).encode(), _MESSAGE_CHARS)!r}"
            cut = f", after {len(content)} characters" if content else ""
            raise ContentFiltered(
                f"{self._where()}: the provider's content filter withheld the answer "
                f"({why}{cut}) -- provider '{name}' refused this story's content; the "
                "story ends here (the provider's other stories run on)",
                provider=name,
            )
        return completion

    def _where(self) -> str:
        return f"{self.role.role} model '{self.role.model}' at {self.role.provider.base_url}"

    def _describe(self, exc: Any, what: str) -> str:
        """``what`` (``HTTP 404``) and the error's own words, in whichever shape the
        endpoint sent them: OpenAI's ``{"error": {"message": ...}}``, Ollama's and LM
        Studio's ``{"error": "..."}``, vLLM's ``{"object": "error", "message": ...}``, a
        ``{"detail": ...}``, or a body that is no JSON (a proxy's page: an excerpt)."""
        body = getattr(exc, "body", None)  # the SDK's: the "error" entry of a JSON object
        detail = ""
        if isinstance(body, dict):
            err = body.get("error", body)
            if isinstance(err, dict):
                found = err.get("message") or err.get("detail")
                detail = str(found) if found else json.dumps(err)[:300]
            else:
                detail = str(err)
        elif isinstance(body, str):
            if _is_json(getattr(getattr(exc, "response", None), "content", b"")):
                detail = self._masked(body.encode(), _MESSAGE_CHARS)  # the server's words
            else:  # not JSON: a proxy's page may echo the request's key
                detail = f"body {self._excerpt(body.encode())}"
        elif body is not None:
            detail = json.dumps(body)[:300]
        if getattr(exc, "status_code", None) in (401, 403):  # say which key, never its value
            source = self.role.key_source
            what += f" with the key from {source}" if source else " with no key sent"
        return f"{self._where()}: {what}: {detail or exc}"

    def _retry_after(self, exc: Any) -> float | None:
        headers = getattr(getattr(exc, "response", None), "headers", None) or {}
        ms = headers.get("retry-after-ms")
        if ms:
            try:
                return max(0.0, min(float(ms) / 1000, self.settings.retry_after_max_s))
            except ValueError:
                pass
        value = headers.get("retry-after")
        if not value:
            return None
        try:
            seconds = float(value)
        except ValueError:
            try:  # an HTTP date; anything else is no usable hint
                parsed = email.utils.parsedate_to_datetime(value)
            except (TypeError, ValueError):
                return None
            seconds = parsed.timestamp() - time.time()
        if seconds != seconds:  # NaN
            return None
        return max(0.0, min(seconds, self.settings.retry_after_max_s))

    def _backoff(self, attempt: int) -> float:
        ceiling = min(
            self.settings.backoff_max_s, self.settings.backoff_base_s * 2 ** (attempt - 1)
        )
        return random.uniform(ceiling / 2, ceiling)  # jitter spreads parallel stories apart

    def _sleep(self, seconds: float) -> None:
        if self._cancel is None:
            time.sleep(seconds)
        elif self._cancel.wait(seconds):
            raise Interrupted("cancelled while waiting to retry the model")


def make_client(
    config: Config,
    role: str | RoleConfig,
    *,
    settings: LlmSettings | None = None,
    cancel: threading.Event | None = None,
    on_retry: Callable[[str], None] | None = None,
    share_http_with: LlmClient | None = None,
) -> LlmClient:
    """The client of ``role`` (a role of ``config`` by name, or one resolved already), on the
    home's request settings or ``settings``: the one place a model client is made."""
    resolved = config.role(role) if isinstance(role, str) else role
    return LlmClient(
        resolved,
        settings or config.llm,
        cancel=cancel,
        on_retry=on_retry,
        share_http_with=share_http_with,
    )


def story_clients(
    config: Config,
    *,
    cancel: threading.Event | None = None,
    on_retry: Callable[[str], None] | None = None,
    share_http_with: LlmClient | None = None,
) -> tuple[LlmClient, LlmClient]:
    """A story's worker and reviewer (its ``config``'s roles, its own models applied: see
    hero.llm.models), on one HTTP client: ``share_http_with``'s, else the worker's."""
    worker = make_client(
        config, "worker", cancel=cancel, on_retry=on_retry, share_http_with=share_http_with
    )
    reviewer = make_client(
        config,
        "reviewer",
        cancel=cancel,
        on_retry=on_retry,
        share_http_with=share_http_with or worker,
    )
    return worker, reviewer


class _BadReply(HeroError):
    """The endpoint answered 200 with something that is not a usable chat completion."""


#: How much of a body an error message quotes, and how much of it is searched for secrets.
_EXCERPT_CHARS = 120
#: How much of an error's own message (a JSON error's text) an error message quotes.
_MESSAGE_CHARS = 500
_EXCERPT_SCAN_BYTES = 4096
#: Key- and token-like words a proxy's error page may echo back (an Authorization header).
_SECRET_LIKE = re.compile(
    r"((?:authorization|api[_-]?key|token|secret|password)[\"']?\s*[:=]\s*[\"']?"
    r"(?:(?:bearer|basic)\s+)?|\b(?:bearer|basic)\s+|\bsk-)[^\s\"'<>&,;]+",
    re.IGNORECASE,
)
_JSON_KINDS = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}


def error_kind(reason: str) -> str:
    """A retried error's kind, from its reason (``LlmClient._classify``): ``http_<status>``,
    ``timeout``, ``connection`` or ``unusable``; a short, fixed vocabulary a metric's label
    can hold."""
    if reason.startswith("HTTP "):
        status = reason[5:].split()[0] if reason[5:].split() else ""
        return f"http_{status}" if status.isdigit() and len(status) == 3 else "http"
    if reason.startswith("timed out"):
        return "timeout"
    if reason.startswith("connection"):
        return "connection"
    return "unusable"


def _error_words(exc: Any) -> str:
    """The code, type and message of an error answer's body (and Azure's ``innererror``
    code), for telling a refusal of one story's request from one of every request (""
    when the body says nothing)."""
    body = getattr(exc, "body", None)
    err = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(err, dict):
        words = [str(err.get(k) or "") for k in ("code", "type", "message")]
        inner = err.get("innererror")
        if isinstance(inner, dict):
            words.append(str(inner.get("code") or ""))
        return " ".join(words)[:2000]
    return str(err or "")[:2000]


def _refuses_content(status: int, words: str) -> bool:
    """Whether an error answer of ``status`` saying ``words`` refuses one story's content
    (see _CONTENT_REFUSAL) rather than every request: a 403 that names the account, key or
    place is the provider's whatever it says."""
    if not _CONTENT_REFUSAL.search(words):
        return False
    return status != 403 or not _ACCOUNT_WORDS.search(words)


def _caused_by(exc: BaseException, kind: type[BaseException]) -> bool:
    """Whether ``exc`` or an exception it was raised from (or during) is a ``kind``."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def _is_json(raw: object) -> bool:
    """Whether ``raw`` (a response's bytes) is a JSON document."""
    if not isinstance(raw, bytes | str):
        return False
    try:
        json.loads(raw)
    except (ValueError, RecursionError):
        return False
    return True


def _kind(value: object) -> str:
    if value is None:
        return "null or missing"
    return _JSON_KINDS.get(type(value), "a number")


def _count(value: object) -> int:
    """A token count from the answer's usage; 0 when absent or not a finite number."""
    return max(0, int(value)) if _is_count(value) else 0


def _is_count(value: object) -> TypeGuard[int | float]:
    """Whether the answer's usage gave ``value`` as a number (a count, 0 included)."""
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def _estimate_answer(message: dict[str, Any], reasoning: str) -> int:
    """The completion tokens of an answer the endpoint did not count: its text, its tool
    calls and its reasoning (sent back or not, the model wrote it)."""
    if reasoning and "reasoning_content" not in message:
        message = {**message, "reasoning_content": reasoning}
    return estimate_message(message)


def _cached_tokens(usage: dict[str, Any]) -> int:
    """The prompt tokens the provider read from its cache, in whichever shape it reports
    them: OpenAI's ``prompt_tokens_details.cached_tokens``, DeepSeek's
    ``prompt_cache_hit_tokens``, or ``cache_read_input_tokens`` (Anthropic's field, sent
    by some gateways); 0 when none is reported."""
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict) and details.get("cached_tokens") is not None:
        return _count(details.get("cached_tokens"))
    if usage.get("prompt_cache_hit_tokens") is not None:
        return _count(usage.get("prompt_cache_hit_tokens"))
    return _count(usage.get("cache_read_input_tokens"))


def _reported_cost(usage: dict[str, Any]) -> float | None:
    """The cost in USD the provider reported with the answer (``usage.cost``, as OpenRouter
    and some gateways send it), or None when it reported none usable."""
    value = usage.get("cost")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return max(0.0, float(value))


def assistant_message(
    content: str, calls: Sequence[ToolCallRequest], reasoning: str | None = None
) -> dict[str, Any]:
    """The assistant message hero appends to the history and sends back: the one form every
    endpoint hero knows of takes (docs/endpoints.md), built here only (hero.agent.replay
    rebuilds a resumed round's history with it, byte for byte).

    ``content`` is always a string, ``""`` beside tool calls: Ollama, LM Studio, llama.cpp's
    server and mlx-lm refuse ``null`` (or a missing content); every call has its ``id`` and
    ``type: "function"``, and arguments that are a JSON object, as text: vLLM and
    llama.cpp's server parse them to render their chat template, so a call whose arguments
    are not one (cut off by the output limit, or malformed) goes back as ``{}`` (its tool
    result says what was wrong); ``reasoning`` is sent as ``reasoning_content`` when given."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": _wire_arguments(c.arguments)},
            }
            for c in calls
        ]
    if reasoning:
        message["reasoning_content"] = reasoning
    return message


def _wire_arguments(arguments: str) -> str:
    """``arguments`` when they are a JSON object, else ``{}`` (see assistant_message)."""
    try:
        parsed = json.loads(arguments)
    except (ValueError, RecursionError):
        return "{}"
    return arguments if isinstance(parsed, dict) else "{}"


#: The types of content parts that are the answer's text (OpenAI's ``text``, the
#: Responses-style ``output_text``); others (images, ``thinking``, ``refusal``) are not.
_TEXT_PARTS = frozenset({"text", "output_text"})


def _text_of(content: object) -> str:
    """An answer's text: a string, or the text parts of a list of content parts joined;
    "" for none. _BadReply for anything else."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            text
            for p in content
            if isinstance(p, dict)
            and p.get("type", "text") in _TEXT_PARTS
            and isinstance(text := p.get("text"), str)
        )
    raise _BadReply(f"the model's answer held malformed content ({_kind(content)})")


def _arguments_text(arguments: object) -> str:
    """A tool call's arguments as text: as sent when a string; an object (Ollama, some
    gateways) as its JSON; none as ``""``."""
    if arguments is None:
        return ""
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments)
