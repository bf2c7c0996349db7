from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from helpers import REPO_ROOT, uncomment_proposal

from hero.config.detect import Proposal, Step
from hero.config.loader import load_config
from hero.config.scaffold import PROPOSAL_TITLE, init_home, local_example, roles_yaml
from hero.config.schema import ConfigError

FILES = (
    "config/providers/openai.yaml",
    "config/providers/local.yaml",
    "config/roles.yaml",
    "config.local.yaml.example",
    ".gitignore",
    "inbox/.gitkeep",
    "done/.gitkeep",
)
DIRS = ("config", "config/providers", "inbox", "done", "runs", "worktrees")


def git_repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    return path


def snapshot(home: Path) -> dict[str, bytes | None]:
    return {
        str(p.relative_to(home)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(home.rglob("*"))
    }


def test_init_creates_the_layout(tmp_path: Path) -> None:
    home = tmp_path / "home"
    created = init_home(home)
    for rel in FILES:
        assert (home / rel).is_file(), rel
        assert home / rel in created
    for rel in DIRS:
        assert (home / rel).is_dir(), rel
        assert home / rel in created
    assert home in created
    assert not list((home / "inbox").glob("*.md"))  # no example story
    assert not (home / "config.local.yaml").exists()
    gitignore = (home / ".gitignore").read_text(encoding="utf-8").splitlines()
    for line in ("config.local.yaml", "worktrees/", "runs/"):
        assert line in gitignore


def test_generated_provider_files(tmp_path: Path) -> None:
    init_home(tmp_path)
    providers = tmp_path / "config" / "providers"
    local = yaml.safe_load((providers / "local.yaml").read_text(encoding="utf-8"))
    assert local["name"] == "local"
    assert local["base_url"] == "http://127.0.0.1:11434/v1"
    assert "api_key_env" not in local  # keyless
    openai = yaml.safe_load((providers / "openai.yaml").read_text(encoding="utf-8"))
    assert openai["name"] == "openai"
    assert openai["api_key_env"] == "OPENAI_API_KEY"
    assert openai["output_tokens_param"] == "max_completion_tokens"  # reasoning models
    for provider in (local, openai):  # documented, and the defaults
        assert provider["context_window"] is None
        assert provider["send_reasoning"] is False
    assert local["output_tokens_param"] == "max_tokens"
    example = yaml.safe_load((tmp_path / "config.local.yaml.example").read_text(encoding="utf-8"))
    assert example == {"keys": None}  # every value commented out: a copy sets no key


def test_roles_file_documents_every_knob_with_its_default(tmp_path: Path) -> None:
    init_home(tmp_path, target_repo="../repo")
    text = (tmp_path / "config" / "roles.yaml").read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    assert data["worker"] == {"provider": "local"}
    assert data["reviewer"] == {"provider": "local"}
    assert data["target_repo"] == "../repo"
    expected = {
        "target_base_ref": None,
        "max_retries": 3,
        "verify_timeout_ms": 120000,
        "default_verify": [],
        "worker_max_turns": 100,
        "worker_max_tool_calls": 300,
        "worker_max_wall_s": 3600,
        "bash_timeout_s": 600,
        "loop_repeats": 4,
        "llm_timeout_s": 600,
        "llm_max_attempts": 6,
        "llm_backoff_base_s": 2,
        "llm_backoff_max_s": 60,
        "llm_retry_after_max_s": 120,
        "context_condense_at": 0.75,
        "context_keep_turns": 6,
        "context_window_default": 128000,
        "output_reserve_default": 4096,
    }
    for key, value in expected.items():
        assert data[key] == value, key
        # each knob is preceded by a comment
        lines = text.splitlines()
        index = next(i for i, line in enumerate(lines) if line.startswith(f"{key}: "))
        assert lines[index - 1].startswith("#"), key
    assert "# worker:\n#   provider: openai" in text  # commented alternative
    # shown, commented out: the Celery steps append them (README.md, docs/celery.md), and
    # a key given twice is refused
    assert "max_parallel" not in data and "\n# max_parallel: 2\n" in text
    assert "engine" not in data and "\n# engine: local\n" in text


def test_rerun_creates_and_overwrites_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    init_home(home, target_repo="/somewhere")
    roles = home / "config" / "roles.yaml"
    roles.write_text("# my edits\n" + roles.read_text(encoding="utf-8"), encoding="utf-8")
    (home / "config" / "providers" / "local.yaml").write_text("name: local\n", encoding="utf-8")
    before = snapshot(home)
    assert init_home(home, target_repo="/elsewhere") == []
    assert snapshot(home) == before


def test_rerun_recreates_only_what_is_missing(tmp_path: Path) -> None:
    init_home(tmp_path)
    (tmp_path / "config" / "providers" / "openai.yaml").unlink()
    (tmp_path / "done" / ".gitkeep").unlink()
    (tmp_path / "done").rmdir()
    created = init_home(tmp_path)
    assert created == [
        tmp_path / "done",
        tmp_path / "config" / "providers" / "openai.yaml",
        tmp_path / "done" / ".gitkeep",
    ]


def test_existing_gitignore_gets_missing_lines_appended(tmp_path: Path) -> None:
    original = "node_modules/\n/runs/\n*.pyc"
    (tmp_path / ".gitignore").write_text(original, encoding="utf-8")
    created = init_home(tmp_path)
    assert tmp_path / ".gitignore" in created
    text = (tmp_path / ".gitignore").read_text(encoding="utf-8")
    assert text.startswith(original + "\n")
    lines = text.splitlines()
    assert lines.count("config.local.yaml") == 1
    assert lines.count("worktrees/") == 1
    assert "runs/" not in lines  # "/runs/" already covers it
    assert init_home(tmp_path) == []
    assert (tmp_path / ".gitignore").read_text(encoding="utf-8") == text


def test_existing_crlf_gitignore_stays_crlf(tmp_path: Path) -> None:
    (tmp_path / ".gitignore").write_bytes(b"build/\r\nconfig.local.yaml\r\n")
    init_home(tmp_path)
    data = (tmp_path / ".gitignore").read_bytes()
    assert data.startswith(b"build/\r\nconfig.local.yaml\r\n")
    assert b"\n" not in data.replace(b"\r\n", b"")
    assert b"worktrees/\r\nruns/\r\n" in data
    assert data.count(b"config.local.yaml") == 1


def test_generated_config_loads(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "repo")
    home = tmp_path / "home"
    init_home(home, target_repo=str(repo))
    cfg = load_config(home, env={})
    assert cfg.target_repo == repo.resolve()
    worker = cfg.role("worker")
    assert worker.provider.name == "local"
    assert worker.api_key is None
    assert cfg.role("reviewer").provider.name == "local"
    assert cfg.key_env_names == ("OPENAI_API_KEY",)
    all_roles = load_config(home, ("worker", "reviewer", "planner"), env={})
    assert set(all_roles.roles) == {"worker", "reviewer", "planner"}


def test_generated_config_with_relative_target_repo(tmp_path: Path) -> None:
    git_repo(tmp_path / "project")
    home = tmp_path / "home"
    init_home(home, target_repo="../project")
    assert load_config(home, env={}).target_repo == (tmp_path / "project").resolve()


def test_generated_openai_provider_loads_with_a_key(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "repo")
    home = tmp_path / "home"
    init_home(home, target_repo=str(repo))
    roles = home / "config" / "roles.yaml"
    roles.write_text(
        roles.read_text(encoding="utf-8").replace(
            "worker:\n  provider: local", "worker:\n  provider: openai"
        ),
        encoding="utf-8",
    )
    example = (home / "config.local.yaml.example").read_text(encoding="utf-8")
    (home / "config.local.yaml").write_text(example, encoding="utf-8")
    # The copied example sets no key: the environment's is used, as the README says.
    worker = load_config(home, env={"OPENAI_API_KEY": "sk-from-env"}).role("worker")
    assert worker.provider.name == "openai"
    assert worker.api_key == "sk-from-env"
    assert worker.key_source == "$OPENAI_API_KEY"
    # The example's commented line, uncommented as it is, is a placeholder: still the env's.
    (home / "config.local.yaml").write_text(
        example.replace("  # openai: sk-...", "  openai: sk-..."), encoding="utf-8"
    )
    config = load_config(home, env={"OPENAI_API_KEY": "sk-from-env"})
    assert config.role("worker").api_key == "sk-from-env"
    assert config.notices == (
        "config.local.yaml: keys.openai: holds a placeholder, not a key; ignored (the "
        "provider's api_key_env is used). Put the real value there, or remove the line",
    )


def test_example_local_file_holds_no_value_that_looks_like_a_secret() -> None:
    """Only comments show a key's shape: every value in it is unset (the repository's own
    copy is the one hero init writes)."""
    import re

    text = local_example()
    assert yaml.safe_load(text) == {"keys": None}
    for line in text.splitlines():
        if not line.lstrip().startswith("#"):
            assert not re.search(r"sk-|ghp_|your-|password", line, re.IGNORECASE), line
    repo_root = REPO_ROOT
    assert (repo_root / "config.local.yaml.example").read_text(encoding="utf-8") == text


def test_placeholder_target_repo_fails_clearly(tmp_path: Path) -> None:
    init_home(tmp_path / "home")
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "home", env={})
    assert (info.value.file, info.value.key) == ("config/roles.yaml", "target_repo")
    assert "does not exist" in info.value.message


def test_target_repo_with_special_characters(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "my repo: 'quoted' #1")
    init_home(tmp_path / "home", target_repo=str(repo))
    assert load_config(tmp_path / "home", env={}).target_repo == repo.resolve()


def test_home_that_is_a_file(tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_text("x", encoding="utf-8")
    with pytest.raises(NotADirectoryError):
        init_home(path)


# -- the proposal for the target repository's setup and checks (hero.config.detect) -----------

#: Commands YAML would misread unquoted: each must come back as it is.
AWKWARD = (
    'echo "a: b" # not a comment',
    "[ -f setup.cfg ] || true",
    "- x",
    "yes",
    "'quoted' tail",
    "*glob && @at && %pct",
    "{brace}",
)


def test_a_proposal_is_written_commented_and_loads_once_uncommented(tmp_path: Path) -> None:
    git_repo(tmp_path / "repo")
    setup = (
        Step("python3 -m venv .venv", "a venv"),
        Step(".venv/bin/pip install -e '.[test]'", "x"),
    )
    checks = tuple(Step(command, f"reason {n}") for n, command in enumerate(AWKWARD))
    proposal = Proposal("its HEAD commit 1234567", setup, checks, ("tox.ini is there",))
    home = tmp_path / "home"
    init_home(home, target_repo="../repo", proposal=proposal)
    roles = home / "config" / "roles.yaml"
    text = roles.read_text(encoding="utf-8")
    label = "\n# Proposed for ../repo: uncomment to use. hero init read its HEAD commit 1234567"
    assert f"---- {PROPOSAL_TITLE}\n" in text and label in text
    assert text.index(label) < text.index("\nworker:")  # at the top
    assert "\n#   # a venv\n#   - python3 -m venv .venv\n" in text  # each after its reason
    assert "# Also: tox.ini is there." in text
    # as written, it is off: the settings keep their defaults, and each key's own line
    # further down is commented out, so that taking the proposal on gives each key once
    config = load_config(home, env={})
    assert (config.project.setup, config.default_verify) == ((), ())
    assert "\n# setup: []\n" in text and "\n# default_verify: []\n" in text
    roles.write_text(uncomment_proposal(text), encoding="utf-8")
    config = load_config(home, env={})
    assert config.project.setup == tuple(s.command for s in setup)
    assert config.default_verify == AWKWARD


def test_a_proposal_of_checks_alone_leaves_setup_as_it_was(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "repo")
    home = tmp_path / "home"
    proposal = Proposal(
        "its working tree", checks=(Step("make test", "Makefile has a `test` target"),)
    )
    init_home(home, target_repo=str(repo), proposal=proposal)
    roles = home / "config" / "roles.yaml"
    text = roles.read_text(encoding="utf-8")
    assert "\nsetup: []\n" in text and "\n# default_verify: []\n" in text
    assert "\n# setup:\n#   # " not in text  # the setting's own example, no proposal
    roles.write_text(uncomment_proposal(text), encoding="utf-8")
    config = load_config(home, env={})
    assert (config.project.setup, config.default_verify) == ((), ("make test",))


def test_without_a_proposal_the_roles_file_is_as_before(tmp_path: Path) -> None:
    plain = roles_yaml("../repo")
    assert roles_yaml("../repo", Proposal("its working tree", notes=("a note only",))) == plain
    assert PROPOSAL_TITLE not in plain and "Proposed for" not in plain
    # the repository's own config/roles.yaml is written with no target: no proposal in it
    assert (REPO_ROOT / "config" / "roles.yaml").read_text(encoding="utf-8") == roles_yaml()
