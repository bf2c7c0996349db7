"""`hero bench report`'s statistics: the Wilson interval and the exact McNemar test, checked
against values worked out by hand (and published tables)."""

from __future__ import annotations

import math

import pytest

from hero.evals.stats import mcnemar_exact, wilson


@pytest.mark.parametrize(
    ("k", "n", "low", "high"),
    [
        (10, 10, 0.72247, 1.0),
        (0, 10, 0.0, 0.27753),
        (5, 10, 0.23659, 0.76341),
        (1, 10, 0.01788, 0.40415),
        (81, 263, 0.2553, 0.3662),  # Newcombe (1998), Statistics in Medicine 17, table I
    ],
)
def test_wilson_interval_known_values(k: int, n: int, low: float, high: float) -> None:
    got = wilson(k, n)
    assert got == (pytest.approx(low, abs=6e-5), pytest.approx(high, abs=6e-5))


def test_wilson_interval_stays_in_zero_one_and_holds_the_rate() -> None:
    for n in (1, 2, 7, 50, 1000):
        for k in range(n + 1):
            low, high = wilson(k, n)
            assert 0.0 <= low <= k / n <= high <= 1.0
    assert wilson(0, 0) == (0.0, 1.0)  # no task: nothing known


def test_wilson_refuses_impossible_counts() -> None:
    with pytest.raises(ValueError):
        wilson(11, 10)
    with pytest.raises(ValueError):
        wilson(-1, 10)


@pytest.mark.parametrize(
    ("b", "c", "p"),
    [
        (10, 0, 2 / 1024),  # every discordant task goes one way: 2 * 0.5**10
        (0, 10, 2 / 1024),
        (1, 0, 1.0),  # one discordant task says nothing
        (0, 0, 1.0),
        (5, 5, 1.0),
        (6, 1, 2 * (1 + 7) / 128),  # 0.125
        (8, 2, 2 * (1 + 10 + 45) / 1024),  # 0.109375
        (12, 2, 2 * (1 + 14 + 91) / 2**14),  # 0.01294
    ],
)
def test_mcnemar_exact_known_values(b: int, c: int, p: float) -> None:
    assert mcnemar_exact(b, c) == pytest.approx(p, rel=1e-12)


def test_mcnemar_exact_on_thousands_of_tasks_neither_overflows_nor_underflows() -> None:
    assert mcnemar_exact(3000, 3000) == 1.0
    tiny = mcnemar_exact(2000, 0)
    assert 0.0 <= tiny < 1e-300
    assert math.isclose(mcnemar_exact(1000, 1000), 1.0)
    with pytest.raises(ValueError):
        mcnemar_exact(-1, 3)
