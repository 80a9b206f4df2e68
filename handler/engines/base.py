"""The engine protocol: padded phoneme ids in, padded audio plus exact per-item lengths out.

An engine owns the model maths and nothing else: it does not know about HTTP,
requests, batching policy or audio encoding. Every engine must satisfy the
correctness contract of ``DESIGN.md``: for deterministic settings (noise
scales 0), an item's audio from a batch equals its audio when synthesised
alone (same ``num_samples``, max |difference| <= 1e-3).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence, runtime_checkable

import numpy as np


@dataclass(frozen=True, kw_only=True)
class SynthesisParams:
    """Everything an engine takes once per forward pass (the *conditioning key*).

    Items may share one engine call only when their ``SynthesisParams`` are
    equal; the dataclass is frozen and hashable so it can key a dict.

    Attributes:
        length_scale: duration multiplier, ``1 / speed`` (dimensionless, > 0).
        noise_scale: VITS prior noise scale (0 = deterministic).
        noise_w: VITS stochastic duration predictor noise scale (0 = deterministic).
        speaker_id: speaker index for multi-speaker voices, ``None`` otherwise.
    """

    length_scale: float = 1.0
    noise_scale: float = 0.0
    noise_w: float = 0.0
    speaker_id: int | None = None


@dataclass(frozen=True)
class EngineOutput:
    """Result of one batched engine call.

    Attributes:
        audio: float32 array ``(batch, max_samples)`` in [-1, 1] (roughly), padded
            at the end; samples past ``num_samples[i]`` are padding.
        num_samples: int64 array ``(batch,)``: the exact number of valid samples of
            each item, each ``<= audio.shape[1]``.
    """

    audio: np.ndarray
    num_samples: np.ndarray


@runtime_checkable
class Engine(Protocol):
    """A TTS acoustic model + vocoder that synthesises a padded batch in one call."""

    #: Output sample rate in Hz (e.g. 22050 for Piper "medium" voices).
    sample_rate_hz: int
    #: Voice names accepted in the request's ``voice`` field.
    voices: Sequence[str]
    #: Id written past each shorter item's end when padding a batch.
    pad_id: int

    def tokenize(self, text: str) -> list[int]:
        """Turn one text segment (about a sentence) into model input ids.

        Returns an empty list when the text yields no phonemes/tokens (the
        caller turns that into a 422 error). Never raises for ordinary text.
        """
        ...

    def synthesize(
        self, ids: np.ndarray, lengths: np.ndarray, params: SynthesisParams
    ) -> EngineOutput:
        """Synthesise a padded batch in one forward pass.

        Args:
            ids: int64 array ``(batch, max_tokens)``, right-padded with the
                engine's pad id; row ``i`` is valid up to ``lengths[i]``.
            lengths: int64 array ``(batch,)`` of token counts, each >= 1.
            params: conditioning shared by every item of the batch.

        Returns:
            ``EngineOutput`` with padded audio and exact per-item sample counts.

        Raises:
            MemoryError / ``torch.cuda.OutOfMemoryError``: out of memory.
            Any other exception: the engine failed on this batch.
        """
        ...


def pad_ids(sequences: Sequence[Sequence[int]], pad_id: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad id sequences into one batch.

    Args:
        sequences: ``batch`` non-empty sequences of ints.
        pad_id: value written past each sequence's end.

    Returns:
        ``(ids, lengths)``: int64 ``(batch, max_tokens)`` and int64 ``(batch,)``.

    Raises:
        ValueError: when ``sequences`` is empty or holds an empty sequence.
    """
    if not sequences:
        raise ValueError("pad_ids needs at least one sequence, got 0")
    lengths = np.array([len(s) for s in sequences], dtype=np.int64)
    if int(lengths.min()) < 1:
        raise ValueError(f"pad_ids got an empty sequence (lengths={lengths.tolist()})")
    ids = np.full((len(sequences), int(lengths.max())), pad_id, dtype=np.int64)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = seq
    return ids, lengths
