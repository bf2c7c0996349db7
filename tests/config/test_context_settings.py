"""The settings for long rounds, so a round never outgrows its model: the context window, the output cap and its field
name, reasoning sent back or not, and cached input tokens from the provider to `hero status`.

Config is loaded from real files; the model client is the real `openai` SDK over HTTP to
hero's scripted model."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import is_review, step_of, verdict

from hero.cli import main
from hero.config.home import Config, context_limits
from hero.config.loader import load_config
from hero.config.providers import Provider, RoleConfig
from hero.config.schema import ConfigError
from hero.config.sections import Budgets, ContextSettings, LlmSettings
from hero.llm.client import LlmClient
from hero.llm.scripted import Reply, ScriptedModel, ToolCall, text
from hero.run.budget import Meter
from hero.state import RunState

Start = Callable[..., ScriptedModel]

PROVIDER = """\
name: local
base_url: http://127.0.0.1:11434/v1
default_model: qwen2.5-coder:14b
"""
ROLES = "worker:\n  provider: local\nreviewer:\n  provider: local\ntarget_repo: repo\n"
MESSAGES = [{"role": "user", "content": "hello"}]


def make_home(tmp_path: Path, roles: str = ROLES, provider: str = PROVIDER) -> Path:
    home = tmp_path / "home"
    (home / "config" / "providers").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(home / "repo")], check=True)
    (home / "config" / "roles.yaml").write_text(roles, encoding="utf-8")
    (home / "config" / "providers" / "local.yaml").write_text(provider, encoding="utf-8")
    return home


def config_error(home: Path) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_config(home, ("worker", "reviewer"), env={})
    return info.value


# ----------------------------------------------------------------------------- config


def test_defaults_when_nothing_is_set(tmp_path: Path) -> None:
    cfg = load_config(make_home(tmp_path), env={})

    provider = cfg.role("worker").provider
    assert provider.context_window is None
    assert provider.send_reasoning is False
    assert provider.output_tokens_param == "max_tokens"
    assert cfg.role("worker").max_output_tokens is None
    assert cfg.role("worker").context_window is None
    assert cfg.context == ContextSettings(
        condense_at=0.75, keep_turns=6, window_default=128_000, reserve_default=4096
    )
    assert context_limits(cfg, "worker") == (128_000, 4096)


def test_every_setting_is_read(tmp_path: Path) -> None:
    provider = PROVIDER + (
        "context_window: 32768\nsend_reasoning: true\noutput_tokens_param: max_completion_tokens\n"
    )
    roles = (
        "worker:\n  provider: local\n  max_output_tokens: 8000\n"
        "reviewer:\n  provider: local\n"
        "target_repo: repo\n"
        "context_condense_at: 0.5\n"
        "context_keep_turns: 3\n"
        "context_window_default: 16384\n"
        "output_reserve_default: 2048\n"
    )
    cfg = load_config(make_home(tmp_path, roles, provider), env={})

    worker = cfg.role("worker")
    assert worker.provider.context_window == worker.context_window == 32768
    assert worker.provider.send_reasoning is True
    assert worker.provider.output_tokens_param == "max_completion_tokens"
    assert worker.max_output_tokens == 8000
    assert cfg.role("reviewer").max_output_tokens is None
    assert cfg.context == ContextSettings(0.5, 3, 16384, 2048)
    assert context_limits(cfg, "worker") == (32768, 8000)  # the role's cap
    assert context_limits(cfg, "reviewer") == (32768, 2048)  # output_reserve_default


def test_window_default_applies_without_a_provider_window(tmp_path: Path) -> None:
    roles = ROLES + "context_window_default: 20000\noutput_reserve_default: 9999\n"
    cfg = load_config(make_home(tmp_path, roles), env={})
    assert context_limits(cfg, "worker") == (20000, 9999)  # just under half the window


def test_the_condense_fraction_takes_its_upper_bound(tmp_path: Path) -> None:
    cfg = load_config(make_home(tmp_path, ROLES + "context_condense_at: 0.95\n"), env={})
    assert cfg.context.condense_at == 0.95


@pytest.mark.parametrize(
    ("line", "key", "fragment"),
    [
        ("context_window: 1023", "context_window", "whole number >= 1024"),
        ("context_window: big", "context_window", "whole number >= 1024"),
        ("context_window: 4096.5", "context_window", "whole number >= 1024"),
        ("context_window: true", "context_window", "whole number >= 1024"),
        ("send_reasoning: 'yes'", "send_reasoning", "true or false"),
        ("send_reasoning: 1", "send_reasoning", "true or false"),
        ("output_tokens_param: max_output_tokens", "output_tokens_param", "max_tokens"),
        ("output_tokens_param: max_completion_token", "output_tokens_param", "did you mean"),
        ("output_tokens_param: 5", "output_tokens_param", "non-empty string"),
        ("context_windw: 4096", "context_windw", "did you mean 'context_window'"),
    ],
)
def test_provider_file_errors(tmp_path: Path, line: str, key: str, fragment: str) -> None:
    err = config_error(make_home(tmp_path, provider=PROVIDER + line + "\n"))
    assert (err.file, err.key) == ("config/providers/local.yaml", key)
    assert fragment in err.message


@pytest.mark.parametrize(
    ("extra", "key", "fragment"),
    [
        ("context_condense_at: 0.1", "context_condense_at", "> 0.1 and <= 0.95"),
        ("context_condense_at: 0.96", "context_condense_at", "> 0.1 and <= 0.95"),
        ("context_condense_at: half", "context_condense_at", "fraction"),
        ("context_condense_at: true", "context_condense_at", "fraction"),
        ("context_condense_at: .nan", "context_condense_at", "fraction"),
        ("context_keep_turns: 0", "context_keep_turns", "whole number >= 1"),
        ("context_keep_turns: 2.5", "context_keep_turns", "whole number >= 1"),
        ("context_window_default: 1000", "context_window_default", "whole number >= 1024"),
        ("output_reserve_default: 255", "output_reserve_default", "whole number >= 256"),
        ("output_reserve_default: lots", "output_reserve_default", "whole number >= 256"),
    ],
)
def test_roles_file_knob_errors(tmp_path: Path, extra: str, key: str, fragment: str) -> None:
    err = config_error(make_home(tmp_path, ROLES + extra + "\n"))
    assert (err.file, err.key) == ("config/roles.yaml", key)
    assert fragment in err.message


@pytest.mark.parametrize("value", ["0", "-5", "many", "1.5", "false"])
def test_role_max_output_tokens_errors(tmp_path: Path, value: str) -> None:
    roles = ROLES.replace(
        "worker:\n  provider: local\n",
        f"worker:\n  provider: local\n  max_output_tokens: {value}\n",
    )
    err = config_error(make_home(tmp_path, roles))
    assert (err.file, err.key) == ("config/roles.yaml", "worker.max_output_tokens")
    assert "whole number >= 1" in err.message


def test_a_cap_of_half_the_window_names_the_role_key(tmp_path: Path) -> None:
    roles = ROLES.replace(
        "worker:\n  provider: local\n", "worker:\n  provider: local\n  max_output_tokens: 16384\n"
    )
    err = config_error(make_home(tmp_path, roles, PROVIDER + "context_window: 32768\n"))
    assert (err.file, err.key) == ("config/roles.yaml", "worker.max_output_tokens")
    assert "below half the context window (32768 / 2 = 16384)" in err.message
    assert "found 16384" in err.message


def test_a_small_provider_window_names_the_provider_file(tmp_path: Path) -> None:
    err = config_error(make_home(tmp_path, provider=PROVIDER + "context_window: 8192\n"))
    assert (err.file, err.key) == ("config/providers/local.yaml", "context_window")
    assert "4096 tokens, output_reserve_default" in err.message
    assert "found 8192" in err.message


def test_a_reserve_of_half_the_default_window_names_the_knob(tmp_path: Path) -> None:
    roles = ROLES + "context_window_default: 4096\noutput_reserve_default: 2048\n"
    err = config_error(make_home(tmp_path, roles))
    assert (err.file, err.key) == ("config/roles.yaml", "output_reserve_default")
    assert "context_window_default" in err.message


def test_context_limits_of_a_role_not_loaded(tmp_path: Path) -> None:
    cfg = load_config(make_home(tmp_path), ("worker",), env={})
    with pytest.raises(ConfigError) as info:
        context_limits(cfg, "planner")
    assert info.value.key == "planner"


def test_context_limits_of_a_config_built_in_code(tmp_path: Path) -> None:
    provider = Provider(name="p", base_url="http://x", default_model="m", context_window=10_000)
    role = RoleConfig("worker", provider, "m", None, max_output_tokens=5000)
    cfg = Config(home=tmp_path, target_repo=tmp_path, roles={"worker": role})
    with pytest.raises(ConfigError) as info:
        context_limits(cfg, "worker")
    assert info.value.key == "worker.max_output_tokens"


# ----------------------------------------------------------------------------- the client


def client_for(
    base_url: str,
    *,
    max_output_tokens: int | None = None,
    output_tokens_param: str = "max_tokens",
    send_reasoning: bool = False,
) -> LlmClient:
    provider = Provider(
        name="scripted",
        base_url=base_url,
        default_model="m",
        send_reasoning=send_reasoning,
        output_tokens_param=output_tokens_param,
    )
    role = RoleConfig("worker", provider, "m", None, max_output_tokens=max_output_tokens)
    return LlmClient(role, LlmSettings(max_attempts=1))


def test_output_cap_is_sent_as_max_tokens_by_default(scripted: Start) -> None:
    model = scripted([text("a")])
    client_for(model.base_url, max_output_tokens=2000).complete(MESSAGES)
    body = model.requests[0].body
    assert body["max_tokens"] == 2000
    assert "max_completion_tokens" not in body


def test_output_cap_is_sent_under_the_providers_field(scripted: Start) -> None:
    model = scripted([text("a")])
    client = client_for(
        model.base_url, max_output_tokens=3000, output_tokens_param="max_completion_tokens"
    )
    client.complete(MESSAGES)
    body = model.requests[0].body
    assert body["max_completion_tokens"] == 3000
    assert "max_tokens" not in body


def test_no_output_cap_is_sent_without_one(scripted: Start) -> None:
    model = scripted([text("a")])
    client_for(model.base_url, output_tokens_param="max_completion_tokens").complete(MESSAGES)
    body = model.requests[0].body
    assert "max_tokens" not in body and "max_completion_tokens" not in body


@pytest.mark.parametrize(
    ("reply", "cached"),
    [
        (Reply(content="x", prompt_tokens=1000, cached_tokens=800), 800),  # OpenAI
        (Reply(content="x", prompt_tokens=1000, usage_extra={"prompt_cache_hit_tokens": 700}), 700),
        (Reply(content="x", prompt_tokens=1000, usage_extra={"cache_read_input_tokens": 600}), 600),
        (Reply(content="x", prompt_tokens=1000), 0),  # none reported
        (  # OpenAI's shape wins over the others
            Reply(
                content="x",
                prompt_tokens=1000,
                cached_tokens=500,
                usage_extra={"prompt_cache_hit_tokens": 1, "cache_read_input_tokens": 2},
            ),
            500,
        ),
        (Reply(content="x", prompt_tokens=1000, usage_extra={"prompt_cache_hit_tokens": "a"}), 0),
        (Reply(content="x", prompt_tokens=1000, usage_extra={"prompt_tokens_details": None}), 0),
    ],
)
def test_cached_input_tokens_in_each_shape(scripted: Start, reply: Reply, cached: int) -> None:
    model = scripted([reply])
    client = client_for(model.base_url)

    completion = client.complete(MESSAGES)

    assert completion.tokens_cached == cached
    assert completion.tokens_in == 1000
    assert client.usage.tokens_cached == cached


def test_cached_tokens_add_up_in_usage(scripted: Start) -> None:
    model = scripted(
        [
            Reply(content="a", cached_tokens=100),
            Reply(content="b", usage_extra={"prompt_cache_hit_tokens": 20}),
            Reply(content="c"),
        ]
    )
    client = client_for(model.base_url)
    for _ in range(3):
        client.complete(MESSAGES)
    assert client.usage.tokens_cached == 120
    assert client.usage.llm_calls == 3


def test_reasoning_is_kept_but_not_sent_back_by_default(scripted: Start) -> None:
    model = scripted([Reply(content="a", reasoning="I THINK SO"), text("b")])
    client = client_for(model.base_url)

    completion = client.complete(MESSAGES)
    client.complete([*MESSAGES, completion.message, {"role": "user", "content": "go on"}])

    assert completion.reasoning == "I THINK SO"
    assert completion.message == {"role": "assistant", "content": "a"}
    assert "I THINK SO" not in json.dumps(model.requests[1].body)


def test_reasoning_is_sent_back_when_the_provider_wants_it(scripted: Start) -> None:
    model = scripted(
        [
            Reply(tool_calls=(ToolCall("bash", {"command": "ls"}, id="c1"),), reasoning="PLAN"),
            text("b"),
        ]
    )
    client = client_for(model.base_url, send_reasoning=True)

    completion = client.complete(MESSAGES)
    tool = {"role": "tool", "tool_call_id": "c1", "content": "ok"}
    client.complete([*MESSAGES, completion.message, tool])

    assert completion.reasoning == "PLAN"
    assert completion.message["reasoning_content"] == "PLAN"
    assert model.requests[1].body["messages"][1]["reasoning_content"] == "PLAN"


def test_no_reasoning_means_none_in_the_message(scripted: Start) -> None:
    model = scripted([text("a")])
    completion = client_for(model.base_url, send_reasoning=True).complete(MESSAGES)
    assert completion.reasoning == ""
    assert "reasoning_content" not in completion.message


def test_the_budget_meter_shows_the_wrapped_models_attributes(scripted: Start) -> None:
    model = scripted([Reply(content="a", cached_tokens=7)])
    client = client_for(model.base_url, max_output_tokens=1000)
    metered = Meter(Budgets(), RunState(id="s1")).wrap(client)

    metered.complete(MESSAGES)

    assert metered.usage is client.usage
    assert metered.usage.tokens_cached == 7
    assert metered.role.max_output_tokens == 1000
    with pytest.raises(AttributeError):
        _ = metered.no_such_attribute


# ----------------------------------------------------------------------------- state, status


@pytest.mark.slow
def test_cached_tokens_reach_the_run_record_and_status(
    scripted: Start,
    make_home: Callable[..., Path],
    write_story: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    worker = [
        Reply(
            tool_calls=(ToolCall("bash", {"command": "echo hi > hi.txt"}),),
            prompt_tokens=10_000,
            completion_tokens=100,
            cached_tokens=6_000,
        ),
        Reply(content="Done.", prompt_tokens=12_000, completion_tokens=100, cached_tokens=9_000),
    ]
    review = Reply(
        content=verdict("APPROVED").content,
        prompt_tokens=3_000,
        completion_tokens=50,
        usage_extra={"prompt_cache_hit_tokens": 1_000},
    )

    def handler(body: dict[str, Any]) -> Reply:
        return review if is_review(body) else worker[min(step_of(body), len(worker) - 1)]

    home = make_home(scripted(handler))
    story = write_story(home, "s1", verify=["true"])
    main(["run", str(story), "--home", str(home)])
    capsys.readouterr()

    state = json.loads((home / "runs" / "state" / "s1.json").read_text())
    assert state["status"] == "passed"
    assert state["usage"]["tokens_in"] == 25_000
    assert state["usage"]["tokens_cached"] == 16_000

    assert main(["status", "--json", "--home", str(home)]) == 0
    (row,) = json.loads(capsys.readouterr().out)["stories"]
    assert (row["tokens_in"], row["tokens_cached"]) == (25_000, 16_000)

    assert main(["status", "--home", str(home)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("s1 "))
    assert "25.2k (16.0k cached)" in line
