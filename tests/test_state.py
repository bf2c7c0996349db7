"""Tests for hero.state: the run record of a story and its atomic persistence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hero.state import RunState, StateError, load_state, save_state, state_dir, state_path


def full_state() -> RunState:
    return RunState(
        id="s1",
        status="gave_up",
        title="Story s1",
        story_path="/home/inbox/s1.md",
        branch="hero/s1",
        base_ref="main",
        base_sha="a" * 40,
        head_sha="b" * 40,
        worktree="/home/worktrees/s1",
        current_round=2,
        phase="review",
        rounds=[{"round": 1, "review": {"verdict": "CHANGES_REQUESTED"}, "feedback": "ünïcode ✓"}],
        usage={"tokens_in": 10, "tokens_out": 5, "llm_calls": 2, "cost_usd": 0.25},
        error="",
        started_at=1.5,
        finished_at=9.0,
        runs=3,
    )


def test_paths(tmp_path: Path) -> None:
    assert state_dir(tmp_path) == tmp_path / "runs" / "state"
    assert state_path(tmp_path, "s1") == tmp_path / "runs" / "state" / "s1.json"


def test_missing_state_is_none(tmp_path: Path) -> None:
    assert load_state(tmp_path, "s1") is None


def test_save_load_round_trip(tmp_path: Path) -> None:
    state = full_state()
    save_state(tmp_path, state)

    loaded = load_state(tmp_path, "s1")

    assert loaded == state
    assert loaded is not state
    assert state.updated_at > 0  # save stamps the time
    on_disk = json.loads(state_path(tmp_path, "s1").read_text(encoding="utf-8"))
    assert on_disk["rounds"][0]["feedback"] == "ünïcode ✓"
    assert on_disk["branch"] == "hero/s1"


def test_defaults_round_trip(tmp_path: Path) -> None:
    save_state(tmp_path, RunState(id="bare"))
    loaded = load_state(tmp_path, "bare")
    assert loaded is not None
    assert loaded.status == "queued"
    assert loaded.rounds == []
    assert loaded.usage == {"tokens_in": 0, "tokens_out": 0, "llm_calls": 0, "cost_usd": 0.0}
    assert loaded.finished_at is None


def test_save_overwrites_and_leaves_no_temp_files(tmp_path: Path) -> None:
    state = full_state()
    save_state(tmp_path, state)
    state.status = "passed"
    state.rounds.append({"round": 2})
    save_state(tmp_path, state)

    assert sorted(p.name for p in state_dir(tmp_path).iterdir()) == ["s1.json"]
    loaded = load_state(tmp_path, "s1")
    assert loaded is not None
    assert loaded.status == "passed"
    assert len(loaded.rounds) == 2


def test_unserialisable_state_is_not_written(tmp_path: Path) -> None:
    save_state(tmp_path, full_state())
    before = state_path(tmp_path, "s1").read_text(encoding="utf-8")
    bad = full_state()
    bad.rounds = [{"not json": object()}]
    with pytest.raises(TypeError):
        save_state(tmp_path, bad)
    assert sorted(p.name for p in state_dir(tmp_path).iterdir()) == ["s1.json"]
    assert state_path(tmp_path, "s1").read_text(encoding="utf-8") == before


def test_failed_replace_removes_the_temp_file(tmp_path: Path) -> None:
    # A directory where the state file belongs makes the final os.replace fail.
    state_path(tmp_path, "s1").mkdir(parents=True)
    with pytest.raises(OSError):
        save_state(tmp_path, full_state())
    assert sorted(p.name for p in state_dir(tmp_path).iterdir()) == ["s1.json"]
    assert state_path(tmp_path, "s1").is_dir()


def test_corrupt_file_raises_state_error_naming_path(tmp_path: Path) -> None:
    path = state_path(tmp_path, "s1")
    path.parent.mkdir(parents=True)
    path.write_text('{"id": "s1", "status": ', encoding="utf-8")

    with pytest.raises(StateError) as info:
        load_state(tmp_path, "s1")
    assert str(path) in str(info.value)


@pytest.mark.parametrize("content", ["[1, 2]", '"text"', "null", ""])
def test_non_object_json_is_a_state_error(tmp_path: Path, content: str) -> None:
    path = state_path(tmp_path, "s1")
    path.parent.mkdir(parents=True)
    path.write_text(content, encoding="utf-8")
    with pytest.raises(StateError, match="s1.json"):
        load_state(tmp_path, "s1")


def test_non_utf8_file_is_a_state_error(tmp_path: Path) -> None:
    path = state_path(tmp_path, "s1")
    path.parent.mkdir(parents=True)
    path.write_bytes(b'\xff\xfe{"id": "s1"}')
    with pytest.raises(StateError) as info:
        load_state(tmp_path, "s1")
    assert str(path) in str(info.value)


def test_id_mismatch_is_a_state_error(tmp_path: Path) -> None:
    save_state(tmp_path, RunState(id="other"))
    state_path(tmp_path, "other").rename(state_path(tmp_path, "s1"))

    with pytest.raises(StateError) as info:
        load_state(tmp_path, "s1")
    assert str(state_path(tmp_path, "s1")) in str(info.value)


def test_unknown_keys_are_ignored(tmp_path: Path) -> None:
    data = full_state().to_dict()
    data["from_a_newer_hero"] = {"x": 1}
    data["another"] = 7
    path = state_path(tmp_path, "s1")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(data), encoding="utf-8")

    loaded = load_state(tmp_path, "s1")

    assert loaded is not None
    assert loaded.to_dict() == full_state().to_dict()
    assert not hasattr(loaded, "from_a_newer_hero")


def test_missing_keys_take_defaults(tmp_path: Path) -> None:
    path = state_path(tmp_path, "s1")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"id": "s1", "status": "running"}), encoding="utf-8")
    loaded = load_state(tmp_path, "s1")
    assert loaded is not None
    assert loaded.status == "running"
    assert loaded.current_round == 0
