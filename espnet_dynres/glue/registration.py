"""Everything espnet_dynres adds to ESPnet, in one place: this module only registers.

:func:`register` adds the names of :data:`FRONTENDS`, :data:`SPECAUGS`, :data:`MODELS`, :data:`BATCH_TYPE_DOCS`
and wraps ``ASRTask``'s ``add_task_arguments``, ``build_model`` and ``build_sequence_iter_factory`` with
:mod:`.task_arguments`, :mod:`.build_model` and :mod:`.build_iter_factory`."""

from __future__ import annotations

import functools

from espnet2.samplers.build_batch_sampler import BATCH_TYPES
from espnet2.tasks import asr as espnet_asr

from espnet_dynres.glue import build_iter_factory, build_model, task_arguments
from espnet_dynres.asr.dynres_model import DynResASRModel
from espnet_dynres.asr.frontend.dynres import DynResFrontend
from espnet_dynres.asr.specaug.dynres_specaug import DynResSpecAug
from espnet_dynres.asr.token_normalized_model import TokenNormalizedASRModel

FRONTENDS = {"dynres": DynResFrontend}
SPECAUGS = {"dynres": DynResSpecAug}
MODELS = {"dynres": DynResASRModel, "token_normalized": TokenNormalizedASRModel}
BATCH_TYPE_DOCS = {
    "dynres": ("Dynamic-resolution batches (espnet_dynres): utterances grouped by duration "
               "so that the dynres frontend brings all of them to one frame count T inside "
               "its frame-rate clamp; batch_bins is the frame budget B x T. "
               "Needs frontend: dynres.")
}

# ESPnet's own methods, taken before they are replaced.
ESPNET_BUILD_MODEL = espnet_asr.ASRTask.build_model.__func__
ESPNET_ADD_TASK_ARGUMENTS = espnet_asr.ASRTask.add_task_arguments.__func__

# The plugin's only module-level mutable state: ESPnet has no plugin API, so registration writes once per process.
_registered = False


def register() -> None:
    """Add the plugin's names to ESPnet's ASR task and wrap its three methods (idempotent)."""
    global _registered
    if _registered:
        return
    espnet_asr.frontend_choices.classes.update(FRONTENDS)
    espnet_asr.specaug_choices.classes.update(SPECAUGS)
    espnet_asr.model_choices.classes.update(MODELS)
    BATCH_TYPES.update(BATCH_TYPE_DOCS)
    espnet_asr.ASRTask.build_sequence_iter_factory = classmethod(build_iter_factory.build_sequence_iter_factory)
    espnet_asr.ASRTask.build_model = classmethod(functools.partial(build_model.build_model, ESPNET_BUILD_MODEL))
    espnet_asr.ASRTask.add_task_arguments = classmethod(
        functools.partial(task_arguments.add_task_arguments, ESPNET_ADD_TASK_ARGUMENTS))
    _registered = True
