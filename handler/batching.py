"""The pure sub-batch planner: ``(items, limits, cost model) -> sub-batches``.

TorchServe hands the handler up to ``batchSize`` requests; each request is
split into sentence segments (*items*), each tokenised to ``num_tokens`` ids.
Items that share a *conditioning key* (voice, speed, noise scales) may share
one padded engine call, whose cost depends on its shape: the number of items
and the longest item (padded tokens = items x longest).

The planner:

1. groups items by key (keys in order of first appearance) -- items with
   different keys can never share a forward pass (Ray Serve's
   ``_split_batch_by_model_id`` does the same before padding);
2. sorts each group by ``(num_tokens, original index)``, so that neighbours
   have similar lengths and the order is deterministic;
3. cuts the sorted order into contiguous runs with an exact dynamic programme
   that minimises the sum of ``cost_model.estimate_s`` over the runs, subject
   to ``PlanLimits``.

Restricting the search to contiguous runs of the sorted order loses nothing
when the cost never falls as ``max_tokens`` grows (for a fixed item count):
take the sub-batch holding the longest item and swap its other members for
the longest items outside it; its own longest item is unchanged and no other
sub-batch's grows, so cost and padded tokens do not rise. Repeating this on
the rest yields contiguous runs of the same sizes.

This module is pure: no torch, no clock, no I/O, no logging. Every function
returns plain data and raises ``ValueError`` with the bad value in its
message.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final, Hashable, Protocol, Sequence

#: Two plan costs within this relative distance count as equal; the plan with
#: fewer engine calls then wins (a real call is never free, and float sums of
#: equal costs differ in their last bits).
_REL_TIE_TOL: Final = 1e-9


@dataclass(frozen=True)
class PlanItem:
    """One segment to synthesise, as the planner sees it.

    Attributes:
        num_tokens: token count of the segment (>= 1).
        key: conditioning key; items share an engine call only when their keys
            are equal. Must be hashable (e.g. a frozen ``SynthesisParams``).
        request_index: index of the request in the TorchServe batch (carried
            for the caller; the planner ignores it).
        segment_index: index of the segment within its request (carried for
            the caller; the planner ignores it).
    """

    num_tokens: int
    key: Hashable
    request_index: int = 0
    segment_index: int = 0


@dataclass(frozen=True, kw_only=True)
class PlanLimits:
    """Hard limits on one engine call.

    Attributes:
        max_items: most items in one sub-batch (>= 1).
        max_padded_tokens: most padded tokens, ``items x longest item``, in one
            sub-batch (>= 1). An item longer than this on its own is still
            planned, alone in its sub-batch; see ``plan_sub_batches``.

    Raises:
        ValueError: a field is not an integer >= 1; the message names it.
    """

    max_items: int
    max_padded_tokens: int

    def __post_init__(self) -> None:
        for name in ("max_items", "max_padded_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"PlanLimits.{name} must be an integer >= 1, got {value!r}")


class CostModel(Protocol):
    """Estimated wall time of one engine call, from its shape."""

    def estimate_s(self, num_items: int, max_tokens: int) -> float:
        """Seconds for one engine call of ``num_items`` items padded to ``max_tokens``.

        Must return a finite float for ``num_items >= 1`` and ``max_tokens >= 1``.
        """
        ...


def padded_tokens(sub_batch_lengths: Sequence[int]) -> int:
    """Padded tokens of one sub-batch: ``len(lengths) * max(lengths)`` (0 when empty)."""
    if not sub_batch_lengths:
        return 0
    return len(sub_batch_lengths) * max(sub_batch_lengths)


def padding_ratio(sub_batch_lengths: Sequence[int]) -> float:
    """Padded tokens / real tokens of one sub-batch (>= 1.0; 1.0 = no padding).

    Returns 1.0 for an empty sub-batch.

    Raises:
        ValueError: a length is < 1.
    """
    if not sub_batch_lengths:
        return 1.0
    if min(sub_batch_lengths) < 1:
        raise ValueError(f"padding_ratio needs lengths >= 1, got {list(sub_batch_lengths)}")
    return padded_tokens(sub_batch_lengths) / sum(sub_batch_lengths)


def estimate_plan_s(
    items: Sequence[PlanItem], sub_batches: Sequence[Sequence[int]], cost_model: CostModel
) -> float:
    """Sum of ``cost_model.estimate_s`` over the sub-batches of a plan, in seconds.

    Args:
        items: the planned items.
        sub_batches: lists of indices into ``items`` (as ``plan_sub_batches`` returns).
        cost_model: the model to price each sub-batch with.
    """
    total_s = 0.0
    for sub_batch in sub_batches:
        longest = max(items[index].num_tokens for index in sub_batch)
        total_s += cost_model.estimate_s(len(sub_batch), longest)
    return total_s


def plan_sub_batches(
    items: Sequence[PlanItem], limits: PlanLimits, cost_model: CostModel
) -> list[list[int]]:
    """Cut ``items`` into sub-batches that minimise the estimated total time.

    Args:
        items: the segments of one TorchServe batch, any order, any keys.
        limits: most items and most padded tokens per sub-batch.
        cost_model: estimated seconds of one engine call of a given shape.

    Returns:
        Sub-batches as lists of indices into ``items``; every index appears
        exactly once. Each sub-batch holds one key only, its indices in
        ascending ``(num_tokens, index)`` order. Sub-batches are ordered by key
        (first appearance in ``items``), then by ascending length. Each
        sub-batch has at most ``limits.max_items`` items and at most
        ``limits.max_padded_tokens`` padded tokens -- except that an item
        longer than ``max_padded_tokens`` forms a sub-batch by itself: the
        planner cannot shorten it, so the caller decides whether to run it
        anyway or reject it (e.g. 413).
        Among plans of equal estimated cost (relative tolerance 1e-9) the one
        with fewer sub-batches is chosen. Same input, same output.

    Raises:
        ValueError: an item's ``num_tokens`` is not an integer >= 1, or the
            cost model returns a non-finite estimate.
        TypeError: an item's key is not hashable.
    """
    _check_items(items)
    plan: list[list[int]] = []
    for group in _group_by_key(items):
        order = sorted(group, key=lambda index: (items[index].num_tokens, index))
        lengths = [items[index].num_tokens for index in order]
        for start, stop in _cut_runs(lengths, limits, cost_model):
            plan.append(order[start:stop])
    return plan


def _check_items(items: Sequence[PlanItem]) -> None:
    """Raise ``ValueError`` naming the first item whose ``num_tokens`` is not an int >= 1."""
    for index, item in enumerate(items):
        tokens = item.num_tokens
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
            raise ValueError(f"items[{index}].num_tokens must be an integer >= 1, got {tokens!r}")


def _group_by_key(items: Sequence[PlanItem]) -> list[list[int]]:
    """Indices of ``items`` grouped by key, keys in order of first appearance."""
    groups: dict[Hashable, list[int]] = {}
    for index, item in enumerate(items):
        groups.setdefault(item.key, []).append(index)
    return list(groups.values())


def _cut_runs(
    lengths: Sequence[int], limits: PlanLimits, cost_model: CostModel
) -> list[tuple[int, int]]:
    """Optimal cut of ascending ``lengths`` into contiguous runs ``[start, stop)``.

    Dynamic programme over prefixes: ``best[j]`` is the cheapest plan of the
    first ``j`` items, ``best[j] = min_k best[j - k] + estimate_s(k, lengths[j - 1])``
    over run sizes ``k <= max_items`` with ``k * lengths[j - 1] <= max_padded_tokens``
    (``k = 1`` is always allowed, for oversize items). The run's longest item
    is its last because ``lengths`` ascends, so the padded-token bound only
    grows with ``k`` and the inner loop stops at the first violation:
    O(n * max_items) cost-model calls. Ties go to fewer runs.
    """
    count = len(lengths)
    best_s = [0.0] + [math.inf] * count
    best_runs = [0] * (count + 1)
    run_start = [0] * (count + 1)
    for stop in range(1, count + 1):
        longest = lengths[stop - 1]
        for size in range(1, min(limits.max_items, stop) + 1):
            if size > 1 and size * longest > limits.max_padded_tokens:
                break
            cost_s = best_s[stop - size] + _estimate_checked(cost_model, size, longest)
            runs = best_runs[stop - size] + 1
            if _is_better(cost_s, runs, best_s[stop], best_runs[stop]):
                best_s[stop], best_runs[stop], run_start[stop] = cost_s, runs, stop - size
    cuts: list[tuple[int, int]] = []
    stop = count
    while stop > 0:
        cuts.append((run_start[stop], stop))
        stop = run_start[stop]
    cuts.reverse()
    return cuts


def _estimate_checked(cost_model: CostModel, num_items: int, max_tokens: int) -> float:
    """``cost_model.estimate_s`` as a float; ``ValueError`` when it is not finite."""
    estimate_s = float(cost_model.estimate_s(num_items, max_tokens))
    if not math.isfinite(estimate_s):
        raise ValueError(
            f"cost model returned {estimate_s!r} s for "
            f"num_items={num_items}, max_tokens={max_tokens}"
        )
    return estimate_s


def _is_better(cost_s: float, runs: int, best_s: float, best_runs: int) -> bool:
    """Whether ``(cost_s, runs)`` beats the incumbent: cheaper, or as cheap with fewer runs."""
    if math.isinf(best_s):
        return True
    tolerance_s = _REL_TIE_TOL * max(abs(cost_s), abs(best_s))
    if cost_s < best_s - tolerance_s:
        return True
    return cost_s <= best_s + tolerance_s and runs < best_runs
