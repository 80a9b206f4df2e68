"""Audio post-processing: float to int16, pauses, in-memory WAV and raw PCM.

Nothing here writes files: the WAV container is produced in memory with the
standard library's ``wave`` module, which writes correct RIFF and data sizes.
"""

from __future__ import annotations

import io
import wave
from typing import Final, Sequence

import numpy as np

#: Full scale of signed 16-bit PCM. Floats are scaled by 32767 (not 32768) so
#: that +1.0 maps to +32767 and -1.0 to -32767 without overflow.
INT16_FULL_SCALE: Final = 32767.0


def float_to_int16(audio: np.ndarray) -> np.ndarray:
    """Convert float audio in [-1, 1] to int16 with clipping.

    Args:
        audio: float array ``(samples,)``; values outside [-1, 1] are clipped,
            NaN becomes 0.

    Returns:
        int16 array ``(samples,)``: ``round(clip(x, -1, 1) * 32767)``.
    """
    clean = np.nan_to_num(np.asarray(audio, dtype=np.float32), nan=0.0, posinf=1.0, neginf=-1.0)
    return np.rint(np.clip(clean, -1.0, 1.0) * INT16_FULL_SCALE).astype(np.int16)


def join_with_pauses(segments: Sequence[np.ndarray], *, pause_s: float, sample_rate_hz: int) -> np.ndarray:
    """Concatenate float segments with ``pause_s`` seconds of silence between them.

    Args:
        segments: float32 arrays ``(samples_i,)``; at least one.
        pause_s: silence between consecutive segments, seconds (>= 0).
        sample_rate_hz: sample rate of all segments, Hz.

    Returns:
        float32 array of ``sum(samples_i) + (len(segments) - 1) * round(pause_s * sample_rate_hz)``
        samples.

    Raises:
        ValueError: no segments.
    """
    if not segments:
        raise ValueError("join_with_pauses needs at least one segment, got 0")
    gap = np.zeros(int(round(pause_s * sample_rate_hz)), dtype=np.float32)
    parts: list[np.ndarray] = []
    for index, segment in enumerate(segments):
        if index:
            parts.append(gap)
        parts.append(np.asarray(segment, dtype=np.float32))
    return np.concatenate(parts)


def encode_wav(samples: np.ndarray, *, sample_rate_hz: int) -> bytes:
    """Encode int16 mono samples as a 16-bit PCM WAV file, in memory.

    Args:
        samples: int16 array ``(samples,)``.
        sample_rate_hz: the sample rate written to the header, Hz.

    Returns:
        RIFF/WAVE bytes: a 44-byte header followed by ``2 * len(samples)`` data bytes.

    Raises:
        TypeError: ``samples`` is not int16.
    """
    if samples.dtype != np.int16:
        raise TypeError(f"encode_wav expects int16 samples, got {samples.dtype}")
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(int(sample_rate_hz))
        wav.writeframes(samples.astype("<i2", copy=False).tobytes())
    return buffer.getvalue()


def encode_pcm(samples: np.ndarray) -> bytes:
    """Raw signed 16-bit little-endian mono PCM (``s16le``) bytes of int16 ``samples``."""
    if samples.dtype != np.int16:
        raise TypeError(f"encode_pcm expects int16 samples, got {samples.dtype}")
    return samples.astype("<i2", copy=False).tobytes()
