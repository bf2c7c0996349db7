"""The Celery engine's settings (stories run on other machines): engine, broker_url, state_url, target_remote,
lease_s, engine_queue, broker_visibility_timeout_s; where a broker password may live."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from hero.config.loader import load_config
from hero.config.schema import ConfigError
from hero.config.sections import EngineSettings
from hero.redact import Redactor

PROVIDER = "name: local\nbase_url: http://127.0.0.1:11434/v1\ndefault_model: m\n"
ROLES = "worker:\n  provider: local\nreviewer:\n  provider: local\n"
CELERY = "engine: celery\nbroker_url: redis://10.0.0.1:6379/0\ntarget_remote: /srv/app.git\n"
KEY = "k3y-" + "7" * 60
KEY_LINE = f"engine_key: {KEY}\n"


def make_home(
    tmp_path: Path, roles: str, *, repo: bool = True, local: str = "", key: bool = True
) -> Path:
    """A home with ``roles``, and config.local.yaml holding ``local`` (and, with ``key``,
    an engine key)."""
    home = tmp_path / "home"
    (home / "config" / "providers").mkdir(parents=True)
    if repo:
        subprocess.run(["git", "init", "-q", str(home / "repo")], check=True)
        roles += "target_repo: repo\n"
    (home / "config" / "roles.yaml").write_text(ROLES + roles, encoding="utf-8")
    (home / "config" / "providers" / "local.yaml").write_text(PROVIDER, encoding="utf-8")
    local += KEY_LINE if key else ""
    if local:
        (home / "config.local.yaml").write_text(local, encoding="utf-8")
    return home


def error_of(home: Path, env: dict[str, str] | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_config(home, env=env or {})
    return info.value


def test_the_local_engine_is_the_default(tmp_path: Path) -> None:
    config = load_config(make_home(tmp_path, "", key=False), env={})
    assert config.engine == EngineSettings()
    assert not config.engine.remote


def test_every_engine_setting_is_read(tmp_path: Path) -> None:
    home = make_home(
        tmp_path,
        CELERY + "lease_s: 12\nengine_queue: team-a\nbroker_visibility_timeout_s: 600\n",
    )
    engine = load_config(home, env={}).engine
    assert engine.remote and engine.kind == "celery"
    assert engine.broker_url == "redis://10.0.0.1:6379/0"
    assert engine.state_url == engine.broker_url  # a Redis broker holds hero's keys too
    assert engine.target_remote == "/srv/app.git"
    assert (engine.lease_s, engine.queue, engine.visibility_timeout_s) == (12, "team-a", 600)


def test_a_password_in_roles_yaml_is_refused_without_being_echoed(tmp_path: Path) -> None:
    home = make_home(
        tmp_path,
        "engine: celery\nbroker_url: redis://:s3cret-pw@10.0.0.1:6379/0\n"
        "target_remote: /srv/app.git\n",
    )
    error = error_of(home)
    assert error.key == "broker_url" and "config.local.yaml" in str(error)
    assert "s3cret-pw" not in str(error)


def test_the_password_comes_from_config_local_or_the_environment_and_is_a_secret(
    tmp_path: Path,
) -> None:
    home = make_home(tmp_path, CELERY, local="broker_url: redis://:from-local-file@10.0.0.1/0\n")
    config = load_config(home, env={})
    assert config.engine.broker_url == "redis://:from-local-file@10.0.0.1/0"
    assert "from-local-file" in config.secrets
    assert "from-local-file" not in repr(config.engine)  # never printed with the settings
    env = {"HERO_BROKER_URL": "redis://:from-env@10.0.0.2/1"}
    config = load_config(home, env=env)
    assert config.engine.broker_url == "redis://:from-env@10.0.0.2/1"  # the environment wins
    said = Redactor(config.secrets).redact(f"connecting to {config.engine.broker_url}")
    assert "from-env" not in said


def test_a_broker_that_is_not_redis_needs_a_state_url(tmp_path: Path) -> None:
    home = make_home(
        tmp_path, "engine: celery\nbroker_url: amqp://mq:5672//\ntarget_remote: /srv/app.git\n"
    )
    assert error_of(home).key == "state_url"
    config = load_config(home, env={"HERO_STATE_URL": "redis://10.0.0.3:6379/2"})
    assert config.engine.broker_url == "amqp://mq:5672//"
    assert config.engine.state_url == "redis://10.0.0.3:6379/2"


@pytest.mark.parametrize(
    ("roles", "key", "fragment"),
    [
        ("engine: kubernetes\n", "engine", "expected one of local, celery"),
        ("engine: celery\ntarget_remote: /srv/app.git\n", "broker_url", "required"),
        ("engine: celery\nbroker_url: redis://h:6379/0\n", "target_remote", "required"),
        (CELERY + "engine_queue: 'a b'\n", "engine_queue", "expected letters"),
        (CELERY + "lease_s: 0\n", "lease_s", ""),
        ("broker_url: not a url\n", "broker_url", "expected a URL"),
    ],
)
def test_bad_engine_settings_name_the_key(
    tmp_path: Path, roles: str, key: str, fragment: str
) -> None:
    error = error_of(make_home(tmp_path, roles))
    assert error.key == key
    assert fragment in str(error)


def test_a_worker_home_needs_no_target_repo_but_a_coordinator_does(tmp_path: Path) -> None:
    home = make_home(tmp_path, CELERY, repo=False)
    config = load_config(home, env={})
    assert config.target_repo == home / "worker" / "repo"  # the worker's clone stands in
    from hero.cli import main

    # `hero watch` needs a repository
    assert main(["watch", "--home", str(home), "--exit-when-idle"]) == 2


def test_without_the_celery_extra_the_commands_say_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A plain `pip install hero` has no Celery: `hero worker`, `hero watch` and
    `hero run-plan` with engine: celery say so and how to fix it, not a traceback."""
    import importlib.util

    from hero.cli import main

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name in ("celery", "redis") else real(name, *a),
    )
    home = make_home(tmp_path, CELERY)
    for argv in (["worker"], ["watch", "--exit-when-idle"], ["run-plan", "p"]):
        assert main([*argv, "--home", str(home)]) == 2
        err = capsys.readouterr().err
        assert "needs celery and redis" in err and "pip install" in err, argv


@pytest.mark.parametrize(
    ("url", "secret"),
    [
        ("https://hero:tok-in-password-1@git.example/app.git", "tok-in-password-1"),
        ("https://ghp_tokenAsTheUser123@github.com/o/app.git", "ghp_tokenAsTheUser123"),
    ],
)
def test_a_credential_in_target_remote_is_a_secret(tmp_path: Path, url: str, secret: str) -> None:
    home = make_home(
        tmp_path, f"engine: celery\nbroker_url: redis://h:6379/0\ntarget_remote: {url}\n"
    )
    config = load_config(home, env={})
    assert secret in config.secrets
    assert secret not in repr(config)
    assert "git" not in config.secrets  # ssh's user names are no secrets


# --------------------------------------------------------------------------- engine_key


def test_engine_celery_needs_an_engine_key_and_says_how_to_make_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without engine_key, neither the coordinator nor a worker starts: the error names the
    setting, where it goes and how to make one."""
    from hero.cli import main

    home = make_home(tmp_path, CELERY, key=False)
    error = error_of(home)
    assert (error.file, error.key) == ("config.local.yaml", "engine_key")
    assert "secrets.token_hex(32)" in error.message and "HERO_ENGINE_KEY" in error.message
    for argv in (["worker"], ["watch", "--exit-when-idle"]):
        assert main([*argv, "--home", str(home)]) == 2, argv
        err = capsys.readouterr().err
        assert "configuration error" in err and "engine_key" in err, err
        assert "token_hex" in err, err


@pytest.mark.parametrize(
    ("roles", "local", "env", "file"),
    [
        (f"engine_key: {KEY}\n", "", {}, "config/roles.yaml"),  # a secret in roles.yaml
        ("", "engine_key: short-key-1234\n", {}, "config.local.yaml"),  # too short to be one
        ("", "", {"HERO_ENGINE_KEY": "short-key-5678"}, "config.local.yaml"),
        ("", "engine_key: 12345\n", {}, "config.local.yaml"),  # not a string
    ],
)
def test_a_bad_engine_key_is_refused_without_being_echoed(
    tmp_path: Path, roles: str, local: str, env: dict[str, str], file: str
) -> None:
    home = make_home(tmp_path, CELERY + roles, local=local, key=False)
    error = error_of(home, env)
    assert (error.file, error.key) == (file, "engine_key"), str(error)
    for value in (KEY, "short-key-1234", "short-key-5678"):
        assert value not in str(error)


def test_the_engine_key_is_a_secret_and_never_in_a_commands_environment(
    tmp_path: Path,
) -> None:
    from hero.runner import child_env

    home = make_home(tmp_path, CELERY)
    config = load_config(home, env={})
    assert config.engine.key == KEY and KEY in config.secrets
    assert KEY not in repr(config)
    from_env = "env-engine-key-" + "3" * 40
    config = load_config(home, env={"HERO_ENGINE_KEY": f" {from_env} "})  # the env wins
    assert config.engine.key == from_env and from_env in config.secrets
    env = child_env(
        {"HERO_ENGINE_KEY": from_env, "MY_CI": f"key={from_env};", "LANG": "C.UTF-8"},
        allow=["MY_CI", "HERO_ENGINE_KEY"],
        secret_values=config.secrets,
    )
    assert env["LANG"] == "C.UTF-8"
    assert "HERO_ENGINE_KEY" not in env and "MY_CI" not in env
    assert all(from_env not in value for value in env.values())
    said = Redactor(config.secrets).redact(f"a task signed with {from_env}")
    assert from_env not in said


def test_a_rediss_url_that_turns_the_certificate_check_off_is_refused(tmp_path: Path) -> None:
    unchecked = "rediss://10.0.0.1:6380/0?ssl_cert_reqs=none"
    home = make_home(tmp_path, CELERY, local=f"broker_url: '{unchecked}'\n")
    error = error_of(home)
    assert error.key == "broker_url" and "ssl_ca_certs" in error.message
    checked = "rediss://10.0.0.1:6380/0?ssl_ca_certs=/etc/hero/redis-ca.pem"
    home = make_home(tmp_path / "2", CELERY, local=f"broker_url: '{checked}'\n")
    assert load_config(home, env={}).engine.state_url == checked


def test_celerys_keys_are_under_heros_prefix_and_a_bare_rediss_url_is_checked() -> None:
    """What lets a Redis ACL user limited to ``~<engine_queue>:*`` run hero (see
    test_engine_trust for the real thing)."""
    import ssl

    from hero.engine.app import make_app

    engine = EngineSettings(kind="celery", broker_url="redis://h:6379/0", queue="team-a")
    conf = make_app(engine).conf
    assert conf.broker_transport_options["global_keyprefix"] == "team-a:kombu:"
    assert not conf.result_backend and conf.task_ignore_result
    assert conf.worker_enable_remote_control is False
    tls = make_app(EngineSettings(kind="celery", broker_url="rediss://h:6380/0")).conf
    assert tls.broker_use_ssl == {"ssl_cert_reqs": ssl.CERT_REQUIRED}
