"""Tests for hero.state: the run record of a story and its atomic persistence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hero.state import (
    ReviewRecord,
    Round,
    RunState,
    StateError,
    Status,
    WorkerOutcome,
    load_state,
    save_state,
    state_dir,
    state_path,
)

DATA = Path(__file__).parent / "data"


def full_state() -> RunState:
    return RunState(
        id="s1",
        status=Status.GAVE_UP,
        title="Story s1",
        story_path="/home/inbox/s1.md",
        branch="hero/s1",
        base_ref="main",
        base_sha="a" * 40,
        head_sha="b" * 40,
        worktree="/home/worktrees/s1",
        current_round=2,
        phase="review",
        rounds=[
            Round(
                round=1,
                review=ReviewRecord(verdict="CHANGES_REQUESTED"),
                feedback="ünïcode ✓",
            )
        ],
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
    state.status = Status.PASSED
    state.rounds.append(Round(round=2))
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
    bad.rounds = [Round(round=1, verify={"not json": object()})]
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


# --------------------------------------------------------------------------- the record's types


def test_state_written_by_0_1_0_loads_and_writes_back_the_same(tmp_path: Path) -> None:
    # A real state file from hero 0.1.0 (`hero demo`): two rounds, changes requested, approved.
    text = (DATA / "state-0.1.0.json").read_text(encoding="utf-8")

    state = RunState.from_dict(json.loads(text))

    assert state.status is Status.PASSED
    assert [r.round for r in state.rounds] == [1, 2]
    first, second = state.rounds
    assert first.review.verdict == "CHANGES_REQUESTED"
    assert not first.review.short_circuited and not first.review.malformed
    assert first.review.comments[0]["severity"] == "blocker"
    assert [a["satisfied"] for a in first.review.ac_check] == [True, True, False]
    assert first.worker == WorkerOutcome(
        turns=6,
        tool_calls=5,
        tokens_in=5398,
        tokens_out=191,
        stop_reason="done",
        detail="",
        summary="Added textkit.slugify and exported it.",
    )
    assert first.verify["passed"] is True
    assert first.verify["log"].endswith("verify-r1.log")
    assert first.head_sha == "0044b24c1f398debf2f378ae99e420a6207ec879"
    assert first.feedback.startswith("**CHANGES_REQUESTED**: slugify works")
    assert second.review.verdict == "APPROVED"
    assert second.duration_s == 0.179
    # Same keys, same order, same values: the file users' scripts read is unchanged.
    assert json.dumps(state.to_dict(), indent=2, ensure_ascii=False) == text

    save_state(tmp_path, state)
    written = json.loads(state_path(tmp_path, "add-slugify").read_text(encoding="utf-8"))
    expected = json.loads(text)
    assert written.pop("updated_at") >= expected.pop("updated_at")
    assert written == expected


def test_status_is_the_enum_and_written_as_its_string(tmp_path: Path) -> None:
    save_state(tmp_path, RunState(id="s1", status=Status.INTERRUPTED))
    on_disk = json.loads(state_path(tmp_path, "s1").read_text(encoding="utf-8"))
    assert on_disk["status"] == "interrupted"
    assert type(RunState(id="s1").to_dict()["status"]) is str
    loaded = load_state(tmp_path, "s1")
    assert loaded is not None and loaded.status is Status.INTERRUPTED


@pytest.mark.parametrize("status", ["finished", "PASSED", "", None, 3])
def test_unknown_status_is_a_state_error_naming_it(tmp_path: Path, status: object) -> None:
    path = state_path(tmp_path, "s1")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"id": "s1", "status": status}), encoding="utf-8")
    with pytest.raises(StateError) as info:
        load_state(tmp_path, "s1")
    assert repr(status) in str(info.value)
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    "rounds",
    [3, "round 1", [1], [{"round": 1, "worker": "six turns"}], [{"round": 1, "verify": []}]],
)
def test_malformed_rounds_are_a_state_error(tmp_path: Path, rounds: object) -> None:
    path = state_path(tmp_path, "s1")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"id": "s1", "rounds": rounds}), encoding="utf-8")
    with pytest.raises(StateError, match="s1.json"):
        load_state(tmp_path, "s1")


def test_round_keys_from_a_newer_hero_are_ignored_and_missing_ones_default() -> None:
    data = {
        "round": 4,
        "new_key": 1,
        "worker": {"turns": 2, "new_worker_key": True},
        "review": {"verdict": "APPROVED", "new_review_key": []},
    }
    r = Round.from_dict(data)
    assert r == Round(
        round=4, worker=WorkerOutcome(turns=2), review=ReviewRecord(verdict="APPROVED")
    )
    assert list(r.to_dict()) == [
        "round",
        "started_at",
        "duration_s",
        "worker",
        "verify",
        "review",
        "head_sha",
        "feedback",
    ]
    assert list(r.to_dict()["review"]) == [
        "verdict",
        "summary",
        "short_circuited",
        "malformed",
        "ac_check",
        "comments",
    ]


def test_plain_values_become_their_types() -> None:
    state = RunState(id="s1", status="running", rounds=[{"round": 1}])  # type: ignore[arg-type]
    assert state.status is Status.RUNNING
    assert state.rounds == [Round(round=1)]


def test_fresh_budget_only_after_giving_up() -> None:
    gave_up = full_state()
    gave_up.rounds.append(Round(round=2))
    assert gave_up.max_rounds(3) == 3
    assert gave_up.grant_fresh_budget()
    assert gave_up.round_offset == 2
    assert gave_up.max_rounds(3) == 5

    for status in set(Status) - {Status.GAVE_UP}:
        state = full_state()
        state.status = status
        state.round_offset = 1
        assert not state.grant_fresh_budget()
        assert state.round_offset == 1


def test_a_round_left_open_is_closed_once_up_to_the_given_time() -> None:
    state = RunState(id="s1", current_round=2, round_started_at=100.0, rounds=[Round(round=1)])
    assert state.round_open and state.open_round_s(130.0) == 30.0
    state.close_open_round(130.0)
    assert state.cut_short_s == 30.0 and not state.round_open
    state.close_open_round(500.0)  # closed: nothing more counts
    assert state.cut_short_s == 30.0
    # a finished round (in ``rounds``) is not a round in progress
    done = RunState(id="s1", current_round=1, round_started_at=100.0, rounds=[Round(round=1)])
    done.close_open_round(130.0)
    assert done.cut_short_s == 0.0 and done.round_started_at == 100.0


def test_a_record_saved_as_no_longer_running_closes_its_round_at_its_last_save(
    tmp_path: Path,
) -> None:
    """A run killed with SIGKILL left its round open; whoever writes the record next with
    another status (a daemon, `hero retry`) counts that round up to the last save."""
    state = RunState(
        id="s1", status="running", current_round=1, round_started_at=100.0, updated_at=0.0
    )
    save_state(tmp_path, state)  # running: the round stays open
    assert state.round_open
    state.updated_at = 140.0  # as if loaded from the killed run's last save
    state.status = Status.INTERRUPTED
    save_state(tmp_path, state)
    loaded = load_state(tmp_path, "s1")
    assert loaded is not None and loaded.cut_short_s == 40.0 and not loaded.round_open
    assert "round_started_at" not in json.loads(state_path(tmp_path, "s1").read_text())
