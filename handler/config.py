"""Handler settings: a frozen object built once from the archive's ``model-config.yaml``.

The ``handler:`` section of ``model-config.yaml`` (TorchServe hands it to the
worker as ``context.model_yaml_config``) holds our own settings, e.g.::

    handler:
      engine: piper-onnx
      model_file: en_US-joe-medium.onnx
      max_text_chars: 2000
      num_threads: 1

Unknown keys and bad values raise ``ConfigError`` at start-up with a message
naming the key, so a typo fails the model load instead of being ignored.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Final, Mapping

ENGINES: Final = ("piper-onnx", "hf-vits")
FORMATS: Final = ("wav", "pcm")

#: TorchServe's default max_response_size is 6,553,500 bytes per item, i.e.
#: about 148 s of 22,050 Hz 16-bit mono audio; 2,000 characters of English at
#: ~15 characters per second of speech is ~133 s at speed 1.0.
DEFAULT_MAX_TEXT_CHARS: Final = 2000


class ConfigError(ValueError):
    """A ``handler:`` setting is unknown or has a bad value; the message names it."""


@dataclass(frozen=True, kw_only=True)
class HandlerSettings:
    """Validated handler settings (the ``handler:`` section of ``model-config.yaml``).

    Attributes:
        engine: ``"piper-onnx"`` (default) or ``"hf-vits"``.
        model_file: Piper: the ``.onnx`` file in the archive; its JSON config is
            ``model_file + ".json"``.
        checkpoint_dir: hf-vits: the checkpoint directory inside the archive.
        voice: the voice name clients may send in ``voice`` (default: from the model).
        device: ``"cpu"`` or ``"cuda"``.
        num_threads: intra-op threads per worker (0 = library default).
        max_text_chars: longest accepted text, in characters.
        max_response_bytes: largest response body; an item whose audio would exceed it
            gets 413 (keep equal to TorchServe's ``max_response_size``, 6,553,500 bytes by
            default: a larger response kills the worker and fails its whole batch).
        max_segment_chars: a sentence longer than this is cut at commas/spaces.
        sentence_pause_s: silence inserted between a request's sentences, seconds.
        min_speed, max_speed: accepted ``speed`` range (1.0 = the voice's natural rate).
        noise_scale, noise_w: VITS noise scales (0, 0 = deterministic output).
        default_format: response format when the request names none.
        max_sub_batch_items: most items in one engine call.
        max_padded_tokens: most padded tokens (items x longest) in one engine call.
    """

    engine: str = "piper-onnx"
    model_file: str = "en_US-joe-medium.onnx"
    checkpoint_dir: str = "checkpoint"
    voice: str | None = None
    device: str = "cpu"
    num_threads: int = 0
    max_text_chars: int = DEFAULT_MAX_TEXT_CHARS
    max_response_bytes: int = 6_553_500
    max_segment_chars: int = 400
    sentence_pause_s: float = 0.2
    min_speed: float = 0.25
    max_speed: float = 4.0
    noise_scale: float = 0.667
    noise_w: float = 0.8
    default_format: str = "wav"
    max_sub_batch_items: int = 32
    max_padded_tokens: int = 16384

    def __post_init__(self) -> None:
        _check(self.engine in ENGINES, "engine", self.engine, f"one of {ENGINES}")
        _check(self.device in ("cpu", "cuda"), "device", self.device, "'cpu' or 'cuda'")
        _check(self.default_format in FORMATS, "default_format", self.default_format, f"one of {FORMATS}")
        for name in ("max_text_chars", "max_response_bytes", "max_segment_chars", "max_sub_batch_items", "max_padded_tokens"):
            _check(getattr(self, name) >= 1, name, getattr(self, name), "an integer >= 1")
        _check(self.num_threads >= 0, "num_threads", self.num_threads, "an integer >= 0")
        _check(0 < self.min_speed <= self.max_speed, "min_speed", self.min_speed, "0 < min_speed <= max_speed")
        _check(self.sentence_pause_s >= 0, "sentence_pause_s", self.sentence_pause_s, ">= 0 seconds")
        for name in ("noise_scale", "noise_w"):
            _check(getattr(self, name) >= 0, name, getattr(self, name), ">= 0")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any] | None) -> "HandlerSettings":
        """Build settings from the ``handler:`` mapping, coercing YAML scalars.

        Raises:
            ConfigError: unknown key, or a value of the wrong type or range.
        """
        values = dict(values or {})
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - set(fields))
        if unknown:
            raise ConfigError(f"unknown handler setting(s) {unknown}; known: {sorted(fields)}")
        kwargs = {name: _coerce(name, fields[name].type, value) for name, value in values.items()}
        return cls(**kwargs)


def _coerce(name: str, type_name: Any, value: Any) -> Any:
    """Convert a YAML scalar to the field's type, naming the key on failure."""
    type_name = str(type_name)
    if value is None and "None" in type_name:
        return None
    try:
        if type_name.startswith("int"):
            if isinstance(value, bool) or float(value) != int(float(value)):
                raise ValueError
            return int(float(value))
        if type_name.startswith("float"):
            return float(value)
        return str(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"handler setting {name!r} = {value!r} is not a valid {type_name}") from exc


def _check(ok: bool, name: str, value: Any, expected: str) -> None:
    if not ok:
        raise ConfigError(f"handler setting {name!r} = {value!r}: expected {expected}")
