from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hero.config.home import Config
from hero.config.keys import is_placeholder
from hero.config.loader import load_config, resolve_home
from hero.config.providers import Provider, RoleConfig
from hero.config.schema import MAX_CONFIG_BYTES, ConfigError
from hero.config.sections import LlmSettings, WorkerLimits

SECRET = "sk-test-SECRET-0123456789abcdefXYZ"
ENV_SECRET = "env-secret-value-9876543210zyxw"

OPENAI = """\
name: openai
base_url: https://api.openai.com/v1/
default_model: gpt-5-mini
default_reasoning_effort: medium
api_key_env: HERO_TEST_OPENAI_KEY
insecure_tls: false
headers:
  X-Team: platform
input_usd_per_mtok: 0.25
output_usd_per_mtok: 2
"""

LOCAL = """\
name: local
base_url: http://127.0.0.1:11434/v1
default_model: qwen2.5-coder:14b
"""

ROLES = """\
worker:
  provider: openai
  model: gpt-5
  reasoning_effort: high
reviewer:
  provider: local
target_repo: repo
"""


def git_repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    return path


def make_home(
    tmp_path: Path,
    roles: str = ROLES,
    providers: dict[str, str] | None = None,
    local: str | None = None,
) -> Path:
    home = tmp_path / "home"
    (home / "config" / "providers").mkdir(parents=True)
    git_repo(home / "repo")
    (home / "config" / "roles.yaml").write_text(roles, encoding="utf-8")
    if providers is None:
        providers = {"openai": OPENAI, "local": LOCAL}
    for name, text in providers.items():
        (home / "config" / "providers" / f"{name}.yaml").write_text(text, encoding="utf-8")
    if local is not None:
        (home / "config.local.yaml").write_text(local, encoding="utf-8")
    return home


def config_error(home: Path, roles: tuple[str, ...] = ("worker", "reviewer"), **kw) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_config(home, roles, **kw)
    err = info.value
    assert str(err) == f"{err.file}: {err.key}: {err.message}"
    assert "\n" not in str(err)
    return err


KEY_ENV = {"HERO_TEST_OPENAI_KEY": ENV_SECRET}


# ----------------------------------------------------------------------------- valid homes


def test_full_valid_home(tmp_path: Path) -> None:
    roles = ROLES + (
        "planner:\n  provider: openai\n"
        "target_base_ref: develop\n"
        "max_retries: 5\n"
        "max_parallel: 3\n"
        "verify_timeout_ms: 5000\n"
        "default_verify: [ruff check ., pytest -q]\n"
        "worker_max_turns: 10\n"
        "worker_max_tool_calls: 20\n"
        "worker_max_wall_s: 30.5\n"
        "bash_timeout_s: 40\n"
        "loop_repeats: 3\n"
        "llm_timeout_s: 50\n"
        "llm_max_attempts: 2\n"
        "llm_backoff_base_s: 0\n"
        "llm_backoff_max_s: 1.5\n"
        "llm_retry_after_max_s: 7.5\n"
    )
    home = make_home(tmp_path, roles=roles)
    cfg = load_config(home, ("worker", "reviewer", "planner"), env=KEY_ENV)
    assert isinstance(cfg, Config)
    assert cfg.home == home.resolve()
    assert cfg.target_repo == (home / "repo").resolve()
    assert cfg.target_base_ref == "develop"
    assert cfg.max_retries == 5
    assert cfg.max_parallel == 3
    assert cfg.verify_timeout_ms == 5000
    assert cfg.default_verify == ("ruff check .", "pytest -q")
    assert cfg.worker_limits == WorkerLimits(10, 20, 30.5, 40.0, 3)
    assert cfg.llm == LlmSettings(50.0, 2, 0.0, 1.5, 7.5)
    assert isinstance(cfg.worker_limits.bash_timeout_s, float)

    openai = Provider(
        name="openai",
        base_url="https://api.openai.com/v1",
        default_model="gpt-5-mini",
        default_reasoning_effort="medium",
        api_key_env="HERO_TEST_OPENAI_KEY",
        insecure_tls=False,
        headers={"X-Team": "platform"},
        input_usd_per_mtok=0.25,
        output_usd_per_mtok=2.0,
    )
    source = "$HERO_TEST_OPENAI_KEY"
    assert cfg.role("worker") == RoleConfig(
        "worker", openai, "gpt-5", "high", ENV_SECRET, key_source=source
    )
    assert cfg.role("planner") == RoleConfig(
        "planner", openai, "gpt-5-mini", "medium", ENV_SECRET, key_source=source
    )
    reviewer = cfg.role("reviewer")
    assert reviewer.provider.name == "local"
    assert reviewer.model == "qwen2.5-coder:14b"
    assert reviewer.reasoning_effort is None
    assert reviewer.api_key is None
    assert reviewer.key_source == ""
    assert set(cfg.roles) == {"worker", "reviewer", "planner"}
    assert cfg.secrets == (ENV_SECRET,)
    assert cfg.key_env_names == ("HERO_TEST_OPENAI_KEY",)
    assert ENV_SECRET not in repr(cfg)


def test_defaults(tmp_path: Path) -> None:
    home = make_home(tmp_path, roles="reviewer:\n  provider: local\ntarget_repo: repo\n")
    cfg = load_config(home, ("reviewer",), env={})
    assert cfg.target_base_ref is None
    assert cfg.max_retries == 3
    assert cfg.max_parallel == 2
    assert cfg.verify_timeout_ms == 120_000
    assert cfg.default_verify == ()
    assert cfg.worker_limits == WorkerLimits()
    assert cfg.llm == LlmSettings()
    assert cfg.llm.retry_after_max_s == 120.0
    assert cfg.secrets == ()


def test_keyless_provider(tmp_path: Path) -> None:
    home = make_home(tmp_path, roles="worker:\n  provider: local\ntarget_repo: repo\n")
    cfg = load_config(home, ("worker",), env={})
    assert cfg.role("worker").api_key is None
    assert cfg.role("worker").provider.api_key_env is None


def test_key_from_local_file_wins_over_env(tmp_path: Path) -> None:
    home = make_home(tmp_path, local=f"keys:\n  openai: {SECRET}\n")
    cfg = load_config(home, env=KEY_ENV)
    assert cfg.role("worker").api_key == SECRET
    assert SECRET in cfg.secrets
    assert ENV_SECRET in cfg.secrets  # every known key is listed for redaction
    assert SECRET not in repr(cfg)
    assert SECRET not in repr(cfg.role("worker"))


def test_key_from_local_file_without_env(tmp_path: Path) -> None:
    home = make_home(tmp_path, local=f"keys:\n  openai: '{SECRET}'\n  local:\n")
    cfg = load_config(home, env={})
    assert cfg.role("worker").api_key == SECRET
    assert cfg.secrets == (SECRET,)


def test_key_from_env(tmp_path: Path) -> None:
    cfg = load_config(make_home(tmp_path), env=KEY_ENV)
    assert cfg.role("worker").api_key == ENV_SECRET


def test_key_from_os_environ_by_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HERO_TEST_OPENAI_KEY", ENV_SECRET)
    cfg = load_config(make_home(tmp_path))
    assert cfg.role("worker").api_key == ENV_SECRET


def test_missing_env_key_names_provider_file_and_api_key_env(tmp_path: Path) -> None:
    err = config_error(make_home(tmp_path), env={"HERO_TEST_OPENAI_KEY": ""})
    assert err.file == "config/providers/openai.yaml"
    assert err.key == "api_key_env"
    assert "HERO_TEST_OPENAI_KEY is not set" in err.message
    assert "config.local.yaml has no keys.openai" in err.message


@pytest.mark.parametrize(
    "placeholder",
    ["sk-your-key-here", "<your key>", "your-api-key", "changeme", "sk-...", "sk-xxxxxxxx"],
)
def test_env_key_wins_over_a_placeholder_in_the_local_file(
    tmp_path: Path, placeholder: str
) -> None:
    """A value copied from an example is no key: the variable's key is used, and the
    notice says so once, without the value."""
    home = make_home(tmp_path, local=f"keys:\n  openai: '{placeholder}'\n")
    cfg = load_config(home, env=KEY_ENV)
    assert cfg.role("worker").api_key == ENV_SECRET
    assert cfg.role("worker").key_source == "$HERO_TEST_OPENAI_KEY"
    assert len(cfg.notices) == 1  # said once, however many roles use the provider
    assert "keys.openai: holds a placeholder, not a key; ignored" in cfg.notices[0]
    assert placeholder not in cfg.notices[0]
    assert placeholder not in cfg.secrets


def test_placeholder_without_env_key_says_the_file_holds_only_a_placeholder(
    tmp_path: Path,
) -> None:
    home = make_home(tmp_path, local="keys:\n  openai: sk-your-key-here\n")
    err = config_error(home, env={})
    assert err.key == "api_key_env"
    assert "HERO_TEST_OPENAI_KEY is not set" in err.message
    assert "config.local.yaml holds only a placeholder in keys.openai" in err.message


def test_a_real_key_in_the_local_file_still_wins_and_its_source_is_named(
    tmp_path: Path,
) -> None:
    home = make_home(tmp_path, local=f"keys:\n  openai: {SECRET}\n")
    cfg = load_config(home, env=KEY_ENV)
    assert cfg.role("worker").key_source == "config.local.yaml: keys.openai"
    assert cfg.notices == ()


def test_placeholder_github_token_and_engine_key_are_unset(tmp_path: Path) -> None:
    home = make_home(
        tmp_path,
        local="github_token: ghp_your-token-here\nengine_key: your-64-hex-characters-here\n",
    )
    cfg = load_config(home, env=KEY_ENV)
    assert cfg.github_token is None
    assert cfg.engine.key == ""
    assert [n.split(":")[1].strip() for n in cfg.notices] == ["github_token", "engine_key"]
    cfg = load_config(home, env={**KEY_ENV, "GITHUB_TOKEN": "ghp_real0123456789"})
    assert cfg.github_token == "ghp_real0123456789"


def test_keys_that_are_not_placeholders() -> None:
    for real in (SECRET, ENV_SECRET, "sk-proj-aK8s_3jdk-2kdjQ", "ghp_0123456789abcdefABCDEF"):
        assert not is_placeholder(real), real


def test_missing_key_only_matters_for_requested_roles(tmp_path: Path) -> None:
    cfg = load_config(make_home(tmp_path), ("reviewer",), env={})
    assert set(cfg.roles) == {"reviewer"}


def test_missing_role_block_errors_only_when_requested(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    cfg = load_config(home, ("worker", "reviewer"), env=KEY_ENV)
    err = config_error(home, ("worker", "planner"), env=KEY_ENV)
    assert err.file == "config/roles.yaml"
    assert err.key == "planner"
    assert "not configured" in err.message
    assert "planner: {provider:" in err.message
    with pytest.raises(ConfigError) as info:
        cfg.role("planner")
    assert info.value.file == "config/roles.yaml"
    assert info.value.key == "planner"


def test_null_role_block_is_not_configured(tmp_path: Path) -> None:
    home = make_home(tmp_path, roles="worker:\nreviewer:\n  provider: local\ntarget_repo: repo\n")
    err = config_error(home, ("worker",))
    assert (err.key, "not configured" in err.message) == ("worker", True)


def test_unknown_role_name_is_a_programming_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        load_config(make_home(tmp_path), ("boss",))


def test_reasoning_effort_precedence(tmp_path: Path) -> None:
    roles = (
        "worker:\n  provider: openai\n  reasoning_effort: low\n"
        "reviewer:\n  provider: openai\n"
        "planner:\n  provider: local\n"
        "target_repo: repo\n"
    )
    cfg = load_config(
        make_home(tmp_path, roles=roles), ("worker", "reviewer", "planner"), env=KEY_ENV
    )
    assert cfg.role("worker").reasoning_effort == "low"  # role
    assert cfg.role("reviewer").reasoning_effort == "medium"  # provider default
    assert cfg.role("planner").reasoning_effort is None  # neither


def test_model_falls_back_to_provider_default(tmp_path: Path) -> None:
    roles = "worker:\n  provider: openai\nreviewer:\n  provider: openai\n  model: o3\ntarget_repo: repo\n"
    cfg = load_config(make_home(tmp_path, roles=roles), env=KEY_ENV)
    assert cfg.role("worker").model == "gpt-5-mini"
    assert cfg.role("reviewer").model == "o3"


def test_absolute_target_repo(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "elsewhere")
    home = make_home(tmp_path, roles=f"worker:\n  provider: local\ntarget_repo: '{repo}'\n")
    assert load_config(home, ("worker",)).target_repo == repo.resolve()


def test_provider_without_name_uses_file_stem(tmp_path: Path) -> None:
    providers = {"local": LOCAL.replace("name: local\n", "")}
    home = make_home(
        tmp_path, roles="worker:\n  provider: local\ntarget_repo: repo\n", providers=providers
    )
    assert load_config(home, ("worker",)).role("worker").provider.name == "local"


# ----------------------------------------------------------------------------- errors


def test_provider_name_mismatch(tmp_path: Path) -> None:
    providers = {"openai": OPENAI, "local": LOCAL.replace("name: local", "name: ollama")}
    err = config_error(make_home(tmp_path, providers=providers), env=KEY_ENV)
    assert err.file == "config/providers/local.yaml"
    assert err.key == "name"
    assert "'local'" in err.message and "'ollama'" in err.message


def test_unknown_provider(tmp_path: Path) -> None:
    home = make_home(tmp_path, roles="worker:\n  provider: azure\ntarget_repo: repo\n")
    err = config_error(home, ("worker",))
    assert (err.file, err.key) == ("config/roles.yaml", "worker.provider")
    assert "config/providers/azure.yaml" in err.message
    assert "available providers: local, openai" in err.message


@pytest.mark.parametrize(
    ("roles", "key", "fragment"),
    [
        (ROLES + "max_retry: 3\n", "max_retry", "did you mean 'max_retries'"),
        (ROLES + "colour: blue\n", "colour", "known keys: worker, reviewer, planner"),
        (
            ROLES.replace("  reasoning_effort: high\n", "  effort: high\n"),
            "worker.effort",
            "unknown key",
        ),
        (
            ROLES.replace("  model: gpt-5\n", "  api_key: abc\n"),
            "worker.api_key",
            "config.local.yaml",
        ),
        (ROLES + "max_retries: 0\n", "max_retries", "the number 0"),
        (ROLES + "max_retries: true\n", "max_retries", "boolean true"),
        (ROLES + "max_parallel: '2'\n", "max_parallel", "the string '2'"),
        (ROLES + "max_parallel: 1.5\n", "max_parallel", "whole number >= 1"),
        (ROLES + "verify_timeout_ms: -5\n", "verify_timeout_ms", ">= 1"),
        (ROLES + "default_verify: {a: b}\n", "default_verify", "a mapping"),
        (ROLES + "default_verify: [ok, 3]\n", "default_verify", "item 2"),
        (ROLES + "worker_max_turns: 0\n", "worker_max_turns", "default 100"),
        (ROLES + "worker_max_tool_calls: x\n", "worker_max_tool_calls", "the string 'x'"),
        (ROLES + "worker_max_wall_s: 0\n", "worker_max_wall_s", "> 0"),
        (ROLES + "bash_timeout_s: [1]\n", "bash_timeout_s", "a list"),
        (ROLES + "loop_repeats: 1\n", "loop_repeats", ">= 2"),
        (ROLES + "llm_timeout_s: .nan\n", "llm_timeout_s", "> 0"),
        (ROLES + "llm_max_attempts: 0\n", "llm_max_attempts", ">= 1"),
        (ROLES + "llm_backoff_base_s: -1\n", "llm_backoff_base_s", ">= 0"),
        (
            ROLES + "llm_backoff_base_s: 10\nllm_backoff_max_s: 5\n",
            "llm_backoff_max_s",
            ">= llm_backoff_base_s",
        ),
        (ROLES + "llm_retry_after_max_s: 0\n", "llm_retry_after_max_s", "a number > 0"),
        (ROLES + "llm_retry_after_max_s: -5\n", "llm_retry_after_max_s", "default 120"),
        (ROLES + "llm_retry_after_max_s: soon\n", "llm_retry_after_max_s", "the string 'soon'"),
        (ROLES + "llm_retry_after_max_s: .inf\n", "llm_retry_after_max_s", "> 0"),
        (ROLES + "target_base_ref: 5\n", "target_base_ref", "the number 5"),
        (ROLES.replace("  model: gpt-5\n", "  model: 5\n"), "worker.model", "the number 5"),
        (
            ROLES.replace("  reasoning_effort: high\n", "  reasoning_effort: ''\n"),
            "worker.reasoning_effort",
            "empty string",
        ),
        ("worker: openai\ntarget_repo: repo\n", "worker", "found the string 'openai'"),
        ("worker:\n  model: x\ntarget_repo: repo\n", "worker.provider", "required"),
        ("worker:\n  provider: ../x\ntarget_repo: repo\n", "worker.provider", "'../x'"),
        ("worker:\n  provider: local\n", "target_repo", "required"),
        ("worker:\n  provider: local\ntarget_repo: 5\n", "target_repo", "the number 5"),
        ("worker:\n  provider: local\ntarget_repo: nowhere\n", "target_repo", "does not exist"),
        ("worker:\n  provider: local\ntarget_repo: config\n", "target_repo", "has no .git"),
        (
            "worker:\n  provider: local\ntarget_repo: config/roles.yaml\n",
            "target_repo",
            "is a file",
        ),
        ("- worker\n", "file", "expected a mapping"),
    ],
)
def test_roles_file_errors(tmp_path: Path, roles: str, key: str, fragment: str) -> None:
    err = config_error(make_home(tmp_path, roles=roles), ("worker",), env=KEY_ENV)
    assert err.file == "config/roles.yaml"
    assert err.key == key
    assert fragment in err.message


@pytest.mark.parametrize(
    ("provider", "key", "fragment"),
    [
        (LOCAL + "temperature: 0.2\n", "temperature", "unknown key"),
        (LOCAL + "api_key: abc\n", "api_key", "config.local.yaml"),
        (LOCAL.replace("base_url: http://127.0.0.1:11434/v1\n", ""), "base_url", "required"),
        (LOCAL.replace("http://127.0.0.1:11434/v1", "127.0.0.1:11434"), "base_url", "http://"),
        (LOCAL.replace("default_model: qwen2.5-coder:14b\n", ""), "default_model", "required"),
        (LOCAL + "default_model: 3\n", "file", "duplicate key 'default_model'"),
        (LOCAL + "insecure_tls: 'yes'\n", "insecure_tls", "true or false"),
        (LOCAL + "headers: [a]\n", "headers", "a list"),
        (LOCAL + "headers: {X-A: 1}\n", "headers.X-A", "expected a string"),
        (LOCAL + "headers: {'bad header': x}\n", "headers", "header names"),
        (LOCAL + "input_usd_per_mtok: cheap\n", "input_usd_per_mtok", "number >= 0"),
        (LOCAL + "output_usd_per_mtok: -1\n", "output_usd_per_mtok", "number >= 0"),
        (LOCAL + "api_key_env: 'my var'\n", "api_key_env", "NAME of an environment variable"),
        (LOCAL + "default_reasoning_effort: [high]\n", "default_reasoning_effort", "a list"),
    ],
)
def test_provider_file_errors(tmp_path: Path, provider: str, key: str, fragment: str) -> None:
    home = make_home(
        tmp_path,
        roles="worker:\n  provider: local\ntarget_repo: repo\n",
        providers={"local": provider},
    )
    err = config_error(home, ("worker",), env={})
    assert err.file == "config/providers/local.yaml"
    if key == "file":  # YAML-level problem
        assert err.key == "yaml"
    else:
        assert err.key == key
    assert fragment in err.message


def test_yaml_syntax_error_mentions_the_line(tmp_path: Path) -> None:
    roles = "worker:\n  provider: local\ntarget_repo: repo\nmax_retries: [3\nmax_parallel: 2\n"
    err = config_error(make_home(tmp_path, roles=roles), ("worker",))
    assert err.file == "config/roles.yaml"
    assert err.key == "yaml"
    assert "invalid YAML at line 5" in err.message


def test_yaml_error_in_provider_file_mentions_the_line(tmp_path: Path) -> None:
    home = make_home(
        tmp_path,
        roles="worker:\n  provider: local\ntarget_repo: repo\n",
        providers={"local": LOCAL + "headers:\n\t- x\n"},
    )
    err = config_error(home, ("worker",))
    assert err.file == "config/providers/local.yaml"
    assert "line 5" in err.message


def test_duplicate_role_block(tmp_path: Path) -> None:
    roles = "worker:\n  provider: local\nworker:\n  provider: openai\ntarget_repo: repo\n"
    err = config_error(make_home(tmp_path, roles=roles), ("worker",))
    assert "duplicate key 'worker'" in err.message
    assert "line 3" in err.message


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("3", "expected a list of strings (or one string); found the number 3"),
        ("{a: b}", "expected a list of strings (or one string); found a mapping"),
        ("[ok, '']", "expected a list of non-empty strings; item 2 is an empty string"),
        ("[ok, [x]]", "item 2 is a list of 1 item(s)"),
    ],
)
def test_default_verify_string_list_errors(tmp_path: Path, value: str, fragment: str) -> None:
    # The same rule (and wording) as a story's scope and depends_on: hero.yamlio.string_list.
    roles = "target_repo: repo\ndefault_verify: " + value + "\n"
    err = config_error(make_home(tmp_path, roles=roles), ())
    assert (err.file, err.key) == ("config/roles.yaml", "default_verify")
    assert fragment in err.message


def test_default_verify_one_string_and_stripping(tmp_path: Path) -> None:
    home = make_home(tmp_path, roles="target_repo: repo\ndefault_verify: '  make test '\n")
    assert load_config(home, ()).default_verify == ("make test",)


def test_file_that_is_not_utf8_or_is_binary(tmp_path: Path) -> None:
    home = make_home(tmp_path, roles="target_repo: repo\n")
    roles_path = home / "config" / "roles.yaml"
    roles_path.write_bytes("target_repo: r\xe9po\n".encode("latin-1"))
    err = config_error(home, ())
    assert (err.file, err.key) == ("config/roles.yaml", "file")
    assert "byte 0xe9 at offset 14" in err.message
    roles_path.write_bytes(b"target_repo: repo\n\x00\x01")
    err = config_error(home, ())
    assert (err.file, err.key) == ("config/roles.yaml", "file")
    assert "binary" in err.message


def test_bad_utf8_in_the_local_file_quotes_no_byte(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    (home / "config.local.yaml").write_bytes(b"keys:\n  openai: sk-\xe9\xff\n")
    err = config_error(home, env={})
    assert (err.file, err.key) == ("config.local.yaml", "file")
    assert "not valid UTF-8" in err.message
    assert "0xe9" not in err.message


def test_bom_is_accepted_in_config_files(tmp_path: Path) -> None:
    home = make_home(tmp_path, roles="target_repo: repo\n")
    (home / "config" / "roles.yaml").write_bytes(b"\xef\xbb\xbftarget_repo: repo\n")
    assert load_config(home, ()).target_repo == (home / "repo").resolve()


def test_missing_home_and_missing_roles_file(tmp_path: Path) -> None:
    err = config_error(tmp_path / "nope")
    assert err.key == "home"
    assert "hero init" in err.message
    empty = tmp_path / "empty"
    empty.mkdir()
    err = config_error(empty)
    assert err.file == "config/roles.yaml"
    assert "hero init" in err.message and "--home" in err.message
    assert "no config/ directory" in err.message


def _hero_run(home: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """`hero run` as a real process: a config file that blocks would hang it, not a test."""
    story = tmp_path / "story.md"
    story.write_text("---\nid: s1\n---\nDo a thing.\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "HERO_HOME"}
    return subprocess.run(
        [sys.executable, "-m", "hero", "run", str(story), "--home", str(home)],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env=env,
    )


@pytest.mark.slow
def test_fifo_as_roles_file_is_refused_at_once(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    roles = home / "config" / "roles.yaml"
    roles.unlink()
    os.mkfifo(roles)
    proc = _hero_run(home, tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "config/roles.yaml: file: expected a regular YAML file; found a FIFO" in proc.stderr
    err = config_error(home)
    assert (err.file, err.key) == ("config/roles.yaml", "file")


@pytest.mark.slow
def test_device_as_local_file_is_refused(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    (home / "config.local.yaml").symlink_to("/dev/zero")
    proc = _hero_run(home, tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert (
        "config.local.yaml: file: expected a regular YAML file; found a character device"
        in proc.stderr
    )


def test_special_and_huge_config_files_are_refused(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    provider = home / "config" / "providers" / "local.yaml"
    provider.unlink()
    os.mkfifo(provider)
    err = config_error(home, (), env=KEY_ENV)
    assert (err.file, err.key) == ("config/providers/local.yaml", "file")
    assert "found a FIFO" in err.message
    provider.unlink()
    provider.mkdir()
    assert "found a directory" in config_error(home, (), env=KEY_ENV).message
    provider.rmdir()
    provider.write_text(LOCAL + "#" * MAX_CONFIG_BYTES + "\n", encoding="utf-8")
    err = config_error(home, (), env=KEY_ENV)
    assert (err.file, err.key) == ("config/providers/local.yaml", "file")
    assert f"too large: expected at most {MAX_CONFIG_BYTES} bytes" in err.message
    provider.write_text(LOCAL, encoding="utf-8")
    (home / "config.local.yaml").symlink_to("nowhere.yaml")  # dangling: no local file
    assert load_config(home, (), env=KEY_ENV).roles == {}


def test_empty_roles_file_needs_target_repo(tmp_path: Path) -> None:
    err = config_error(make_home(tmp_path, roles=""), ())
    assert (err.file, err.key) == ("config/roles.yaml", "target_repo")


def test_no_roles_requested_needs_no_provider(tmp_path: Path) -> None:
    home = make_home(tmp_path, roles="target_repo: repo\n", providers={})
    cfg = load_config(home, ())
    assert cfg.roles == {}
    assert cfg.key_env_names == ()


# ----------------------------------------------------------------------------- secrets


@pytest.mark.parametrize(
    "local",
    [
        f"keys:\n  openai: {SECRET}\nkey: {SECRET}\n",  # unknown top-level key
        f"keys: [{SECRET}]\n",  # keys not a mapping
        f"keys:\n  openai: [{SECRET}]\n",  # value not a string
        f"keys:\n  openai: {SECRET}\n  'bad name': {SECRET}\n",  # bad provider name
        f"{SECRET}\n",  # not a mapping
        f"keys:\n  openai: '{SECRET}\n",  # YAML syntax error (unterminated quote)
        f"keys:\n  openai: {SECRET}\n  openai: {SECRET}x\n",  # duplicate key
        f"keys: {{openai: {SECRET}: x}}\n",  # YAML syntax error inside a flow mapping
    ],
)
def test_local_file_errors_never_show_the_key(tmp_path: Path, local: str) -> None:
    home = make_home(tmp_path, local=local)
    with pytest.raises(ConfigError) as info:
        load_config(home, env={})
        # a valid-looking file must still fail later, on the missing env key for the worker
        raise AssertionError("expected a ConfigError")
    text = str(info.value)
    assert SECRET not in text
    assert SECRET[:12] not in text
    assert info.value.__cause__ is None
    assert info.value.__suppress_context__


def test_later_errors_never_show_the_key(tmp_path: Path) -> None:
    # The key is known (local file), then other problems happen: none may show it.
    roles = ROLES + f"max_retries: {SECRET}\n"
    home = make_home(tmp_path, roles=roles, local=f"keys:\n  openai: {SECRET}\n")
    err = config_error(home)
    assert SECRET not in str(err)
    assert "***" in str(err)

    providers = {"openai": OPENAI + f"default_reasoning_effort: {SECRET}\n", "local": LOCAL}
    home2 = make_home(tmp_path / "2", providers=providers, local=f"keys:\n  openai: {SECRET}\n")
    assert SECRET not in str(config_error(home2))


def test_key_pasted_into_api_key_env_is_not_echoed(tmp_path: Path) -> None:
    for value in (SECRET, "abcdEFGH1234ijklMNOP5678"):
        base = tmp_path / value[:4]
        providers = {"openai": OPENAI.replace("HERO_TEST_OPENAI_KEY", value), "local": LOCAL}
        err = config_error(make_home(base, providers=providers), env={})
        assert err.key == "api_key_env"
        assert value not in str(err)
        assert "config.local.yaml" in err.message


def test_env_key_is_not_in_errors(tmp_path: Path) -> None:
    roles = ROLES + f"max_retries: {ENV_SECRET}\n"
    err = config_error(make_home(tmp_path, roles=roles), env=KEY_ENV)
    assert ENV_SECRET not in str(err)


def test_sensitive_headers_are_secrets(tmp_path: Path) -> None:
    providers = {"local": LOCAL + "headers:\n  Authorization: Bearer tok-123456\n  X-Plain: hi\n"}
    home = make_home(
        tmp_path, roles="worker:\n  provider: local\ntarget_repo: repo\n", providers=providers
    )
    cfg = load_config(home, ("worker",))
    assert "Bearer tok-123456" in cfg.secrets
    assert "hi" not in cfg.secrets


# ----------------------------------------------------------------------------- resolve_home


def test_resolve_home_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cli = tmp_path / "cli"
    env_home = tmp_path / "env"
    cwd = tmp_path / "cwd"
    for d in (cli, env_home, cwd):
        d.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("HERO_HOME", str(env_home))
    assert resolve_home(str(cli)) == cli.resolve()
    assert resolve_home(None) == env_home.resolve()
    monkeypatch.setenv("HERO_HOME", "")
    assert resolve_home(None) == cwd.resolve()
    monkeypatch.delenv("HERO_HOME")
    assert resolve_home(None) == cwd.resolve()
    assert resolve_home("") == cwd.resolve()
    assert resolve_home("sub") == cwd.resolve() / "sub"  # relative to the cwd
    assert resolve_home(None, env={"HERO_HOME": str(env_home)}) == env_home.resolve()


def test_resolve_home_expands_user(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert resolve_home("~/hero") == (tmp_path / "hero").resolve()


@pytest.mark.parametrize(
    ("rules", "said"),
    [
        ('["git push \'x"]', 'rule 1 ("git push \'x") cannot be parsed'),
        ('[""]', "item 1 is an empty string"),
    ],
)
def test_a_command_rule_that_cannot_be_parsed_is_a_configuration_error(
    tmp_path: Path, rules: str, said: str
) -> None:
    import subprocess

    home = tmp_path / "home"
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (home / "config" / "providers").mkdir(parents=True)
    (home / "config" / "providers" / "local.yaml").write_text(
        "name: local\nbase_url: http://127.0.0.1:9/v1\ndefault_model: m\n"
    )
    (home / "config" / "roles.yaml").write_text(
        f"target_repo: {repo}\ndeny_commands: {rules}\nworker: {{provider: local}}\n"
    )
    with pytest.raises(ConfigError) as err:
        load_config(home, roles=("worker",))
    assert err.value.key == "deny_commands"
    assert said in str(err.value)
