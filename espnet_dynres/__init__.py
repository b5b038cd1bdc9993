"""espnet_dynres: dynamic-resolution batching and a token-normalized loss for ESPnet2 ASR.

Importing this package registers ``frontend: dynres``, ``model: token_normalized``
and ``batch_type: dynres`` with ESPnet's ASR task (see :mod:`espnet_dynres.registration`).
"""

from espnet_dynres.registration import register

register()

__version__ = "0.1.0"
__all__ = ["register", "__version__"]
