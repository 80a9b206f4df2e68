"""TTS engines: one protocol (``base.Engine``), several implementations.

Implementations are imported lazily by ``load_engine`` so that importing this
package never loads onnxruntime or torch.
"""

from __future__ import annotations

from pathlib import Path

from handler.config import HandlerSettings
from handler.engines.base import Engine


def load_engine(settings: HandlerSettings, model_dir: str | Path) -> Engine:
    """Build the engine named by ``settings.engine`` from files in ``model_dir``.

    Args:
        settings: validated handler settings.
        model_dir: the unpacked model archive directory.

    Raises:
        FileNotFoundError: the model file or checkpoint directory is missing.
        ValueError: unknown engine name.
    """
    model_dir = Path(model_dir)
    if settings.engine == "piper-onnx":
        from handler.engines.piper_onnx import PiperOnnxEngine

        model_path = model_dir / settings.model_file
        if not model_path.is_file():
            raise FileNotFoundError(f"Piper model file {model_path} not found (handler setting 'model_file')")
        return PiperOnnxEngine(
            model_path=model_path,
            num_threads=settings.num_threads,
            use_cuda=settings.device == "cuda",
            voice_name=settings.voice,
        )
    if settings.engine == "hf-vits":
        from handler.engines.hf_vits import HfVitsEngine

        checkpoint = model_dir / settings.checkpoint_dir
        if not checkpoint.is_dir():
            raise FileNotFoundError(f"VITS checkpoint directory {checkpoint} not found (handler setting 'checkpoint_dir')")
        return HfVitsEngine(
            checkpoint_dir=checkpoint,
            device=settings.device,
            num_threads=settings.num_threads or None,
            voice_name=settings.voice,
        )
    raise ValueError(f"unknown engine {settings.engine!r}")
