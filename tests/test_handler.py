"""The handler with a fault-injecting fake engine and a real TorchServe Context.

Covers order preservation, exact trimming, per-item statuses, failure
isolation (bisecting a poisoned item) and out-of-memory splitting.
"""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import scipy.io.wavfile

from handler.config import ConfigError, HandlerSettings
from handler.handler import TTSHandler
from tests.fakes import POISON, FakeEngine, make_context

SETTINGS = HandlerSettings(max_text_chars=200, sentence_pause_s=0.01, noise_scale=0.0, noise_w=0.0)
PAUSE_SAMPLES = 160  # 0.01 s at the fake engine's 16,000 Hz


def run_batch(bodies, *, engine=None, settings=SETTINGS):
    """Run one batch through ``TTSHandler.handle``; returns (responses, statuses, content types, engine)."""
    engine = engine or FakeEngine()
    handler = TTSHandler()
    handler.configure(settings, engine)
    context = make_context(len(bodies))
    responses = handler.handle([{"body": b} for b in bodies], context)
    statuses = [context.get_response_status(i)[0] or 200 for i in range(len(bodies))]
    types = [context.get_response_content_type(i) for i in range(len(bodies))]
    return responses, statuses, types, engine


def wav_samples(data: bytes) -> np.ndarray:
    rate, samples = scipy.io.wavfile.read(io.BytesIO(data))
    assert rate == 16000
    return samples


def letters(text: str) -> int:
    return sum(c.isalpha() for c in text)


def test_order_and_exact_lengths_in_a_mixed_batch():
    texts = ["Hi.", "A much longer sentence than the first one.", "Mid length words.", "Two sentences. Second one here."]
    responses, statuses, types, engine = run_batch([{"text": t} for t in texts])
    assert statuses == [200, 200, 200, 200]
    assert types == ["audio/wav"] * 4
    assert len(wav_samples(responses[0])) == letters("Hi") * 10
    assert len(wav_samples(responses[1])) == letters(texts[1]) * 10
    assert len(wav_samples(responses[3])) == letters("Two sentences") * 10 + PAUSE_SAMPLES + letters("Second one here") * 10
    # Each response equals that text synthesised alone: batching changes nothing.
    for text, response in zip(texts, responses):
        alone, status, _, _ = run_batch([{"text": text}])
        assert status == [200]
        assert alone[0] == response


def test_padding_is_never_returned():
    # The fake engine writes 0.9 into padding; a trimmed item never contains it.
    responses, _, _, _ = run_batch([{"text": "ab"}, {"text": "abcdefghijklmnopqrstuvwxyz"}])
    short = wav_samples(responses[0])
    assert len(short) == 20
    assert np.abs(short).max() < int(0.9 * 32767) - 1


def test_bad_inputs_get_their_own_status_and_neighbours_200():
    bodies = [{"text": "good one"}, {"text": ""}, {"text": "good two", "speed": 9}, {"text": "..."},
              {"text": "x" * 201}, {"text": "good three", "format": "flac"}, "plain good text"]
    responses, statuses, types, _ = run_batch(bodies)
    assert statuses == [200, 400, 400, 422, 413, 400, 200]
    errors = {i: json.loads(responses[i])["error"] for i in (1, 2, 3, 4, 5)}
    assert {i: e["field"] for i, e in errors.items()} == {1: "text", 2: "speed", 3: "text", 4: "text", 5: "format"}
    assert errors[3]["code"] == "no_phonemes"
    assert types[1] == "application/json" and types[0] == "audio/wav"


def test_poisoned_item_is_isolated_by_bisection():
    texts = ["abcdefghijk"] * 8
    texts[5] = f"{POISON}abcd"  # 11 tokens like the others: the planner puts all 8 in one call
    responses, statuses, _, engine = run_batch([{"text": t} for t in texts])
    assert statuses == [200, 200, 200, 200, 200, 500, 200, 200]
    assert json.loads(responses[5])["error"]["code"] == "engine_failure"
    for i in (0, 1, 2, 3, 4, 6, 7):
        assert len(wav_samples(responses[i])) == letters(texts[i]) * 10
    assert engine.calls[0] == 8  # one call for the whole batch failed, then bisection
    assert len(engine.calls) > 2


def test_out_of_memory_splits_and_all_succeed():
    texts = ["abcdefghij"] * 8  # 8 items x 10 tokens = 80 padded tokens
    engine = FakeEngine(oom_above_padded_tokens=30)
    responses, statuses, _, engine = run_batch([{"text": t} for t in texts], engine=engine)
    assert statuses == [200] * 8
    assert all(len(wav_samples(r)) == 100 for r in responses)
    assert max(engine.calls) == 8 and min(engine.calls) <= 3


def test_single_item_out_of_memory_gets_507_alone():
    texts = ["short", "x" * 40, "tiny"]  # the 40-token item alone exceeds 30 padded tokens
    engine = FakeEngine(oom_above_padded_tokens=30)
    responses, statuses, _, _ = run_batch([{"text": t} for t in texts], engine=engine)
    assert statuses == [200, 507, 200]
    assert json.loads(responses[1])["error"]["code"] == "out_of_memory"


def test_speeds_do_not_share_an_engine_call():
    responses, statuses, _, engine = run_batch([{"text": "abcd", "speed": 1.0}, {"text": "abcd", "speed": 2.0}])
    assert statuses == [200, 200]
    assert engine.calls == [1, 1]
    assert [len(wav_samples(r)) for r in responses] == [40, 20]


def test_pcm_format_and_headers():
    handler = TTSHandler()
    handler.configure(SETTINGS, FakeEngine())
    context = make_context(1)
    [body] = handler.handle([{"body": {"text": "abc", "format": "pcm", "id": "client-7"}}], context)
    assert len(body) == 2 * 30
    headers = context.get_response_headers(0)
    assert headers["content-type"] == "audio/pcm"
    assert headers["X-Sample-Rate"] == "16000"
    assert headers["X-Client-Request-Id"] == "client-7"
    assert headers["X-Audio-Duration-Seconds"] == "0.002"


def test_audio_over_the_response_limit_gets_413_alone():
    # 10 samples per letter: 26 letters -> 260 samples -> 564 bytes of WAV; limit 300 bytes.
    settings = HandlerSettings(max_response_bytes=300, noise_scale=0.0, noise_w=0.0)
    responses, statuses, _, _ = run_batch([{"text": "ab"}, {"text": "abcdefghijklmnopqrstuvwxyz"}], settings=settings)
    assert statuses == [200, 413]
    error = json.loads(responses[1])["error"]
    assert (error["code"], error["field"]) == ("text_too_long", "text")
    assert "response limit of 0.0 s" in error["message"]


def test_unexpected_decoding_bug_fails_only_its_request(monkeypatch):
    import handler.handler as handler_module

    real = handler_module.decode_request

    def flaky(raw, limits):
        if raw["body"].get("text") == "trigger":
            raise KeyError("bug")
        return real(raw, limits)

    monkeypatch.setattr(handler_module, "decode_request", flaky)
    responses, statuses, _, _ = run_batch([{"text": "abc"}, {"text": "trigger"}, {"text": "de"}])
    assert statuses == [200, 500, 200]
    assert json.loads(responses[1])["error"]["code"] == "engine_failure"
    assert len(wav_samples(responses[2])) == 20


@pytest.mark.parametrize(("values", "name"), [
    ({"engine": "nope"}, "engine"), ({"max_text_chars": 0}, "max_text_chars"), ({"max_speed": "fast"}, "max_speed"),
    ({"typo_setting": 1}, "typo_setting"), ({"num_threads": 1.5}, "num_threads"),
])
def test_bad_settings_name_the_key(values, name):
    with pytest.raises(ConfigError, match=name):
        HandlerSettings.from_mapping(values)


def test_settings_coerce_yaml_values():
    settings = HandlerSettings.from_mapping({"num_threads": "2", "noise_scale": 0, "voice": None, "max_speed": 3})
    assert (settings.num_threads, settings.noise_scale, settings.voice, settings.max_speed) == (2, 0.0, None, 3.0)
