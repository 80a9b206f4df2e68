"""The default engine: a Piper VITS voice (ONNX) run with onnxruntime.

Piper's exported graph takes ``input`` (batch, phonemes) int64,
``input_lengths`` (batch,) int64 and ``scales`` (3,) float32 =
[noise_scale, length_scale, noise_w] (plus ``sid`` for multi-speaker voices) and
returns ``output`` (batch, 1, 1, samples) padded to the longest item, with no
per-item lengths. We expose the graph's ``Ceil`` tensor (``w_ceil``, the
per-phoneme durations in frames, masked to 0 on padding) as an extra output
when loading, as ``piper.patch_voice_with_alignment`` does. Following VITS
(``y_lengths = clamp_min(sum(w_ceil), 1)``), an item's exact length is
``max(1, sum(w_ceil[i])) * hop_length`` samples.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Sequence

import numpy as np
import onnx
import onnxruntime

from handler.engines.base import EngineOutput, SynthesisParams

_LOGGER = logging.getLogger(__name__)

#: Piper's phoneme id map markers (``piper.const``): beginning, end, pad.
_BOS, _EOS, _PAD = "^", "$", "_"
#: Phonemes that are not speech: punctuation and spaces. A text made only of
#: these "yields no phonemes".
_NON_SPEECH = frozenset(" !'(),-.:;?\"¡¿—…")
_ESPEAK_LOCK = threading.Lock()


class PiperOnnxEngine:
    """Runs a Piper voice with onnxruntime on CPU (or CUDA where available).

    Args:
        model_path: the voice's ``.onnx`` file.
        config_path: its JSON config (default: ``model_path + ".json"``).
        num_threads: onnxruntime intra-op threads (0 = onnxruntime's default).
        use_cuda: use the CUDA execution provider.
        voice_name: the name clients may send as ``voice`` (default: file stem).

    Raises:
        FileNotFoundError: a file is missing.
        ValueError: the graph has no (or several) ``Ceil`` nodes to expose.
    """

    def __init__(
        self,
        *,
        model_path: str | Path,
        config_path: str | Path | None = None,
        num_threads: int = 0,
        use_cuda: bool = False,
        voice_name: str | None = None,
    ) -> None:
        from piper.config import PiperConfig  # piper-tts: GPL-3.0 (espeak-ng bridge)
        from piper.phonemize_espeak import EspeakPhonemizer

        model_path = Path(model_path)
        config_path = Path(config_path) if config_path else Path(f"{model_path}.json")
        self.config = PiperConfig.from_dict(json.loads(config_path.read_text(encoding="utf-8")))
        self.sample_rate_hz: int = int(self.config.sample_rate)
        self.hop_length: int = int(self.config.hop_length)
        name = voice_name or model_path.name.removesuffix(".onnx")
        self.voices: Sequence[str] = tuple(dict.fromkeys([name, name.split("-")[1] if name.count("-") >= 2 else name]))
        self._phonemizer = EspeakPhonemizer()
        self._pad_id = self.config.phoneme_id_map[_PAD][0]
        self._session = _load_session(model_path, num_threads=num_threads, use_cuda=use_cuda)
        self._input_names = {i.name for i in self._session.get_inputs()}
        _LOGGER.info(
            "Piper voice %s loaded: %d Hz, hop %d, providers %s",
            name, self.sample_rate_hz, self.hop_length, self._session.get_providers(),
        )

    @property
    def pad_id(self) -> int:
        """The id used to pad shorter items of a batch."""
        return self._pad_id

    def tokenize(self, text: str) -> list[int]:
        """Phonemise ``text`` with espeak-ng and map it to Piper phoneme ids.

        espeak may split the text into several clauses; their phonemes are
        joined into one item. Returns ``[]`` when the text has no spoken phoneme.
        """
        from piper.phoneme_ids import phonemes_to_ids

        with _ESPEAK_LOCK:  # espeak-ng keeps global state
            sentences = self._phonemizer.phonemize(
                self.config.espeak_voice, text, vowel_clusters=self.config.vowel_clusters
            )
        phonemes = [p for sentence in sentences for p in sentence]
        id_map = self.config.phoneme_id_map
        if not any(p in id_map and p not in _NON_SPEECH for p in phonemes):
            return []
        return phonemes_to_ids(phonemes, id_map)

    def synthesize(self, ids: np.ndarray, lengths: np.ndarray, params: SynthesisParams) -> EngineOutput:
        """Synthesise a padded batch in one onnxruntime call (see ``Engine.synthesize``)."""
        feeds = {
            "input": np.ascontiguousarray(ids, dtype=np.int64),
            "input_lengths": np.asarray(lengths, dtype=np.int64),
            "scales": np.array([params.noise_scale, params.length_scale, params.noise_w], dtype=np.float32),
        }
        if "sid" in self._input_names:
            feeds["sid"] = np.full((ids.shape[0],), params.speaker_id or 0, dtype=np.int64)
        audio, w_ceil = self._session.run(None, feeds)
        audio = audio.reshape(ids.shape[0], -1).astype(np.float32, copy=False)
        frames = np.maximum(w_ceil.reshape(ids.shape[0], -1).sum(axis=1), 1.0)
        num_samples = np.minimum(frames.astype(np.int64) * self.hop_length, audio.shape[1])
        return EngineOutput(audio=audio, num_samples=num_samples)


def _load_session(model_path: Path, *, num_threads: int, use_cuda: bool) -> onnxruntime.InferenceSession:
    """Load the graph with its ``Ceil`` (w_ceil) tensor exposed as a second output."""
    model = onnx.load(str(model_path))
    ceil_outputs = [out for node in model.graph.node if node.op_type == "Ceil" for out in node.output]
    if len(ceil_outputs) != 1:
        raise ValueError(f"{model_path}: expected exactly one Ceil node (VITS w_ceil), found {len(ceil_outputs)}")
    if all(o.name != ceil_outputs[0] for o in model.graph.output):
        value_info = onnx.ValueInfoProto()
        value_info.name = ceil_outputs[0]
        model.graph.output.append(value_info)
    options = onnxruntime.SessionOptions()
    if num_threads > 0:
        options.intra_op_num_threads = num_threads
        options.inter_op_num_threads = 1
    providers = ["CUDAExecutionProvider", "CPUExecutionProvider"] if use_cuda else ["CPUExecutionProvider"]
    return onnxruntime.InferenceSession(model.SerializeToString(), sess_options=options, providers=providers)
