"""A linear cost model of one engine call, and its online fit from measured timings.

The planner (``handler/batching.py``) prices a sub-batch of ``num_items``
items padded to ``max_tokens`` tokens with::

    estimate_s = fixed_s
               + per_padded_token_s * num_items * max_tokens * duration_padding(num_items)
               + per_item_s * num_items
    duration_padding(n) = 1 + duration_spread * e(n)

``fixed_s`` is the per-call overhead (Python, session run, kernel launches),
``per_padded_token_s`` the work that scales with the padded input (encoder,
duration predictor, and -- through the roughly proportional audio length --
the decoder), ``per_item_s`` the work per row that padding does not change.
Note that ``per_item_s`` never changes *which* plan is cheapest (every plan
pays it once per item); only the ratio ``fixed_s / per_padded_token_s``
does: merging two calls pays off when it adds fewer than
``fixed_s / per_padded_token_s`` padded tokens.

``duration_padding`` is the padding the planner cannot see. The flow and the
HiFi-GAN decoder, most of the work, run on audio *frames*, and a batch is
padded to its longest audio, whose length the model predicts inside the
call. Frames per token vary from item to item (coefficient of variation
``duration_spread``), so ``n`` items of equal token length are padded to the
largest of ``n`` draws: on average ``1 + duration_spread * e(n)`` times their
mean length, where ``e(n)`` is the expected maximum of ``n`` standard normal
variables (Blom's approximation ``ndtri((n - 0.375) / (n + 0.25))``: e(1) = 0,
e(2) = 0.59, e(4) = 1.05, e(8) = 1.43, e(16) = 1.77). For items of unequal
length it overestimates (the longest item dominates), which errs towards
fewer merges. Measured for ``en_US-joe-medium`` on the 720 Harvard sentences:
frames per token vary by 7.2 % (``DEFAULT_DURATION_SPREAD``); merging 2 / 4 /
8 items of exactly equal token length padded their frames by 4.3 / 7.6 /
9.0 % (the formula: 4.2 / 7.6 / 10.3 %), and such calls took 1.4 / 2.3 / 0.2 %
longer than the same items run alone on a 2-core CPU. Without this term the
fitted CPU model has ``fixed_s`` = 0, so every merge of equal-length items
looked free and the planner made them (a tie goes to fewer calls), losing
those few percent; with it, a merge must save a measured per-call overhead
larger than its expected hidden padding.

``CostModelFitter`` keeps a bounded window of recent ``(num_items,
max_tokens, seconds)`` measurements and refits the three coefficients every
``refresh_every`` records, by a robust non-negative least-squares fit of the
*relative* error (see ``fit_linear_cost_model``). Relative, because engine
calls span two orders of magnitude (a 20-token single to a 24-item batch)
and their timing noise grows with them: an absolute fit lets the big calls'
noise decide ``fixed_s``, which only the small calls can measure -- on a
2-core CPU (``scripts/bench_planner.py``) it fitted ``fixed_s`` = 0.13-0.33 s
where single calls showed about 7 ms, and the planner then merged items it
should have run alone. Robust, because a call slowed by a neighbour's load is
an outlier, not information about the engine.
"""

from __future__ import annotations

import functools
import logging
import math
import operator
from collections import deque
from dataclasses import dataclass
from typing import Final, Sequence

import numpy as np
from scipy.optimize import least_squares, nnls
from scipy.special import ndtri

_LOGGER = logging.getLogger(__name__)

#: A fit needs at least this many unknowns' worth of samples, whatever the setting.
_NUM_COEFFICIENTS: Final = 3
#: Relative residual at which the robust fit's loss turns from quadratic to
#: linear (``least_squares(loss="soft_l1", f_scale=...)``): timing noise of a
#: few percent is fitted as usual; a call 30 % or more off weighs much less.
_OUTLIER_SCALE: Final = 0.1
#: Coefficient of variation of audio frames per token between items, measured
#: for the default voice (``en_US-joe-medium``) on the Harvard sentences.
DEFAULT_DURATION_SPREAD: Final = 0.07


@functools.lru_cache(maxsize=1024)
def _expected_max_normal(num_items: int) -> float:
    """Expected maximum of ``num_items`` standard normal draws (Blom; 0.0 for one item)."""
    return float(ndtri((num_items - 0.375) / (num_items + 0.25)))


def duration_padding(num_items: int, duration_spread: float) -> float:
    """Expected padded audio frames over the frames of an item of the longest token length.

    ``1 + duration_spread * e(num_items)``, ``e`` the expected maximum of
    ``num_items`` standard normal variables; exactly 1.0 for one item or no spread.

    Args:
        num_items: items in the call (>= 1).
        duration_spread: coefficient of variation of frames per token (>= 0).
    """
    if num_items <= 1 or duration_spread == 0:
        return 1.0
    return 1.0 + duration_spread * _expected_max_normal(int(num_items))


@dataclass(frozen=True, kw_only=True)
class LinearCostModel:
    """Seconds of one engine call, linear in its shape (see the module docstring).

    Attributes:
        fixed_s: per-call overhead, seconds (finite, >= 0).
        per_padded_token_s: seconds per padded token, ``num_items * max_tokens``
            (finite, >= 0).
        per_item_s: seconds per item (row) of the call (finite, >= 0).
        duration_spread: coefficient of variation of audio frames per token
            between items (finite, >= 0); 0 prices padded tokens only.

    Raises:
        ValueError: a coefficient is negative or not finite; the message names it.
    """

    fixed_s: float
    per_padded_token_s: float
    per_item_s: float
    duration_spread: float = 0.0

    def __post_init__(self) -> None:
        for name in ("fixed_s", "per_padded_token_s", "per_item_s", "duration_spread"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(
                    f"LinearCostModel.{name} must be a finite number >= 0, got {value!r}"
                )

    def estimate_s(self, num_items: int, max_tokens: int) -> float:
        """Estimated seconds of one call of ``num_items`` items padded to ``max_tokens`` tokens.

        ``fixed_s + per_padded_token_s * num_items * max_tokens * duration_padding(num_items)
        + per_item_s * num_items``.
        """
        padded = num_items * max_tokens * duration_padding(num_items, self.duration_spread)
        return self.fixed_s + self.per_padded_token_s * padded + self.per_item_s * num_items


#: Cold-start model, used until enough measurements arrive.
#:
#: Only the ratio ``fixed_s / per_padded_token_s`` = 10 tokens matters to the
#: planner: it merges calls only when each merge adds at most ~10 padded
#: tokens, i.e. it groups items of (nearly) equal length -- a few percent of
#: padding for sentences of 50-200 phonemes. That is safe on both devices: on
#: a CPU, where padded tokens cost real time and per-call overhead is small,
#: it wastes at most ~10 tokens of work per saved call; on a GPU, where padding
#: is nearly free and per-call overhead dominates, it merely makes more calls
#: than the optimum, and the first refit (``refresh_every`` calls later)
#: corrects that. The absolute scale (1 ms per padded token, 10 ms per call)
#: is a rough CPU figure for a Piper "medium" voice; ``per_item_s`` is 0
#: because it does not affect plans. It has no ``duration_spread``, so equal
#: lengths tie and are merged; fitted models carry the fitter's spread.
DEFAULT_COST_MODEL: Final = LinearCostModel(fixed_s=0.010, per_padded_token_s=0.001, per_item_s=0.0)


def fit_linear_cost_model(
    samples: Sequence[tuple[int, int, float]],
    *,
    min_samples: int = 8,
    duration_spread: float = 0.0,
) -> LinearCostModel | None:
    """Fit ``LinearCostModel`` to measured calls, minimising a robust relative error.

    Design matrix ``A = [1, num_items * max_tokens * duration_padding(num_items),
    num_items]`` (one row per call; ``duration_spread`` is given, not fitted),
    measured seconds ``y``, coefficients ``c = (fixed_s,
    per_padded_token_s, per_item_s) >= 0``. The residual of a call is relative,
    ``(A c - y) / y``, so a 30 ms call and a 3 s call count alike. First
    ``scipy.optimize.nnls`` solves the relative least-squares problem; then
    ``scipy.optimize.least_squares`` refines it from there with the
    ``soft_l1`` loss (scale ``_OUTLIER_SCALE``) and bounds ``c >= 0``, so a few
    calls slowed by outside load do not drag the fit. Columns are scaled to
    unit max before solving so that their very different magnitudes do not
    hurt conditioning. On exact data both steps return the exact coefficients.

    Args:
        samples: ``(num_items, max_tokens, seconds)`` per call; assumed valid
            (``num_items, max_tokens >= 1``, ``seconds`` finite and > 0).
        min_samples: fewest samples to attempt a fit (at least 3 are used).
        duration_spread: the model's ``duration_spread`` (>= 0), used in the
            design matrix and copied to the result.

    Returns:
        The fitted model, or ``None`` when the data cannot determine it: fewer
        than ``min_samples`` samples, fewer than 2 distinct item counts, a
        design matrix of rank < 3, a solver failure or all-zero coefficients.
    """
    if len(samples) < max(min_samples, _NUM_COEFFICIENTS):
        return None
    data = np.asarray(samples, dtype=np.float64).reshape(-1, 3)
    num_items, max_tokens, seconds = data[:, 0], data[:, 1], data[:, 2]
    if np.unique(num_items).size < 2:
        return None
    padding = np.array([duration_padding(n, duration_spread) for n in num_items.astype(np.int64)])
    design = np.column_stack([np.ones_like(num_items), num_items * max_tokens * padding, num_items])
    scale = np.abs(design).max(axis=0)
    if not np.all(scale > 0) or np.linalg.matrix_rank(design / scale) < _NUM_COEFFICIENTS:
        return None
    relative = design / scale / seconds[:, None]  # relative residual = relative @ c' - 1
    try:
        scaled_coef = _robust_nonnegative_fit(relative)
    except (RuntimeError, ValueError) as exc:
        _LOGGER.warning("cost model fit failed, keeping the previous model: %s", exc)
        return None
    coef = scaled_coef / scale
    if not np.all(np.isfinite(coef)) or not np.any(coef > 0):
        return None
    return LinearCostModel(
        fixed_s=float(coef[0]),
        per_padded_token_s=float(coef[1]),
        per_item_s=float(coef[2]),
        duration_spread=duration_spread,
    )


def _robust_nonnegative_fit(relative: np.ndarray) -> np.ndarray:
    """``c >= 0`` minimising ``sum(soft_l1(relative @ c - 1))``, float64 ``(3,)``.

    Args:
        relative: float64 ``(calls, 3)``, each row of the scaled design divided
            by its call's measured seconds.

    Raises:
        RuntimeError / ValueError: a solver failed.
    """
    target = np.ones(relative.shape[0])
    start, _residual = nnls(relative, target)
    if np.allclose(relative @ start, target, rtol=0.0, atol=1e-12):
        return start  # exact data: nothing to be robust against
    result = least_squares(
        lambda coef: relative @ coef - target,
        start,
        jac=lambda coef: relative,
        bounds=(0.0, np.inf),
        loss="soft_l1",
        f_scale=_OUTLIER_SCALE,
    )
    if not result.success:
        raise RuntimeError(f"least_squares did not converge: {result.message}")
    return result.x


class CostModelFitter:
    """Online fit of ``LinearCostModel`` from the engine calls a worker makes.

    Usage, once per engine call::

        fitter.record(num_items, max_tokens, seconds)
        if fitter.maybe_refresh():
            _LOGGER.info("cost model refit: %s", fitter.model)

    ``record`` only stores; ``maybe_refresh`` refits from the window once
    ``refresh_every`` valid samples have arrived since the last attempt. A fit
    that the data cannot support (see ``fit_linear_cost_model``) keeps the
    previous model. Not thread-safe: one fitter per worker process.

    Args:
        initial: model returned until the first successful fit.
        window: most recent calls kept (>= 1); older ones are forgotten, so
            the model follows changes in load or hardware. Large by default:
            on a CPU the split between ``fixed_s`` and ``per_item_s``, which
            decides whether to merge, rests on the few multi-item calls and
            is a few milliseconds in calls of 0.1-1 s with ~8 % noise; fits
            of 128 of the planner's own calls on 2 cores gave ``fixed_s`` from
            6 to 19 ms, of 489 calls 0.8 ms (``scripts/bench_planner.py``).
        refresh_every: valid records between refit attempts (>= 1).
        min_samples: fewest samples in the window for a fit (>= 3).
        duration_spread: ``duration_spread`` of the fitted models (finite, >= 0;
            see the module docstring); ``initial`` keeps its own.

    Raises:
        ValueError: a setting is out of range; the message names it.
    """

    def __init__(
        self,
        *,
        initial: LinearCostModel = DEFAULT_COST_MODEL,
        window: int = 1024,
        refresh_every: int = 16,
        min_samples: int = 8,
        duration_spread: float = DEFAULT_DURATION_SPREAD,
    ) -> None:
        if not isinstance(duration_spread, (int, float)) or not 0 <= duration_spread < math.inf:
            raise ValueError(
                f"CostModelFitter duration_spread must be a finite number >= 0, got {duration_spread!r}"
            )
        for name, value, lowest in (
            ("window", window, 1),
            ("refresh_every", refresh_every, 1),
            ("min_samples", min_samples, _NUM_COEFFICIENTS),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
                raise ValueError(
                    f"CostModelFitter {name} must be an integer >= {lowest}, got {value!r}"
                )
        self._model = initial
        self._samples: deque[tuple[int, int, float]] = deque(maxlen=window)
        self._refresh_every = refresh_every
        self._min_samples = min_samples
        self._duration_spread = float(duration_spread)
        self._pending = 0
        self._num_ignored = 0

    @property
    def model(self) -> LinearCostModel:
        """The current model: ``initial`` until the first successful fit."""
        return self._model

    @property
    def num_samples(self) -> int:
        """Valid samples now in the window (<= ``window``)."""
        return len(self._samples)

    @property
    def num_ignored(self) -> int:
        """Samples rejected by ``record`` so far."""
        return self._num_ignored

    def record(self, num_items: int, max_tokens: int, seconds: float) -> bool:
        """Store one measured engine call; returns whether it was kept.

        Args:
            num_items: items in the call (an integer >= 1).
            max_tokens: tokens of its longest item (an integer >= 1).
            seconds: measured wall time of the call (finite, > 0).

        Bad samples (values out of range, NaN/inf, non-integer counts) are ignored
        and counted in ``num_ignored``; they never raise.
        """
        try:
            items, tokens = operator.index(num_items), operator.index(max_tokens)
            elapsed_s = float(seconds)
        except (TypeError, ValueError, OverflowError):
            items, tokens, elapsed_s = 0, 0, math.nan
        if items < 1 or tokens < 1 or not math.isfinite(elapsed_s) or elapsed_s <= 0:
            self._num_ignored += 1
            _LOGGER.debug(
                "ignored cost sample num_items=%r max_tokens=%r seconds=%r",
                num_items, max_tokens, seconds,
            )
            return False
        self._samples.append((items, tokens, elapsed_s))
        self._pending += 1
        return True

    def maybe_refresh(self) -> bool:
        """Refit when ``refresh_every`` samples arrived since the last attempt.

        Returns:
            True when a new model was fitted and ``model`` now returns it;
            False when it was not yet time, or the window could not support
            a fit (the previous model is kept).
        """
        if self._pending < self._refresh_every:
            return False
        self._pending = 0
        fitted = fit_linear_cost_model(
            list(self._samples), min_samples=self._min_samples, duration_spread=self._duration_spread
        )
        if fitted is None:
            _LOGGER.debug(
                "cost model refit skipped: %d samples do not determine it", len(self._samples)
            )
            return False
        self._model = fitted
        return True
