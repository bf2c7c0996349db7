"""A model per story: the ``model:`` and ``reasoning_effort:`` story fields, `hero run
--model` / `--reasoning-effort`, and where they go (hero.llm.models).

Real parts throughout: the `openai` client over HTTP to hero's scripted model on loopback
(two of them when a story names another provider), real git repositories, `hero run` in
process and `hero watch` as a child process.
"""

from __future__ import annotations

import dataclasses
import json
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from engine_support import Cluster
from engine_support import Policy as EnginePolicy
from helpers import MESSAGES, backlog, is_review, make_client
from run_support import good_worker, policy, review_requests, run_hero, worker_requests
from watch_support import Policy, Procs, story_of, wait_for

from hero.cli import main
from hero.config.loader import load_config
from hero.llm.breaker import CLOSED, breakers_path, read_breakers
from hero.llm.client import LlmError, ModelOutage, ModelRefused
from hero.llm.models import OverrideError, parse_override, providers_of, roles_for, story_config
from hero.llm.scripted import HttpError, ScriptedModel
from hero.state import RunState
from hero.story.format import parse_story_text
from hero.story.record import StoryError

ALL_DONE_S = 300.0  # generous "did not hang" bounds, not speed checks
FAST = {"llm_max_attempts": 2, "outage_backoff_s": 0.5, "outage_backoff_max_s": 1.0}


def story_text(front: str) -> str:
    return f"---\nid: s1\ntitle: T\n{front}\n---\n\n## Goal\nDo it.\n"


def add_provider(home: Path, name: str, base_url: str, *extra: str) -> None:
    lines = [f"name: {name}", f"base_url: {base_url}", "default_model: other-default", *extra]
    (home / "config" / "providers" / f"{name}.yaml").write_text("\n".join(lines) + "\n")


def models_of(requests: list[dict[str, Any]]) -> set[tuple[str, Any]]:
    return {(r["model"], r.get("reasoning_effort")) for r in requests}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --------------------------------------------------------------------------- the fields


@pytest.mark.parametrize(
    ("front", "field", "said"),
    [
        ("model: 3", "model", "expected a model name as a string, or a mapping"),
        ("model: [a, b]", "model", "found a list"),
        ("model: ''", "model", "expected a model name as a string; found an empty string"),
        ("model: '   '", "model", "found an empty string"),
        ("model: {}", "model", "found an empty mapping"),
        ("model: {planner: x}", "model", "unknown role 'planner'; expected worker or reviewer"),
        ("model: {worker: 7}", "model.worker", "expected a model name as a string"),
        ("model: {reviewer: ''}", "model.reviewer", "found an empty string"),
        ("model: 'a b'", "model", "without spaces or control characters"),
        ('model: "gpt\\x1b[31m"', "model", "without spaces or control characters"),
        ('model: "gpt\\n5"', "model", "without spaces or control characters"),
        ("model: " + "m" * 201, "model", "at most 200 characters; found 201"),
        ("reasoning_effort: 2", "reasoning_effort", "expected a word like low or high"),
        ("reasoning_effort: 'very high'", "reasoning_effort", "expected a word like minimal"),
        ("reasoning_effort: {worker: high, boss: low}", "reasoning_effort", "unknown role"),
        ("reasoning_effort: {worker: true}", "reasoning_effort.worker", "found the boolean true"),
    ],
)
def test_a_bad_model_field_is_an_error_naming_the_file_and_the_field(
    front: str, field: str, said: str
) -> None:
    with pytest.raises(StoryError) as info:
        parse_story_text(story_text(front), Path("inbox/s1.md"))
    assert info.value.field == field
    assert said in info.value.message
    assert str(info.value).startswith(f"inbox/s1.md: {field}: ")


def test_the_fields_read_as_written_and_are_written_back_as_read(tmp_path: Path) -> None:
    from hero.story.format import dumps_story, story_metadata

    front = "model: {worker: ' openai:gpt-5 ', reviewer: small}\nreasoning_effort: high"
    story = parse_story_text(story_text(front), tmp_path / "s1.md")
    assert story.model == {"worker": "openai:gpt-5", "reviewer": "small"}
    assert story.reasoning_effort == "high"
    again = parse_story_text(dumps_story(story_metadata(story), story.body), tmp_path / "s1.md")
    assert (again.model, again.reasoning_effort) == (story.model, story.reasoning_effort)


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (["worker="], "--model 'worker=': expected a value; found an empty string"),
        (["a b"], "without spaces"),
    ],
)
def test_a_bad_override_names_the_option_and_the_value(given: list[str], said: str) -> None:
    with pytest.raises(OverrideError) as info:
        parse_override(given)
    assert said in str(info.value)
    with pytest.raises(OverrideError) as effort:
        parse_override((), ["reviewer=ultra high"])
    assert "--reasoning-effort 'reviewer=ultra high'" in str(effort.value)


# --------------------------------------------------------------------------- the resolver


@pytest.fixture
def two_providers(
    make_home: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """A home whose roles use `scripted`, beside a provider `other` with a key of its own
    and a default reasoning effort (no server answers: nothing is sent here)."""
    home = make_home(ScriptedModel([]).start())
    add_provider(
        home,
        "other",
        "http://127.0.0.1:9/v1",
        "api_key_env: OTHER_TEST_KEY",
        "default_reasoning_effort: low",
    )
    monkeypatch.setenv("OTHER_TEST_KEY", "sk-other-provider-key-1234")
    yield home


def test_the_rule_for_a_provider_prefix(two_providers: Path) -> None:
    config = load_config(two_providers)
    front = "model: {worker: 'qwen2.5:7b', reviewer: 'other:big'}\nreasoning_effort: {worker: none}"
    story = parse_story_text(story_text(front), two_providers / "inbox" / "s1.md")
    roles = roles_for(config, story)
    # no provider is called `qwen2.5`: the whole of it is a model on the role's provider
    worker, reviewer = roles["worker"], roles["reviewer"]
    assert (worker.provider.name, worker.model, worker.reasoning_effort) == (
        "scripted",
        "qwen2.5:7b",
        None,
    )
    assert worker.chosen_by == "story field model"
    # another provider: its URL, its key (and where it came from), its default effort
    assert (reviewer.provider.name, reviewer.model, reviewer.reasoning_effort) == (
        "other",
        "big",
        "low",
    )
    assert reviewer.api_key == "sk-other-provider-key-1234"
    assert reviewer.key_source == "$OTHER_TEST_KEY"
    assert providers_of(story_config(config, story)) == ("other", "scripted")
    # `other:` alone: that provider's default model
    bare = parse_story_text(story_text("model: 'other:'"), Path("s1.md"))
    assert {r.model for r in roles_for(config, bare).values()} == {"other-default"}
    # a story that chooses nothing keeps config's own roles, untouched
    plain = parse_story_text(story_text(""), Path("s1.md"))
    assert story_config(config, plain) is config


def test_a_provider_without_its_key_is_the_storys_error(
    two_providers: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = load_config(two_providers)
    monkeypatch.delenv("OTHER_TEST_KEY")
    config = dataclasses.replace(config, key_sources=(config.key_sources[0], {}))
    story = parse_story_text(story_text("model: {reviewer: 'other:big'}"), Path("inbox/s1.md"))
    with pytest.raises(StoryError) as info:
        story_config(config, story)
    assert info.value.field == "model.reviewer"
    assert "names provider 'other'" in info.value.message
    assert "OTHER_TEST_KEY is not set" in info.value.message


def test_an_answer_cap_the_other_providers_window_cannot_hold_is_the_storys_error(
    two_providers: Path,
) -> None:
    add_provider(two_providers, "tiny", "http://127.0.0.1:9/v1", "context_window: 1024")
    roles = (two_providers / "config" / "roles.yaml").read_text()
    roles = roles.replace("worker:\n  provider: scripted", "worker:\n  provider: scripted\n"
                          "  max_output_tokens: 4000")  # fmt: skip
    (two_providers / "config" / "roles.yaml").write_text(roles)
    config = load_config(two_providers)
    story = parse_story_text(story_text("model: 'tiny:m'"), Path("inbox/s1.md"))
    with pytest.raises(StoryError) as info:
        story_config(config, story)
    assert info.value.field == "model"
    assert "on provider 'tiny'" in info.value.message
    assert "max_output_tokens" in info.value.message


def test_a_model_the_story_chose_that_is_refused_is_the_storys_error(
    scripted: Callable[..., ScriptedModel],
) -> None:
    """An unknown model's 404 stops the provider's queue when config/roles.yaml named it;
    when one story's frontmatter named it, only that story ends in error."""
    model = scripted([HttpError(404, "The model `gpt-9` does not exist"), *[HttpError(404, "x")]])
    client = make_client(model.base_url, model="gpt-9")
    client.role = dataclasses.replace(client.role, chosen_by="story field model")
    with pytest.raises(LlmError) as info:
        client.complete(MESSAGES)
    assert not isinstance(info.value, ModelOutage)
    assert "does not exist" in str(info.value) and "chosen by story field model" in str(info.value)
    with pytest.raises(ModelRefused):  # chosen by roles.yaml: the provider's refusal
        make_client(model.base_url, model="gpt-9").complete(MESSAGES)


def test_a_record_from_before_models_were_kept_loads() -> None:
    old = RunState(id="s1").to_dict()
    assert "models" not in old
    assert RunState.from_dict(old).models == {}
    with pytest.raises(TypeError, match="models"):
        RunState.from_dict({**old, "models": {"worker": ["not", "an", "object"]}})


# --------------------------------------------------------------------------- hero run


@pytest.mark.slow
def test_a_per_story_model_reaches_the_request(
    scripted, make_home, write_story, capsys: pytest.CaptureFixture[str]
) -> None:
    model = scripted(policy(good_worker()))
    home = make_home(model)
    story = write_story(
        home,
        "s1",
        verify=["true"],
        model={"worker": "story-worker-model", "reviewer": "story-reviewer-model"},
        reasoning_effort={"worker": "high"},
    )

    assert run_hero(home, story, "--json") == 0

    result = json.loads(capsys.readouterr().out)
    assert models_of(worker_requests(model)) == {("story-worker-model", "high")}
    assert models_of(review_requests(model)) == {("story-reviewer-model", None)}
    assert all("reasoning_effort" not in r for r in review_requests(model))
    expected = {
        "worker": {
            "provider": "scripted",
            "model": "story-worker-model",
            "reasoning_effort": "high",
        },
        "reviewer": {
            "provider": "scripted",
            "model": "story-reviewer-model",
            "reasoning_effort": None,
        },
    }
    assert result["models"] == expected
    state = json.loads((home / "runs" / "state" / "s1.json").read_text())
    assert state["models"] == expected

    assert main(["status", "--home", str(home), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["stories"]
    assert row["models"] == expected
    assert main(["status", "--home", str(home)]) == 0
    out = capsys.readouterr().out
    assert (
        "models: worker scripted:story-worker-model (high), "
        "reviewer scripted:story-reviewer-model" in out
    )


@pytest.mark.slow
def test_a_story_on_another_provider_uses_its_url_and_key(
    scripted, make_home, write_story, monkeypatch: pytest.MonkeyPatch
) -> None:
    home_model = scripted(policy(good_worker()))
    other = scripted(policy(good_worker()))
    home = make_home(home_model)
    add_provider(home, "other", other.base_url, "api_key_env: OTHER_TEST_KEY")
    monkeypatch.setenv("OTHER_TEST_KEY", "sk-other-provider-key-1234")
    story = write_story(home, "s1", verify=["true"], model={"worker": "other:far-model"})

    assert run_hero(home, story) == 0

    # the worker's requests went to the other provider, with its key; the reviewer's stayed
    assert other.requests and all(not is_review(r.body) for r in other.requests)
    assert {r.body["model"] for r in other.requests} == {"far-model"}
    assert {r.headers.get("authorization") for r in other.requests} == {
        "Bearer sk-other-provider-key-1234"
    }
    assert home_model.requests and all(is_review(r.body) for r in home_model.requests)
    assert {r.headers.get("authorization") for r in home_model.requests} == {"Bearer no-key"}
    state = json.loads((home / "runs" / "state" / "s1.json").read_text())
    assert state["models"]["worker"] == {
        "provider": "other",
        "model": "far-model",
        "reasoning_effort": None,
    }
    assert "sk-other-provider-key" not in json.dumps(state)


@pytest.mark.slow
def test_hero_run_model_overrides_the_story_for_that_run_only(
    scripted, make_home, write_story, capsys: pytest.CaptureFixture[str]
) -> None:
    other = scripted(policy(good_worker()))
    model = scripted(policy(good_worker()))
    home = make_home(model)
    add_provider(home, "other", other.base_url)
    story = write_story(
        home, "s1", verify=["true"], model="from-the-story", reasoning_effort="medium"
    )
    before = story.read_text()

    code = run_hero(
        home,
        story,
        "--model",
        "everyone",
        "--model",
        "reviewer=other:judge",
        "--reasoning-effort",
        "worker=none",
        "--json",
    )

    assert code == 0, capsys.readouterr()
    assert models_of(worker_requests(model)) == {("everyone", None)}
    assert not review_requests(model)
    assert models_of([r.body for r in other.requests]) == {("judge", "medium")}
    assert json.loads(capsys.readouterr().out)["models"]["reviewer"]["provider"] == "other"
    done = home / "done" / "s1.md"
    assert done.read_text() == before  # the story keeps its own fields


def test_a_dry_run_shows_and_sends_nothing_of_the_storys_models(
    scripted, make_home, write_story, capsys: pytest.CaptureFixture[str]
) -> None:
    other = scripted(policy(good_worker()))
    model = scripted(policy(good_worker()))
    home = make_home(model)
    add_provider(home, "other", other.base_url)
    story = write_story(home, "s1", verify=["true"], model="from-the-story")

    assert run_hero(home, story, "--dry-run", "--json", "--model", "reviewer=other:judge") == 0

    plan = json.loads(capsys.readouterr().out)
    assert not model.requests and not other.requests
    assert plan["request"]["body"]["model"] == "from-the-story"
    roles = {name: (r["provider"], r["model"]) for name, r in plan["roles"].items()}
    assert roles == {"worker": ("scripted", "from-the-story"), "reviewer": ("other", "judge")}


def test_bad_models_on_hero_run_are_usage_errors(
    scripted, make_home, write_story, capsys: pytest.CaptureFixture[str]
) -> None:
    model = scripted([])
    home = make_home(model)
    add_provider(home, "keyed", model.base_url, "api_key_env: KEYED_TEST_KEY_UNSET")
    story = write_story(home, "s1", verify=["true"])

    assert run_hero(home, story, "--model", "reviewer=") == 2
    assert "--model 'reviewer='" in capsys.readouterr().err
    assert run_hero(home, story, "--model", "keyed:m") == 2
    assert "--model (the worker): names provider 'keyed'" in capsys.readouterr().err

    bad = write_story(home, "s2", verify=["true"], model={"reviewer": "keyed:m"})
    assert run_hero(home, bad) == 2
    err = capsys.readouterr().err
    assert f"{bad}: model.reviewer: names provider 'keyed'" in err
    assert not model.requests  # nothing was sent
    assert not (home / "runs" / "state" / "s2.json").exists()


# --------------------------------------------------------------------------- hero watch


def requests_of(model: ScriptedModel, sid: str) -> list[dict[str, Any]]:
    return [r.body for r in model.requests if story_of(r.body) == sid]


@pytest.mark.slow
def test_watch_runs_a_story_on_its_model_and_a_down_provider_holds_back_only_its_stories(
    scripted, make_home, write_story, procs: Procs
) -> None:
    model = scripted(Policy())
    home = make_home(model, **FAST)
    # a provider nothing listens on: its stories pause, its breaker opens
    add_provider(home, "down", f"http://127.0.0.1:{free_port()}/v1")
    write_story(home, "bad", model="3 words here")  # refused like any invalid story
    daemon = procs.start(home)
    daemon.wait_event("watching")
    daemon.wait_event("rejected", file="bad.md")

    write_story(home, "away", verify=["true"], model={"worker": "down:m"})
    daemon.wait_event("paused", story="away")
    daemon.wait_event("provider unavailable", provider="down")
    # while `down` is open, stories on the home's provider still start and pass
    write_story(home, "s1", verify=["test -f s1-r1.txt"], model="chosen", reasoning_effort="low")
    write_story(home, "s2", verify=["test -f s2-r1.txt"])
    for sid in ("s1", "s2"):
        assert daemon.wait_event("finished", story=sid)["status"] == "passed"
    assert models_of(requests_of(model, "s1")) == {("chosen", "low")}  # worker and reviewer
    assert models_of(requests_of(model, "s2")) == {("scripted-test", None)}
    assert not requests_of(model, "away")  # never sent to the home's provider

    # `away` paused on `down` (its probes since then pause it again, or run it as one)
    assert {e["provider"] for e in daemon.events("paused", story="away")} == {"down"}
    away = json.loads((home / "runs" / "state" / "away.json").read_text())
    assert away["status"] in ("interrupted", "running") and not away["rounds"]
    assert (home / "inbox" / "away.md").exists()  # back in the queue, waiting for `down`
    assert "3 words here" in (home / "runs" / "rejected" / "bad.md.error.txt").read_text()
    breakers = read_breakers(breakers_path(home))
    assert breakers["down"].state != CLOSED
    assert "scripted" not in breakers or breakers["scripted"].state == CLOSED
    assert daemon.proc.poll() is None


@pytest.mark.slow
def test_watch_records_the_models_a_story_used(
    scripted, make_home, write_story, procs: Procs
) -> None:
    gate = threading.Event()
    model = scripted(Policy(gates={"s1": gate}))
    home = make_home(model)
    daemon = procs.start(home)
    write_story(home, "s1", verify=["test -f s1-r1.txt"], model={"reviewer": "judge"})
    assert wait_for(lambda: model.requests, ALL_DONE_S)
    state = json.loads((home / "runs" / "state" / "s1.json").read_text())
    assert state["models"]["reviewer"]["model"] == "judge"  # recorded when the run started
    assert state["models"]["worker"]["model"] == "scripted-test"
    gate.set()
    assert daemon.wait_event("finished", story="s1")["status"] == "passed"
    assert {r.body["model"] for r in model.requests if is_review(r.body)} == {"judge"}


# --------------------------------------------------------------------------- celery


@pytest.mark.slow
def test_on_the_celery_engine_the_worker_machine_runs_the_storys_model(
    cluster: Cluster, scripted, write_story
) -> None:
    """The worker machine reads the story file the coordinator sent, and its model: field
    with it (a `hero run --model` override never goes there: `hero run` runs locally)."""
    model = scripted(EnginePolicy())
    home = cluster.home(model)
    backlog(write_story(home, "s1", verify=["test -f s1-r1.txt"], model={"worker": "far"}))
    cluster.start_worker()
    coordinator = cluster.start_coordinator("--exit-when-idle")
    assert coordinator.wait_exit() == 0, cluster.outputs()

    state = coordinator.state("s1")
    assert state is not None and state["status"] == "passed", state
    assert state["models"]["worker"]["model"] == "far"
    assert state["models"]["reviewer"]["model"] == "scripted-test"
    assert {r.body["model"] for r in model.requests if not is_review(r.body)} == {"far"}
    assert {r.body["model"] for r in model.requests if is_review(r.body)} == {"scripted-test"}
