"""Tests of the linear cost model and its online fitter (``handler/cost_model.py``)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from handler.cost_model import (
    DEFAULT_COST_MODEL,
    DEFAULT_DURATION_SPREAD,
    CostModelFitter,
    LinearCostModel,
    duration_padding,
    fit_linear_cost_model,
)

#: A GPU-like truth: large per-call overhead, cheap padded tokens; the fitter's default spread.
_TRUE_MODEL = LinearCostModel(
    fixed_s=0.020, per_padded_token_s=1e-4, per_item_s=5e-3, duration_spread=DEFAULT_DURATION_SPREAD
)
_SPREAD = _TRUE_MODEL.duration_spread


def _synthetic_calls(
    count: int, *, seed: int = 1234, noise: float = 0.01
) -> list[tuple[int, int, float]]:
    """``count`` calls of random shape timed by ``_TRUE_MODEL`` with relative Gaussian noise."""
    rng = np.random.default_rng(seed)
    num_items = rng.integers(1, 17, size=count)
    max_tokens = rng.integers(5, 201, size=count)
    calls = []
    for items, tokens in zip(num_items.tolist(), max_tokens.tolist()):
        seconds = _TRUE_MODEL.estimate_s(items, tokens) * (1.0 + noise * rng.standard_normal())
        calls.append((items, tokens, seconds))
    return calls


def _assert_close(model: LinearCostModel, truth: LinearCostModel, rel: float) -> None:
    assert model.fixed_s == pytest.approx(truth.fixed_s, rel=rel)
    assert model.per_padded_token_s == pytest.approx(truth.per_padded_token_s, rel=rel)
    assert model.per_item_s == pytest.approx(truth.per_item_s, rel=rel)
    assert model.duration_spread == truth.duration_spread


# ---------------------------------------------------------------- LinearCostModel


def test_linear_estimate_formula():
    model = LinearCostModel(fixed_s=0.5, per_padded_token_s=0.01, per_item_s=0.1)
    assert model.estimate_s(3, 20) == pytest.approx(0.5 + 0.01 * 60 + 0.1 * 3)


def test_duration_padding_is_one_plus_spread_times_expected_max_normal():
    assert duration_padding(1, 0.5) == 1.0
    assert duration_padding(7, 0.0) == 1.0
    # Blom's approximation of the expected maximum of n standard normals: 0.589, 1.049, 1.769.
    assert duration_padding(2, 0.1) == pytest.approx(1.05895, abs=1e-5)
    assert duration_padding(4, 0.1) == pytest.approx(1.10491, abs=1e-5)
    assert duration_padding(16, 0.1) == pytest.approx(1.17688, abs=1e-5)
    factors = [duration_padding(n, 0.07) for n in range(1, 33)]
    assert factors == sorted(factors)


def test_linear_estimate_with_duration_spread():
    model = LinearCostModel(fixed_s=0.5, per_padded_token_s=0.01, per_item_s=0.1, duration_spread=0.1)
    # e(3) = ndtri(2.625 / 3.25) = 0.86942
    assert model.estimate_s(3, 20) == pytest.approx(0.5 + 0.01 * 60 * 1.086942 + 0.1 * 3, rel=1e-6)
    assert model.estimate_s(1, 20) == pytest.approx(0.5 + 0.01 * 20 + 0.1)


def test_duration_spread_makes_equal_length_merges_cost_more():
    # Without per-call overhead, merging items of equal token length only adds
    # (hidden) audio padding, so two calls are estimated cheaper than one.
    model = LinearCostModel(fixed_s=0.0, per_padded_token_s=0.0016, per_item_s=0.0, duration_spread=0.07)
    assert model.estimate_s(2, 80) == pytest.approx(2 * model.estimate_s(1, 80) * 1.041262, rel=1e-6)
    assert model.estimate_s(2, 80) > 2 * model.estimate_s(1, 80)


@pytest.mark.parametrize("field", ["fixed_s", "per_padded_token_s", "per_item_s", "duration_spread"])
@pytest.mark.parametrize("bad", [-1e-6, math.nan, math.inf])
def test_linear_model_rejects_bad_coefficients(field, bad):
    kwargs = {"fixed_s": 0.0, "per_padded_token_s": 0.0, "per_item_s": 0.0, field: bad}
    with pytest.raises(ValueError, match=field):
        LinearCostModel(**kwargs)


def test_default_model_groups_only_near_equal_lengths():
    # Merging two calls pays off only when it adds <= fixed_s / per_padded_token_s tokens.
    assert DEFAULT_COST_MODEL.fixed_s / DEFAULT_COST_MODEL.per_padded_token_s == pytest.approx(10.0)
    together = DEFAULT_COST_MODEL.estimate_s(2, 100)
    assert together < DEFAULT_COST_MODEL.estimate_s(1, 100) + DEFAULT_COST_MODEL.estimate_s(1, 95)
    assert together > DEFAULT_COST_MODEL.estimate_s(1, 100) + DEFAULT_COST_MODEL.estimate_s(1, 80)


# ---------------------------------------------------------------- fitting


def test_fit_recovers_known_coefficients():
    fitted = fit_linear_cost_model(_synthetic_calls(256), duration_spread=_SPREAD)
    assert fitted is not None
    _assert_close(fitted, _TRUE_MODEL, rel=0.05)


def test_fit_is_exact_on_noise_free_data():
    fitted = fit_linear_cost_model(_synthetic_calls(64, noise=0.0), duration_spread=_SPREAD)
    assert fitted is not None
    _assert_close(fitted, _TRUE_MODEL, rel=1e-6)


#: A CPU-like truth (Piper on 2 cores): small per-call overhead, padded tokens dominate.
_CPU_MODEL = LinearCostModel(fixed_s=0.007, per_padded_token_s=0.0016, per_item_s=0.0, duration_spread=_SPREAD)


def _cpu_calls(count: int, *, seed: int, noise: float) -> list[tuple[int, int, float]]:
    """Mostly small calls of 20-120 tokens, as the planner makes on a CPU, timed by ``_CPU_MODEL``."""
    rng = np.random.default_rng(seed)
    calls = []
    for _ in range(count):
        items, tokens = int(rng.choice([1, 1, 1, 2, 3, 4, 8])), int(rng.integers(20, 121))
        calls.append((items, tokens, _CPU_MODEL.estimate_s(items, tokens) * (1.0 + noise * rng.standard_normal())))
    return calls


@pytest.mark.parametrize("seed", range(5))
def test_relative_fit_measures_a_small_overhead_under_noise(seed):
    # 7 % timing noise on calls of 30 ms to 1.5 s: an absolute least-squares fit put
    # fixed_s anywhere in 2-12 ms on these seeds; the relative fit stays within 10 %.
    fitted = fit_linear_cost_model(_cpu_calls(256, seed=seed, noise=0.07), duration_spread=_SPREAD)
    assert fitted is not None
    assert fitted.fixed_s == pytest.approx(_CPU_MODEL.fixed_s, rel=0.10)
    assert fitted.per_padded_token_s == pytest.approx(_CPU_MODEL.per_padded_token_s, rel=0.03)
    assert fitted.per_item_s < 0.0015


def test_fit_shrugs_off_slow_outliers():
    # Six calls slowed 3x by outside load: absolute NNLS fitted fixed_s = 0 and
    # 2.0 ms per token here; the robust relative fit barely moves.
    exact = _cpu_calls(64, seed=1, noise=0.0)
    fitted = fit_linear_cost_model(exact + [(n, t, 3.0 * s) for n, t, s in exact[:6]], duration_spread=_SPREAD)
    assert fitted is not None
    assert fitted.fixed_s == pytest.approx(_CPU_MODEL.fixed_s, rel=0.05)
    assert fitted.per_padded_token_s == pytest.approx(_CPU_MODEL.per_padded_token_s, rel=0.01)
    assert fitted.per_item_s < 1e-4


def test_fit_keeps_coefficients_non_negative():
    # Timings that fall with size would need a negative coefficient; NNLS clamps it to 0.
    calls = [(n, t, max(0.001, 1.0 - 0.01 * n * t)) for n in (1, 2, 4, 8) for t in (5, 10, 20)]
    fitted = fit_linear_cost_model(calls)
    assert fitted is not None
    assert min(fitted.fixed_s, fitted.per_padded_token_s, fitted.per_item_s) >= 0.0


def test_fit_refuses_underdetermined_data():
    one_item_count = [(4, t, 0.01 * t) for t in range(1, 20)]
    one_shape_per_count = [(n, 10, 0.1 * n) for n in (1, 2, 3, 4) for _ in range(4)]
    assert fit_linear_cost_model(_synthetic_calls(7)) is None  # fewer than min_samples
    assert fit_linear_cost_model(one_item_count) is None  # 1 distinct item count
    assert fit_linear_cost_model(one_shape_per_count) is None  # rank 2: n*t == 10*n
    assert fit_linear_cost_model([]) is None


# ---------------------------------------------------------------- CostModelFitter


def test_default_model_before_enough_data():
    fitter = CostModelFitter()
    assert fitter.model is DEFAULT_COST_MODEL
    for call in _synthetic_calls(15):
        fitter.record(*call)
        assert not fitter.maybe_refresh()
    assert fitter.model is DEFAULT_COST_MODEL


def test_fitter_recovers_known_coefficients():
    fitter = CostModelFitter()
    refreshes = 0
    for call in _synthetic_calls(256):
        assert fitter.record(*call)
        refreshes += fitter.maybe_refresh()
    assert refreshes == 256 // 16
    _assert_close(fitter.model, _TRUE_MODEL, rel=0.05)


def test_refresh_cadence():
    fitter = CostModelFitter(refresh_every=5, min_samples=3)
    outcomes = []
    for call in _synthetic_calls(20):
        fitter.record(*call)
        outcomes.append(fitter.maybe_refresh())
    assert [i for i, refreshed in enumerate(outcomes) if refreshed] == [4, 9, 14, 19]
    assert not fitter.maybe_refresh()  # nothing new since the last attempt


def test_window_is_bounded_and_forgets_old_calls():
    fitter = CostModelFitter(window=32, refresh_every=32)
    slow = LinearCostModel(fixed_s=1.0, per_padded_token_s=1e-2, per_item_s=0.1, duration_spread=_SPREAD)
    rng = np.random.default_rng(7)
    for _ in range(100):
        n, t = int(rng.integers(1, 9)), int(rng.integers(5, 50))
        fitter.record(n, t, slow.estimate_s(n, t))
    for n, t, seconds in _synthetic_calls(32, noise=0.0):
        fitter.record(n, t, seconds)
    assert fitter.num_samples == 32
    assert fitter.maybe_refresh()
    _assert_close(fitter.model, _TRUE_MODEL, rel=1e-6)  # only the last 32 calls count


@pytest.mark.parametrize(
    "bad",
    [
        (0, 10, 0.1),
        (2, 0, 0.1),
        (-1, 10, 0.1),
        (2, 10, 0.0),
        (2, 10, -0.5),
        (2, 10, math.nan),
        (2, 10, math.inf),
        (2.5, 10, 0.1),
        (2, None, 0.1),
        (2, 10, "fast"),
    ],
)
def test_bad_samples_are_ignored(bad):
    fitter = CostModelFitter()
    assert not fitter.record(*bad)
    assert fitter.num_samples == 0
    assert fitter.num_ignored == 1


def test_bad_samples_never_disturb_the_fit():
    fitter = CostModelFitter(refresh_every=1)
    for index, call in enumerate(_synthetic_calls(64, noise=0.0)):
        fitter.record(*call)
        fitter.record(call[0], call[1], math.nan if index % 2 else -1.0)
        fitter.maybe_refresh()
    assert fitter.num_ignored == 64
    _assert_close(fitter.model, _TRUE_MODEL, rel=1e-6)


def test_degenerate_window_keeps_previous_model():
    fitter = CostModelFitter(refresh_every=8)
    for call in _synthetic_calls(16, noise=0.0):
        fitter.record(*call)
    assert fitter.maybe_refresh()
    previous = fitter.model
    refit = CostModelFitter(initial=previous, window=8, refresh_every=8)
    for _ in range(8):
        refit.record(3, 40, 0.2)  # one shape only: cannot determine three coefficients
    assert not refit.maybe_refresh()
    assert refit.model is previous


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"window": 0}, "window"),
        ({"refresh_every": 0}, "refresh_every"),
        ({"min_samples": 2}, "min_samples"),
        ({"duration_spread": -0.1}, "duration_spread"),
        ({"duration_spread": math.nan}, "duration_spread"),
    ],
)
def test_fitter_rejects_bad_settings(kwargs, name):
    with pytest.raises(ValueError, match=name):
        CostModelFitter(**kwargs)


def test_fitter_fits_with_its_duration_spread():
    fitter = CostModelFitter(refresh_every=64, duration_spread=0.0)
    spread_free = LinearCostModel(fixed_s=0.020, per_padded_token_s=1e-4, per_item_s=5e-3)
    rng = np.random.default_rng(3)
    for _ in range(64):
        n, t = int(rng.integers(1, 17)), int(rng.integers(5, 201))
        fitter.record(n, t, spread_free.estimate_s(n, t))
    assert fitter.maybe_refresh()
    _assert_close(fitter.model, spread_free, rel=1e-6)
    assert CostModelFitter().model is DEFAULT_COST_MODEL  # the cold start keeps its own spread (0)


def test_numpy_integer_counts_are_accepted():
    fitter = CostModelFitter()
    assert fitter.record(np.int64(3), np.int32(40), np.float32(0.25))
    assert fitter.num_samples == 1
