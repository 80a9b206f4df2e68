"""Load loops: closed-loop clients and open-loop Poisson arrivals, over HTTP or in-process.

Closed loop, concurrency N: N client threads, each sending its next request
as soon as the previous one is answered. Requests take consecutive indices
of the workload stream. The *measured* requests are a fixed index range
(the same texts on every system and at every level); the stream starts
``warmup`` indices before it (N: the start-up wave, where all N requests
arrive at once, is not measured), and clients keep sending *filler*
requests after it until every measured request has been answered, so that
the measured requests all see N requests in the system. Fillers in flight
are drained before the loop returns. ``max_level_s`` bounds a level: after
it, no new request is sent.

For the in-process ceiling, concurrency N is emulated by handler calls of N
consecutive requests back to back (every "client" is answered when its
batch returns).

Open loop at rate r: arrivals at Poisson times over ``ramp_s + duration_s``
seconds; each request's latency counts from its *scheduled* arrival, so a
slow server cannot hide queueing (no coordinated omission). The measured
requests are those that arrive in ``[ramp_s, ramp_s + duration_s)``.
In-process, arrived requests are handled in batches of up to ``max_batch``
as soon as the previous call returns.
"""

from __future__ import annotations

import itertools
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence

from scripts.bench_stats import RequestRecord
from scripts.bench_workload import poisson_arrivals

#: (records, window_start_s, window_end_s) of an open-loop run.
LoadResult = tuple[list[RequestRecord], float, float]


class _MeasuredTracker:
    """Counts answered measured requests; tells clients when to stop sending.

    Args:
        measured: the measured stream indices.
        max_level_s: no new request after this many seconds from the start.
    """

    def __init__(self, measured: range, max_level_s: float) -> None:
        self._t0 = time.perf_counter()
        self._lock = threading.Lock()
        self._measured = measured
        self._left = len(measured)
        self._max_level_s = max_level_s

    def now_s(self) -> float:
        """Seconds since the level started."""
        return time.perf_counter() - self._t0

    def answered(self, index: int) -> None:
        """Request ``index`` got its answer."""
        if index in self._measured:
            with self._lock:
                self._left -= 1

    def done(self) -> bool:
        """Whether every measured request was answered, or the time bound passed."""
        return self._left <= 0 or self.now_s() >= self._max_level_s


def closed_loop_http(send: Callable[[str], object], texts: Sequence[str], *, concurrency: int, measured: range,
                     warmup: int, max_level_s: float, on_done: Callable[[], None] | None = None) -> list[RequestRecord]:
    """Closed loop over ``send(text) -> Outcome`` with ``concurrency`` client threads.

    Returns:
        Every request sent (warm-up, measured and fillers), ordered by index; times in
        seconds from the level's start.
    """
    tracker = _MeasuredTracker(measured, max_level_s)
    records: list[RequestRecord] = []
    stream = itertools.count(max(0, measured.start - warmup))

    def client() -> None:
        while not tracker.done():
            index = next(stream)
            start_s = tracker.now_s()
            outcome = send(texts[index % len(texts)])
            records.append(RequestRecord(index, start_s, tracker.now_s(), outcome.status, outcome.audio_s))
            tracker.answered(index)
            if on_done:
                on_done()

    threads = [threading.Thread(target=client, name=f"bench-client-{i}", daemon=True) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sorted(records, key=lambda r: r.index)


def closed_loop_batches(handle_batch: Callable[[list[str]], list], texts: Sequence[str], *, concurrency: int,
                        measured: range, warmup: int, max_level_s: float,
                        on_done: Callable[[], None] | None = None) -> list[RequestRecord]:
    """Closed loop emulated in-process: ``handle_batch`` on ``concurrency`` consecutive requests, back to back."""
    tracker = _MeasuredTracker(measured, max_level_s)
    records: list[RequestRecord] = []
    stream = itertools.count(max(0, measured.start - warmup))
    while not tracker.done():
        indices = [next(stream) for _ in range(concurrency)]
        start_s = tracker.now_s()
        outcomes = handle_batch([texts[i % len(texts)] for i in indices])
        end_s = tracker.now_s()
        for index, outcome in zip(indices, outcomes):
            records.append(RequestRecord(index, start_s, end_s, outcome.status, outcome.audio_s))
            tracker.answered(index)
            if on_done:
                on_done()
    return records


def open_loop_http(send: Callable[[str], object], texts: Sequence[str], *, rate_rps: float, ramp_s: float,
                   duration_s: float, seed: int, max_in_flight: int = 256,
                   on_done: Callable[[], None] | None = None) -> LoadResult:
    """Poisson arrivals at ``rate_rps``; each request on a pool thread (at most ``max_in_flight``)."""
    arrivals = poisson_arrivals(rate_rps, ramp_s + duration_s, seed=seed)
    records: list[RequestRecord] = []
    t0 = time.perf_counter()

    def one(index: int, at_s: float) -> None:
        outcome = send(texts[index % len(texts)])
        records.append(RequestRecord(index, at_s, time.perf_counter() - t0, outcome.status, outcome.audio_s))
        if on_done:
            on_done()

    with ThreadPoolExecutor(max_workers=max_in_flight, thread_name_prefix="bench-open") as pool:
        for index, at_s in enumerate(arrivals):
            delay_s = at_s - (time.perf_counter() - t0)
            if delay_s > 0:
                time.sleep(delay_s)
            pool.submit(one, index, at_s)
    return sorted(records, key=lambda r: r.index), ramp_s, ramp_s + duration_s


def open_loop_batches(handle_batch: Callable[[list[str]], list], texts: Sequence[str], *, rate_rps: float,
                      ramp_s: float, duration_s: float, seed: int, max_batch: int,
                      on_done: Callable[[], None] | None = None) -> LoadResult:
    """Poisson arrivals handled in-process: every call takes all arrived requests, up to ``max_batch``."""
    arrivals = poisson_arrivals(rate_rps, ramp_s + duration_s, seed=seed)
    records: list[RequestRecord] = []
    t0 = time.perf_counter()
    next_index = 0
    while next_index < len(arrivals):
        now_s = time.perf_counter() - t0
        if arrivals[next_index] > now_s:
            time.sleep(arrivals[next_index] - now_s)
            continue
        stop = next_index
        while stop < len(arrivals) and arrivals[stop] <= now_s and stop - next_index < max_batch:
            stop += 1
        indices = list(range(next_index, stop))
        outcomes = handle_batch([texts[i % len(texts)] for i in indices])
        end_s = time.perf_counter() - t0
        records.extend(RequestRecord(i, arrivals[i], end_s, o.status, o.audio_s) for i, o in zip(indices, outcomes))
        if on_done:
            for _ in indices:
                on_done()
        next_index = stop
    return records, ramp_s, ramp_s + duration_s
