"""Tests of the benchmark's pure parts and of the design note's batching loop (no timing asserts)."""

from __future__ import annotations

import io
import queue
import threading
import wave

import numpy as np
import pytest

from benchmarks.baselines import seed_flask
from handler.engines.base import EngineOutput, SynthesisParams
from scripts.bench_load import closed_loop_batches, closed_loop_http
from scripts.bench_stats import (
    RequestRecord,
    goal_checks,
    histogram_delta,
    mean_batch_size,
    parse_counter,
    percentiles_ms,
    ratio_table,
    summarize_closed,
    summarize_open,
)
from scripts.bench_systems import Outcome, wav_duration_s
from scripts.bench_workload import build_workload, load_sentences, poisson_arrivals

_SENTENCES = [f"Sentence number {i} is here." for i in range(50)]


# -- workload -------------------------------------------------------------------------------------


def test_workload_is_deterministic_for_a_seed():
    first = build_workload(_SENTENCES, count=200, seed=7)
    assert first == build_workload(_SENTENCES, count=200, seed=7)
    assert first != build_workload(_SENTENCES, count=200, seed=8)


def test_workload_mixes_single_sentences_and_3_to_6_sentence_paragraphs():
    items = build_workload(_SENTENCES, count=2000, seed=1, paragraph_fraction=0.25)
    paragraphs = [item for item in items if item.num_sentences > 1]
    assert 0.20 < len(paragraphs) / len(items) < 0.30
    assert {item.num_sentences for item in paragraphs} == {3, 4, 5, 6}
    for item in items:
        assert item.text.count("Sentence number") == item.num_sentences
    assert all(item.text in _SENTENCES for item in items if item.num_sentences == 1)


def test_workload_extremes_and_bad_arguments():
    assert all(i.num_sentences == 1 for i in build_workload(_SENTENCES, count=50, paragraph_fraction=0.0))
    assert all(i.num_sentences >= 3 for i in build_workload(_SENTENCES, count=50, paragraph_fraction=1.0))
    with pytest.raises(ValueError, match="count"):
        build_workload(_SENTENCES, count=0)
    with pytest.raises(ValueError, match="paragraph_fraction"):
        build_workload(_SENTENCES, count=5, paragraph_fraction=1.5)


def test_the_harvard_sentences_load():
    sentences = load_sentences()
    assert len(sentences) == 720 and sentences[0].startswith("The birch canoe")


def test_poisson_arrivals_are_deterministic_ascending_and_near_the_rate():
    times = poisson_arrivals(10.0, 200.0, seed=3)
    assert times == poisson_arrivals(10.0, 200.0, seed=3)
    assert times == sorted(times) and 0 <= times[0] and times[-1] < 200.0
    assert 1800 < len(times) < 2200


# -- summary maths ------------------------------------------------------------------------------


def test_percentiles_on_known_inputs():
    result = percentiles_ms([i / 1000.0 for i in range(1, 101)])  # 1..100 ms
    assert result["p50_ms"] == pytest.approx(50.5)
    assert result["p95_ms"] == pytest.approx(95.05)
    assert result["p99_ms"] == pytest.approx(99.01)
    assert percentiles_ms([]) == {"p50_ms": None, "p95_ms": None, "p99_ms": None}


def test_closed_summary_uses_the_measured_indices_and_littles_law():
    records = [
        RequestRecord(0, 0.0, 9.0, "200", 9.0),  # warm-up: ignored
        RequestRecord(1, 1.0, 2.0, "200", 2.0),
        RequestRecord(2, 1.0, 3.0, "200", 4.0),
        RequestRecord(3, 2.0, 3.0, "503"),
        RequestRecord(4, 3.0, 5.0, "200", 1.0),
        RequestRecord(5, 4.0, 4.5, "200", 1.0),  # filler: ignored
    ]
    summary = summarize_closed(records, concurrency=2, measured=range(1, 5))
    # busy = 1 + 2 + 1 + 2 = 6 s; 3 ok requests, 7 s of audio, 2 clients.
    assert summary["requests_per_s"] == pytest.approx(2 * 3 / 6.0)
    assert summary["audio_s_per_s"] == pytest.approx(2 * 7.0 / 6.0)
    assert summary["num_requests"] == 4 and summary["num_ok"] == 3
    assert summary["errors"] == 1 and summary["errors_by_status"] == {"503": 1}
    assert summary["p50_ms"] == pytest.approx(2000.0)
    assert summary["not_sent"] == 0


def test_closed_summary_of_nothing_measured():
    summary = summarize_closed([], concurrency=4, measured=range(10, 20))
    assert summary["requests_per_s"] is None and summary["not_sent"] == 10 and summary["p95_ms"] is None


def test_open_summary_counts_arrivals_in_the_window_and_a_backlog():
    records = [RequestRecord(i, float(i), float(i) + 0.5, "200", 1.0) for i in range(10)]
    summary = summarize_open(records, window_start_s=2.0, window_end_s=6.0)  # arrivals 2, 3, 4, 5
    assert summary["num_requests"] == 4 and summary["offered_rps"] == pytest.approx(1.0)
    assert summary["requests_per_s"] == pytest.approx(4 / 4.0)
    slow = [RequestRecord(i, float(i), 10.0, "200", 1.0) for i in range(4)]
    assert summarize_open(slow, window_start_s=0.0, window_end_s=4.0)["requests_per_s"] == pytest.approx(4 / 10.0)


def test_batch_size_histograms_and_counters():
    delta = histogram_delta({1: 3, 8: 2}, {1: 3, 4: 2, 8: 5})
    assert delta == {4: 2, 8: 3}
    assert mean_batch_size(delta) == pytest.approx((8 + 24) / 5)
    assert mean_batch_size({}) is None
    text = "\n".join([
        "# TYPE TTSEngineSeconds counter",
        'TTSEngineSeconds{ModelName="a",Level="Model",Hostname="h"} 1.5',
        'TTSEngineSeconds{ModelName="b",Level="Model",Hostname="h"} 4.0',
        'TTSEngineSecondsX{ModelName="a"} 99',
    ])
    assert parse_counter(text, "TTSEngineSeconds", "a") == pytest.approx(1.5)
    assert parse_counter(text, "TTSEngineSeconds") == pytest.approx(5.5)
    assert parse_counter(text, "Missing") == 0.0


def _row(system, concurrency, rps, p95=100.0, busy=0.9):
    return {"system": system, "mode": "closed", "concurrency": concurrency, "requests_per_s": rps, "p95_ms": p95,
            "engine_busy": busy}


def test_ratios_and_goals():
    rows = [
        _row("ceiling", 1, 4.0, p95=500.0), _row("torchserve-unbatched", 1, 4.0),
        _row("torchserve-batched", 1, 3.6, p95=600.0), _row("seed-flask", 1, 3.0),
        _row("ceiling", 8, 4.0, busy=1.0), _row("torchserve-unbatched", 8, 3.8),
        _row("torchserve-batched", 8, 3.4, busy=0.95), _row("seed-flask", 8, 2.0),
    ]
    ratios = {r["concurrency"]: r for r in ratio_table(rows)}
    assert ratios[8]["c/a"] == pytest.approx(0.85) and ratios[1]["c/d"] == pytest.approx(1.2)
    assert ratios[8]["c/a busy"] == pytest.approx(0.95) and "c/d busy" not in ratios[8]
    goals = {(g["goal"], g["concurrency"]): g for g in goal_checks(rows, max_batch_delay_ms=50)}
    assert goals[("c/a >= 0.90", 8)]["met"] is False
    assert goals[("c/a >= 0.90", 8)]["margin"] == pytest.approx(-0.05)
    assert ("c/a >= 0.90", 1) not in goals and ("c/b >= 1.00", 1) not in goals
    assert goals[("c/b >= 1.00", 8)]["met"] is False and goals[("c/d >= 1.00", 1)]["met"] is True
    latency = goals[("p95(c) <= p95(a) + 50 + 15 ms", 1)]
    assert latency["target"] == pytest.approx(565.0) and latency["met"] is False
    assert latency["margin"] == pytest.approx(-35.0)


# -- load loops with fakes -----------------------------------------------------------------------------


def test_closed_loop_http_measures_the_fixed_index_range():
    sent = []

    def send(text):
        sent.append(text)
        return Outcome("200", 1.0)

    texts = [f"t{i}" for i in range(100)]
    records = closed_loop_http(send, texts, concurrency=3, measured=range(8, 20), warmup=3, max_level_s=60.0)
    indices = [r.index for r in records]
    assert indices == sorted(set(indices)) and indices[0] == 5
    assert set(range(8, 20)) <= set(indices)
    assert summarize_closed(records, concurrency=3, measured=range(8, 20))["num_ok"] == 12


def test_closed_loop_batches_hands_over_consecutive_batches():
    calls = []

    def handle(batch):
        calls.append(list(batch))
        return [Outcome("200", 0.5) for _ in batch]

    texts = [f"t{i}" for i in range(100)]
    records = closed_loop_batches(handle, texts, concurrency=4, measured=range(4, 12), warmup=4, max_level_s=60.0)
    assert calls == [["t0", "t1", "t2", "t3"], ["t4", "t5", "t6", "t7"], ["t8", "t9", "t10", "t11"]]
    assert len(records) == 12


# -- the design note's server (batch forming with a fake engine) ---------------------------------------


class FakeEngine:
    """Ids = character codes; audio row i = constant (i + 1) / 10 for 10 samples per token."""

    sample_rate_hz = 1000
    pad_id = 0

    def __init__(self):
        self.batch_sizes = []

    def tokenize(self, text):
        return [ord(c) for c in text]

    def synthesize(self, ids, lengths, params):
        self.batch_sizes.append(ids.shape[0])
        audio = np.zeros((ids.shape[0], ids.shape[1] * 10), dtype=np.float32)
        for row in range(ids.shape[0]):
            audio[row, : lengths[row] * 10] = ids[row, 0] / 1000.0
        return EngineOutput(audio=audio, num_samples=np.asarray(lengths) * 10)


def _samples(wav_bytes):
    with wave.open(io.BytesIO(wav_bytes), "rb") as wav:
        return np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2")


def test_requests_queued_within_the_window_form_one_batch_each_with_its_own_result():
    request_queue = queue.Queue(maxsize=seed_flask.QUEUE_MAXSIZE)
    requests = [seed_flask.InferenceRequest(text, str(i)) for i, text in enumerate(["a", "bbb", "cc"])]
    for req in requests:
        request_queue.put(req)
    batch = seed_flask.collect_batch(request_queue)
    assert batch == requests
    engine = FakeEngine()
    seed_flask.run_batch(engine, SynthesisParams(), batch)
    assert engine.batch_sizes == [3]  # ONE engine call, all padded to the longest
    for req, text in zip(requests, ["a", "bbb", "cc"]):
        samples = _samples(req.result["audio"])
        assert req.result["status"] == "success"
        assert len(samples) == 10 * len(text)  # trimmed to its own length
        assert set(samples.tolist()) == {round(ord(text[0]) / 1000.0 * 32767)}


def test_a_batch_holds_at_most_max_batch_size_requests():
    request_queue = queue.Queue(maxsize=seed_flask.QUEUE_MAXSIZE)
    for i in range(10):
        request_queue.put(seed_flask.InferenceRequest(f"text {i}", str(i)))
    assert len(seed_flask.collect_batch(request_queue)) == seed_flask.MAX_BATCH_SIZE
    assert len(seed_flask.collect_batch(request_queue)) == 2


def test_an_engine_failure_fails_the_whole_batch():
    class Broken(FakeEngine):
        def synthesize(self, ids, lengths, params):
            raise RuntimeError("boom")

    batch = [seed_flask.InferenceRequest("a", "1"), seed_flask.InferenceRequest("b", "2")]
    seed_flask.run_batch(Broken(), SynthesisParams(), batch)
    assert [r.result for r in batch] == [{"status": "error", "msg": "boom"}] * 2


def test_the_flask_endpoint_returns_each_request_its_own_wav():
    engine = FakeEngine()
    app = seed_flask.create_app(engine, SynthesisParams())
    client = app.test_client()
    results = {}

    def post(text):
        results[text] = client.post("/tts", json={"text": text, "uuid": text})

    threads = [threading.Thread(target=post, args=(text,)) for text in ["x", "yy", "zzz"]]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for text, response in results.items():
        assert response.status_code == 200 and response.mimetype == "audio/wav"
        assert wav_duration_s(response.data) == pytest.approx(10 * len(text) / 1000.0)
    assert sum(engine.batch_sizes) == 3
