"""A padded-token budget per sub-batch from free accelerator memory.

On CUDA the budget is ``free_bytes * headroom / bytes_per_padded_token``,
where ``free_bytes`` comes from ``torch.cuda.mem_get_info`` before each
handler call and ``bytes_per_padded_token`` is measured: after every engine
call the peak memory it allocated (``torch.cuda.max_memory_allocated`` minus
what was allocated before) divided by its padded tokens; we keep the largest
value seen, so the estimate only grows. Until a measurement exists the
configured ``max_padded_tokens`` applies. On a CPU (or without torch) the
budget is simply the configured cap: host memory is not the limiting factor
at these batch sizes, and a ``MemoryError`` is still split and retried by the
runner.
"""

from __future__ import annotations

import logging
from typing import Callable

_LOGGER = logging.getLogger(__name__)

#: Fraction of the free memory a sub-batch may use; the rest absorbs
#: fragmentation and allocations the per-token measurement does not see.
DEFAULT_HEADROOM = 0.7


class PaddedTokenBudget:
    """Tracks bytes per padded token and turns free memory into a padded-token cap.

    Args:
        max_padded_tokens: the configured cap (tokens); the budget never exceeds it.
        mem_get_info: returns ``(free_bytes, total_bytes)``; ``None`` on CPU.
        headroom: fraction of free memory one sub-batch may use (0 < headroom <= 1).

    Raises:
        ValueError: ``max_padded_tokens < 1`` or headroom outside (0, 1].
    """

    def __init__(
        self,
        *,
        max_padded_tokens: int,
        mem_get_info: Callable[[], tuple[int, int]] | None = None,
        headroom: float = DEFAULT_HEADROOM,
    ) -> None:
        if max_padded_tokens < 1:
            raise ValueError(f"max_padded_tokens must be >= 1, got {max_padded_tokens}")
        if not 0 < headroom <= 1:
            raise ValueError(f"headroom must be in (0, 1], got {headroom}")
        self.max_padded_tokens = max_padded_tokens
        self.headroom = headroom
        self._mem_get_info = mem_get_info
        self.bytes_per_padded_token: float | None = None

    def observe(self, *, padded_tokens: int, peak_bytes: int) -> None:
        """Record one engine call: ``peak_bytes`` allocated for ``padded_tokens`` tokens."""
        if padded_tokens <= 0 or peak_bytes <= 0:
            return
        per_token = peak_bytes / padded_tokens
        if self.bytes_per_padded_token is None or per_token > self.bytes_per_padded_token:
            self.bytes_per_padded_token = per_token

    def current(self) -> int:
        """The padded-token cap for the next sub-batches (>= 1, <= ``max_padded_tokens``)."""
        if self._mem_get_info is None or self.bytes_per_padded_token is None:
            return self.max_padded_tokens
        free_bytes, _total = self._mem_get_info()
        fit = int(free_bytes * self.headroom / self.bytes_per_padded_token)
        return max(1, min(self.max_padded_tokens, fit))


class CudaMemoryProbe:
    """Measures the peak CUDA memory one engine call allocates, in bytes.

    ``start()`` before the call resets the peak counter and notes what is
    allocated; ``peak_bytes()`` after it returns the peak above that base.
    """

    def __init__(self) -> None:
        import torch

        self._cuda = torch.cuda
        self._base = 0

    def start(self) -> None:
        self._cuda.reset_peak_memory_stats()
        self._base = self._cuda.memory_allocated()

    def peak_bytes(self) -> int:
        return int(self._cuda.max_memory_allocated() - self._base)


def budget_for_device(device: str, *, max_padded_tokens: int) -> tuple[PaddedTokenBudget, CudaMemoryProbe | None]:
    """A budget (and, on CUDA, a memory probe for the runner) for ``device`` ("cpu" or "cuda[:n]")."""
    if not device.startswith("cuda"):
        return PaddedTokenBudget(max_padded_tokens=max_padded_tokens), None
    import torch

    return PaddedTokenBudget(max_padded_tokens=max_padded_tokens, mem_get_info=torch.cuda.mem_get_info), CudaMemoryProbe()
