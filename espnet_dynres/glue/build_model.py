"""``ASRTask.build_model`` with the plugin's setting checks, the plugin's trainer for its models,
and the effective options recorded in the run's ``config.yaml``."""

from __future__ import annotations

import argparse
import inspect
from typing import Callable

import torch
from espnet2.train.trainer import Trainer as ESPNET_TRAINER

from espnet_dynres.glue import config_checks
from espnet_dynres.asr.dynres_model import DynResASRModel
from espnet_dynres.asr.frontend.dynres import DynResFrontend
from espnet_dynres.samplers.dynres_batch_sampler import DynResBatchSampler
from espnet_dynres.glue.task_arguments import SAMPLER_ARGUMENTS
from espnet_dynres.glue.trainer import DynResTrainer


def build_model(original: Callable, cls, args: argparse.Namespace):
    """ESPnet's ``build_model`` (``original``) after :func:`check_sampler_arguments` and, when a plugin switch is
    on, the conf-key and grad_clip checks (:func:`espnet_dynres.glue.config_checks.with_conf_key_check`).
    Training builds the model before its iterators, so option conflicts stop it before any data is read.
    The task trains a :class:`DynResASRModel` with :class:`~espnet_dynres.glue.trainer.DynResTrainer`
    (the BatchNorm re-estimate before each validation) and any other model with ESPnet's ``Trainer``
    (so a stock configuration, DeepSpeed included, runs as ESPnet's own)."""
    config_checks.check_sampler_arguments(args)
    model = config_checks.with_conf_key_check(original)(cls, args)
    if cls.trainer in (ESPNET_TRAINER, DynResTrainer):  # a task's own trainer is left as it is
        cls.trainer = DynResTrainer if isinstance(model, DynResASRModel) else ESPNET_TRAINER
    record_effective_options(args, model)
    return model


def record_effective_options(args: argparse.Namespace, model: torch.nn.Module) -> None:
    """Write the value every plugin option runs with into ``args``, which ESPnet saves as the run's
    ``config.yaml`` after building the model: the sampler options (:data:`SAMPLER_ARGUMENTS`, with
    ``batch_type`` or ``valid_batch_type`` ``dynres``; defaults from :class:`DynResBatchSampler`),
    the dynres frontend's own keys (the rate clamp from its :class:`FrameRatePolicy`, ``method``,
    ``resample_*``) and ``model_conf.batchnorm_restat_batches``.  An omitted option is then recorded
    as the value used, so a run stays reproducible from its config if a default changes."""
    if "dynres" in (getattr(args, "batch_type", None), getattr(args, "valid_batch_type", None)):
        defaults = inspect.signature(DynResBatchSampler.__init__).parameters
        for name in SAMPLER_ARGUMENTS:
            if getattr(args, name, None) is None:
                setattr(args, name, defaults[name].default)
    frontend = getattr(model, "frontend", None)
    if isinstance(frontend, DynResFrontend):
        policy = frontend.policy
        args.frontend_conf = {
            **(args.frontend_conf or {}),
            "min_frame_rate_hz": policy.min_frame_rate_hz, "max_frame_rate_hz": policy.max_frame_rate_hz,
            "fallback_frame_rate_hz": policy.fallback_frame_rate_hz, "target_frame_rate_hz": policy.target_frame_rate_hz,
            "eval_frame_rate_hz": policy.eval_frame_rate_hz,
            "target_frame_rate_range_hz": (None if policy.target_frame_rate_range_hz is None
                                           else list(policy.target_frame_rate_range_hz)),
            "curriculum_epochs": policy.curriculum_epochs, "method": frontend.method,
            "resample_filterbank": frontend.resample_filterbank, "resample_grid_hz": frontend.resample_grid_hz,
        }
    if isinstance(model, DynResASRModel):
        args.model_conf = {**(args.model_conf or {}), "batchnorm_restat_batches": model.batchnorm_restat_batches}
