"""Request decoding and validation: each bad input gets its status and names its field."""

from __future__ import annotations

import json

import pytest

from handler.errors import BadRequestError, PayloadTooLargeError
from handler.requests import RequestLimits, SynthesisRequest, decode_request

LIMITS = RequestLimits(max_text_chars=50, voices=("en_US-joe-medium", "joe"))


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"body": {"text": "Hello there."}}, SynthesisRequest(text="Hello there.")),
        ({"body": {"text": "  Hi  ", "speed": 2, "format": "PCM", "id": 7}},
         SynthesisRequest(text="Hi", speed=2.0, audio_format="pcm", request_id="7")),
        ({"data": "plain text body"}, SynthesisRequest(text="plain text body")),
        ({"body": b"bytes body"}, SynthesisRequest(text="bytes body")),
        ({"body": bytearray(json.dumps({"text": "json as bytes"}).encode())}, SynthesisRequest(text="json as bytes")),
        ({"body": {"input": "OpenAI style", "voice": "joe", "response_format": "wav", "speed": 0.25, "model": "tts-1"}},
         SynthesisRequest(text="OpenAI style", speed=0.25)),
        ({"body": {"text": "x", "speed": 4.0}}, SynthesisRequest(text="x", speed=4.0)),
        ({"body": {"text": "x" * 50}}, SynthesisRequest(text="x" * 50)),
        ({"body": {"text": "hello\u0000world\u0007"}}, SynthesisRequest(text="hello world")),
        ({"body": b'"a JSON string"'}, SynthesisRequest(text="a JSON string")),
        ({"body": b'"Hi," she said.'}, SynthesisRequest(text='"Hi," she said.')),
        ({"text": b"form field", "speed": b"1.5", "format": "pcm"},
         SynthesisRequest(text="form field", speed=1.5, audio_format="pcm")),
        ({"body": {"text": "x", "id": "req-42_A"}}, SynthesisRequest(text="x", request_id="req-42_A")),
    ],
)
def test_valid_requests_decode(raw, expected):
    assert decode_request(raw, LIMITS) == expected


@pytest.mark.parametrize(
    ("raw", "error", "field"),
    [
        ({}, BadRequestError, "text"),
        ({"body": {}}, BadRequestError, "text"),
        ({"body": {"text": ""}}, BadRequestError, "text"),
        ({"body": {"text": " \n\t "}}, BadRequestError, "text"),
        ({"body": "   "}, BadRequestError, "text"),
        ({"body": {"text": 12}}, BadRequestError, "text"),
        ({"body": {"input": ["a"]}}, BadRequestError, "input"),
        ({"body": {"text": "a", "input": "b"}}, BadRequestError, "text"),
        ({"body": {"text": "x" * 51}}, PayloadTooLargeError, "text"),
        ({"body": {"text": "hi", "speed": 0.1}}, BadRequestError, "speed"),
        ({"body": {"text": "hi", "speed": 4.5}}, BadRequestError, "speed"),
        ({"body": {"text": "hi", "speed": "fast"}}, BadRequestError, "speed"),
        ({"body": {"text": "hi", "speed": True}}, BadRequestError, "speed"),
        ({"body": {"text": "hi", "speed": float("nan")}}, BadRequestError, "speed"),
        ({"body": {"text": "hi", "format": "mp3"}}, BadRequestError, "format"),
        ({"body": {"text": "hi", "response_format": "ogg"}}, BadRequestError, "response_format"),
        ({"body": {"text": "hi", "format": 3}}, BadRequestError, "format"),
        ({"body": {"text": "hi", "voice": "alloy"}}, BadRequestError, "voice"),
        ({"body": {"text": "hi", "id": {"a": 1}}}, BadRequestError, "id"),
        ({"body": {"text": "hi", "colour": "red"}}, BadRequestError, "colour"),
        ({"body": b"{not json"}, BadRequestError, None),
        ({"body": "[1, 2]"}, BadRequestError, None),
        ({"body": b"\xff\xfe\x00"}, BadRequestError, "text"),
        ({"body": {"text": "hi", "speed": 10**400}}, BadRequestError, "speed"),
        ({"body": {"text": "hi", "id": "a\r\nX-Evil: 1"}}, BadRequestError, "id"),
        ({"body": {"text": "hi", "id": "caf\u00e9"}}, BadRequestError, "id"),
        ({"body": {"text": "hi", "id": "x" * 129}}, BadRequestError, "id"),
        ({"text": b"form", "speed": b"fast"}, BadRequestError, "speed"),
        ({"text": b"form", "colour": b"red"}, BadRequestError, "colour"),
        ({"body": {"text": "\u0000\u0001"}}, BadRequestError, "text"),
    ],
)
def test_bad_requests_raise_with_status_and_field(raw, error, field):
    with pytest.raises(error) as info:
        decode_request(raw, LIMITS)
    assert type(info.value) is error
    assert info.value.field == field
    body = info.value.to_dict()["error"]
    assert body["field"] == field
    assert body["code"] == error.code
    assert isinstance(body["message"], str) and body["message"]


def test_statuses_of_error_classes():
    assert (BadRequestError.status, PayloadTooLargeError.status) == (400, 413)


def test_error_message_does_not_echo_long_text():
    with pytest.raises(PayloadTooLargeError) as info:
        decode_request({"body": {"text": "secret " * 20}}, LIMITS)
    assert "secret" not in info.value.message
    assert "139 characters" in info.value.message
