"""The four systems the benchmark compares, behind one small interface.

* ``CeilingSystem`` (a): our ``TTSHandler`` driven in-process through a
  minimal fake TorchServe context: planner, runner and engine, no HTTP, no
  batch delay. ``handle_batch(texts)`` is one handler call.
* ``TorchServeSystem`` (b, c): a model registered on a TorchServe started by
  ``scripts.tslib``; ``send(text)`` is one ``POST /predictions/<model>``.
* ``SeedFlaskSystem`` (d): ``benchmarks/baselines/seed_flask.py`` as a
  subprocess on a free loopback port; ``send(text)`` is one ``POST /tts``.

Every system gives a ``Snapshot`` (handler batch-size histogram, engine
seconds, CPU seconds of its process tree and of the machine) so that a run
can report deltas. Every process started here is stopped by its pid.
"""

from __future__ import annotations

import io
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
import wave
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import psutil
import requests
import yaml

from scripts.bench_stats import parse_counter
from scripts.tslib import REPO_ROOT, TorchServeClient, free_port, parse_batch_sizes

_LOGGER = logging.getLogger(__name__)
_SEED_BATCH = re.compile(r"SEED_BATCH size=(\d+) batch_s=([0-9.]+)")


@dataclass(frozen=True)
class Outcome:
    """One response: ``status`` (HTTP status or client error name) and its ``audio_s`` seconds."""

    status: str
    audio_s: float = 0.0


@dataclass(frozen=True)
class Snapshot:
    """Cumulative counters of a system at one moment.

    Attributes:
        batch_sizes: ``{handler batch size: calls}`` so far, or ``None`` when not observable.
        engine_s: engine seconds so far, or ``None`` (seed-flask: seconds in its ``run_batch``,
            tokenising and encoding included).
        tree_cpu_s: per pid of the system's process tree, user + system CPU seconds.
        machine_busy_s: whole-machine busy CPU seconds (all cores) so far.
        wall_s: ``time.perf_counter()`` when taken.
    """

    batch_sizes: dict[int, int] | None
    engine_s: float | None
    tree_cpu_s: dict[int, float] = field(default_factory=dict)
    machine_busy_s: float = 0.0
    wall_s: float = 0.0


def wav_duration_s(body: bytes) -> float:
    """Duration of a WAV file held in memory, seconds (0.0 when it is not a WAV)."""
    try:
        with wave.open(io.BytesIO(body), "rb") as wav:
            return wav.getnframes() / float(wav.getframerate())
    except (wave.Error, EOFError):
        return 0.0


def tree_cpu_seconds(root_pid: int) -> dict[int, float]:
    """User + system CPU seconds of ``root_pid`` and all its descendants, per pid."""
    try:
        root = psutil.Process(root_pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return {}
    out = {}
    for proc in procs:
        try:
            times = proc.cpu_times()
            out[proc.pid] = times.user + times.system
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


def machine_busy_seconds() -> float:
    """Busy CPU seconds of the whole machine (all cores): total minus idle and iowait."""
    times = psutil.cpu_times()
    return sum(times) - times.idle - getattr(times, "iowait", 0.0)


def _snapshot(batch_sizes: dict[int, int] | None, engine_s: float | None, root_pid: int) -> Snapshot:
    return Snapshot(batch_sizes, engine_s, tree_cpu_seconds(root_pid), machine_busy_seconds(), time.perf_counter())


def _outcome(response: requests.Response) -> Outcome:
    if response.status_code != 200:
        return Outcome(str(response.status_code))
    audio_s = wav_duration_s(response.content)
    return Outcome("200", audio_s) if audio_s > 0 else Outcome("200-no-audio")


def _client_error(exc: requests.RequestException) -> Outcome:
    return Outcome("timeout" if isinstance(exc, requests.Timeout) else type(exc).__name__)


# -- (a) the ceiling: the handler in-process ---------------------------------------------------


class _InProcessMetrics:
    """Collects what ``TTSHandler`` emits through ``context.metrics``."""

    def __init__(self) -> None:
        self.batches: Counter[int] = Counter()
        self.counters: Counter[str] = Counter()

    def add_metric(self, name, value, unit, dimensions=None, metric_type=None) -> None:  # noqa: ARG002
        if name == "TTSBatches":
            size = next(int(d.value) for d in dimensions or [] if d.name == "BatchSize")
            self.batches[size] += int(value)
        else:
            self.counters[name] += value

    def add_time(self, *args, **kwargs) -> None:  # noqa: ARG002 - HandlerTime; not needed here
        return None


class InProcessContext:
    """The parts of TorchServe's ``Context`` that ``TTSHandler`` (and ``BaseHandler.handle``) use.

    Args:
        model_yaml_config: the archive's ``model-config.yaml`` as a dict.
        model_dir: the folder holding the voice files (``system_properties["model_dir"]``).
        model_name: the model name used in metric dimensions.
    """

    def __init__(self, model_yaml_config: dict, model_dir: Path, model_name: str = "ceiling") -> None:
        self.model_yaml_config = model_yaml_config
        self.system_properties = {"model_dir": str(model_dir), "gpu_id": None, "batch_size": None}
        self.model_name = model_name
        self.manifest = {"model": {"modelName": model_name}}
        self.metrics = _InProcessMetrics()
        self.statuses: dict[int, int] = {}
        self.headers: dict[int, dict[str, str]] = {}

    def get_request_header(self, idx: int, key: str) -> None:  # noqa: ARG002 - no HTTP headers in-process
        return None

    def set_response_status(self, code: int = 200, phrase: str = "", idx: int = 0) -> None:  # noqa: ARG002
        self.statuses[idx] = code

    def set_response_header(self, idx: int, key: str, value: str) -> None:
        self.headers.setdefault(idx, {})[key] = value

    def set_response_content_type(self, idx: int, value: str) -> None:
        self.set_response_header(idx, "content-type", value)


class CeilingSystem:
    """(a) ``TTSHandler`` in this process, fed batches directly.

    Args:
        build_dir: an archive build folder (``build/<model-name>``) holding
            ``model-config.yaml`` and ``extra/`` (the voice files): the same
            settings as the TorchServe systems.
    """

    name = "ceiling"

    def __init__(self, build_dir: Path) -> None:
        from handler.handler import TTSHandler  # imports ts/torch: only when the ceiling runs

        config = yaml.safe_load((Path(build_dir) / "model-config.yaml").read_text(encoding="utf-8"))
        self.context = InProcessContext(config, Path(build_dir) / "extra")
        self.handler = TTSHandler()
        self.handler.initialize(self.context)

    def handle_batch(self, texts: Sequence[str]) -> list[Outcome]:
        """One handler call on ``texts`` (as TorchServe would pass JSON bodies); one outcome each."""
        self.context.statuses.clear()
        self.context.headers.clear()
        bodies = self.handler.handle([{"body": {"text": text}} for text in texts], self.context)
        outcomes = []
        for index, body in enumerate(bodies):
            status = self.context.statuses.get(index, 200)
            outcomes.append(Outcome("200", wav_duration_s(body)) if status == 200 else Outcome(str(status)))
        return outcomes

    def snapshot(self) -> Snapshot:
        metrics = self.context.metrics
        return _snapshot(dict(metrics.batches), float(metrics.counters["TTSEngineSeconds"]), os.getpid())

    def stop(self) -> None:
        """Nothing runs outside this process."""


# -- (b), (c) TorchServe ------------------------------------------------------------------


class TorchServeSystem:
    """A model on a running TorchServe (started and stopped by the caller).

    Args:
        name: ``"torchserve-unbatched"`` or ``"torchserve-batched"``.
        client: the server's client.
        model_name: the registered model.
    """

    def __init__(self, name: str, client: TorchServeClient, model_name: str) -> None:
        self.name = name
        self.client = client
        self.model_name = model_name

    def send(self, text: str) -> Outcome:
        """One synthesis request; never raises for HTTP or connection errors."""
        try:
            return _outcome(self.client.synthesize(self.model_name, {"text": text}))
        except requests.RequestException as exc:
            return _client_error(exc)

    def snapshot(self) -> Snapshot:
        text = self.client.metrics_text()
        engine_s = parse_counter(text, "TTSEngineSeconds", self.model_name)
        return _snapshot(parse_batch_sizes(text, self.model_name), engine_s, self.client.info.pid)

    def stop(self) -> None:
        """The server is stopped by whoever started it."""


# -- (d) the design note's Flask server -----------------------------------------------------


class SeedFlaskSystem:
    """(d) ``benchmarks.baselines.seed_flask`` in a subprocess on a free loopback port.

    Args:
        build_dir: the archive build folder whose ``model-config.yaml`` and voice files it loads.
        run_dir: where its log goes (``seed_flask.log``).
        timeout_s: per-request client timeout, seconds.
    """

    name = "seed-flask"

    def __init__(self, build_dir: Path, run_dir: Path, *, timeout_s: float = 300.0) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/tts"
        self.timeout_s = timeout_s
        run_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = run_dir / "seed_flask.log"
        cmd = [sys.executable, "-m", "benchmarks.baselines.seed_flask", "--port", str(self.port),
               "--config", str(Path(build_dir) / "model-config.yaml"), "--model-dir", str(Path(build_dir) / "extra")]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        try:
            self._wait_listening(timeout_s=120.0)
        except RuntimeError:
            self.stop()
            raise

    def _wait_listening(self, *, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"seed_flask exited with status {self.proc.returncode}:\n{self._log_tail()}")
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.3)
        raise RuntimeError(f"seed_flask did not listen on port {self.port} within {timeout_s:.0f} s")

    def _log_tail(self, lines: int = 20) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def send(self, text: str) -> Outcome:
        """One ``POST /tts``; never raises for HTTP or connection errors."""
        try:
            return _outcome(requests.post(self.url, json={"text": text}, timeout=self.timeout_s))
        except requests.RequestException as exc:
            return _client_error(exc)

    def snapshot(self) -> Snapshot:
        sizes: Counter[int] = Counter()
        engine_s = 0.0
        for match in _SEED_BATCH.finditer(self.log_path.read_text(errors="replace")):
            sizes[int(match.group(1))] += 1
            engine_s += float(match.group(2))
        return _snapshot(dict(sizes), engine_s, self.proc.pid)

    def stop(self) -> None:
        """SIGTERM its process group, then SIGKILL after 10 s; reap it."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(timeout=10)
                break
            except subprocess.TimeoutExpired:
                continue
        self.proc.poll()
