"""``TTSHandler``: the TorchServe adapter for dynamic-batching text to speech.

TorchServe hands ``handle`` a batch of up to ``batchSize`` requests. We decode
and validate each one, split texts into sentence segments, tokenise them,
plan sub-batches (``handler.batching``), run one engine call per sub-batch
(``handler.runner``), stitch each request's segments and encode it. Exactly
one response per request, in order; a bad or failing request gets its own
status and a JSON error body while its neighbours get 200.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
from ts.torch_handler.base_handler import BaseHandler

from handler import audio
from handler.batching import PlanItem, PlanLimits, plan_sub_batches
from handler.config import HandlerSettings
from handler.cost_model import CostModelFitter
from handler.engines import load_engine
from handler.engines.base import SynthesisParams
from handler.errors import EngineError, PayloadTooLargeError, TTSError, UntokenizableError
from handler.memory import budget_for_device
from handler.metrics import BatchStats, emit_batch_metrics, emit_cost_model_metrics
from handler.requests import RequestLimits, SynthesisRequest, decode_request
from handler.runner import BatchRunner, CallRecord
from handler.segmenter import split_sentences

_LOGGER = logging.getLogger(__name__)


@dataclass
class Pending:
    """One request of the batch on its way through the handler.

    Attributes:
        request: the decoded request, or ``None`` when decoding failed.
        error: the first error met, or ``None``.
        items: indices of this request's segments in ``Prepared.ids``.
        audio: float32 ``(samples,)`` once synthesised.
    """

    request: SynthesisRequest | None = None
    error: TTSError | None = None
    items: list[int] = field(default_factory=list)
    audio: np.ndarray | None = None


@dataclass
class Prepared:
    """The batch after ``preprocess``: per-request state plus the flat list of items.

    Attributes:
        pending: one entry per request, in the order received.
        ids: per item (sentence segment), its token ids.
        params: per item, its conditioning key.
        owners: per item, the index of its request in ``pending``.
        stats: what ``inference`` measured, for logs and metrics.
    """

    pending: list[Pending]
    ids: list[list[int]] = field(default_factory=list)
    params: list[SynthesisParams] = field(default_factory=list)
    owners: list[int] = field(default_factory=list)
    stats: BatchStats | None = None


class TTSHandler(BaseHandler):
    """TorchServe handler: batched text to speech with per-item errors."""

    def initialize(self, context) -> None:
        """Load settings from ``model-config.yaml`` (``handler:``) and build the engine.

        Raises:
            handler.config.ConfigError: a bad ``handler:`` setting (the model load fails
                with a message naming it).
        """
        self.context = context
        settings = HandlerSettings.from_mapping((context.model_yaml_config or {}).get("handler"))
        self.configure(settings, load_engine(settings, context.system_properties.get("model_dir")))

    def configure(self, settings: HandlerSettings, engine) -> None:
        """Attach settings and an engine (``initialize`` calls this; tests pass fakes)."""
        self.settings = settings
        self.engine = engine
        self.limits = RequestLimits(
            max_text_chars=settings.max_text_chars,
            min_speed=settings.min_speed,
            max_speed=settings.max_speed,
            default_format=settings.default_format,
            voices=tuple(engine.voices),
        )
        self.cost_fitter = CostModelFitter()
        self.budget, probe = budget_for_device(settings.device, max_padded_tokens=settings.max_padded_tokens)
        self.runner = BatchRunner(engine, pad_id=engine.pad_id, on_call=self._record_call, memory_probe=probe)
        self.initialized = True
        _LOGGER.info("TTSHandler ready: engine=%s voices=%s settings=%s", settings.engine, self.limits.voices, settings)

    # -- TorchServe stages -------------------------------------------------

    def preprocess(self, data: list) -> Prepared:
        """Decode, validate, segment and tokenise every request of the batch."""
        prepared = Prepared(pending=[])
        for index, raw in enumerate(data):
            pending = Pending()
            prepared.pending.append(pending)
            try:
                pending.request = decode_request(raw, self.limits)
                self._add_items(prepared, index, pending.request)
            except TTSError as exc:
                pending.error = exc
            except Exception as exc:  # noqa: BLE001 - a bug in decoding fails this request only
                _LOGGER.exception("unexpected error decoding request %d", index)
                pending.error = EngineError(f"could not process the request: {type(exc).__name__}")
        return prepared

    def inference(self, prepared: Prepared) -> Prepared:
        """Plan sub-batches and run one engine call per sub-batch."""
        plan_items = [
            PlanItem(num_tokens=len(ids), key=params, request_index=owner, segment_index=i)
            for i, (ids, params, owner) in enumerate(zip(prepared.ids, prepared.params, prepared.owners))
        ]
        limits = PlanLimits(max_items=self.settings.max_sub_batch_items, max_padded_tokens=self.budget.current())
        sub_batches = plan_sub_batches(plan_items, limits, self.cost_fitter.model)
        result = self.runner.run(sub_batches, prepared.ids, prepared.params)
        self._assemble(prepared, result.audio, result.errors)
        prepared.stats = BatchStats.from_calls(
            batch_size=len(prepared.pending), calls=result.calls, pending=prepared.pending,
            sample_rate_hz=self.engine.sample_rate_hz,
        )
        return prepared

    def postprocess(self, prepared: Prepared) -> list[bytes]:
        """Encode each request's audio, or its JSON error; set statuses and headers."""
        responses = [self._respond(index, pending) for index, pending in enumerate(prepared.pending)]
        if len(responses) != len(prepared.pending):  # the count invariant, both numbers in the message
            raise RuntimeError(f"built {len(responses)} responses for {len(prepared.pending)} requests")
        if prepared.stats is not None:
            self._emit_metrics(prepared.stats)
        return responses

    # -- helpers -------------------------------------------------------------

    def _add_items(self, prepared: Prepared, owner: int, request: SynthesisRequest) -> None:
        """Split one request into tokenised segments and append them as items."""
        params = SynthesisParams(
            length_scale=1.0 / request.speed, noise_scale=self.settings.noise_scale, noise_w=self.settings.noise_w
        )
        try:
            segment_ids = [self.engine.tokenize(s) for s in split_sentences(request.text, max_chars=self.settings.max_segment_chars)]
        except Exception as exc:  # noqa: BLE001 - a tokenizer crash fails this request only
            _LOGGER.error("tokenizer failed on request %d: %s", owner, type(exc).__name__)
            raise EngineError(f"tokenizer failed: {type(exc).__name__}", field="text") from exc
        segment_ids = [ids for ids in segment_ids if ids]
        if not segment_ids:
            raise UntokenizableError("the text yields no phonemes to speak", field="text")
        pending = prepared.pending[owner]
        for ids in segment_ids:
            pending.items.append(len(prepared.ids))
            prepared.ids.append(ids)
            prepared.params.append(params)
            prepared.owners.append(owner)

    def _assemble(self, prepared: Prepared, item_audio: dict, item_errors: dict) -> None:
        """Join each request's segments with pauses, or keep its first item error."""
        for pending in prepared.pending:
            if pending.error is not None:
                continue
            errors = [item_errors[i] for i in pending.items if i in item_errors]
            if errors:
                pending.error = max(errors, key=lambda e: e.status)
                continue
            pending.audio = audio.join_with_pauses(
                [item_audio[i] for i in pending.items],
                pause_s=self.settings.sentence_pause_s,
                sample_rate_hz=self.engine.sample_rate_hz,
            )

    def _respond(self, index: int, pending: Pending) -> bytes:
        """Bytes of one response; sets its status, content type and headers. Never raises."""
        request = pending.request
        if request is not None and request.request_id is not None:
            self.context.set_response_header(index, "X-Client-Request-Id", request.request_id)
        try:
            if pending.error is None and pending.audio is not None:
                return self._audio_response(index, pending.request, pending.audio)
            error = pending.error or EngineError("no audio was produced")
        except TTSError as exc:
            error = exc
        except Exception as exc:  # noqa: BLE001 - one response per request, whatever happens
            _LOGGER.exception("unexpected error encoding response %d", index)
            error = EngineError(f"could not encode the audio: {type(exc).__name__}")
        self.context.set_response_status(error.status, error.phrase, index)
        self.context.set_response_content_type(index, "application/json")
        return error.to_json_bytes()

    def _audio_response(self, index: int, request: SynthesisRequest, samples_f32: np.ndarray) -> bytes:
        """Encode one request's audio (WAV or raw PCM) and set its headers.

        Raises:
            PayloadTooLargeError: the encoded audio exceeds ``max_response_bytes``.
        """
        rate = self.engine.sample_rate_hz
        duration_s = len(samples_f32) / rate
        if 2 * len(samples_f32) + 44 > self.settings.max_response_bytes:
            limit_s = (self.settings.max_response_bytes - 44) / 2 / rate
            raise PayloadTooLargeError(
                f"the audio would last {duration_s:.1f} s, over this server's response limit of {limit_s:.1f} s; "
                "send shorter text or a higher speed", field="text",
            )
        samples = audio.float_to_int16(samples_f32)
        self.context.set_response_header(index, "X-Sample-Rate", str(rate))
        self.context.set_response_header(index, "X-Audio-Duration-Seconds", f"{duration_s:.3f}")
        if request.audio_format == "pcm":
            self.context.set_response_content_type(index, "audio/pcm")
            return audio.encode_pcm(samples)
        self.context.set_response_content_type(index, "audio/wav")
        return audio.encode_wav(samples, sample_rate_hz=rate)

    def _record_call(self, record: CallRecord) -> None:
        if record.ok:
            self.cost_fitter.record(record.num_items, record.max_tokens, record.seconds)
            self.budget.observe(padded_tokens=record.padded_tokens, peak_bytes=record.peak_bytes)

    def _emit_metrics(self, stats: BatchStats) -> None:
        _LOGGER.info("TTS_BATCH %s", stats.log_fields())
        emit_batch_metrics(self.context.metrics, self.context.model_name, stats)
        if self.cost_fitter.maybe_refresh():
            model = self.cost_fitter.model
            _LOGGER.info(
                "TTS_COST_MODEL fixed_s=%.6f per_padded_token_s=%.3e per_item_s=%.6f",
                model.fixed_s, model.per_padded_token_s, model.per_item_s,
            )
            emit_cost_model_metrics(self.context.metrics, self.context.model_name, model)
