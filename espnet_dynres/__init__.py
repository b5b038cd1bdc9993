"""espnet_dynres: dynamic-resolution batching and a token-normalized loss for ESPnet2 ASR.

Importing it registers five names with ESPnet's ASR task (:mod:`.glue.registration`, :mod:`.glue.import_hook`):
``frontend: dynres``, ``specaug: dynres``, ``model: dynres``, ``model: token_normalized``, ``batch_type: dynres``."""

from espnet_dynres.glue.import_hook import register_with_espnet as _register_with_espnet

__version__ = "0.1.0"
__all__ = ["register", "__version__"]


def register() -> None:
    """Register the five names now, importing ESPnet's ASR task (``import espnet_dynres`` arranges it already)."""
    import espnet2.tasks.asr  # noqa: F401  (the import hook registers right after it)
    _register_with_espnet()


_register_with_espnet()
