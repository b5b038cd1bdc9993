"""``ASRTask.build_model`` with the plugin's setting checks, trainer, and effective options in ``config.yaml``."""

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
    """ESPnet's ``build_model`` (``original``) after the checks of :mod:`~espnet_dynres.glue.config_checks`; a
    :class:`DynResASRModel` trains with :class:`~espnet_dynres.glue.trainer.DynResTrainer`."""
    config_checks.check_sampler_arguments(args)
    model = config_checks.with_conf_key_check(original)(cls, args)
    if cls.trainer in (ESPNET_TRAINER, DynResTrainer):  # a task's own trainer is left as it is
        cls.trainer = DynResTrainer if isinstance(model, DynResASRModel) else ESPNET_TRAINER
    record_effective_options(args, model)
    return model


def record_effective_options(args: argparse.Namespace, model: torch.nn.Module) -> None:
    """Write the value every plugin option (sampler, dynres frontend, re-estimate) runs with into ``args``."""
    if "dynres" in (getattr(args, "batch_type", None), getattr(args, "valid_batch_type", None)):
        defaults = inspect.signature(DynResBatchSampler.__init__).parameters
        for name in SAMPLER_ARGUMENTS:
            if getattr(args, name, None) is None:
                setattr(args, name, defaults[name].default)
    frontend = getattr(model, "frontend", None)
    if isinstance(frontend, DynResFrontend):
        policy = frontend.policy
        args.frontend_conf = {
            **(args.frontend_conf or {}), "min_frame_rate_hz": policy.min_frame_rate_hz,
            "max_frame_rate_hz": policy.max_frame_rate_hz, "fallback_frame_rate_hz": policy.fallback_frame_rate_hz,
            "target_frame_rate_hz": policy.target_frame_rate_hz, "eval_frame_rate_hz": policy.eval_frame_rate_hz,
            "target_frame_rate_range_hz": (None if policy.target_frame_rate_range_hz is None
                                           else list(policy.target_frame_rate_range_hz)),
            "curriculum_epochs": policy.curriculum_epochs, "method": frontend.method,
            "resample_filterbank": frontend.resample_filterbank, "resample_grid_hz": frontend.resample_grid_hz}
    if isinstance(model, DynResASRModel):
        args.model_conf = {**(args.model_conf or {}), "batchnorm_restat_batches": model.batchnorm_restat_batches}
