"""The shared statistics (core/stats.py) on hand-computable cases: the bootstrap's draws and
percentile interval, a paired statistic over grouped rows, Pearson of a constant row, Student's
t, Welch's interval and the Hodges-Lehmann estimate with its Wilcoxon interval."""
from __future__ import annotations

import math
import random

import numpy as np
import pytest

from palkit.core import stats
from palkit.core.stats import (Estimate, bootstrap_indices, grouped_bootstrap_indices,
                               hodges_lehmann, paired_bootstrap, percentile_interval,
                               rowwise_accuracy, rowwise_pearson, t_975, t_halfwidth,
                               welch_interval)


def test_each_constant_is_the_one_every_interval_uses():
    assert (stats.CONFIDENCE, stats.RESAMPLES, stats.SEED) == (0.95, 2000, 0)
    from palkit.export.gate import Gate
    assert (Gate().seed, Gate().resamples) == (stats.SEED, stats.RESAMPLES)


def test_the_draws_are_seeded_and_groups_come_from_one_generator_in_order():
    a, b = bootstrap_indices(50, 100, seed=3), bootstrap_indices(50, 100, seed=3)
    assert np.array_equal(a, b) and a.shape == (100, 50) and 0 <= a.min() and a.max() < 50
    assert not np.array_equal(a, bootstrap_indices(50, 100, seed=4))
    first, second = grouped_bootstrap_indices([50, 7], 100, seed=3)
    assert np.array_equal(first, a) and second.shape == (100, 7) and second.max() < 7
    rng = np.random.default_rng(3)  # one generator, the groups drawn in order
    assert np.array_equal(first, rng.integers(0, 50, (100, 50)))
    assert np.array_equal(second, rng.integers(0, 7, (100, 7)))


def test_the_interval_is_the_percentiles():
    # 0..1000: the 2.5% and 97.5% points of 1001 values, interpolated at q * (n - 1)
    assert percentile_interval(np.arange(1001.0)) == pytest.approx([25.0, 975.0])
    assert percentile_interval(range(101), confidence=0.9) == pytest.approx([5.0, 95.0])


def test_a_paired_difference_over_grouped_rows():
    """Two tasks; side b is a's predictions with every tenth one of the first task wrong: the
    gap of the tasks' mean accuracy is 5 points, and the interval holds it."""
    gold = {"x": np.array([0, 1, 1, 0] * 50), "y": np.array([2, 0, 1] * 30)}
    a = {t: g.copy() for t, g in gold.items()}
    b = {t: g.copy() for t, g in gold.items()}
    b["x"][::10] = 1 - b["x"][::10]

    def gap(ix: np.ndarray, iy: np.ndarray) -> np.ndarray:
        rows = {"x": ix, "y": iy}
        return 100 * np.mean([rowwise_accuracy(a[t][rows[t]], gold[t][rows[t]])
                              - rowwise_accuracy(b[t][rows[t]], gold[t][rows[t]])
                              for t in gold], axis=0)

    est = paired_bootstrap(gap, [200, 90], resamples=500)
    assert est.value == pytest.approx(5.0) and est.samples.shape == (500,)
    low, high = est.interval
    assert 2 < low < 5 < high < 8
    same = paired_bootstrap(lambda i: rowwise_accuracy(a["x"][i], a["x"][i]), [200])
    assert (same.value, same.interval) == (1.0, [1.0, 1.0])


def test_rowwise_metrics():
    x = np.array([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0], [2.0, 2.0, 2.0]])
    y = np.array([[2.0, 4.0, 6.0], [3.0, 2.0, 1.0], [1.0, 2.0, 3.0]])
    assert rowwise_pearson(x, y) == pytest.approx([1.0, -1.0, 0.0])  # a constant row reads 0
    assert rowwise_accuracy([[1, 2, 3], [1, 1, 1]], [1, 2, 0]) == pytest.approx([2 / 3, 1 / 3])


def test_t_quantile_is_students_beyond_the_table_too():
    """The table where few degrees make it large, the expansion beyond (exact values from
    statistical tables)."""
    for df, exact in ((1, 12.706), (2, 4.303), (4, 2.776), (9, 2.262), (12, 2.179),
                      (30, 2.042), (120, 1.980)):
        assert t_975(df) == pytest.approx(exact, abs=0.002)
    assert t_975(3.7) == t_975(3)  # fractional degrees round down: the wider interval
    assert t_halfwidth([1.0, 2.0, 3.0]) == pytest.approx(4.303 * 1.0 / math.sqrt(3))
    assert t_halfwidth([1.0]) == 0.0


def test_welchs_interval():
    # se = sqrt(0.23^2/3 + 0.3^2/3) = 0.218 on about 3.7 degrees of freedom: t(3) = 3.182
    low, high = welch_interval(75.75, 0.23, 3, 75.9, 0.3, 3)
    assert (low, high) == pytest.approx((-0.15 - 3.182 * 0.2183, -0.15 + 3.182 * 0.2183),
                                        abs=1e-3)


def test_hodges_lehmann_is_the_median_of_walsh_averages_with_wilcoxons_interval():
    est = hodges_lehmann([1.0, 2.0, 10.0])  # Walsh: 1, 1.5, 2, 5.5, 6, 10
    assert isinstance(est, Estimate) and est.value == 3.75
    # n = 3 is too few for any 95% rank interval: it spans every Walsh average
    assert est.interval == [1.0, 10.0]
    rng = random.Random(0)
    values = [rng.gauss(0, 1) for _ in range(40)] + [50.0] * 8  # 8 outliers of 48
    robust = hodges_lehmann(values)
    assert abs(robust.value) < 0.6 and robust.interval[0] < robust.value < robust.interval[1]
    # k from the normal approximation: n = 20 gives the tabulated critical value 52
    walsh = sorted((a + b) / 2 for i, a in enumerate(range(20)) for b in list(range(20))[i:])
    assert hodges_lehmann(list(range(20))).interval == [walsh[52], walsh[-53]]
