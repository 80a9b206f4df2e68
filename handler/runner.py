"""Running planned sub-batches on an engine with failure isolation.

For each sub-batch the runner pads the items' ids, makes one engine call,
trims every item to its exact length and records the call's cost. When a call
fails it does not fail the neighbours:

* out of memory (``MemoryError``, ``torch.cuda.OutOfMemoryError``, caught by
  type): split the sub-batch in half and retry each half; an item that runs out
  of memory alone gets ``OutOfMemoryError`` (507);
* any other exception: bisect the sub-batch to find the failing item(s); those
  get ``EngineError`` (500), the others their audio.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from handler.engines.base import Engine, SynthesisParams, pad_ids
from handler.errors import EngineError, OutOfMemoryError, TTSError

_LOGGER = logging.getLogger(__name__)


def out_of_memory_types() -> tuple[type[BaseException], ...]:
    """Exception types that mean "out of memory": ``MemoryError`` and, when torch
    is importable, ``torch.cuda.OutOfMemoryError`` (a ``RuntimeError`` subclass)."""
    types: list[type[BaseException]] = [MemoryError]
    try:
        import torch

        types.append(torch.cuda.OutOfMemoryError)
    except (ImportError, AttributeError):
        pass
    return tuple(types)


_OOM_TYPES = out_of_memory_types()


@dataclass(frozen=True)
class CallRecord:
    """Cost of one engine call.

    Attributes:
        num_items: items in the call.
        max_tokens: longest item, tokens.
        padded_tokens: ``num_items * max_tokens``.
        real_tokens: sum of the items' token counts.
        seconds: wall-clock duration of the call, seconds.
        ok: False when the call raised.
        peak_bytes: accelerator memory the call allocated at its peak (0 when not measured).
    """

    num_items: int
    max_tokens: int
    padded_tokens: int
    real_tokens: int
    seconds: float
    ok: bool
    peak_bytes: int = 0


@dataclass
class RunResult:
    """Outcome of running several sub-batches.

    Attributes:
        audio: item index -> float32 array ``(num_samples,)`` for items that succeeded.
        errors: item index -> the ``TTSError`` of items that failed.
        calls: every engine call made, in order (including failed ones).
    """

    audio: dict[int, np.ndarray] = field(default_factory=dict)
    errors: dict[int, TTSError] = field(default_factory=dict)
    calls: list[CallRecord] = field(default_factory=list)


class BatchRunner:
    """Runs sub-batches of tokenised items on one engine, isolating failures.

    Args:
        engine: the engine to call.
        pad_id: id used to pad shorter items.
        on_call: optional callback receiving each ``CallRecord`` (e.g. the cost model).
        clock: monotonic clock in seconds (injectable for tests).
        memory_probe: optional object with ``start()`` / ``peak_bytes()`` measuring each
            call's peak accelerator memory (``handler.memory.CudaMemoryProbe``).
    """

    def __init__(
        self,
        engine: Engine,
        *,
        pad_id: int = 0,
        on_call: Callable[[CallRecord], None] | None = None,
        clock: Callable[[], float] = time.perf_counter,
        memory_probe=None,
    ) -> None:
        self._engine = engine
        self._memory_probe = memory_probe
        self._pad_id = pad_id
        self._on_call = on_call
        self._clock = clock

    def run(
        self,
        sub_batches: Sequence[Sequence[int]],
        ids: Sequence[Sequence[int]],
        params: Sequence[SynthesisParams],
    ) -> RunResult:
        """Run every sub-batch; each item ends in ``audio`` or in ``errors``.

        Args:
            sub_batches: lists of item indices; items of one sub-batch share params.
            ids: per item, its token ids (non-empty).
            params: per item, its conditioning.

        Returns:
            A ``RunResult`` covering every item index of ``sub_batches`` exactly once.
        """
        result = RunResult()
        for sub_batch in sub_batches:
            self._run_isolated(list(sub_batch), ids, params, result)
        return result

    def _run_isolated(self, items: list[int], ids, params, result: RunResult) -> None:
        try:
            self._call(items, ids, params[items[0]], result)
        except _OOM_TYPES as exc:
            if len(items) == 1:
                _LOGGER.warning("item %d is out of memory even alone: %s", items[0], type(exc).__name__)
                result.errors[items[0]] = OutOfMemoryError("out of memory synthesising this text; send shorter text")
                return
            _LOGGER.warning("out of memory on a sub-batch of %d items; splitting in half", len(items))
            self._split(items, ids, params, result)
        except Exception as exc:  # noqa: BLE001 - isolate any engine failure to its item
            if len(items) == 1:
                _LOGGER.error("engine failed on item %d: %s: %s", items[0], type(exc).__name__, exc)
                result.errors[items[0]] = EngineError(f"synthesis failed: {type(exc).__name__}")
                return
            _LOGGER.warning("engine failed on a sub-batch of %d items (%s); bisecting", len(items), type(exc).__name__)
            self._split(items, ids, params, result)

    def _split(self, items: list[int], ids, params, result: RunResult) -> None:
        half = len(items) // 2
        self._run_isolated(items[:half], ids, params, result)
        self._run_isolated(items[half:], ids, params, result)

    def _call(self, items: list[int], ids, params: SynthesisParams, result: RunResult) -> None:
        """One engine call; on success stores each item's trimmed audio."""
        padded, lengths = pad_ids([ids[i] for i in items], self._pad_id)
        if self._memory_probe is not None:
            self._memory_probe.start()
        start = self._clock()
        ok = False
        try:
            output = self._engine.synthesize(padded, lengths, params)
            ok = True
        finally:
            record = CallRecord(
                num_items=len(items),
                max_tokens=int(padded.shape[1]),
                padded_tokens=int(padded.size),
                real_tokens=int(lengths.sum()),
                seconds=self._clock() - start,
                ok=ok,
                peak_bytes=self._memory_probe.peak_bytes() if self._memory_probe is not None else 0,
            )
            result.calls.append(record)
            if self._on_call is not None:
                self._on_call(record)
        _check_output(output, len(items))
        for row, item in enumerate(items):
            result.audio[item] = np.array(output.audio[row, : int(output.num_samples[row])], dtype=np.float32)


def _check_output(output, expected: int) -> None:
    """The count invariant, in one place, with both numbers in the message."""
    if output.audio.shape[0] != expected or output.num_samples.shape[0] != expected:
        raise RuntimeError(
            f"engine returned {output.audio.shape[0]} audio rows and {output.num_samples.shape[0]} lengths "
            f"for {expected} items"
        )
