"""A story's models: the worker's and the reviewer's RoleConfig once the story's ``model:``
and ``reasoning_effort:`` fields, or `hero run --model` / `--reasoning-effort`, are applied.

One resolver (:func:`story_config`) serves every place a story's clients are made: `hero run`
(hero.run.launch), `hero watch` (its dispatcher checks a story when it queues it, and builds its
clients and breakers from it), and `hero worker` (engine: celery, from the story file).

The rule for a model string: ``<provider>:<model>`` when the part before the first ':' is
the name of a provider file in config/providers/ (``openai:`` alone: that provider's
default_model); any other string is a model on the role's own provider, so an Ollama name
like ``qwen2.5:7b`` is a model name. A model on another provider brings that provider's key
and its default_reasoning_effort (unless a reasoning effort is given too). The reasoning
effort ``none`` is not sent at all.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from hero.config.home import Config, context_limits
from hero.config.keys import provider_key
from hero.config.providers import RoleConfig
from hero.config.schema import ConfigError
from hero.config.tools import configured_servers, narrow, role_patterns
from hero.errors import UsageError
from hero.story.fields import effort_problem, model_problem, role_value
from hero.story.record import EFFORT_NOT_SENT, MODEL_ROLES, Story, StoryError

#: Who chose a role's model, as RoleConfig.chosen_by says it.
BY_STORY = "story field"
BY_OPTION = "--"


class OverrideError(UsageError):
    """A `hero run --model` / `--reasoning-effort` value that cannot be used."""


@dataclass(frozen=True)
class Override:
    """`hero run --model` / `--reasoning-effort` for one run: role -> value. Not written to
    the story; wins over its fields."""

    model: Mapping[str, str] = field(default_factory=dict)
    reasoning_effort: Mapping[str, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.model or self.reasoning_effort)


def parse_override(models: Sequence[str] = (), efforts: Sequence[str] = ()) -> Override:
    """The override `hero run` was given: each value ``VALUE`` (both roles) or
    ``worker=VALUE`` / ``reviewer=VALUE``; a later one wins. OverrideError naming the
    option and the value."""
    return Override(
        _per_role(models, "--model", model_problem),
        _per_role(efforts, "--reasoning-effort", effort_problem),
    )


def _per_role(
    values: Sequence[str], option: str, check: Callable[[str], str | None]
) -> dict[str, str]:
    out: dict[str, str] = {}
    for given in values:
        roles: Iterable[str] = MODEL_ROLES
        text = given
        head, sep, rest = given.partition("=")
        if sep and head.strip() in MODEL_ROLES:
            roles, text = (head.strip(),), rest
        text = text.strip()
        problem = "expected a value; found an empty string" if not text else check(text)
        if problem:
            raise OverrideError(
                f"{option} {given!r}: {problem} (give VALUE for both roles, or "
                f"worker=VALUE / reviewer=VALUE)"
            )
        for role in roles:
            out[role] = text
    return out


def story_config(config: Config, story: Story, override: Override | None = None) -> Config:
    """``config`` with the story's roles (:func:`roles_for`); ``config`` itself when the
    story and the override choose nothing."""
    roles = roles_for(config, story, override)
    if all(roles[name] is config.roles[name] for name in roles):
        return config
    resolved = replace(config, roles={**config.roles, **roles})
    for name, role in roles.items():
        if role is config.roles[name]:
            continue
        try:  # a window the answer's cap leaves no room in fails now, not mid-round
            context_limits(resolved, name)
        except ConfigError as exc:
            message = f"on provider '{role.provider.name}': {exc}"
            raise _error(story, role.chosen_by, name, message) from None
    return resolved


def roles_for(
    config: Config, story: Story, override: Override | None = None
) -> dict[str, RoleConfig]:
    """The worker's and the reviewer's RoleConfig (those loaded) for ``story``: the
    override's values first, then the story's fields, then config/roles.yaml's. A role
    nothing changes is config's own object. StoryError naming the story file and the field
    (OverrideError naming the option) when a named provider's key is missing."""
    override = override or Override()
    out: dict[str, RoleConfig] = {}
    for name in MODEL_ROLES:
        base = config.roles.get(name)
        if base is None:
            continue
        model, model_by = _pick(override.model, story.model, name, "model")
        effort, effort_by = _pick(
            override.reasoning_effort, story.reasoning_effort, name, "reasoning_effort"
        )
        role = _narrowed(config, story, base)
        if model is None and effort is None:
            out[name] = role
            continue
        if model is not None:
            role = _with_model(config, story, role, model, model_by)
        if effort is not None:
            role = replace(role, reasoning_effort=None if effort == EFFORT_NOT_SENT else effort)
        out[name] = replace(role, chosen_by=model_by or effort_by)
    return out


def _narrowed(config: Config, story: Story, base: RoleConfig) -> RoleConfig:
    """``base`` with the story's ``tools:`` for it (narrowing only: StoryError naming the
    field and the tool the role does not have); ``base`` itself when the story names none."""
    wanted = (story.tools or {}).get(base.role)
    if wanted is None:
        return base
    has = role_patterns(base.tools, base.role, configured_servers(config))
    problem = narrow(base.role, has, wanted)
    if problem:
        raise StoryError(story.path, f"tools.{base.role}", problem)
    return replace(base, tools=tuple(wanted))


def _pick(
    option: Mapping[str, str], field_value: str | Mapping[str, str] | None, role: str, key: str
) -> tuple[str | None, str]:
    """A role's value and who chose it ("" when neither did)."""
    if role in option:
        return option[role], f"{BY_OPTION}{key.replace('_', '-')}"
    value = role_value(field_value, role)
    return (value, f"{BY_STORY} {key}") if value is not None else (None, "")


def _with_model(config: Config, story: Story, base: RoleConfig, text: str, by: str) -> RoleConfig:
    prefix, sep, rest = text.partition(":")
    provider = config.providers.get(prefix) if sep else None
    if provider is None:  # not a provider's name: the whole of it is a model name
        return replace(base, model=text)
    model = rest.strip() or provider.default_model
    if provider.name == base.provider.name:
        return replace(base, model=model)
    try:
        key, source = provider_key(config, provider)
    except ConfigError as exc:
        raise _error(story, by, base.role, f"names provider '{provider.name}': {exc}") from None
    return replace(
        base,
        provider=provider,
        model=model,
        reasoning_effort=provider.default_reasoning_effort,
        api_key=key,
        key_source=source,
    )


def _error(story: Story, by: str, role: str, message: str) -> UsageError:
    if by.startswith(BY_OPTION):
        return OverrideError(f"{by} (the {role}): {message}")
    field_name = by.removeprefix(f"{BY_STORY} ")
    where = field_name if isinstance(getattr(story, field_name), str) else f"{field_name}.{role}"
    return StoryError(story.path, where, message)


def providers_of(config: Config) -> tuple[str, ...]:
    """The providers the story roles of ``config`` use, sorted: what a story's breakers are."""
    return tuple(sorted({config.roles[n].provider.name for n in MODEL_ROLES if n in config.roles}))


def models_record(config: Config) -> dict[str, dict[str, str | None]]:
    """What the run record keeps of the models a run uses (RunState.models):
    ``{role: {provider, model, reasoning_effort}}``."""
    return {
        name: {
            "provider": role.provider.name,
            "model": role.model,
            "reasoning_effort": role.reasoning_effort,
        }
        for name in MODEL_ROLES
        if (role := config.roles.get(name)) is not None
    }


def override_of(args: argparse.Namespace) -> Override:
    """The override `hero run`'s --model and --reasoning-effort give
    (hero.commands.model_options; empty when none was given)."""
    return parse_override(getattr(args, "model", ()), getattr(args, "reasoning_effort", ()))
