"""The design note's Flask dynamic-batching server, rebuilt on our engine. Comparison only.

The design note (``shared/seed/*.txt``, "动态批处理机制") gives a Flask server
that batches TTS requests. This module rebuilds it faithfully on our Piper
engine so that ``scripts/bench.py`` can compare it with TorchServe. What is
kept exactly as in the note:

* Flask's development server (``app.run``, threaded), ``POST /tts`` with JSON
  ``{"text": ..., "uuid": ...}``;
* a ``queue.Queue(maxsize=20)`` filled with ``request_queue.put(req, timeout=1)``
  (a full queue for 1 s raises ``queue.Full`` -> Flask answers 500);
* ONE background thread: ``start_time`` is taken *before* blocking for the
  first request, then the batch is filled while
  ``len < MAX_BATCH_SIZE (8) and time.time() - start_time < BATCH_TIMEOUT (0.1 s)``
  with ``get(timeout=BATCH_TIMEOUT / 2)``, stopping at the first empty wait;
* tokenisation inside that thread, every text padded to the longest
  (``pad_sequence``), ONE engine call for the whole batch, results split per
  request; an exception fails the whole batch;
* the endpoint polls ``while req.result is None: time.sleep(0.01)``.

Deviations, each needed to run it here or to compare it fairly:

* it returns the WAV bytes (16-bit PCM, in memory) instead of writing
  ``outputs/*.wav`` and returning the path; each item is trimmed to its own
  length (the engine reports it), so no padding is returned;
* the engine is our ``PiperOnnxEngine`` with the archive's ``handler:``
  settings (same voice, threads and noise scales as the TorchServe systems);
  there is no audio prompt (the Piper voice is fixed), so ``audio`` is dropped;
* it binds 127.0.0.1 on a given port (the note: 0.0.0.0:7860);
* the batch error answers HTTP 500 with the note's JSON ``{"status": "error",
  "msg": ...}`` (the note answers it with 200);
* the note's bare ``except: break`` is ``except queue.Empty: break`` and its
  unused ``batch_lock`` is left out;
* one ``SEED_BATCH size=... batch_s=...`` log line per batch (seconds in ``run_batch``), for the benchmark.

Run: ``python -m benchmarks.baselines.seed_flask --port P --config build/<m>/model-config.yaml
--model-dir build/<m>/extra``.
"""

from __future__ import annotations

import argparse
import logging
import queue
import sys
import threading
import time
import uuid as uuid_lib
from pathlib import Path
from typing import Final

import yaml
from flask import Flask, Response, jsonify, request

from handler import audio
from handler.config import HandlerSettings
from handler.engines import load_engine
from handler.engines.base import SynthesisParams, pad_ids

_LOGGER = logging.getLogger(__name__)

# The note's global parameters.
MAX_BATCH_SIZE: Final = 8
BATCH_TIMEOUT: Final = 0.1  # seconds (100 ms)
QUEUE_MAXSIZE: Final = 20
PUT_TIMEOUT_S: Final = 1.0
POLL_INTERVAL_S: Final = 0.01


class InferenceRequest:
    """One queued request; ``result`` is set by the batch thread.

    Attributes:
        text_input: the text to speak.
        uuid: the client's id (the note uses it to name the output file).
        result: ``None`` until done, then ``{"status": "success", "audio": bytes}``
            or ``{"status": "error", "msg": str}``.
    """

    def __init__(self, text_input: str, uuid: str) -> None:
        self.text_input = text_input
        self.uuid = uuid
        self.result: dict | None = None


def collect_batch(request_queue: queue.Queue, *, max_batch_size: int = MAX_BATCH_SIZE,
                  batch_timeout: float = BATCH_TIMEOUT) -> list[InferenceRequest]:
    """The note's batch forming: block for a first request, then fill within the window.

    As in the note, the window starts *before* the blocking ``get``: after an
    idle spell longer than ``batch_timeout`` seconds the batch is the first
    request alone. Each further ``get`` waits at most ``batch_timeout / 2`` s and
    the first empty wait ends the batch.

    Returns:
        1 to ``max_batch_size`` requests in arrival order.
    """
    batch_requests = []
    start_time = time.time()
    first_req = request_queue.get()
    batch_requests.append(first_req)
    while len(batch_requests) < max_batch_size and (time.time() - start_time) < batch_timeout:
        try:
            req = request_queue.get(timeout=batch_timeout / 2)
            batch_requests.append(req)
        except queue.Empty:
            break
    return batch_requests


def run_batch(engine, params: SynthesisParams, batch_requests: list[InferenceRequest]) -> None:
    """Tokenise, pad all to the longest, ONE engine call, split: sets every ``req.result``.

    Any exception fails the whole batch, as in the note.
    """
    start_s = time.perf_counter()
    try:
        inputs = [engine.tokenize(req.text_input) for req in batch_requests]
        padded_inputs, lengths = pad_ids(inputs, getattr(engine, "pad_id", 0))
        output = engine.synthesize(padded_inputs, lengths, params)
        for i, req in enumerate(batch_requests):
            samples = audio.float_to_int16(output.audio[i, : int(output.num_samples[i])])
            req.result = {"status": "success", "audio": audio.encode_wav(samples, sample_rate_hz=engine.sample_rate_hz)}
    except Exception as e:  # noqa: BLE001 - the note fails the whole batch on any error
        for req in batch_requests:
            req.result = {"status": "error", "msg": str(e)}
    _LOGGER.info("SEED_BATCH size=%d batch_s=%.4f", len(batch_requests), time.perf_counter() - start_s)


def batch_processor(request_queue: queue.Queue, engine, params: SynthesisParams) -> None:
    """The note's background thread: collect a batch, run it, forever."""
    while True:
        run_batch(engine, params, collect_batch(request_queue))


def create_app(engine, params: SynthesisParams) -> Flask:
    """The note's Flask app with its queue and ONE started background batch thread."""
    app = Flask(__name__)
    request_queue: queue.Queue = queue.Queue(maxsize=QUEUE_MAXSIZE)

    @app.route("/tts", methods=["POST"])
    def tts_endpoint():
        data = request.json
        req = InferenceRequest(text_input=data["text"], uuid=str(data.get("uuid") or uuid_lib.uuid4()))
        request_queue.put(req, timeout=PUT_TIMEOUT_S)  # queue.Full after 1 s -> 500
        while req.result is None:
            time.sleep(POLL_INTERVAL_S)
        if req.result["status"] != "success":
            return jsonify(req.result), 500
        return Response(req.result["audio"], mimetype="audio/wav")

    threading.Thread(target=batch_processor, args=(request_queue, engine, params), daemon=True).start()
    return app


def load_from_archive_build(config_path: Path, model_dir: Path) -> tuple[object, SynthesisParams]:
    """The engine and conditioning from an archive's ``model-config.yaml`` ``handler:`` section.

    Returns:
        ``(engine, params)`` with ``length_scale`` 1.0 and the archive's noise scales.
    """
    section = (yaml.safe_load(Path(config_path).read_text(encoding="utf-8")) or {}).get("handler")
    settings = HandlerSettings.from_mapping(section)
    params = SynthesisParams(length_scale=1.0, noise_scale=settings.noise_scale, noise_w=settings.noise_w)
    return load_engine(settings, model_dir), params


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True, help="port on 127.0.0.1")
    parser.add_argument("--config", required=True, help="an archive build's model-config.yaml")
    parser.add_argument("--model-dir", required=True, help="the folder holding the voice files")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    engine, params = load_from_archive_build(Path(args.config), Path(args.model_dir))
    app = create_app(engine, params)
    app.run(host="127.0.0.1", port=args.port, threaded=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
