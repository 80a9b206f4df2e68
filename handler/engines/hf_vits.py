"""The ``hf-vits`` engine: transformers ``VitsModel`` + ``VitsTokenizer`` (torch).

Loads a VITS / MMS-TTS checkpoint from a LOCAL directory (never the hub) and
synthesises a padded batch in one forward pass.

What the model does with a padded batch (read in ``modeling_vits.py``,
transformers 5.x, and checked by ``tests/test_engine_hf_vits.py``):

* ``sequence_lengths`` are in **samples**: the predicted frame count times the
  hop, ``prod(config.upsample_rates)`` (256 for MMS-TTS). Each HiFi-GAN
  transposed convolution turns ``L`` frames into exactly ``L * rate`` samples
  when ``kernel - rate`` is even (checked at load), so the waveform is
  ``max(sequence_lengths)`` samples long and ``sequence_lengths[i]`` is item
  ``i``'s exact length.
* The text encoder, duration predictor and flow mask padded positions, but the
  HiFi-GAN decoder does not: its convolutions read the padding frames after an
  item's end (the conv biases make them non-zero), which changed the last
  ~100 samples of a short item by up to 1.3 in a batch. ``_DecoderPaddingMask``
  zeroes each item's padding frames before every decoder convolution, which is
  exactly what the zero padding of an unbatched call sees.
* ``VitsTokenizer`` with ``normalize=True`` lower-cases and silently drops
  characters outside the vocab; with ``normalize=False`` they become the unknown
  id. With ``add_blank`` the blank id 0 sits between and around characters.
  ``tokenize`` returns ``[]`` when no real (known, non-space) character is left.
"""

from __future__ import annotations

import json
import logging
import math
import string
from pathlib import Path
from typing import Final, Literal, Sequence

import numpy as np
import torch
from torch import nn
from transformers import VitsConfig, VitsModel, VitsTokenizer
from transformers.utils import is_phonemizer_available

from handler.engines.base import EngineOutput, SynthesisParams

_LOGGER = logging.getLogger(__name__)

#: Symbols of the random test checkpoint's vocab (id 0 is the blank/pad token).
_RANDOM_VOCAB: Final[tuple[str, ...]] = (
    ("<pad>",) + tuple(string.ascii_lowercase) + (" ", "'", ",", ".", "!", "?", "-", ";", ":", "<unk>")
)
#: A ``VitsConfig`` small enough for a forward pass in milliseconds on a CPU.
_TINY_CONFIG: Final[dict[str, object]] = {
    "hidden_size": 16,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "ffn_dim": 32,
    "flow_size": 16,
    "spectrogram_bins": 17,
    "upsample_initial_channel": 32,
    "upsample_rates": [8, 8, 4],
    "upsample_kernel_sizes": [16, 16, 8],
    "resblock_kernel_sizes": [3],
    "resblock_dilation_sizes": [[1, 3]],
    "duration_predictor_filter_channels": 16,
    "duration_predictor_num_flows": 2,
    "depth_separable_num_layers": 2,
    "prior_encoder_num_flows": 2,
    "prior_encoder_num_wavenet_layers": 2,
    "posterior_encoder_num_wavenet_layers": 1,
}


class _DecoderPaddingMask:
    """Context manager: zero padding frames before every HiFi-GAN convolution of ``model``.

    A forward pre-hook on ``model.flow`` captures the output padding mask that
    ``VitsModel.forward`` passes to it (``flow(latents, padding_mask, ...)``,
    float ``(batch, 1, max_frames)``); pre-hooks on the decoder convolutions
    multiply their input ``(batch, channels, max_frames * factor)`` by that mask
    repeated ``factor`` times along time. Hooks are removed on exit, also when
    the forward pass raises (the exception propagates unchanged).
    """

    def __init__(self, model: VitsModel) -> None:
        self._model = model
        self._masks: dict[int, torch.Tensor] = {}
        self._frame_mask: torch.Tensor | None = None
        self._handles: list[torch.utils.hooks.RemovableHandle] = []

    def __enter__(self) -> _DecoderPaddingMask:
        self._handles.append(self._model.flow.register_forward_pre_hook(self._capture))
        for name, module in self._model.decoder.named_modules():
            # ``cond`` maps a (batch, channels, 1) speaker embedding: not a time axis.
            if isinstance(module, (nn.Conv1d, nn.ConvTranspose1d)) and name != "cond":
                self._handles.append(module.register_forward_pre_hook(self._mask_input))
        return self

    def __exit__(self, *exc_info: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._masks.clear()

    def _capture(self, module: nn.Module, args: tuple) -> None:
        padding_mask = args[1] if len(args) > 1 else None
        if not isinstance(padding_mask, torch.Tensor) or padding_mask.dim() != 3:
            raise RuntimeError(
                "VitsModel.flow was not called as flow(latents, padding_mask, ...); "
                "the transformers version is not supported by the hf-vits engine"
            )
        self._masks.clear()
        self._frame_mask = None if bool(padding_mask.all()) else padding_mask

    def _mask_input(self, module: nn.Module, args: tuple) -> tuple | None:
        if self._frame_mask is None:
            return None
        hidden = args[0]
        factor, rest = divmod(hidden.shape[-1], self._frame_mask.shape[-1])
        if rest:
            raise RuntimeError(
                f"decoder input of {hidden.shape[-1]} steps is not a multiple of "
                f"{self._frame_mask.shape[-1]} frames"
            )
        if factor not in self._masks:
            self._masks[factor] = self._frame_mask.repeat_interleave(factor, dim=-1).to(hidden.dtype)
        return (hidden * self._masks[factor],) + tuple(args[1:])


class HfVitsEngine:
    """VITS / MMS-TTS through transformers, one batched forward pass per call.

    Attributes:
        sample_rate_hz: output sample rate (``config.sampling_rate``, 16000 for MMS).
        voices: ``(voice_name,)``.
        pad_id: id to right-pad ``ids`` with (the tokenizer's pad id, 0).
        hop_samples: output samples per spectrogram frame, ``prod(upsample_rates)``.
        num_speakers: speakers of the checkpoint (1 = single speaker).

    Not thread-safe: ``synthesize`` sets the model's noise scales per call.
    """

    def __init__(
        self,
        *,
        checkpoint_dir: str | Path,
        device: str = "cpu",
        num_threads: int | None = None,
        voice_name: str | None = None,
    ) -> None:
        """Load model and tokenizer from ``checkpoint_dir`` with ``local_files_only=True``.

        Args:
            checkpoint_dir: directory written by ``save_pretrained`` (config.json,
                model.safetensors, vocab.json, tokenizer_config.json).
            device: torch device, ``"cpu"`` or ``"cuda"`` (``"cuda:N"``).
            num_threads: when given, ``torch.set_num_threads`` (process-wide), >= 1.
            voice_name: the voice's name; default the directory's name.

        Raises:
            FileNotFoundError: ``checkpoint_dir`` is not a directory.
            ValueError: bad ``num_threads`` or an unsupported decoder config.
            RuntimeError: the tokenizer needs ``phonemizer``, which is not installed.
            OSError: transformers cannot read the checkpoint.
        """
        path = Path(checkpoint_dir)
        if not path.is_dir():
            raise FileNotFoundError(f"hf-vits checkpoint_dir {str(path)!r} is not a directory")
        if num_threads is not None:
            if num_threads < 1:
                raise ValueError(f"num_threads must be >= 1, got {num_threads}")
            torch.set_num_threads(num_threads)
        self._device = torch.device(device)
        self._tokenizer = _load_tokenizer(path)
        self._model = VitsModel.from_pretrained(path, local_files_only=True, dtype=torch.float32)
        self._model.to(self._device).eval()
        config = self._model.config
        self.hop_samples = _hop_samples(config)
        self.sample_rate_hz = int(config.sampling_rate)
        self.num_speakers = int(config.num_speakers)
        self.voices: Sequence[str] = (voice_name or path.resolve().name,)
        self.pad_id = int(self._tokenizer.pad_token_id or 0)
        self._silent_ids = _silent_ids(self._tokenizer)
        _LOGGER.info(
            "hf-vits voice %s loaded from %s on %s: %s Hz, hop %s, %s speaker(s)",
            self.voices[0], path, self._device, self.sample_rate_hz, self.hop_samples, self.num_speakers,
        )

    def tokenize(self, text: str) -> list[int]:
        """Turn one sentence into the tokenizer's ids (with blanks when ``add_blank``).

        Returns:
            The ids, or ``[]`` when no known, non-space character is left (for
            example only emoji or symbols outside the vocab).
        """
        ids = [int(i) for i in self._tokenizer(text)["input_ids"]]
        real = ids[1::2] if self._tokenizer.add_blank else ids
        if all(i in self._silent_ids for i in real):
            _LOGGER.debug("hf-vits: no tokens in %r", text)
            return []
        return ids

    def synthesize(self, ids: np.ndarray, lengths: np.ndarray, params: SynthesisParams) -> EngineOutput:
        """Synthesise a padded batch in one forward pass.

        Args:
            ids: int64 ``(batch, max_tokens)``, row ``i`` valid up to ``lengths[i]``.
            lengths: int64 ``(batch,)``, each in ``[1, max_tokens]``.
            params: ``length_scale`` -> speaking rate ``1 / length_scale``;
                ``noise_scale`` -> ``model.noise_scale``; ``noise_w`` ->
                ``model.noise_scale_duration``; ``speaker_id`` for multi-speaker
                checkpoints (``None`` or 0 for single-speaker ones).

        Returns:
            ``EngineOutput``: float32 ``(batch, max_samples)`` audio, zero past each
            item's end, and int64 ``(batch,)`` exact sample counts.

        Raises:
            ValueError: bad shapes, ids outside the vocab, or bad params.
            torch.cuda.OutOfMemoryError / MemoryError: propagated unchanged.
        """
        speaker_id = self._check_params(params)
        input_ids, attention_mask = self._to_tensors(ids, lengths)
        self._model.noise_scale = float(params.noise_scale)
        self._model.noise_scale_duration = float(params.noise_w)
        with torch.inference_mode(), _DecoderPaddingMask(self._model):
            output = self._model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                speaker_id=speaker_id,
                speaking_rate=1.0 / params.length_scale,
            )
        return _engine_output(output.waveform, output.sequence_lengths)

    def _check_params(self, params: SynthesisParams) -> int | None:
        """Validate ``params``; return the ``speaker_id`` to pass to the model."""
        if not (math.isfinite(params.length_scale) and params.length_scale > 0):
            raise ValueError(f"length_scale must be finite and > 0, got {params.length_scale}")
        for name in ("noise_scale", "noise_w"):
            value = getattr(params, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be finite and >= 0, got {value}")
        speaker_id = params.speaker_id
        if self.num_speakers <= 1:
            if speaker_id not in (None, 0):
                raise ValueError(f"voice {self.voices[0]} has one speaker, got speaker_id={speaker_id}")
            return None
        if speaker_id is not None and not 0 <= speaker_id < self.num_speakers:
            raise ValueError(f"speaker_id must be in [0, {self.num_speakers - 1}], got {speaker_id}")
        return speaker_id

    def _to_tensors(self, ids: np.ndarray, lengths: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Check the padded batch; return int64 ``input_ids`` and ``attention_mask`` on the device."""
        ids = np.asarray(ids, dtype=np.int64)
        lengths = np.asarray(lengths, dtype=np.int64)
        if ids.ndim != 2 or lengths.shape != (ids.shape[0],) or ids.shape[0] == 0:
            raise ValueError(f"need ids (batch, tokens) and lengths (batch,), got {ids.shape} and {lengths.shape}")
        if lengths.min() < 1 or lengths.max() > ids.shape[1]:
            raise ValueError(f"lengths must be in [1, {ids.shape[1]}], got {lengths.tolist()}")
        max_tokens = int(lengths.max())
        valid = np.arange(max_tokens)[None, :] < lengths[:, None]
        ids = np.where(valid, ids[:, :max_tokens], self.pad_id)
        vocab_size = int(self._model.config.vocab_size)
        if ids.min() < 0 or ids.max() >= vocab_size:
            raise ValueError(f"ids must be in [0, {vocab_size}), got [{ids.min()}, {ids.max()}]")
        input_ids = torch.from_numpy(ids).to(self._device)
        attention_mask = torch.from_numpy(valid.astype(np.int64)).to(self._device)
        return input_ids, attention_mask


def _load_tokenizer(path: Path) -> VitsTokenizer:
    """Load the checkpoint's ``VitsTokenizer``; fail now if it needs a missing phonemizer."""
    tokenizer = VitsTokenizer.from_pretrained(path, local_files_only=True)
    if tokenizer.phonemize and not is_phonemizer_available():
        raise RuntimeError(
            f"the tokenizer of {path} has phonemize=True but the phonemizer package is not installed"
        )
    if tokenizer.is_uroman:
        _LOGGER.warning("tokenizer of %s expects uroman-romanised text; non-Latin input may be dropped", path)
    return tokenizer


def _silent_ids(tokenizer: VitsTokenizer) -> frozenset[int]:
    """Ids that carry no speech on their own: unknown, pad and whitespace tokens."""
    silent = {tokenizer.unk_token_id, tokenizer.pad_token_id}
    silent.update(i for token, i in tokenizer.get_vocab().items() if token.isspace())
    return frozenset(i for i in silent if i is not None)


def _hop_samples(config: VitsConfig) -> int:
    """Samples per frame, ``prod(upsample_rates)``; raise ValueError when a stage is not exact."""
    for rate, kernel in zip(config.upsample_rates, config.upsample_kernel_sizes):
        if (kernel - rate) % 2:
            raise ValueError(
                f"upsample kernel {kernel} with rate {rate}: kernel - rate must be even for exact lengths"
            )
    return int(np.prod(config.upsample_rates))


def _engine_output(waveform: torch.Tensor, sequence_lengths: torch.Tensor) -> EngineOutput:
    """Move the model output to numpy; zero the padding; check the lengths fit."""
    audio = waveform.detach().to(device="cpu", dtype=torch.float32).numpy().copy()
    num_samples = sequence_lengths.detach().cpu().numpy().astype(np.int64)
    if audio.ndim != 2 or num_samples.shape != (audio.shape[0],) or num_samples.max() > audio.shape[1]:
        raise RuntimeError(
            f"VitsModel returned waveform {audio.shape} with sequence_lengths {num_samples.tolist()}"
        )
    for row, count in enumerate(num_samples):
        audio[row, count:] = 0.0
    return EngineOutput(audio=audio, num_samples=num_samples)


def build_random_checkpoint(
    path: str | Path, *, size: Literal["tiny", "mms"] = "tiny", seed: int = 0
) -> Path:
    """Write a randomly initialised VITS checkpoint (model + tokenizer) to ``path``.

    Args:
        path: output directory (created if missing; files are overwritten).
        size: ``"tiny"``: about 53 k parameters, a forward pass in
            tens of milliseconds on a CPU; ``"mms"``: ``VitsConfig`` defaults (the size of
            Meta's MMS-TTS voices, about 36 M parameters).
        seed: torch seed for the weights (the global RNG state is restored).

    Returns:
        ``path`` as a ``Path``, loadable with ``from_pretrained(path, local_files_only=True)``.
        Vocab: blank/pad ``<pad>`` (id 0), ``a``-``z``, space, ``' , . ! ? - ; :``
        and ``<unk>``; ``add_blank=True, normalize=True, phonemize=False``; 16 kHz.

    Raises:
        ValueError: unknown ``size``.
    """
    if size not in ("tiny", "mms"):
        raise ValueError(f"size must be 'tiny' or 'mms', got {size!r}")
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    vocab_file = out / "vocab.json"
    vocab_file.write_text(json.dumps({s: i for i, s in enumerate(_RANDOM_VOCAB)}, ensure_ascii=False), "utf-8")
    tokenizer = VitsTokenizer(
        vocab_file=str(vocab_file), add_blank=True, normalize=True, phonemize=False
    )
    tokenizer.save_pretrained(out)
    overrides = _TINY_CONFIG if size == "tiny" else {}
    config = VitsConfig(vocab_size=len(_RANDOM_VOCAB), sampling_rate=16_000, **overrides)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = VitsModel(config).eval()
    model.save_pretrained(out)
    _LOGGER.info("random %s VITS checkpoint (seed %s) written to %s", size, seed, out)
    return out
