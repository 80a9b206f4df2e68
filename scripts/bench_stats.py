"""Pure maths of the benchmark: per-request records to a run summary, ratios and goal checks.

Closed loop (N clients, no think time): the measured requests are a fixed
range of workload indices (the same texts on every system), sent while N
requests are in the system (``scripts/bench_load.py``). Every client always
has one request in flight, so by the interactive response-time law the
throughput is ``X = N / mean latency``. We use it over the measured
requests, which avoids the quantisation error of counting completions in a
time window when a batching server completes 8 (or 32) requests at once::

    requests_per_s = N * ok_requests / sum(latency_s over measured requests)
    audio_s_per_s  = N * sum(audio_s over ok requests) / sum(latency_s ...)

Failed requests count in the denominator (their client was busy) but not in
the numerator: ``requests_per_s`` is goodput. (Counting answers between the
first measured start and the last measured answer instead over-counts by up
to one batch: the batch whose answers start the span is partly inside it.)

Open loop (Poisson arrivals): ``requests_per_s = ok requests / max(window,
last completion - window start)``, so a server that falls behind shows a
throughput below the offered rate.

Latency percentiles are over successful requests only, in milliseconds,
with numpy's linear interpolation. No I/O, no clock.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Final, Iterable, Mapping, Sequence

import numpy as np

SYSTEMS: Final = ("ceiling", "torchserve-unbatched", "torchserve-batched", "seed-flask")
#: The ratios we report: (name, numerator system, denominator system).
RATIOS: Final = (
    ("c/a", "torchserve-batched", "ceiling"),
    ("c/b", "torchserve-batched", "torchserve-unbatched"),
    ("c/d", "torchserve-batched", "seed-flask"),
)


@dataclass(frozen=True)
class RequestRecord:
    """One request as the load generator saw it.

    Attributes:
        index: position in the workload stream (same index, same text, on every system).
        start_s: when it was sent (open loop: when it was *scheduled*), seconds from run start.
        end_s: when its response (or error) arrived, seconds from run start.
        status: HTTP status as a string (``"200"``), or a client-side error name (``"timeout"``).
        audio_s: seconds of audio in the response (0 for errors).
    """

    index: int
    start_s: float
    end_s: float
    status: str
    audio_s: float = 0.0

    @property
    def ok(self) -> bool:
        """Whether the request succeeded (HTTP 200 with audio)."""
        return self.status == "200"

    @property
    def latency_s(self) -> float:
        """``end_s - start_s``, seconds."""
        return self.end_s - self.start_s


def percentiles_ms(latencies_s: Sequence[float], qs: Iterable[int] = (50, 95, 99)) -> dict[str, float | None]:
    """``{"p50_ms": ..., ...}`` of latencies given in seconds; ``None`` values when empty."""
    qs = tuple(qs)
    if not len(latencies_s):
        return {f"p{q}_ms": None for q in qs}
    values = np.percentile(np.asarray(latencies_s, dtype=np.float64) * 1000.0, qs)
    return {f"p{q}_ms": float(v) for q, v in zip(qs, values)}


def in_window(records: Sequence[RequestRecord], window_start_s: float, window_end_s: float) -> list[RequestRecord]:
    """Records that started in ``[window_start_s, window_end_s)``."""
    return [r for r in records if window_start_s <= r.start_s < window_end_s]


def _common(chosen: Sequence[RequestRecord]) -> dict:
    """Counts, errors by status and latency percentiles of the measured requests."""
    ok = [r for r in chosen if r.ok]
    errors = Counter(r.status for r in chosen if not r.ok)
    return {
        "num_requests": len(chosen),
        "num_ok": len(ok),
        "errors": sum(errors.values()),
        "errors_by_status": dict(sorted(errors.items())),
        **percentiles_ms([r.latency_s for r in ok]),
        "mean_latency_ms": float(np.mean([r.latency_s for r in ok]) * 1000.0) if ok else None,
    }


def summarize_closed(records: Sequence[RequestRecord], *, concurrency: int, measured: range) -> dict:
    """Summary of a closed-loop run with ``concurrency`` clients (see the module docstring).

    Args:
        records: every request of the level (warm-up and fillers included).
        concurrency: clients, N.
        measured: the measured workload indices.

    Returns:
        ``requests_per_s``, ``audio_s_per_s``, ``p50_ms``/``p95_ms``/``p99_ms``,
        ``mean_latency_ms``, ``num_requests``, ``num_ok``, ``errors``, ``errors_by_status``,
        ``not_sent`` (measured indices never sent: the level hit its time bound).
        Rates are ``None`` when nothing was measured.
    """
    chosen = [r for r in records if r.index in measured]
    ok = [r for r in chosen if r.ok]
    busy_s = sum(r.latency_s for r in chosen)
    return {
        **_common(chosen),
        "requests_per_s": concurrency * len(ok) / busy_s if busy_s > 0 else None,
        "audio_s_per_s": concurrency * sum(r.audio_s for r in ok) / busy_s if busy_s > 0 else None,
        "not_sent": len(measured) - len(chosen),
    }


def summarize_open(records: Sequence[RequestRecord], *, window_start_s: float, window_end_s: float) -> dict:
    """Summary of an open-loop run whose measured arrivals fall in the window (see the module docstring)."""
    chosen = in_window(records, window_start_s, window_end_s)
    ok = [r for r in chosen if r.ok]
    last_end_s = max((r.end_s for r in chosen), default=window_end_s)
    span_s = max(window_end_s - window_start_s, last_end_s - window_start_s)
    return {
        **_common(chosen),
        "requests_per_s": len(ok) / span_s if span_s > 0 else None,
        "audio_s_per_s": sum(r.audio_s for r in ok) / span_s if span_s > 0 else None,
        "offered_rps": len(chosen) / (window_end_s - window_start_s) if window_end_s > window_start_s else None,
    }


# -- handler batch sizes and other Prometheus counters -----------------------------


def histogram_delta(before: Mapping[int, int], after: Mapping[int, int]) -> dict[int, int]:
    """``after - before`` per batch size, dropping zeros (counters only grow)."""
    delta = {size: after.get(size, 0) - before.get(size, 0) for size in set(before) | set(after)}
    return {size: count for size, count in sorted(delta.items()) if count}


def mean_batch_size(histogram: Mapping[int, int]) -> float | None:
    """Mean of a ``{batch_size: calls}`` histogram; ``None`` when empty."""
    calls = sum(histogram.values())
    return sum(size * count for size, count in histogram.items()) / calls if calls else None


def parse_counter(metrics_text: str, name: str, model_name: str | None = None) -> float:
    """Sum of a Prometheus counter ``name{...} value`` over its label sets (0.0 when absent)."""
    total = 0.0
    pattern = re.compile(rf"^{re.escape(name)}(\{{[^}}]*\}})?\s+(\S+)$")
    for line in metrics_text.splitlines():
        match = pattern.match(line.strip())
        if match and (model_name is None or f'ModelName="{model_name}"' in (match.group(1) or "")):
            total += float(match.group(2))
    return total


# -- ratios and goals ---------------------------------------------------------------


def _by_system_level(rows: Sequence[Mapping]) -> dict[tuple[str, int], Mapping]:
    return {(r["system"], r["concurrency"]): r for r in rows if r.get("mode", "closed") == "closed"}


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def ratio_table(rows: Sequence[Mapping]) -> list[dict]:
    """Per concurrency, the ``requests_per_s`` ratios c/a, c/b, c/d and two engine-busy ratios.

    ``c/a busy`` and ``c/b busy`` divide the systems' ``engine_busy`` (engine seconds per wall
    second) instead: the share of time each keeps the engine working. Requests/s also
    scales with the machine's speed during the level, which on a shared VM drifts by
    10-20 % within minutes; the engine-busy ratio does not, so it isolates the serving
    overhead (all three run the same handler and engine). Not for c/d: the seed
    server's "engine" time includes its padding. ``None`` where a side is missing.
    """
    table = _by_system_level(rows)
    levels = sorted({level for _, level in table})
    out = []
    for level in levels:
        entry: dict = {"concurrency": level}
        for name, top, bottom in RATIOS:
            top_row, bottom_row = table.get((top, level)), table.get((bottom, level))
            entry[name] = _ratio(top_row and top_row["requests_per_s"], bottom_row and bottom_row["requests_per_s"])
            if name != "c/d":
                entry[f"{name} busy"] = _ratio(top_row and top_row.get("engine_busy"),
                                               bottom_row and bottom_row.get("engine_busy"))
        out.append(entry)
    return out


def goal_checks(rows: Sequence[Mapping], *, max_batch_delay_ms: float, slack_ms: float = 15.0) -> list[dict]:
    """The issue's four goals, per concurrency where they apply.

    * ``c/a >= 0.90`` at concurrency >= 8; ``c/b >= 1.0`` at concurrency >= 2; ``c/d >= 1.0`` everywhere;
    * at concurrency 1: p95 of (c) <= p95 of (a) + ``max_batch_delay_ms`` + ``slack_ms``, where the
      ceiling's p95 at concurrency 1 stands for the single-request engine time.

    Returns:
        Rows ``{"goal", "concurrency", "value", "target", "met", "margin"}``; ``margin`` is
        ``value - target`` for ratios and ``target - value`` (ms) for the latency goal, so a
        negative margin is a miss. ``met`` is ``None`` when a side was not measured.
    """
    checks = []
    thresholds = {"c/a": (0.90, 8), "c/b": (1.0, 2), "c/d": (1.0, 1)}
    for entry in ratio_table(rows):
        for name, (target, from_level) in thresholds.items():
            if entry["concurrency"] >= from_level:
                value = entry[name]
                met = None if value is None else value >= target
                margin = None if value is None else value - target
                checks.append({"goal": f"{name} >= {target:.2f}", "concurrency": entry["concurrency"],
                               "value": value, "target": target, "met": met, "margin": margin})
    table = _by_system_level(rows)
    batched, ceiling = table.get(("torchserve-batched", 1)), table.get(("ceiling", 1))
    if batched and ceiling and batched.get("p95_ms") is not None and ceiling.get("p95_ms") is not None:
        target = ceiling["p95_ms"] + max_batch_delay_ms + slack_ms
        value = batched["p95_ms"]
        checks.append({"goal": f"p95(c) <= p95(a) + {max_batch_delay_ms:g} + {slack_ms:g} ms", "concurrency": 1,
                       "value": value, "target": target, "met": value <= target, "margin": target - value})
    return checks


def finite_or_none(value: float | None) -> float | None:
    """``value`` unless it is NaN or infinite (JSON has no NaN)."""
    return value if value is not None and math.isfinite(value) else None
