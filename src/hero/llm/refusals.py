"""Refusals of a request's content, as providers send them: the scripted model's
(hero.llm.scripted's ``refusal``) for tests and benchmarks of what hero must take as the end
of one story, never as the provider's fault (hero.llm.client's ``ContentRefused``).

Their shapes are the providers' own (OpenAI's error object, Azure's with its
``innererror``, Anthropic's ``{"type": "error", ...}``, vLLM's ``{"object": "error"}``,
llama.cpp server's); their words are hero's paraphrase of what each says.
"""

from __future__ import annotations

from collections.abc import Mapping

#: Refusals of a request's content, in the shapes and words providers send them (what hero
#: must take as the end of one story, never as the provider's fault): by name, the
#: (status, body) of each.
REFUSALS: Mapping[str, tuple[int, object]] = {
    # OpenAI's moderation of a prompt
    "openai-invalid-prompt": (
        400,
        {
            "error": {
                "message": "Invalid prompt: your prompt was flagged as potentially violating "
                "our usage policy. Please try again with a different prompt.",
                "type": "invalid_request_error",
                "param": None,
                "code": "invalid_prompt",
            }
        },
    ),
    # OpenAI's image and older moderation code
    "openai-content-policy": (
        400,
        {
            "error": {
                "message": "Your request was rejected as a result of our safety system.",
                "type": "invalid_request_error",
                "param": None,
                "code": "content_policy_violation",
            }
        },
    ),
    # Azure OpenAI's content filter on the prompt, its inner error code
    "azure-content-filter": (
        400,
        {
            "error": {
                "message": "The response was filtered due to the prompt triggering Azure "
                "OpenAI's content management policy.",
                "type": None,
                "param": "prompt",
                "code": "content_filter",
                "status": 400,
                "innererror": {
                    "code": "ResponsibleAIPolicyViolation",
                    "content_filter_result": {"hate": {"filtered": True, "severity": "high"}},
                },
            }
        },
    ),
    # an Anthropic-compatible gateway passing Anthropic's error shape on
    "anthropic-gateway": (
        400,
        {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": "Output blocked by content filtering policy",
            },
        },
    ),
    # OpenRouter's moderation: a 403 that names what was flagged
    "openrouter-moderation": (
        403,
        {
            "error": {
                "code": 403,
                "message": "scripted-test requires moderation. Your input was flagged for "
                '"violence".',
                "metadata": {"reasons": ["violence"]},
            }
        },
    ),
    # vLLM's error shape, from a guard model in front of it
    "vllm-guard": (
        400,
        {
            "object": "error",
            "message": "Request blocked: the guard model classified the prompt as unsafe.",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        },
    ),
    # llama.cpp server's error shape, from a guardrail proxy in front of it
    "llamacpp-guardrail": (
        400,
        {
            "error": {
                "code": 400,
                "message": "prompt rejected by guardrail: possible jailbreak attempt",
                "type": "invalid_request_error",
            }
        },
    ),
}
