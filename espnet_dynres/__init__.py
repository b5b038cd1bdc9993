"""espnet_dynres: dynamic-resolution batching and a token-normalized loss for ESPnet2 ASR.

Importing this package registers five names with ESPnet's ASR task: ``frontend: dynres``,
``specaug: dynres``, ``model: dynres``, ``model: token_normalized`` and ``batch_type: dynres``
(see :mod:`espnet_dynres.glue.registration`). The names are added the moment ESPnet's
``espnet2.tasks.asr`` is imported, or at once if it is already (:mod:`espnet_dynres.glue.import_hook`),
so that a process that only reads data with the plugin's helpers does not import ESPnet's tasks.
"""

from espnet_dynres.glue.import_hook import register_with_espnet as _register_with_espnet

__version__ = "0.1.0"
__all__ = ["register", "__version__"]


def register() -> None:
    """Register the five names now, importing ESPnet's ASR task (``import espnet_dynres`` arranges it already)."""
    import espnet2.tasks.asr  # noqa: F401  (the import hook registers right after it)

    _register_with_espnet()


_register_with_espnet()
