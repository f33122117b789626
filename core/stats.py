"""The statistics palkit's measurements share, each constant defined once: the confidence of every
interval, the paired bootstrap (the int8 gate's metric change, the report's accuracy gap, any
metric computed over rows of example indices), Student's t (between-process and Welch intervals)
and the Hodges-Lehmann estimate with its Wilcoxon interval (paired timing).

numpy and the standard library only, so that every layer may use it."""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Callable, Sequence

import numpy as np
from numpy.typing import ArrayLike

CONFIDENCE = 0.95  # of every interval palkit quotes; t_975 is its Student quantile
RESAMPLES = 2000   # bootstrap resamples: the percentile interval's 2.5% tail is then 50 of them
SEED = 0           # fixed, so the same outputs always get the same interval (and verdict)
# Student's t, 97.5th percentile, by degrees of freedom, where few degrees make it large
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306}

# A statistic over bootstrap rows: one [resamples, n] index array per group in, one value per
# row out (e.g. a metric of the bundle's predictions minus the reference's on the same rows).
Statistic = Callable[..., np.ndarray]


@dataclass(frozen=True)
class Estimate:
    """A statistic's value and its CONFIDENCE interval [low, high]."""
    value: float
    interval: list[float]


@dataclass(frozen=True)
class Bootstrap(Estimate):
    """A bootstrap estimate, with the statistic on each resample."""
    samples: np.ndarray = field(repr=False, compare=False, default_factory=lambda: np.empty(0))


def _z(confidence: float) -> float:
    return NormalDist().inv_cdf(0.5 + confidence / 2)


# ---- the bootstrap -----------------------------------------------------------------------------

def grouped_bootstrap_indices(sizes: Sequence[int], resamples: int = RESAMPLES,
                              seed: int = SEED) -> list[np.ndarray]:
    """One [resamples, n] array of indices per group of n examples, drawn with replacement
    within the group, the groups in order from one generator seeded `seed` (deterministic)."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, n, (resamples, n)) for n in sizes]


def bootstrap_indices(n: int, resamples: int = RESAMPLES, seed: int = SEED) -> np.ndarray:
    """[resamples, n] indices of n examples drawn with replacement (the one-group case)."""
    return grouped_bootstrap_indices([n], resamples, seed)[0]


def percentile_interval(samples: ArrayLike, confidence: float = CONFIDENCE) -> list[float]:
    """The central `confidence` interval of bootstrap samples (percentile method, linear
    interpolation between ranks)."""
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(np.asarray(samples, dtype=np.float64), [tail, 100 - tail])
    return [float(low), float(high)]


def paired_bootstrap(statistic: Statistic, sizes: Sequence[int], resamples: int = RESAMPLES,
                     seed: int = SEED, confidence: float = CONFIDENCE) -> Bootstrap:
    """`statistic(*rows)` on the whole sample and its percentile interval over `resamples`
    resamples, each drawn within each group of `sizes` (e.g. the examples of each task). Paired:
    a statistic comparing two sides computes both on the same rows, so every resample keeps
    each example's two outcomes together and the interval sees only their difference's spread."""
    samples = np.asarray(statistic(*grouped_bootstrap_indices(sizes, resamples, seed)),
                         dtype=np.float64)
    whole = np.asarray(statistic(*[np.arange(n)[None] for n in sizes]), dtype=np.float64)
    return Bootstrap(float(whole[0]), percentile_interval(samples, confidence), samples)


def rowwise_accuracy(pred: ArrayLike, gold: ArrayLike) -> np.ndarray:
    """The fraction of equal entries of each row ([R, n] -> [R])."""
    return (np.asarray(pred) == np.asarray(gold)).mean(-1)


def rowwise_pearson(x: ArrayLike, y: ArrayLike) -> np.ndarray:
    """Pearson correlation of each row of x with the same row of y ([R, n] -> [R]); 0 for a
    constant row, whose correlation is undefined (a resample can draw one example n times)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    x, y = x - x.mean(-1, keepdims=True), y - y.mean(-1, keepdims=True)
    denom = np.sqrt((x * x).sum(-1) * (y * y).sum(-1))
    safe = np.where(denom > 0, denom, 1.0)
    return np.where(denom > 0, (x * y).sum(-1) / safe, 0.0)


# ---- Student's t -------------------------------------------------------------------------------

def t_975(df: float) -> float:
    """Student's t 97.5th percentile (the two-sided 95% interval's): the table up to 8 degrees of
    freedom, beyond it the Cornish-Fisher expansion around the normal quantile (within 0.002 of
    the exact value). Fractional degrees (Welch's) round down, the wider side."""
    whole = max(1, math.floor(df))
    if whole in T_975:
        return T_975[whole]
    z = NormalDist().inv_cdf(0.975)
    return (z + (z ** 3 + z) / (4 * whole) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * whole ** 2)
            + (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / (384 * whole ** 3))


def t_halfwidth(values: Sequence[float]) -> float:
    """The 95% t interval's half-width around the mean of `values` (n - 1 degrees of freedom);
    0 for fewer than two values, which show no spread."""
    n = len(values)
    return t_975(n - 1) * statistics.stdev(values) / math.sqrt(n) if n > 1 else 0.0


def welch_interval(mean_a: float, sd_a: float, n_a: int, mean_b: float, sd_b: float,
                   n_b: int) -> list[float]:
    """The 95% interval of mean_a - mean_b by Welch's t: each side its own variance, the
    Welch-Satterthwaite degrees of freedom (both n > 1)."""
    va, vb = sd_a ** 2 / n_a, sd_b ** 2 / n_b
    df = (va + vb) ** 2 / (va ** 2 / (n_a - 1) + vb ** 2 / (n_b - 1)) if va + vb > 0 else 1
    half = t_975(df) * math.sqrt(va + vb)
    gap = mean_a - mean_b
    return [gap - half, gap + half]


# ---- Hodges-Lehmann ----------------------------------------------------------------------------

def hodges_lehmann(values: Sequence[float], confidence: float = CONFIDENCE) -> Estimate:
    """The median of the Walsh averages (all pairwise means, each value with itself included):
    robust to up to 29% of outliers at nearly the mean's efficiency, and deterministic. Its
    interval is the Wilcoxon signed-rank one: the k-th smallest to the k-th largest Walsh
    average, k the statistic's lower critical value (normal approximation; fine from about 10
    values)."""
    x = np.asarray(values, dtype=np.float64)
    n = len(x)
    i, j = np.triu_indices(n)
    walsh = np.sort((x[i] + x[j]) / 2)
    middle = len(walsh) // 2
    centre = walsh[middle] if len(walsh) % 2 else (walsh[middle - 1] + walsh[middle]) / 2
    k = max(0, math.floor(n * (n + 1) / 4
                          - _z(confidence) * math.sqrt(n * (n + 1) * (2 * n + 1) / 24)))
    return Estimate(float(centre), [float(walsh[k]), float(walsh[len(walsh) - 1 - k])])
