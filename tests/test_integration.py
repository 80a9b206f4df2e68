"""Integration: a real TorchServe on free loopback ports serving the real default-voice archive.

The server runs from a temporary copy of config.properties with its own model
store; the fixture stops its whole process group (by pid) afterwards.
"""

from __future__ import annotations

import io
import json
import os
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
import scipy.io.wavfile

from scripts.build_archive import build, parse_args
from scripts.tslib import REPO_ROOT, TorchServeClient, parse_batch_sizes, start_server, stop_server

pytestmark = pytest.mark.integration
SENTENCES = [s for s in (REPO_ROOT.parent / "shared" / "data" / "harvard-sentences.txt").read_text().splitlines() if s][:16]
BATCH_SIZE, MAX_BATCH_DELAY_MS = 8, 300


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    store = tmp_path_factory.mktemp("model_store")
    build(parse_args(["--model-name", "tts", "--export-path", str(store), "--threads", "1"]))
    info = start_server(run_dir=tmp_path_factory.mktemp("ts-run"), model_store=store, free_ports=True)
    try:
        client = TorchServeClient(info, timeout_s=120)
        client.register("tts.mar", model_name="tts", batch_size=BATCH_SIZE, max_batch_delay_ms=MAX_BATCH_DELAY_MS)
        yield client
    finally:
        stop_server(info)
        with pytest.raises(ProcessLookupError):
            os.killpg(info.pid, 0)  # the whole process group is gone


def burst(client, payloads):
    with ThreadPoolExecutor(max_workers=len(payloads)) as pool:
        return list(pool.map(lambda p: client.synthesize("tts", p), payloads))


def test_registered_with_batch_settings(server):
    [model] = server.describe("tts")
    assert (model["batchSize"], model["maxBatchDelay"]) == (BATCH_SIZE, MAX_BATCH_DELAY_MS)
    assert model["workers"][0]["status"] == "READY"
    assert all(url.startswith("http://127.0.0.1:") for url in (server.info.inference_url, server.info.management_url))


def test_concurrent_burst_is_batched_and_plausible(server):
    before = parse_batch_sizes(server.metrics_text(), "tts")
    responses = burst(server, [{"text": t} for t in SENTENCES[:8]])
    assert [r.status_code for r in responses] == [200] * 8
    assert [r.headers["content-type"] for r in responses] == ["audio/wav"] * 8
    for text, response in zip(SENTENCES, responses):
        rate, samples = scipy.io.wavfile.read(io.BytesIO(response.content))
        words, seconds = len(text.split()), len(samples) / rate
        assert rate == 22050
        assert 0.15 * words < seconds < 0.8 * words + 0.5, (text, seconds)
        assert float(response.headers["X-Audio-Duration-Seconds"]) == pytest.approx(seconds, abs=1e-3)
    after = parse_batch_sizes(server.metrics_text(), "tts")
    new_calls = {size: after.get(size, 0) - before.get(size, 0) for size in after}
    assert sum(size * n for size, n in new_calls.items()) == 8  # every request went through the handler once
    assert max(size for size, n in new_calls.items() if n > 0) > 1


def test_invalid_request_in_a_burst_gets_400_alone(server):
    payloads = [{"text": t} for t in SENTENCES[8:16]]
    payloads[3] = {"text": "   "}
    payloads[6] = {"text": "fine", "speed": 99}
    responses = burst(server, payloads)
    assert [r.status_code for r in responses] == [200, 200, 200, 400, 200, 200, 400, 200]
    assert responses[3].headers["content-type"].startswith("application/json")
    assert responses[3].json()["error"]["field"] == "text"
    assert responses[6].json()["error"]["field"] == "speed"


def test_plain_text_and_openai_bodies(server):
    plain = server.synthesize("tts", "The birch canoe slid on the smooth planks.")
    openai = server.synthesize("tts", {"input": "Hello there.", "voice": "joe", "response_format": "pcm"})
    assert (plain.status_code, openai.status_code) == (200, 200)
    assert openai.headers["content-type"] == "audio/pcm"
    assert len(openai.content) % 2 == 0 and len(openai.content) > 22050  # over 0.5 s of s16le


def test_security_defaults(server):
    url = f"{server.info.inference_url}/predictions/tts"
    no_token = requests.post(url, json={"text": "hello"}, timeout=30)
    assert no_token.status_code in (400, 401)  # TorchServe 0.12 answers 400 for a missing/bad token
    with pytest.raises(requests.HTTPError, match="does not match any allowed URL"):
        server.register("http://127.0.0.1:9/evil.mar", model_name="evil")


def test_hostile_inputs_get_400_and_the_worker_survives(server):
    [before] = server.describe("tts")
    url = f"{server.info.inference_url}/predictions/tts"
    headers = {"Authorization": f"Bearer {server._inference_key}"}
    header_injection = server.synthesize("tts", {"text": "Hello there.", "id": "a\r\nX-Evil: 1"})
    huge_speed = requests.post(url, data='{"text": "Hello there.", "speed": 1' + "0" * 400 + "}",
                               headers={**headers, "Content-Type": "application/json"}, timeout=60)
    form = requests.post(url, data={"text": "Hello there.", "speed": "1.5"}, headers=headers, timeout=60)
    nul = server.synthesize("tts", {"text": "hello\u0000world"})
    assert [r.status_code for r in (header_injection, huge_speed, form, nul)] == [400, 400, 200, 200]
    assert header_injection.json()["error"]["field"] == "id"
    assert huge_speed.json()["error"]["field"] == "speed"
    assert "X-Evil" not in header_injection.headers
    [after] = server.describe("tts")
    assert after["workers"][0]["pid"] == before["workers"][0]["pid"]  # no worker restart
