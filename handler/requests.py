"""Decoding one TorchServe request into a ``SynthesisRequest``, or a typed error.

Accepted bodies (TorchServe passes each request as a dict whose ``body`` or
``data`` entry holds the body: ``bytes``, or, unless the server runs with
``TS_DECODE_INPUT_REQUEST=false`` as our scripts start it, a ``dict`` for
``application/json`` and a ``str`` for ``text/*``; form posts arrive as one
entry per form field):

* our JSON: ``{"text": "...", "speed": 1.0, "format": "wav", "id": "..."}``
* the OpenAI speech keys: ``{"input": "...", "voice": "...",
  "response_format": "wav", "speed": 1.0, "model": "..."}``
* form fields with the same names (``curl -d text=...`` or ``-F text=...``);
* plain text (``text/plain`` or any body that is not JSON).

This module does not touch the model.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from handler.config import FORMATS
from handler.errors import BadRequestError, PayloadTooLargeError

#: Keys we accept in a JSON body; anything else is a 400 naming the key.
KNOWN_KEYS = frozenset({"text", "input", "speed", "format", "response_format", "id", "voice", "model"})
#: C0/C1 control characters other than tab and line breaks; replaced by spaces
#: before synthesis (espeak-ng refuses NUL).
_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
#: A client ``id`` is echoed in a response header: printable ASCII only.
_ID_PATTERN = re.compile(r"[\x20-\x7e]{1,128}")
#: OpenAI ``response_format`` values we recognise but do not produce.
_KNOWN_UNSUPPORTED_FORMATS = frozenset({"mp3", "opus", "aac", "flac"})


@dataclass(frozen=True, kw_only=True)
class RequestLimits:
    """What a request may ask for.

    Attributes:
        max_text_chars: longest accepted text, in characters (413 above it).
        min_speed, max_speed: accepted speed range (400 outside it).
        default_format: the format used when the request names none.
        voices: accepted ``voice`` values (empty: any value is refused).
    """

    max_text_chars: int = 2000
    min_speed: float = 0.25
    max_speed: float = 4.0
    default_format: str = "wav"
    voices: Sequence[str] = ()


@dataclass(frozen=True, kw_only=True)
class SynthesisRequest:
    """One validated request.

    Attributes:
        text: the text to speak, stripped, non-empty, at most ``max_text_chars``.
        speed: speaking-rate multiplier (1.0 natural; 2.0 twice as fast).
        audio_format: ``"wav"`` (16-bit PCM mono RIFF) or ``"pcm"`` (raw s16le).
        request_id: the client's ``id`` echoed back in a header, or ``None``.
    """

    text: str
    speed: float = 1.0
    audio_format: str = "wav"
    request_id: str | None = None


def decode_request(raw: Mapping[str, Any], limits: RequestLimits) -> SynthesisRequest:
    """Decode and validate one request of a TorchServe batch.

    Args:
        raw: one element of the batch list: ``{"body": ...}`` or ``{"data": ...}``.
        limits: the accepted ranges.

    Returns:
        The validated ``SynthesisRequest``.

    Raises:
        BadRequestError: no body, bad JSON, wrong types, unknown keys, speed out of
            range, unsupported format or voice, empty text (400).
        PayloadTooLargeError: text longer than ``limits.max_text_chars`` (413).
    """
    body = _body_of(raw)
    fields = _fields_of(body)
    text = _text_of(fields, limits)
    check_voice(fields.get("voice"), limits.voices)
    return SynthesisRequest(
        text=text,
        speed=_speed_of(fields, limits),
        audio_format=_format_of(fields, limits),
        request_id=_id_of(fields),
    )


def _body_of(raw: Mapping[str, Any]) -> Any:
    """The request body; for form posts (``-d text=...``, ``-F text=...``) a dict of the form fields."""
    if not isinstance(raw, Mapping):
        raise BadRequestError("request has no body", field=None)
    for key in ("body", "data"):
        if raw.get(key) is not None:
            return raw[key]
    form = {key: _form_value(key, value) for key, value in raw.items() if value is not None}
    if form:
        return form
    raise BadRequestError("request has no body: send JSON {\"text\": ...} or text/plain", field="text")


def _form_value(key: str, value: Any) -> Any:
    """A form field as the JSON body would carry it: text decoded, ``speed`` as a number."""
    if isinstance(value, (bytes, bytearray)):
        try:
            value = bytes(value).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadRequestError(f"form field '{key}' is not valid UTF-8", field=key) from exc
    if key == "speed" and isinstance(value, str):
        try:
            return float(value)
        except ValueError as exc:
            raise BadRequestError(f"'speed' must be a number, got {value!r}", field="speed") from exc
    return value


def _fields_of(body: Any) -> dict[str, Any]:
    """Turn a body (dict, str or bytes) into a dict of fields."""
    if isinstance(body, (bytes, bytearray)):
        try:
            body = bytes(body).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadRequestError("body is not valid UTF-8", field="text") from exc
    if isinstance(body, str):
        body = _parse_text_body(body)
    if isinstance(body, str):
        return {"text": body}
    if not isinstance(body, dict):
        raise BadRequestError(f"JSON body must be an object, got {type(body).__name__}", field=None)
    unknown = sorted(set(body) - KNOWN_KEYS)
    if unknown:
        raise BadRequestError(f"unknown key(s) {unknown}; accepted: {sorted(KNOWN_KEYS)}", field=unknown[0])
    return body


def _string_field(fields: Mapping[str, Any], ours: str, openai: str) -> tuple[str, str | None]:
    """``(field name, value)`` of our key or its OpenAI alias; 400 when both are sent or it is no string."""
    if ours in fields and openai in fields:
        raise BadRequestError(f"send either '{ours}' or '{openai}', not both", field=ours)
    field = openai if openai in fields else ours
    value = fields.get(field)
    if value is not None and not isinstance(value, str):
        raise BadRequestError(f"'{field}' must be a string, got {type(value).__name__}", field=field)
    return field, value


def _parse_text_body(body: str) -> Any:
    """A JSON value when the body looks like JSON, else the plain text itself."""
    stripped = body.lstrip()
    if stripped.startswith('"'):
        try:
            return json.loads(body)
        except json.JSONDecodeError:
            return body  # plain text that starts with a quotation mark
    if not stripped.startswith(("{", "[")):
        return body
    try:
        return json.loads(body)
    except json.JSONDecodeError as exc:
        raise BadRequestError(f"body is not valid JSON: {exc.msg} at position {exc.pos}", field=None) from exc


def _text_of(fields: Mapping[str, Any], limits: RequestLimits) -> str:
    field, value = _string_field(fields, "text", "input")
    if value is None:
        raise BadRequestError("missing 'text' (or OpenAI 'input')", field="text")
    text = _CONTROL_CHARS.sub(" ", value).strip()
    if not text:
        raise BadRequestError(f"'{field}' is empty or whitespace only", field=field)
    if len(text) > limits.max_text_chars:
        raise PayloadTooLargeError(
            f"'{field}' has {len(text)} characters; the limit is {limits.max_text_chars}", field=field
        )
    return text


def _speed_of(fields: Mapping[str, Any], limits: RequestLimits) -> float:
    value = fields.get("speed", 1.0)
    if value is None:
        return 1.0
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadRequestError(f"'speed' must be a number, got {type(value).__name__}", field="speed")
    try:
        speed = float(value)
    except OverflowError as exc:
        raise BadRequestError("'speed' is too large", field="speed") from exc
    if not math.isfinite(speed) or not limits.min_speed <= speed <= limits.max_speed:
        raise BadRequestError(
            f"'speed' = {value} is outside [{limits.min_speed}, {limits.max_speed}]", field="speed"
        )
    return speed


def _format_of(fields: Mapping[str, Any], limits: RequestLimits) -> str:
    field, value = _string_field(fields, "format", "response_format")
    if value is None:
        return limits.default_format
    fmt = value.strip().lower()
    if fmt not in FORMATS:
        hint = " (recognised but not produced by this server)" if fmt in _KNOWN_UNSUPPORTED_FORMATS else ""
        raise BadRequestError(f"'{field}' = {value!r} is not supported{hint}; use one of {list(FORMATS)}", field=field)
    return fmt


def _id_of(fields: Mapping[str, Any]) -> str | None:
    value = fields.get("id")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise BadRequestError(f"'id' must be a string or integer, got {type(value).__name__}", field="id")
    text = str(value)
    if not _ID_PATTERN.fullmatch(text):
        raise BadRequestError("'id' must be 1-128 printable ASCII characters (it is echoed in a header)", field="id")
    return text


def check_voice(fields_voice: Any, voices: Sequence[str]) -> None:
    """Raise ``BadRequestError`` (field ``voice``) unless the voice is served here."""
    if fields_voice is None:
        return
    if not isinstance(fields_voice, str) or fields_voice not in voices:
        raise BadRequestError(f"voice {fields_voice!r} is not served here; available: {list(voices)}", field="voice")
