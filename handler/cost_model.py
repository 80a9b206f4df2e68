"""A linear cost model of one engine call, and its online fit from measured timings.

The planner (``handler/batching.py``) prices a sub-batch of ``num_items``
items padded to ``max_tokens`` tokens with::

    estimate_s = fixed_s + per_padded_token_s * num_items * max_tokens + per_item_s * num_items

``fixed_s`` is the per-call overhead (Python, session run, kernel launches),
``per_padded_token_s`` the work that scales with the padded input (encoder,
duration predictor, and -- through the roughly proportional audio length --
the decoder), ``per_item_s`` the work per row that padding does not change.
Note that ``per_item_s`` never changes *which* plan is cheapest (every plan
pays it once per item); only the ratio ``fixed_s / per_padded_token_s``
does: merging two calls pays off when it adds fewer than
``fixed_s / per_padded_token_s`` padded tokens.

``CostModelFitter`` keeps a bounded window of recent ``(num_items,
max_tokens, seconds)`` measurements and refits the three coefficients by
non-negative least squares every ``refresh_every`` records.
"""

from __future__ import annotations

import logging
import math
import operator
from collections import deque
from dataclasses import dataclass
from typing import Final, Sequence

import numpy as np
from scipy.optimize import nnls

_LOGGER = logging.getLogger(__name__)

#: A fit needs at least this many unknowns' worth of samples, whatever the setting.
_NUM_COEFFICIENTS: Final = 3


@dataclass(frozen=True, kw_only=True)
class LinearCostModel:
    """Seconds of one engine call, linear in its shape (see the module docstring).

    Attributes:
        fixed_s: per-call overhead, seconds (finite, >= 0).
        per_padded_token_s: seconds per padded token, ``num_items * max_tokens``
            (finite, >= 0).
        per_item_s: seconds per item (row) of the call (finite, >= 0).

    Raises:
        ValueError: a coefficient is negative or not finite; the message names it.
    """

    fixed_s: float
    per_padded_token_s: float
    per_item_s: float

    def __post_init__(self) -> None:
        for name in ("fixed_s", "per_padded_token_s", "per_item_s"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(
                    f"LinearCostModel.{name} must be a finite number >= 0, got {value!r}"
                )

    def estimate_s(self, num_items: int, max_tokens: int) -> float:
        """Estimated seconds of one call of ``num_items`` items padded to ``max_tokens`` tokens.

        ``fixed_s + per_padded_token_s * num_items * max_tokens + per_item_s * num_items``.
        """
        return (
            self.fixed_s
            + self.per_padded_token_s * num_items * max_tokens
            + self.per_item_s * num_items
        )


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
#: because it does not affect plans.
DEFAULT_COST_MODEL: Final = LinearCostModel(fixed_s=0.010, per_padded_token_s=0.001, per_item_s=0.0)


def fit_linear_cost_model(
    samples: Sequence[tuple[int, int, float]], *, min_samples: int = 8
) -> LinearCostModel | None:
    """Fit ``LinearCostModel`` to measured calls by non-negative least squares.

    Solves ``min ||A c - y||_2`` subject to ``c >= 0`` (``scipy.optimize.nnls``)
    with design matrix ``A = [1, num_items * max_tokens, num_items]`` (one row
    per call), ``y`` the measured seconds and ``c = (fixed_s,
    per_padded_token_s, per_item_s)``. Columns are scaled to unit max before
    solving so that their very different magnitudes do not hurt conditioning.

    Args:
        samples: ``(num_items, max_tokens, seconds)`` per call; assumed valid
            (``num_items, max_tokens >= 1``, ``seconds`` finite and > 0).
        min_samples: fewest samples to attempt a fit (at least 3 are used).

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
    design = np.column_stack([np.ones_like(num_items), num_items * max_tokens, num_items])
    scale = np.abs(design).max(axis=0)
    if not np.all(scale > 0) or np.linalg.matrix_rank(design / scale) < _NUM_COEFFICIENTS:
        return None
    try:
        scaled_coef, _residual = nnls(design / scale, seconds)
    except (RuntimeError, ValueError) as exc:
        _LOGGER.warning("cost model fit failed, keeping the previous model: %s", exc)
        return None
    coef = scaled_coef / scale
    if not np.all(np.isfinite(coef)) or not np.any(coef > 0):
        return None
    return LinearCostModel(
        fixed_s=float(coef[0]), per_padded_token_s=float(coef[1]), per_item_s=float(coef[2])
    )


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
            the model follows changes in load or hardware.
        refresh_every: valid records between refit attempts (>= 1).
        min_samples: fewest samples in the window for a fit (>= 3).

    Raises:
        ValueError: a setting is out of range; the message names it.
    """

    def __init__(
        self,
        *,
        initial: LinearCostModel = DEFAULT_COST_MODEL,
        window: int = 256,
        refresh_every: int = 16,
        min_samples: int = 8,
    ) -> None:
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
        fitted = fit_linear_cost_model(list(self._samples), min_samples=self._min_samples)
        if fitted is None:
            _LOGGER.debug(
                "cost model refit skipped: %d samples do not determine it", len(self._samples)
            )
            return False
        self._model = fitted
        return True
