"""Fakes at the boundaries: a real TorchServe ``Context`` and a fault-injecting engine."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from ts.context import Context, RequestProcessor
from ts.metrics.metric_cache_yaml_impl import MetricsCacheYamlImpl

from handler.engines.base import EngineOutput, SynthesisParams

REPO_ROOT = Path(__file__).resolve().parent.parent
#: Text containing this word makes ``FakeEngine`` raise on any batch holding it.
POISON = "poison"
_POISON_ID = 99


def make_context(batch_size: int, model_name: str = "tts") -> Context:
    """A real ``ts.context.Context`` with one ``RequestProcessor`` per request and the repo's metrics.yaml."""
    metrics = MetricsCacheYamlImpl(config_file_path=str(REPO_ROOT / "metrics.yaml"))
    metrics.initialize_cache()
    metrics.model_name = model_name
    context = Context(model_name, str(REPO_ROOT), {}, batch_size, None, "0.12.0", metrics=metrics)
    context.request_processor = [RequestProcessor({}) for _ in range(batch_size)]
    context.request_ids = {i: f"req-{i}" for i in range(batch_size)}
    metrics.set_request_ids(context.request_ids)
    return context


class FakeEngine:
    """A deterministic engine: ``samples_per_token`` samples per token, each item's
    audio a ramp that depends only on its own ids (so batched == unbatched).

    Faults: raises ``RuntimeError`` on any batch containing the ``POISON`` word;
    raises ``MemoryError`` when ``batch x max_tokens > oom_above_padded_tokens``.
    Records every call's batch size in ``calls``.
    """

    sample_rate_hz = 16000
    voices = ("fake",)
    pad_id = 0

    def __init__(self, *, samples_per_token: int = 10, oom_above_padded_tokens: int | None = None) -> None:
        self.samples_per_token = samples_per_token
        self.oom_above_padded_tokens = oom_above_padded_tokens
        self.calls: list[int] = []

    def tokenize(self, text: str) -> list[int]:
        """One id per letter (1..26), ``_POISON_ID`` for the poison word; [] when no letters."""
        ids = []
        for word in text.lower().split():
            if POISON in word:
                ids.append(_POISON_ID)
            ids.extend(ord(c) - 96 for c in word if "a" <= c <= "z")
        return ids

    def synthesize(self, ids: np.ndarray, lengths: np.ndarray, params: SynthesisParams) -> EngineOutput:
        self.calls.append(int(ids.shape[0]))
        if self.oom_above_padded_tokens is not None and ids.size > self.oom_above_padded_tokens:
            raise MemoryError(f"fake OOM: {ids.size} padded tokens")
        if (ids == _POISON_ID).any():
            raise RuntimeError("fake engine failure on poisoned item")
        num_samples = (lengths * self.samples_per_token * params.length_scale).astype(np.int64)
        audio = np.full((ids.shape[0], int(num_samples.max())), 0.9, dtype=np.float32)  # padding value
        for row in range(ids.shape[0]):
            n = int(num_samples[row])
            audio[row, :n] = np.linspace(-0.5, 0.5, n, dtype=np.float32) * (ids[row, 0] / 26.0)
        return EngineOutput(audio=audio, num_samples=num_samples)
