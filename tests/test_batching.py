"""Tests of the pure sub-batch planner (``handler/batching.py``)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from handler.batching import (
    PlanItem,
    PlanLimits,
    estimate_plan_s,
    padded_tokens,
    padding_ratio,
    plan_sub_batches,
)
from handler.cost_model import DEFAULT_COST_MODEL, LinearCostModel

# Relative slack for comparing float sums of costs added in different orders.
_REL_TOL = 1e-9


@dataclass(frozen=True)
class PowerCostModel:
    """A non-linear cost (padded tokens to a power): the planner must not assume linearity."""

    fixed_s: float
    per_token_s: float
    exponent: float

    def estimate_s(self, num_items: int, max_tokens: int) -> float:
        return self.fixed_s + self.per_token_s * (num_items * max_tokens) ** self.exponent


def _items(lengths: list[int], key: object = "a") -> list[PlanItem]:
    return [PlanItem(num_tokens=n, key=key) for n in lengths]


# ---------------------------------------------------------------- strategies

_coef = st.floats(min_value=0.0, max_value=1.0, allow_nan=False, allow_infinity=False)
_linear_models = st.builds(
    LinearCostModel,
    fixed_s=_coef,
    per_padded_token_s=_coef,
    per_item_s=_coef,
    duration_spread=st.sampled_from([0.0, 0.07, 0.5]),
)
_power_models = st.builds(
    PowerCostModel,
    fixed_s=_coef,
    per_token_s=_coef,
    exponent=st.floats(min_value=0.5, max_value=2.0),
)
_cost_models = st.one_of(_linear_models, _power_models, st.just(DEFAULT_COST_MODEL))
_plan_items = st.lists(
    st.builds(
        PlanItem,
        num_tokens=st.integers(min_value=1, max_value=60),
        key=st.sampled_from(["a", "b", "c", ("voice", 1.0)]),
    ),
    max_size=40,
)
_limits = st.builds(
    PlanLimits,
    max_items=st.integers(min_value=1, max_value=12),
    max_padded_tokens=st.integers(min_value=1, max_value=400),
)


# ---------------------------------------------------------------- baselines


def _sorted_groups(items: list[PlanItem]) -> list[list[int]]:
    """Indices per key (first appearance), each sorted by (num_tokens, index)."""
    groups: dict[object, list[int]] = {}
    for index, item in enumerate(items):
        groups.setdefault(item.key, []).append(index)
    return [sorted(g, key=lambda i: (items[i].num_tokens, i)) for g in groups.values()]


def _greedy_chunks(items: list[PlanItem], limits: PlanLimits) -> list[list[int]]:
    """One sub-batch per key, chunked greedily in sorted order by the limits."""
    plan: list[list[int]] = []
    for group in _sorted_groups(items):
        chunk: list[int] = []
        for index in group:
            size, longest = len(chunk) + 1, items[index].num_tokens
            if chunk and (size > limits.max_items or size * longest > limits.max_padded_tokens):
                plan.append(chunk)
                chunk = []
            chunk.append(index)
        if chunk:
            plan.append(chunk)
    return plan


def _singletons(items: list[PlanItem]) -> list[list[int]]:
    return [[index] for index in range(len(items))]


def _contiguous_partitions(count: int):
    """Every cut of range(count) into contiguous runs, as lists of (start, stop)."""
    for cuts in itertools.product([False, True], repeat=max(count - 1, 0)):
        runs, start = [], 0
        for position, cut in enumerate(cuts, start=1):
            if cut:
                runs.append((start, position))
                start = position
        runs.append((start, count))
        yield runs


def _feasible(lengths: list[int], limits: PlanLimits) -> bool:
    if len(lengths) > limits.max_items:
        return False
    return len(lengths) == 1 or padded_tokens(lengths) <= limits.max_padded_tokens


def _at_most(cost_s: float, baseline_s: float) -> bool:
    return cost_s <= baseline_s + _REL_TOL * max(abs(cost_s), abs(baseline_s), 1e-12)


# ---------------------------------------------------------------- properties


@given(items=_plan_items, limits=_limits, cost_model=_cost_models)
def test_every_item_appears_exactly_once(items, limits, cost_model):
    plan = plan_sub_batches(items, limits, cost_model)
    assert sorted(itertools.chain.from_iterable(plan)) == list(range(len(items)))
    assert all(plan), "no empty sub-batch"


@given(items=_plan_items, limits=_limits, cost_model=_cost_models)
def test_limits_hold(items, limits, cost_model):
    for sub_batch in plan_sub_batches(items, limits, cost_model):
        lengths = [items[i].num_tokens for i in sub_batch]
        assert len(sub_batch) <= limits.max_items
        if len(sub_batch) > 1:
            assert padded_tokens(lengths) <= limits.max_padded_tokens
        elif padded_tokens(lengths) > limits.max_padded_tokens:
            assert lengths[0] > limits.max_padded_tokens  # a lone oversize item


@given(items=_plan_items, limits=_limits, cost_model=_cost_models)
def test_one_key_per_sub_batch_and_sorted_order(items, limits, cost_model):
    plan = plan_sub_batches(items, limits, cost_model)
    key_order = list(dict.fromkeys(item.key for item in items))
    seen_keys = []
    for sub_batch in plan:
        keys = {items[i].key for i in sub_batch}
        assert len(keys) == 1
        ranks = [(items[i].num_tokens, i) for i in sub_batch]
        assert ranks == sorted(ranks)
        seen_keys.append(items[sub_batch[0]].key)
    assert list(dict.fromkeys(seen_keys)) == key_order
    # Keys are contiguous in the output, and lengths ascend within a key.
    for key, group in itertools.groupby(plan, key=lambda sb: items[sb[0]].key):
        flat = [(items[i].num_tokens, i) for sb in group for i in sb]
        assert flat == sorted(flat), key


@given(items=_plan_items, limits=_limits, cost_model=_cost_models)
def test_deterministic(items, limits, cost_model):
    first = plan_sub_batches(items, limits, cost_model)
    second = plan_sub_batches(list(items), limits, cost_model)
    assert first == second


@given(items=_plan_items, limits=_limits, cost_model=_cost_models)
def test_never_worse_than_baselines(items, limits, cost_model):
    plan_s = estimate_plan_s(items, plan_sub_batches(items, limits, cost_model), cost_model)
    greedy_s = estimate_plan_s(items, _greedy_chunks(items, limits), cost_model)
    single_s = estimate_plan_s(items, _singletons(items), cost_model)
    assert _at_most(plan_s, greedy_s), (plan_s, greedy_s)
    assert _at_most(plan_s, single_s), (plan_s, single_s)


@settings(max_examples=200)
@given(
    lengths=st.lists(st.integers(min_value=1, max_value=30), min_size=1, max_size=9),
    limits=_limits,
    cost_model=_cost_models,
)
def test_optimal_among_all_contiguous_cuts(lengths, limits, cost_model):
    """Exhaustive check of the dynamic programme on one key (2**(n-1) cuts)."""
    items = _items(lengths)
    order = _sorted_groups(items)[0]
    plan_s = estimate_plan_s(items, plan_sub_batches(items, limits, cost_model), cost_model)
    for runs in _contiguous_partitions(len(order)):
        plan = [order[start:stop] for start, stop in runs]
        if all(_feasible([items[i].num_tokens for i in sb], limits) for sb in plan):
            assert _at_most(plan_s, estimate_plan_s(items, plan, cost_model))


# ---------------------------------------------------------------- examples

_ROOMY = PlanLimits(max_items=64, max_padded_tokens=100_000)
_OVERHEAD_ONLY = LinearCostModel(fixed_s=1.0, per_padded_token_s=0.0, per_item_s=0.0)
_TOKENS_ONLY = LinearCostModel(fixed_s=0.0, per_padded_token_s=0.001, per_item_s=0.0)


def test_large_overhead_puts_one_key_in_one_sub_batch():
    items = _items([5, 3, 9, 3])
    assert plan_sub_batches(items, _ROOMY, _OVERHEAD_ONLY) == [[1, 3, 0, 2]]


def test_per_token_cost_only_groups_equal_lengths_only():
    items = _items([4, 2, 4, 7])
    assert plan_sub_batches(items, _ROOMY, _TOKENS_ONLY) == [[1], [0, 2], [3]]


def test_two_keys_never_mix():
    items = [PlanItem(num_tokens=n, key=k) for n, k in [(5, "b"), (5, "a"), (3, "b"), (5, "a")]]
    assert plan_sub_batches(items, _ROOMY, _OVERHEAD_ONLY) == [[2, 0], [1, 3]]


def test_trade_off_between_overhead_and_padding():
    # 10 ms per call, 1 ms per padded token: 10+11 together (32 ms) beats apart (41 ms);
    # adding the 50-token item to them (160 ms) loses to running it alone (60 ms).
    model = LinearCostModel(fixed_s=0.010, per_padded_token_s=0.001, per_item_s=0.0)
    assert plan_sub_batches(_items([50, 10, 11]), _ROOMY, model) == [[1, 2], [0]]


def test_duration_spread_keeps_equal_lengths_apart_without_overhead():
    # A CPU-like fit: no per-call overhead. Without the spread a merge of equal
    # lengths is a tie and the tie goes to fewer calls; with it, the merge's
    # hidden audio padding makes single calls cheaper, until the overhead of the
    # calls it saves outweighs it (240 tokens x 1.6 ms x 6.1 % = 23 ms < 2 x 20 ms).
    items = _items([80, 80, 80])
    flat = LinearCostModel(fixed_s=0.0, per_padded_token_s=0.0016, per_item_s=0.0)
    spread = LinearCostModel(fixed_s=0.0, per_padded_token_s=0.0016, per_item_s=0.0, duration_spread=0.07)
    overhead = LinearCostModel(fixed_s=0.020, per_padded_token_s=0.0016, per_item_s=0.0, duration_spread=0.07)
    assert plan_sub_batches(items, _ROOMY, flat) == [[0, 1, 2]]
    assert plan_sub_batches(items, _ROOMY, spread) == [[0], [1], [2]]
    assert plan_sub_batches(items, _ROOMY, overhead) == [[0, 1, 2]]


def test_max_items_chunks_in_sorted_order():
    limits = PlanLimits(max_items=2, max_padded_tokens=100_000)
    items = _items([6, 1, 5, 2, 4])
    assert plan_sub_batches(items, limits, _OVERHEAD_ONLY) == [[1, 3], [4, 2], [0]]


def test_max_padded_tokens_bounds_sub_batches():
    limits = PlanLimits(max_items=64, max_padded_tokens=10)
    items = _items([5, 5, 5, 3, 3, 3])
    # 3+3+3 -> 9 padded tokens; 5+5 -> 10; the last 5 alone.
    assert plan_sub_batches(items, limits, _OVERHEAD_ONLY) == [[3, 4, 5], [0, 1], [2]]


def test_oversize_item_goes_alone():
    limits = PlanLimits(max_items=8, max_padded_tokens=10)
    items = _items([2, 12, 3])
    assert plan_sub_batches(items, limits, _OVERHEAD_ONLY) == [[0, 2], [1]]


def test_empty_input_gives_empty_plan():
    assert plan_sub_batches([], _ROOMY, DEFAULT_COST_MODEL) == []


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_items": 0, "max_padded_tokens": 10}, "max_items"),
        ({"max_items": 4, "max_padded_tokens": 0}, "max_padded_tokens"),
        ({"max_items": -1, "max_padded_tokens": 10}, "max_items"),
        ({"max_items": 2.5, "max_padded_tokens": 10}, "max_items"),
        ({"max_items": 4, "max_padded_tokens": True}, "max_padded_tokens"),
    ],
)
def test_invalid_limits_raise_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        PlanLimits(**kwargs)


def test_invalid_item_raises_naming_the_index():
    with pytest.raises(ValueError, match=r"items\[1\]\.num_tokens"):
        plan_sub_batches(_items([3, 0]), _ROOMY, DEFAULT_COST_MODEL)


def test_non_finite_cost_estimate_raises():
    nan_model = PowerCostModel(fixed_s=float("nan"), per_token_s=0.0, exponent=1.0)
    with pytest.raises(ValueError, match="cost model returned"):
        plan_sub_batches(_items([3]), _ROOMY, nan_model)


def test_padding_helpers():
    assert padded_tokens([]) == 0
    assert padded_tokens([3, 5, 4]) == 15
    assert padding_ratio([]) == 1.0
    assert padding_ratio([3, 5, 4]) == pytest.approx(15 / 12)
    assert padding_ratio([7]) == 1.0
    with pytest.raises(ValueError):
        padding_ratio([0, 2])


def _set_partitions(elements: list[int]):
    """Every partition of ``elements`` into non-empty blocks (Bell-number many)."""
    if not elements:
        yield []
        return
    first, rest = elements[0], elements[1:]
    for partition in _set_partitions(rest):
        yield [[first], *partition]
        for position in range(len(partition)):
            yield [*partition[:position], [first, *partition[position]], *partition[position + 1 :]]


@settings(max_examples=100)
@given(
    lengths=st.lists(st.integers(min_value=1, max_value=30), min_size=1, max_size=7),
    limits=_limits,
    cost_model=_cost_models,
)
def test_contiguous_cuts_lose_nothing_against_any_partition(lengths, limits, cost_model):
    """For costs non-decreasing in max_tokens, sorted contiguous runs are globally optimal."""
    items = _items(lengths)
    plan_s = estimate_plan_s(items, plan_sub_batches(items, limits, cost_model), cost_model)
    for partition in _set_partitions(list(range(len(items)))):
        if all(_feasible([items[i].num_tokens for i in block], limits) for block in partition):
            assert _at_most(plan_s, estimate_plan_s(items, partition, cost_model))
