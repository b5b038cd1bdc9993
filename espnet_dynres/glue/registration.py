"""Everything espnet_dynres adds to ESPnet, in one place: this module only registers.

``import espnet_dynres`` calls :func:`register`, which adds:

=================  ======================  ==============================================
ESPnet switch      name                    what it is
=================  ======================  ==============================================
``frontend``       ``dynres``              :class:`~espnet_dynres.asr.frontend.dynres.DynResFrontend`
``specaug``        ``dynres``              :class:`~espnet_dynres.asr.specaug.dynres_specaug.DynResSpecAug`
``model``          ``dynres``              :class:`~espnet_dynres.asr.dynres_model.DynResASRModel` (ESPnet's loss)
``model``          ``token_normalized``    :class:`~espnet_dynres.asr.token_normalized_model.TokenNormalizedASRModel`
``batch_type``     ``dynres``              :class:`~espnet_dynres.samplers.dynres_batch_sampler.DynResBatchSampler`
=================  ======================  ==============================================

and wraps three methods of ESPnet's ``ASRTask``:

* ``add_task_arguments``: the dynres sampler's options
  (:func:`espnet_dynres.glue.task_arguments.add_task_arguments`);
* ``build_model``: the setting checks, the BatchNorm re-estimate's budget and the effective
  options (:func:`espnet_dynres.glue.build_model.build_model`);
* ``build_sequence_iter_factory``: the data checks and, for ``batch_type: dynres``, the dynres
  sampler and iterator (:func:`espnet_dynres.glue.build_iter_factory.build_sequence_iter_factory`).

Their checks run only when one of the plugin's switches is on
(:func:`espnet_dynres.glue.plugin_switches.plugin_switches_on`): a stock configuration goes straight
to ESPnet's code.
"""

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
    "dynres": (
        "Dynamic-resolution batches (espnet_dynres): utterances grouped by duration "
        "so that the dynres frontend brings all of them to one frame count T inside "
        "its frame-rate clamp; batch_bins is the frame budget B x T. "
        "Needs frontend: dynres."
    )
}

# ESPnet's own methods, taken before they are replaced.
ESPNET_BUILD_MODEL = espnet_asr.ASRTask.build_model.__func__
ESPNET_ADD_TASK_ARGUMENTS = espnet_asr.ASRTask.add_task_arguments.__func__

# The plugin's only module-level mutable state, forced by ESPnet: its ASR task keeps the choices
# (frontend, specaug, model, batch types) and the methods that build the model and the iterators
# as module/class attributes, with no plugin API, so registration writes into them once per process.
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
        functools.partial(task_arguments.add_task_arguments, ESPNET_ADD_TASK_ARGUMENTS)
    )
    _registered = True
