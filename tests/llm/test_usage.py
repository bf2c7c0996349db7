"""The one Usage record: what a call, a worker's round, a run and a story spent, and how the
run record keeps it (``usage`` in runs/state/<id>.json, byte for byte as before)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hero.config.sections import Budgets
from hero.llm.client import Completion
from hero.llm.usage import Usage
from hero.run.budget import Meter
from hero.state import RunState, load_state, save_state, state_path


def answer(tokens_in: int, tokens_out: int, cost: float = 0.0, cached: int = 0) -> Completion:
    return Completion(
        content="",
        tool_calls=(),
        message={"role": "assistant", "content": ""},
        tokens_in=tokens_in,
        tokens_out=tokens_out,
        http_s=0.0,
        finish_reason="stop",
        cost_usd=cost,
        tokens_cached=cached,
    )


def test_the_key_order_is_the_one_runs_state_has_always_had() -> None:
    """A record of a story that ran: the default's four keys, then tokens_cached (as the
    pipeline appended it to the default record before there was one Usage), then what of it
    is hero's estimate."""
    usage = Usage(
        tokens_in=350,
        tokens_out=35,
        llm_calls=4,
        cost_usd=0.1234567,
        tokens_cached=7,
        estimated_calls=1,
        estimated_tokens=90,
    )
    assert json.dumps(usage.to_dict()) == (
        '{"tokens_in": 350, "tokens_out": 35, "llm_calls": 4, "cost_usd": 0.123457, '
        '"tokens_cached": 7, "estimated_calls": 1, "estimated_tokens": 90}'
    )
    assert Usage.from_dict(usage.to_dict()) == Usage(350, 35, 4, 0.123457, 7, 1, 90)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"tokens_in": 9}, Usage(tokens_in=9)),  # a record from before tokens_cached
        # a record from before estimates: nothing in it was estimated
        ({"tokens_in": 9, "tokens_cached": 2}, Usage(tokens_in=9, tokens_cached=2)),
        ({"estimated_calls": "some", "estimated_tokens": -3}, Usage()),
        ({"tokens_in": 12.0, "cost_usd": 1}, Usage(tokens_in=12, cost_usd=1.0)),
        ({"tokens_in": "lots", "tokens_out": True, "cost_usd": float("inf")}, Usage()),
        ({"tokens_in": -5, "llm_calls": None}, Usage()),
        ([1, 2], Usage()),
    ],
)
def test_a_record_reads_as_the_budgets_count_it(data: object, expected: Usage) -> None:
    assert Usage.from_dict(data) == expected


def test_a_call_a_turn_and_a_story_add_up_the_same_way() -> None:
    call = answer(100, 10, cost=0.5, cached=60).usage
    assert call == Usage(100, 10, 1, 0.5, 60)
    total = Usage(1, 2, 3, 0.25, 4) + call
    assert total == Usage(101, 12, 4, 0.75, 64)
    assert total.tokens == 113
    total.add(call)
    assert total.llm_calls == 5


def test_the_meter_counts_every_call_and_adds_the_earlier_runs() -> None:
    state = RunState(id="s1", usage={"tokens_in": 1000, "tokens_out": 50, "llm_calls": 3})
    meter = Meter(Budgets(), state)
    meter.start_round(1, 0.0)
    meter.add(answer(200, 20, cost=0.01, cached=100))
    meter.add(answer(300, 30))

    assert meter.usage == Usage(500, 50, 2, 0.01, 100)
    assert meter.spent() == Usage(1500, 100, 5, 0.01, 100)
    assert meter.round().tokens == 550
    assert meter.story().tokens == 1600


def test_an_old_record_loads_and_is_written_back_as_before(tmp_path: Path) -> None:
    """A record written before tokens_cached and the estimates existed keeps its keys in
    order, gains the new ones at the end, and keeps a key a newer hero may have added."""
    save_state(tmp_path, RunState(id="s1"))
    assert json.loads(state_path(tmp_path, "s1").read_text())["usage"] == {
        "tokens_in": 0,
        "tokens_out": 0,
        "llm_calls": 0,
        "cost_usd": 0.0,
    }
    state = load_state(tmp_path, "s1")
    assert state is not None
    state.usage["from_a_newer_hero"] = 1
    state.record_usage(Usage.from_dict(state.usage) + Usage(10, 5, 1, 0.002))
    save_state(tmp_path, state)

    text = state_path(tmp_path, "s1").read_text()
    usage_block = text[text.index('"usage"') : text.index("}", text.index('"usage"')) + 1]
    assert usage_block == (
        '"usage": {\n'
        '    "tokens_in": 10,\n'
        '    "tokens_out": 5,\n'
        '    "llm_calls": 1,\n'
        '    "cost_usd": 0.002,\n'
        '    "from_a_newer_hero": 1,\n'
        '    "tokens_cached": 0,\n'
        '    "estimated_calls": 0,\n'
        '    "estimated_tokens": 0\n'
        "  }"
    )
