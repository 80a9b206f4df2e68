"""Dynamic-batching TTS handler for TorchServe (packed into the model archive)."""
