"""Settings of ``config/roles.yaml`` applied over a home's for one use: a `hero bench`
configuration's overrides, on the bench's machine and, with the Celery engine, on the
``hero worker`` that runs the task-run (hero.engine.checkout). One merge, one validation,
both places.

The overrides are the keys of ``config/roles.yaml``, deep-merged over the home's (mappings
key by key, anything else replaced), written as the ``config/roles.yaml`` of a home of
their own whose other ``config/`` entries (providers, ``config.local.yaml``) are links to
the home's, and loaded as any home is: an unknown key, or a value hero refuses, is a
UsageError naming where the overrides came from and the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hero.config.home import Config
from hero.errors import UsageError


def deep_merge(base: Mapping[Any, Any], over: Mapping[Any, Any]) -> dict[Any, Any]:
    """``over`` over ``base``: mappings merged key by key, anything else replaced."""
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def check_overrides(over: object, where: str) -> dict[str, Any]:
    """``over`` as overrides: a mapping of keys of config/roles.yaml (None: none);
    UsageError naming ``where`` and the key otherwise."""
    from hero.config.home import ROLES_FILE_KEYS
    from hero.yamlio import did_you_mean

    over = {} if over is None else over
    if not isinstance(over, dict):
        raise UsageError(f"{where}: expected a mapping of settings of config/roles.yaml")
    for key in over:
        if key not in ROLES_FILE_KEYS:
            raise UsageError(
                f"{where}: {key}: unknown setting{did_you_mean(str(key), ROLES_FILE_KEYS)} "
                "(the keys of config/roles.yaml)"
            )
    return over


def merged_roles(home: Path, over: Mapping[str, Any]) -> dict[str, Any]:
    """The home's config/roles.yaml with ``over`` merged into it."""
    import yaml

    from hero.config.schema import ROLES_FILE

    mine = yaml.safe_load((home / ROLES_FILE).read_text(encoding="utf-8")) or {}
    return deep_merge(mine, over)


def derived_home(
    home: Path, merged: Mapping[str, Any], derived: Path, where: str, *, worker: bool = False
) -> Config:
    """``derived`` made a home whose config/roles.yaml is ``merged`` and whose other config
    entries link to ``home``'s, loaded (``worker``: as a ``hero worker``'s home, whose
    ``target_repo`` is not read); UsageError naming ``where`` and the key for a value hero
    refuses."""
    import yaml

    from hero.config.loader import load_config
    from hero.config.schema import ROLES_FILE, ConfigError
    from hero.fsio import atomic_write

    (derived / "config").mkdir(parents=True, exist_ok=True)
    for entry in (home / "config").iterdir():
        if entry.name == Path(ROLES_FILE).name:
            continue
        link = derived / "config" / entry.name
        if not link.is_symlink():
            link.symlink_to(entry.resolve())
    local = "config.local.yaml"
    if (home / local).exists() and not (derived / local).is_symlink():
        (derived / local).symlink_to((home / local).resolve())
    atomic_write(derived / ROLES_FILE, yaml.safe_dump(dict(merged), sort_keys=False).encode())
    try:
        return load_config(derived, worker=worker)
    except ConfigError as exc:
        raise UsageError(f"{where} (over {home / ROLES_FILE}): {exc.key}: {exc.message}") from None
