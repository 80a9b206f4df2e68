"""The model archive's entry point: ``torch-model-archiver --handler`` points here.

torch-model-archiver copies the handler file to the archive root, and copies
the contents of ``--extra-files`` directories there too; we ship the
``handler`` package as an extra file, so this module imports it by its
package name. TorchServe calls ``handle(None, context)`` once to initialise,
then ``handle(batch, context)`` per batch.
"""

from __future__ import annotations

from handler.handler import TTSHandler

_SERVICE = TTSHandler()


def handle(data, context):
    """TorchServe's function entry point: initialise on first call, then serve batches.

    Args:
        data: ``None`` for the initialisation call, else the batch: a list of
            request dicts (``len(data) <= batchSize``).
        context: TorchServe's ``Context``.

    Returns:
        ``None`` on initialisation, else a list of ``len(data)`` response bodies (bytes).
    """
    if not _SERVICE.initialized:
        _SERVICE.initialize(context)
    if data is None:
        return None
    return _SERVICE.handle(data, context)
