"""The padded-token budget from free memory and measured bytes per padded token."""

from __future__ import annotations

import pytest

from handler.memory import PaddedTokenBudget, budget_for_device


def test_cpu_budget_is_the_configured_cap():
    budget, probe = budget_for_device("cpu", max_padded_tokens=4096)
    assert probe is None
    budget.observe(padded_tokens=100, peak_bytes=10**9)
    assert budget.current() == 4096


def test_budget_from_free_memory_and_largest_measurement():
    free = {"bytes": 8_000_000}
    budget = PaddedTokenBudget(max_padded_tokens=100_000, mem_get_info=lambda: (free["bytes"], 16_000_000), headroom=0.5)
    assert budget.current() == 100_000  # no measurement yet: the cap
    budget.observe(padded_tokens=1000, peak_bytes=400_000)  # 400 B per padded token
    assert budget.current() == 10_000  # 8e6 * 0.5 / 400
    budget.observe(padded_tokens=1000, peak_bytes=200_000)  # smaller: ignored, estimate only grows
    assert budget.bytes_per_padded_token == 400
    budget.observe(padded_tokens=100, peak_bytes=80_000)  # 800 B per padded token
    assert budget.current() == 5_000
    free["bytes"] = 0
    assert budget.current() == 1  # never below one token: the runner's OOM split handles the rest


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"max_padded_tokens": 0}, "max_padded_tokens"), ({"max_padded_tokens": 8, "headroom": 0.0}, "headroom"),
])
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PaddedTokenBudget(**kwargs)
