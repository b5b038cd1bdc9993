"""The plugin's ESPnet ``Trainer``: the BatchNorm re-estimate (from the epoch's training sample) before validation."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
from typing import Iterator, Optional

import torch
from espnet2.train.trainer import Trainer, TrainerOptions

from espnet_dynres.asr.batchnorm_reestimate import batchnorm_layers, reestimate_batchnorm
from espnet_dynres.asr.batchnorm_sample import BatchNormSample, RestatBudget
from espnet_dynres.asr.frontend.dynres import DynResFrontend


def unwrapped(model: torch.nn.Module) -> torch.nn.Module:
    """The model inside ESPnet's ``DistributedDataParallel`` / ``DataParallel`` wrapper (or ``model``)."""
    wrappers = (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)
    return model.module if isinstance(model, wrappers) else model


def restat_budget(args: argparse.Namespace, model: torch.nn.Module) -> RestatBudget:
    """The run's BatchNorm re-estimate budget (:meth:`RestatBudget.from_task_args`, with the dynres frontend's hop)."""
    frontend = getattr(model, "frontend", None)
    hop = frontend.policy.hop_length if isinstance(frontend, DynResFrontend) else None
    return RestatBudget.from_task_args(args, hop_length=hop)


class BatchNormReestimate:
    """The re-estimate step of one run (``args``: ESPnet's task arguments): budget, sample, the two hooks."""

    def __init__(self, args: argparse.Namespace):
        self._args = args
        self.budget: Optional[RestatBudget] = None
        self.sample: Optional[BatchNormSample] = None

    def _prepare(self, model: torch.nn.Module) -> Optional[BatchNormSample]:
        if self.sample is None and hasattr(model, "batchnorm_restat_batches"):
            self.budget = restat_budget(self._args, model)
            self.sample = BatchNormSample(model.batchnorm_restat_batches if batchnorm_layers(model) else 0)
        return self.sample

    @contextlib.contextmanager
    def collecting(self, model: torch.nn.Module) -> Iterator[None]:
        """While open, training forwards of ``model`` offer ``speech (B, T_samples)``, ``speech_lengths (B,)``."""
        model = unwrapped(model)
        sample = self._prepare(model)
        if sample is None or sample.num_batches == 0:
            yield
            return

        def offer(module, args, kwargs):
            if module.training and torch.is_grad_enabled():
                speech = kwargs["speech"] if "speech" in kwargs else args[0]
                lengths = kwargs["speech_lengths"] if "speech_lengths" in kwargs else args[1]
                sample.add(speech, lengths, self.budget)

        handle = model.register_forward_pre_hook(offer, with_kwargs=True)
        try:
            yield
        finally:
            handle.remove()

    def run(self, model: torch.nn.Module) -> int:
        """Re-estimate BatchNorm from the sample, clear it (every rank must call it); returns the layer count."""
        model = unwrapped(model)
        sample = self._prepare(model)
        if sample is None:
            return 0
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        layers = 0
        if self._every_rank_has_a_sample(len(sample) > 0, next(model.parameters()).device, distributed):
            layers = reestimate_batchnorm(model, sample, self.budget,
                                          torch.distributed.all_reduce if distributed else None)
        sample.clear()
        return layers

    @staticmethod
    def _every_rank_has_a_sample(has_sample: bool, device: torch.device, distributed: bool) -> bool:
        if not distributed:
            return has_sample
        flags = torch.tensor([int(has_sample), 1], dtype=torch.long, device=device)  # (mine, ranks)
        torch.distributed.all_reduce(flags)  # sum: ranks with a sample, world size
        if 0 < int(flags[0]) < int(flags[1]):
            logging.warning("BatchNorm re-estimate skipped before this evaluation: %d of %d ranks have no training "
                            "utterance in their sample (no step on them this epoch); the statistics stay as trained.",
                            int(flags[1] - flags[0]), int(flags[1]))
        return int(flags[0]) == int(flags[1])


@dataclasses.dataclass
class DynResTrainerOptions(TrainerOptions):
    """ESPnet's trainer options and the run's :class:`BatchNormReestimate`."""

    batchnorm_reestimate: Optional[BatchNormReestimate] = None


class DynResTrainer(Trainer):
    """ESPnet's ``Trainer`` with the BatchNorm re-estimate before every validation (module docstring)."""

    @classmethod
    def build_options(cls, args: argparse.Namespace) -> DynResTrainerOptions:
        options = super().build_options(args)
        fields = {f.name: getattr(options, f.name) for f in dataclasses.fields(options)}
        return DynResTrainerOptions(**fields, batchnorm_reestimate=BatchNormReestimate(args))

    @classmethod
    def train_one_epoch(cls, model: torch.nn.Module, *args, options: TrainerOptions, **kwargs) -> bool:
        reestimate = getattr(options, "batchnorm_reestimate", None)
        with reestimate.collecting(model) if reestimate is not None else contextlib.nullcontext():
            return super().train_one_epoch(model, *args, options=options, **kwargs)

    @classmethod
    def validate_one_epoch(cls, model: torch.nn.Module, *args, options: TrainerOptions, **kwargs) -> None:
        reestimate = getattr(options, "batchnorm_reestimate", None)
        if reestimate is not None:
            reestimate.run(model)
        return super().validate_one_epoch(model, *args, options=options, **kwargs)
