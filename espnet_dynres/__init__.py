"""espnet_dynres: dynamic-resolution batching and a token-normalized loss for ESPnet2 ASR.

Importing this package registers five names with ESPnet's ASR task: ``frontend: dynres``,
``specaug: dynres``, ``model: dynres``, ``model: token_normalized`` and ``batch_type: dynres``
(see :mod:`espnet_dynres.glue.registration`).
"""

import contextlib as _contextlib
import sys as _sys

# ESPnet prints notices on import (e.g. "Failed to import Flash Attention"); they go to stderr,
# so that a tool's standard output (``audit_batches --json -``) holds only what the tool writes.
with _contextlib.redirect_stdout(_sys.stderr):
    from espnet_dynres.glue.registration import register

    register()

__version__ = "0.1.0"
__all__ = ["register", "__version__"]
