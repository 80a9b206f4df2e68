"""Engine tests for ``hf-vits`` on a tiny random VITS checkpoint built offline."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import VitsModel, VitsTokenizer

from handler.engines.base import Engine, SynthesisParams, pad_ids
from handler.engines.hf_vits import HfVitsEngine, build_random_checkpoint

HELLO = "Hello"
LONG = (
    "The quick brown fox jumps over the lazy dog while the early morning sun rises slowly "
    "above the quiet hills, and a small group of travellers gathers near the old stone "
    "bridge to talk about the long journey still ahead."
)
DETERMINISTIC = SynthesisParams(length_scale=1.0, noise_scale=0.0, noise_w=0.0)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_random_checkpoint(tmp_path_factory.mktemp("vits") / "tiny-voice", size="tiny", seed=0)


@pytest.fixture(scope="module")
def engine(checkpoint: Path) -> HfVitsEngine:
    return HfVitsEngine(checkpoint_dir=checkpoint)


def _one(engine: HfVitsEngine, text: str, params: SynthesisParams = DETERMINISTIC) -> np.ndarray:
    """Audio of ``text`` synthesised alone, trimmed to its length (float32 1-D)."""
    out = engine.synthesize(*pad_ids([engine.tokenize(text)], engine.pad_id), params)
    return out.audio[0, : out.num_samples[0]]


def test_engine_satisfies_protocol(engine: HfVitsEngine) -> None:
    assert len(LONG.split()) == 40
    assert isinstance(engine, Engine)
    assert engine.voices == ("tiny-voice",)
    assert engine.sample_rate_hz == 16_000
    assert engine.hop_samples == 8 * 8 * 4


def test_batched_equals_unbatched(engine: HfVitsEngine) -> None:
    texts = [HELLO, LONG]
    ids, lengths = pad_ids([engine.tokenize(t) for t in texts], engine.pad_id)
    batched = engine.synthesize(ids, lengths, DETERMINISTIC)
    assert batched.audio.dtype == np.float32
    assert batched.num_samples.dtype == np.int64
    assert batched.audio.shape[0] == 2
    assert (batched.num_samples <= batched.audio.shape[1]).all()
    for row, text in enumerate(texts):
        alone = _one(engine, text)
        count = int(batched.num_samples[row])
        assert count == alone.shape[0], f"{text[:10]!r}: batched {count} vs alone {alone.shape[0]} samples"
        diff = float(np.abs(batched.audio[row, :count] - alone).max())
        assert diff <= 1e-3, f"{text[:10]!r}: max |diff| {diff}"
        assert not batched.audio[row, count:].any(), "padding past num_samples must be zero"


def test_num_samples_matches_the_models_unbatched_length(engine: HfVitsEngine, checkpoint: Path) -> None:
    model = VitsModel.from_pretrained(checkpoint, local_files_only=True).eval()
    model.noise_scale = 0.0
    model.noise_scale_duration = 0.0
    ids = engine.tokenize(LONG)
    with torch.inference_mode():
        reference = model(input_ids=torch.tensor([ids]))
    ours = engine.synthesize(*pad_ids([ids], engine.pad_id), DETERMINISTIC)
    assert int(reference.sequence_lengths[0]) == reference.waveform.shape[1]
    assert int(ours.num_samples[0]) == int(reference.sequence_lengths[0])
    np.testing.assert_allclose(ours.audio[0], reference.waveform[0].numpy(), atol=1e-5)


def test_length_scale_two_gives_longer_audio(engine: HfVitsEngine) -> None:
    # Durations are ceil(exp(log_duration) * length_scale) frames per token, so a
    # larger length_scale never shortens; over 435 tokens it strictly lengthens.
    normal = _one(engine, LONG).shape[0]
    slow = _one(engine, LONG, SynthesisParams(length_scale=2.0)).shape[0]
    fast = _one(engine, LONG, SynthesisParams(length_scale=0.5)).shape[0]
    assert fast < normal < slow
    assert slow % engine.hop_samples == 0


@pytest.mark.parametrize("text", ["😀😀", "###", "", "   "])
def test_tokenize_without_vocab_characters_is_empty(engine: HfVitsEngine, text: str) -> None:
    assert engine.tokenize(text) == []


def test_tokenize_hello(engine: HfVitsEngine) -> None:
    ids = engine.tokenize("hello")
    assert ids == engine.tokenize("Hello!#")[: len(ids)]
    assert ids[1::2] == [8, 5, 12, 12, 15]  # letters, 1-based after the blank <pad>
    assert ids[0::2] == [engine.pad_id] * 6  # add_blank: blank between and around


def test_checkpoint_loads_with_local_files_only(checkpoint: Path) -> None:
    names = {p.name for p in checkpoint.iterdir()}
    assert {"config.json", "model.safetensors", "vocab.json", "tokenizer_config.json"} <= names
    model = VitsModel.from_pretrained(checkpoint, local_files_only=True)
    tokenizer = VitsTokenizer.from_pretrained(checkpoint, local_files_only=True)
    assert model.config.vocab_size == len(tokenizer.get_vocab())
    assert (tokenizer.add_blank, tokenizer.normalize, tokenizer.phonemize) == (True, True, False)


def test_missing_checkpoint_dir_fails_fast(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not a directory"):
        HfVitsEngine(checkpoint_dir=tmp_path / "absent")


def test_bad_params_are_value_errors(engine: HfVitsEngine) -> None:
    ids, lengths = pad_ids([engine.tokenize(HELLO)], engine.pad_id)
    with pytest.raises(ValueError, match="one speaker"):
        engine.synthesize(ids, lengths, SynthesisParams(speaker_id=3))
    with pytest.raises(ValueError, match="length_scale"):
        engine.synthesize(ids, lengths, SynthesisParams(length_scale=0.0))
