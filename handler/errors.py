"""One exception tree for the handler; every class carries its HTTP status.

    TTSError (500)                      base: anything we answer with a JSON error
    ├── BadRequestError (400)           malformed body, wrong type, unsupported value
    ├── PayloadTooLargeError (413)      text over the configured character limit
    ├── UntokenizableError (422)        text that yields no phonemes / tokens
    ├── EngineError (500)               the engine failed on this item
    ├── OverloadedError (503)           the service cannot take the request now
    └── OutOfMemoryError (507)          the item does not fit in memory even alone

Each error renders to the JSON body ``{"error": {"code": ..., "message": ...,
"field": ...}}`` where ``code`` is a stable machine-readable string and
``field`` names the request key at fault (or ``None``). Library errors are
translated at the boundary with ``raise ... from exc``.
"""

from __future__ import annotations

import json
from typing import ClassVar


class TTSError(Exception):
    """Base class: an error that becomes one item's HTTP response.

    Args:
        message: human-readable explanation; never contains the request text.
        field: the request key at fault (e.g. ``"speed"``), or ``None``.
    """

    status: ClassVar[int] = 500
    code: ClassVar[str] = "internal_error"
    #: HTTP reason phrase sent with the status.
    phrase: ClassVar[str] = "Internal Server Error"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field

    def to_dict(self) -> dict:
        """The error as a JSON-serialisable dict ``{"error": {...}}``."""
        return {"error": {"code": self.code, "message": self.message, "field": self.field}}

    def to_json_bytes(self) -> bytes:
        """The error body as UTF-8 JSON bytes."""
        return json.dumps(self.to_dict()).encode("utf-8")


class BadRequestError(TTSError):
    """400: the request body or one of its fields is invalid."""

    status = 400
    code = "bad_request"
    phrase = "Bad Request"


class PayloadTooLargeError(TTSError):
    """413: the text is longer than the configured limit."""

    status = 413
    code = "text_too_long"
    phrase = "Payload Too Large"


class UntokenizableError(TTSError):
    """422: the text is valid but yields no phonemes (e.g. only punctuation)."""

    status = 422
    code = "no_phonemes"
    phrase = "Unprocessable Entity"


class EngineError(TTSError):
    """500: the engine raised while synthesising this item."""

    status = 500
    code = "engine_failure"
    phrase = "Internal Server Error"


class OverloadedError(TTSError):
    """503: the service is overloaded; retry later."""

    status = 503
    code = "overloaded"
    phrase = "Service Unavailable"


class OutOfMemoryError(TTSError):
    """507: the item ran out of memory even when synthesised alone."""

    status = 507
    code = "out_of_memory"
    phrase = "Insufficient Storage"
