"""The statistics of `hero bench report`, in pure Python (no scipy).

- :func:`wilson`: a 95% Wilson score interval for a resolve rate (k resolved of n tasks). It
  stays inside [0, 1] and says something at 0 of 10 and 10 of 10, where the normal
  approximation gives a zero-width interval.
- :func:`mcnemar_exact`: the exact McNemar test for two configurations on the same tasks: of
  the discordant tasks (resolved by one and not the other), is the split b : c further from
  even than chance would make it? Two-sided binomial test with p = 1/2 on b + c trials.
"""

from __future__ import annotations

import math

#: The 97.5th percentile of the standard normal distribution: a two-sided 95% interval.
Z95 = 1.959963984540054
#: A paired difference is called significant below this p-value.
ALPHA = 0.05


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval for ``k`` successes of ``n`` trials; (0, 1) when n is 0."""
    if n < 0 or not 0 <= k <= n:
        raise ValueError(f"wilson: need 0 <= k <= n; got k={k}, n={n}")
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    z2 = z * z
    denominator = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denominator
    half = z / denominator * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    # At k = 0 or k = n one end is exactly 0 or 1; rounding must not move it past.
    low = 0.0 if k == 0 else max(0.0, centre - half)
    high = 1.0 if k == n else min(1.0, centre + half)
    return (low, high)


def mcnemar_exact(b: int, c: int) -> float:
    """The two-sided exact McNemar p-value for ``b`` tasks only A resolves and ``c`` only B
    resolves: twice the smaller binomial tail of b + c fair coin flips, at most 1."""
    if b < 0 or c < 0:
        raise ValueError(f"mcnemar_exact: counts must not be negative; got {b}, {c}")
    n = b + c
    if n == 0:
        return 1.0
    # Exact integers up to the one division: no underflow for thousands of tasks. Each
    # binomial coefficient from the one before (C(n, i+1) = C(n, i) (n - i) / (i + 1), exact),
    # not afresh: thousands of discordant tasks cost milliseconds, not seconds.
    tail, term = 0, 1
    for i in range(min(b, c) + 1):
        tail += term
        term = term * (n - i) // (i + 1)
    return min(1.0, 2 * tail / (1 << n))
