"""Audio encoding: WAV header and sizes, int16 clipping, pauses, raw PCM."""

from __future__ import annotations

import io
import struct
import wave

import numpy as np
import pytest
import scipy.io.wavfile

from handler import audio


def test_float_to_int16_clips_and_scales():
    out = audio.float_to_int16(np.array([0.0, 0.5, 1.0, -1.0, 1.7, -3.0, np.nan, -0.5], dtype=np.float32))
    assert out.dtype == np.int16
    assert out.tolist() == [0, 16384, 32767, -32767, 32767, -32767, 0, -16384]


@pytest.mark.parametrize("num_samples", [0, 1, 22050, 12345])
def test_wav_header_sizes_and_roundtrip(num_samples):
    samples = (np.arange(num_samples) % 200 - 100).astype(np.int16)
    data = audio.encode_wav(samples, sample_rate_hz=22050)
    assert len(data) == 44 + 2 * num_samples
    riff, riff_size, wave_tag = struct.unpack("<4sI4s", data[:12])
    assert (riff, wave_tag) == (b"RIFF", b"WAVE")
    assert riff_size == len(data) - 8
    assert data[36:40] == b"data"
    assert struct.unpack("<I", data[40:44])[0] == 2 * num_samples
    with wave.open(io.BytesIO(data)) as wav:
        assert (wav.getnchannels(), wav.getsampwidth(), wav.getframerate(), wav.getnframes()) == (1, 2, 22050, num_samples)
    rate, decoded = scipy.io.wavfile.read(io.BytesIO(data))
    assert rate == 22050
    np.testing.assert_array_equal(decoded, samples)


def test_encode_rejects_float_samples():
    with pytest.raises(TypeError):
        audio.encode_wav(np.zeros(3, dtype=np.float32), sample_rate_hz=16000)
    with pytest.raises(TypeError):
        audio.encode_pcm(np.zeros(3, dtype=np.float64))


def test_pcm_is_little_endian_s16():
    assert audio.encode_pcm(np.array([1, -2, 32767], dtype=np.int16)) == b"\x01\x00\xfe\xff\xff\x7f"


def test_join_with_pauses_exact_length():
    a, b, c = np.ones(10, np.float32), np.ones(5, np.float32), np.ones(1, np.float32)
    joined = audio.join_with_pauses([a, b, c], pause_s=0.2, sample_rate_hz=100)
    assert joined.shape == (10 + 20 + 5 + 20 + 1,)
    assert joined.dtype == np.float32
    assert joined[10:30].tolist() == [0.0] * 20
    assert audio.join_with_pauses([a], pause_s=0.2, sample_rate_hz=100).shape == (10,)
    with pytest.raises(ValueError):
        audio.join_with_pauses([], pause_s=0.1, sample_rate_hz=100)
