"""``ASRTask.build_sequence_iter_factory`` with the ``dynres`` sampler for ``batch_type: dynres``."""

from __future__ import annotations

import argparse
import logging

import numpy as np
import torch

from espnet2.tasks.abs_task import AbsTask, IteratorOptions

from espnet_dynres.glue import config_checks, data_checks
from espnet_dynres.glue.ctc_targets import training_min_frames
from espnet_dynres.core.frame_rate_policy import FrameRatePolicy
from espnet_dynres.core.frontend_config import FrontendConfig
from espnet_dynres.iterators.dynres_iter_factory import DynResIterFactory
from espnet_dynres.glue.checked_dataset import CheckedDataset
from espnet_dynres.glue.plugin_switches import plugin_switches_on
from espnet_dynres.samplers.batch_bins_search import numel_sized_budget
from espnet_dynres.samplers.dynres_batch_sampler import DynResBatchSampler
from espnet_dynres.glue.task_arguments import SAMPLER_ARGUMENTS

ESPNET_BUILD_SEQUENCE_ITER_FACTORY = AbsTask.build_sequence_iter_factory.__func__


def policy_from_args(args: argparse.Namespace) -> FrameRatePolicy:
    """The frontend's :class:`FrameRatePolicy`, built from ``args.frontend_conf``.

    Raises:
        ValueError: ``batch_type: dynres`` with a frontend other than ``dynres``.
        TypeError: unknown keys in ``frontend_conf`` (from the frontend itself).
    """
    frontend = getattr(args, "frontend", None)
    if frontend != "dynres":
        raise ValueError(f"batch_type: dynres plans frame counts for the dynres frontend, but frontend is "
                         f"{frontend!r}; set frontend: dynres (or use another batch_type).")
    return FrontendConfig.from_conf(args.frontend_conf).policy


def ctc_min_frames(cls, args: argparse.Namespace, iter_options: IteratorOptions):
    """:func:`~espnet_dynres.glue.ctc_targets.training_min_frames` of the ``text`` data; ``None`` for validation."""
    texts = [p for p, name, _ in iter_options.data_path_and_name_and_type if name == "text"]
    if not iter_options.train or not texts:
        return None
    return training_min_frames(cls, args, texts[0])


def build_sequence_iter_factory(cls, args: argparse.Namespace, iter_options: IteratorOptions, mode: str):
    """ESPnet's iterator factory, or for ``dynres`` a :class:`DynResBatchSampler` in a :class:`DynResIterFactory`.

    Raises:
        ValueError: ``shuffle_within_batch: true`` (it would break the plan), a frontend other than
            ``dynres``, audio at another sampling rate, or a failed setting or data check.
    """
    config_checks.check_sampler_arguments(args)  # passes trivially for a stock configuration
    if plugin_switches_on(args):  # a stock configuration runs exactly as ESPnet's own
        data_checks.check_sampling_rate(args, iter_options.data_path_and_name_and_type)
        data_checks.check_training_data(args, iter_options)
    if iter_options.batch_type != "dynres":
        return ESPNET_BUILD_SEQUENCE_ITER_FACTORY(cls, args, iter_options, mode)
    if getattr(args, "shuffle_within_batch", False):
        raise ValueError(
            "shuffle_within_batch: true moves utterances between batches and breaks the dynres plan; "
            "batch_type dynres already redraws batch composition every epoch. Set shuffle_within_batch false.")
    distributed = iter_options.distributed
    world_size = torch.distributed.get_world_size() if distributed else 1
    rank = torch.distributed.get_rank() if distributed else 0
    optional = {name: getattr(args, name) for name in SAMPLER_ARGUMENTS if getattr(args, name, None) is not None}
    sampler = DynResBatchSampler(
        batch_bins=iter_options.batch_bins, shape_files=iter_options.shape_files, policy=policy_from_args(args),
        min_batch_size=world_size if distributed else getattr(args, "min_batch_size", 1),
        max_batch_size=getattr(args, "max_batch_size", None), sort_in_batch=args.sort_in_batch,
        sort_batch=args.sort_batch, drop_last=args.drop_last_iter,
        utt2min_frames=ctc_min_frames(cls, args, iter_options), seed=args.seed, shuffle=iter_options.train, **optional)
    sizes = [len(b.keys) for b in sampler.planned_batches(1)]
    logging.info(f"[{mode}] Batch sampler: {sampler}")
    if iter_options.train:
        numel_sized = numel_sized_budget(sampler, iter_options.shape_files)
        if numel_sized:
            logging.warning(f"[{mode}] {numel_sized}")
    logging.info(f"[{mode}] mini-batch sizes summary (epoch 1): N-batch={len(sizes)}, "
                 f"mean={np.mean(sizes):.1f}, min={np.min(sizes)}, max={np.max(sizes)}")
    dataset = CheckedDataset(cls.build_dataset(args, iter_options, set(sampler.keys)), sampler.utt2samples,
                             sampler.shape_files[0], sampler.policy.fs)
    return DynResIterFactory(
        dataset=dataset, sampler=sampler, train=iter_options.train,
        num_iters_per_epoch=iter_options.num_iters_per_epoch, num_batches=iter_options.num_batches, rank=rank,
        world_size=world_size, seed=args.seed, num_workers=args.num_workers, pin_memory=args.ngpu > 0,
        collate_fn=iter_options.collate_fn)
