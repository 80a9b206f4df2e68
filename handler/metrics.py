"""Per-batch statistics and their TorchServe metrics.

Every metric emitted here is declared in the repository's ``metrics.yaml``
(``model_metrics:``) with the dimensions in the same order as emitted below;
TorchServe's frontend exposes only declared metrics on its Prometheus
endpoint. Counters let a scraper derive means and distributions:

* ``TTSBatches{BatchSize="n"}`` — handler calls that received n requests
  (the distribution of batch sizes; the mean is
  ``TTSBatchRequests / sum(TTSBatches)``);
* ``TTSBatchRequests``, ``TTSSubBatches``, ``TTSRealTokens``, ``TTSPaddedTokens``
  (padding ratio = padded / real), ``TTSEngineSeconds``, ``TTSAudioSeconds``
  (RTF = engine / audio seconds).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ts.metrics.dimension import Dimension
from ts.metrics.metric_type_enum import MetricTypes


@dataclass(frozen=True, kw_only=True)
class BatchStats:
    """What one handler call did.

    Attributes:
        batch_size: requests TorchServe handed over.
        sub_batches: engine calls made (including retries after a split).
        real_tokens: sum of item token counts over successful calls.
        padded_tokens: sum of ``items x longest`` over successful calls.
        engine_s: seconds spent in engine calls.
        audio_s: seconds of audio returned (successful requests).
        failed_requests: requests answered with an error status.
    """

    batch_size: int
    sub_batches: int
    real_tokens: int
    padded_tokens: int
    engine_s: float
    audio_s: float
    failed_requests: int

    @property
    def padding_ratio(self) -> float:
        """Padded tokens / real tokens (1.0 = no padding; 1.0 when nothing ran)."""
        return self.padded_tokens / self.real_tokens if self.real_tokens else 1.0

    @classmethod
    def from_calls(cls, *, batch_size: int, calls: Sequence, pending: Sequence, sample_rate_hz: int) -> "BatchStats":
        """Summarise ``CallRecord``s and the per-request outcomes of one batch."""
        ok_calls = [c for c in calls if c.ok]
        samples = sum(len(p.audio) for p in pending if p.audio is not None and p.error is None)
        return cls(
            batch_size=batch_size,
            sub_batches=len(calls),
            real_tokens=sum(c.real_tokens for c in ok_calls),
            padded_tokens=sum(c.padded_tokens for c in ok_calls),
            engine_s=sum(c.seconds for c in calls),
            audio_s=samples / sample_rate_hz,
            failed_requests=sum(1 for p in pending if p.error is not None),
        )

    def log_fields(self) -> str:
        """``key=value`` pairs for the ``TTS_BATCH`` log line (parsed by scripts)."""
        return (
            f"batch_size={self.batch_size} sub_batches={self.sub_batches} "
            f"padding_ratio={self.padding_ratio:.3f} engine_s={self.engine_s:.4f} "
            f"audio_s={self.audio_s:.3f} failed={self.failed_requests}"
        )


def _dims(model_name: str, *extra: Dimension) -> list[Dimension]:
    return [Dimension("ModelName", model_name), Dimension("Level", "Model"), *extra]


def emit_batch_metrics(metrics, model_name: str, stats: BatchStats) -> None:
    """Add one batch's counters to TorchServe's metrics cache (``context.metrics``)."""
    metrics.add_metric(
        "TTSBatches", 1, "count", dimensions=_dims(model_name, Dimension("BatchSize", str(stats.batch_size))),
        metric_type=MetricTypes.COUNTER,
    )
    counters = {
        "TTSBatchRequests": (stats.batch_size, "count"),
        "TTSSubBatches": (stats.sub_batches, "count"),
        "TTSRealTokens": (stats.real_tokens, "count"),
        "TTSPaddedTokens": (stats.padded_tokens, "count"),
        "TTSEngineSeconds": (stats.engine_s, "s"),
        "TTSAudioSeconds": (stats.audio_s, "s"),
    }
    for name, (value, unit) in counters.items():
        metrics.add_metric(name, value, unit, dimensions=_dims(model_name), metric_type=MetricTypes.COUNTER)
    metrics.add_metric(
        "TTSPaddingRatio", stats.padding_ratio, "ratio", dimensions=_dims(model_name), metric_type=MetricTypes.GAUGE
    )


def emit_cost_model_metrics(metrics, model_name: str, model) -> None:
    """Publish the fitted cost-model coefficients as gauges."""
    for name, value in (
        ("TTSCostFixedSeconds", model.fixed_s),
        ("TTSCostPerPaddedTokenSeconds", model.per_padded_token_s),
        ("TTSCostPerItemSeconds", model.per_item_s),
    ):
        metrics.add_metric(name, value, "s", dimensions=_dims(model_name), metric_type=MetricTypes.GAUGE)
