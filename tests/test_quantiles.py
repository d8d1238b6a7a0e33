"""The core's latency quantiles (analyzer._core.Quantiles, core/src/quantiles.rs), which
``live --stats`` reads, against the ``ddsketch`` package: exact values up to the limit, then
the bins, zero count and sum that ``DDSketch.add`` of each value in turn gives, and the
percentiles read from them; states, and merges in any split. (``stats``' percentiles are
exact at any count: its queries, ``analyzer.figures``, tested in tests/test_stats.py.)"""
from __future__ import annotations

import math
import random
from typing import Any

import pytest
from ddsketch import DDSketch

from analyzer._core import EXACT_LIMIT, RELATIVE_ACCURACY, Quantiles, sum_ns

TINY = DDSketch(RELATIVE_ACCURACY)._mapping.min_possible
QS = [0.0, 0.001, 0.25, 0.5, 0.9, 0.99, 0.999, 1.0]


def nearest_rank_index(q: float, n: int) -> int:
    """The definition (README, analyzer.figures): the 0-based index of the nearest-rank
    q-quantile of n sorted values, the smallest rank ceil(q * n) at least 1."""
    return min(n - 1, max(0, math.ceil(q * n - 1e-9) - 1))


def _bins(store: Any) -> list[list[float]]:
    return [[i + store.offset, c] for i, c in enumerate(store.bins) if c] if store.count else []


def reference(values: list[float], limit: int) -> tuple[dict[str, Any], DDSketch | None]:
    """The state the values give, the sketch made with the ddsketch package."""
    st: dict[str, Any] = {"count": len(values), "sum_ns": sum(round(v * 1e6) for v in values), "limit": limit,
                          "min": min(values) if values else None, "max": max(values) if values else None}
    if len(values) <= limit:
        st["values"] = list(values)
        return st, None
    sk = DDSketch(RELATIVE_ACCURACY)
    for v in values:
        sk.add(v)
    st["sketch"] = {"relative_accuracy": RELATIVE_ACCURACY, "zero": sk._zero_count, "pos": _bins(sk._store),
                    "neg": _bins(sk._negative_store), "sum": sk._sum}
    return st, sk


def reference_quantile(values: list[float], sk: DDSketch | None, q: float) -> float:
    """Nearest rank: exact, or the sketch's bucket for rank k (aimed at k + 0.5), clamped to
    the exact min and max."""
    n = len(values)
    k = nearest_rank_index(q, n)
    if sk is None:
        return sorted(values)[k]
    if k <= 0:
        return min(values)
    if k >= n - 1:
        return max(values)
    v = sk.get_quantile_value(1.0 if n <= 1 else min(1.0, (k + 0.5) / (n - 1)))
    return min(max(values), max(min(values), v))


def _values(rng: random.Random, n: int) -> list[float]:
    pool = [rng.expovariate(0.1) for _ in range(60)]        # repeats, as latencies in us do
    return [rng.choice([rng.choice(pool), rng.expovariate(0.05), -rng.expovariate(1.0), 0.0, -0.0, 5e-324,
                        TINY, -TINY, TINY / 2, 1e-300, -1e-300, round(rng.uniform(0, 50), 3)])
            for _ in range(n)]


@pytest.mark.parametrize("n, limit", [(0, 10), (7, 10), (10, 10), (11, 10), (5000, 100), (3000, EXACT_LIMIT)])
def test_the_bins_and_percentiles_are_the_ddsketch_packages(n: int, limit: int) -> None:
    values = _values(random.Random(n + limit), n)
    q = Quantiles(limit)
    for v in values:
        q.add(v)
    st, sk = reference(values, limit)
    assert q.to_state() == st
    assert q.exact is (sk is None) and q.count == n and q.sum_ns == st["sum_ns"]
    if n:
        assert q.quantiles(QS) == [reference_quantile(values, sk, p) for p in QS]
        assert q.quantile(0.5) == reference_quantile(values, sk, 0.5)
        assert (q.min, q.max) == (min(values), max(values))
    else:
        assert q.quantiles(QS) is None and q.quantile(0.5) is None


def test_extend_is_add_of_each_value_in_turn() -> None:
    rng = random.Random(8)
    values = _values(rng, 4000)
    one = Quantiles(100)
    for v in values:
        one.add(v)
    batched = Quantiles(100)
    i = 0
    while i < len(values):
        n = rng.randint(1, 700)
        batched.extend(values[i:i + n])
        i += n
    assert batched.to_state() == one.to_state()


@pytest.mark.parametrize("cut", [0, 30, 99, 100, 101, 2500, 5000])
def test_merging_two_parts_gives_one_accumulators_state(cut: int) -> None:
    values = _values(random.Random(cut), 5000)
    one = Quantiles(200)
    one.extend(values)
    # exact + exact within the limit stays exact; past it, and with a sketch, all goes to the sketch
    for a_vals, b_vals in ((values[:cut], values[cut:]), (values[cut:], values[:cut])):
        a, b = Quantiles(200), Quantiles(200)
        a.extend(a_vals)
        b.extend(b_vals)
        a.merge(b)
        merged = a.to_state()
        mine = one.to_state()
        # the sketch's sum adds floats in another order: within rounding; all else exactly
        assert merged["sketch"].pop("sum") == pytest.approx(mine["sketch"].pop("sum"))
        assert merged == mine
    small = Quantiles(200)
    small.extend(values[:50])
    other = Quantiles(200)
    other.extend(values[50:120])
    small.merge(other)
    assert small.exact and small.to_state() == reference(values[:120], 200)[0]


def test_a_state_round_trip_keeps_every_figure() -> None:
    values = _values(random.Random(4), 3000)
    for limit in (100, 5000):
        q = Quantiles(limit)
        q.extend(values)
        again = Quantiles.from_state(q.to_state())
        assert again.to_state() == q.to_state()
        assert again.quantiles(QS) == q.quantiles(QS) and again.exact is q.exact
        assert (again.count, again.min, again.max, again.sum_ns) == (q.count, q.min, q.max, q.sum_ns)
        # a state the ddsketch package's figures make reads the same
        st, _sk = reference(values, limit)
        assert Quantiles.from_state(st).to_state() == st
    empty = Quantiles()
    assert Quantiles.from_state(empty.to_state()).to_state() == empty.to_state() == \
        {"count": 0, "sum_ns": 0, "limit": EXACT_LIMIT, "min": None, "max": None, "values": []}
    st, _sk = reference(values, 100)
    st["sketch"]["relative_accuracy"] = 0.02
    with pytest.raises(ValueError, match="relative accuracy"):
        Quantiles.from_state(st)
    with pytest.raises(KeyError):
        Quantiles.from_state({"count": 1})


def test_sum_ns_rounds_each_value_as_python_does() -> None:
    values = _values(random.Random(2), 2000) + [0.0000005, 0.0000015, 2.5e-6, -2.5e-6, 1e6]
    assert sum_ns(values) == sum(round(v * 1e6) for v in values)
    assert sum_ns([]) == 0


def test_quantiles_switch_exactly_at_limit() -> None:
    q = Quantiles(limit=10)
    for v in range(1, 11):
        q.add(float(v))
    assert q.exact and q.quantile(0.5) == 5.0
    q.add(11.0)
    assert not q.exact
    assert q.quantile(0.5) == pytest.approx(6.0, rel=RELATIVE_ACCURACY)
    assert q.quantile(1.0) == 11.0 and q.quantile(0.0) == 1.0


def test_quantiles_zero_and_negative_values_in_sketch() -> None:
    q = Quantiles(limit=2)
    vals = [-4.0, 0.0, 0.0, 2.0, 8.0]
    for v in vals:
        q.add(v)
    assert not q.exact
    assert q.quantile(0.2) == -4.0          # clamped to the exact min
    assert q.quantile(0.4) == 0 and q.quantile(0.6) == 0
    assert q.quantile(0.8) == pytest.approx(2.0, rel=RELATIVE_ACCURACY)
