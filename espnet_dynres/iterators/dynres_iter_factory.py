"""Iterator factory for ``batch_type: dynres``: a fresh batch plan every epoch, sharded for DDP."""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from torch.utils.data import DataLoader

from espnet2.iterators.abs_iter_factory import AbsIterFactory
from espnet2.iterators.sequence_iter_factory import worker_init_fn

from espnet_dynres.core.batch_planner import PlannedBatch
from espnet_dynres.samplers.dynres_batch_sampler import DynResBatchSampler

# Batch key of the sampler's plan (a BatchPlan); the name of the batch_plan argument of
# DynResASRModel.forward (ESPnet passes batch keys as keyword arguments).
BATCH_PLAN_KEY = "batch_plan"


class PlannedBatchDataset(torch.utils.data.Dataset):
    """One item is one whole batch: a :class:`PlannedBatch` is loaded (each utterance checked by
    :class:`~espnet_dynres.glue.checked_dataset.CheckedDataset`), collated by ESPnet's collate
    function and given its plan as the batch
    key ``batch_plan``, once, in one step.

    Args:
        dataset: the checked dataset (keyed by utterance id).
        collate_fn: ESPnet's collate function (``CommonCollateFn``).
    """

    def __init__(self, dataset, collate_fn: Optional[Callable]):
        if collate_fn is None:
            raise ValueError("the dynres iterator needs ESPnet's collate function (CommonCollateFn)")
        self.dataset = dataset
        self.collate_fn = collate_fn

    def __getitem__(self, batch: PlannedBatch) -> Tuple[List[str], Dict[str, Any]]:
        uids, data = self.collate_fn([self.dataset[uid] for uid in batch.keys])
        data[BATCH_PLAN_KEY] = batch.plan
        return uids, data

    def __len__(self) -> int:
        return len(self.dataset)


def whole_batch(item):
    """The DataLoader's collate step for :class:`PlannedBatchDataset`, whose items are batches already."""
    return item


class DynResIterFactory(AbsIterFactory):
    """Builds each epoch's ``DataLoader`` from the sampler's plan for that epoch.

    * Training (``train=True``): epoch ``e`` uses
      :meth:`DynResBatchSampler.planned_batches` ``(e)`` — new composition and
      order, deterministic in ``(seed, e)``, so ``--resume true`` rebuilds the
      same epoch.  One DataLoader item is one whole batch (:class:`PlannedBatchDataset`):
      loaded, collated, and given its :class:`~espnet_dynres.core.batch_planner.BatchPlan`
      as batch key ``batch_plan``, which reaches the model's ``forward``; the plan already
      holds the epoch's resolution curriculum, so nothing else needs the epoch.
    * With ``num_iters_per_epoch = n``: the epochs' plans are concatenated into
      one stream (plan 1, plan 2, ...) and epoch ``e`` takes stream items
      ``(e - 1) n`` to ``e n - 1``; every utterance is still seen exactly once per
      plan.
    * Validation (``train=False``): the sampler's fixed sorted batches, with their
      ``STANDARD`` plans (the frontend runs at the standard rate in eval mode).
    * DDP: every batch and its plan are split ``[rank::world_size]`` (the sampler gives
      every batch ``>= world_size`` utterances), so every rank gets the same
      number of batches and the same ``T``; ``batch_bins`` is the global budget.

    Args:
        dataset: ESPnet's ``ESPnetDataset`` holding every utterance of the sampler, keyed by utterance id
            (the task wraps it in :class:`~espnet_dynres.glue.checked_dataset.CheckedDataset`).
        sampler: the ``dynres`` batch sampler.
        train: training (planned, redrawn every epoch) or validation.
        num_iters_per_epoch: ESPnet's ``--num_iters_per_epoch`` (``None``: one plan per epoch).
        num_batches: keep only the first ``num_batches`` batches of each plan.
        rank, world_size: this process's DDP rank and the world size.
        seed: ESPnet's ``--seed`` (DataLoader worker seeds, as ESPnet).
        num_workers, pin_memory: DataLoader options.
        collate_fn: ESPnet's collate function.
    """

    def __init__(
        self,
        dataset,
        sampler: DynResBatchSampler,
        train: bool,
        num_iters_per_epoch: Optional[int] = None,
        num_batches: Optional[int] = None,
        rank: int = 0,
        world_size: int = 1,
        seed: int = 0,
        num_workers: int = 0,
        pin_memory: bool = False,
        collate_fn: Optional[Callable] = None,
    ):
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} outside world_size {world_size}")
        if num_iters_per_epoch is not None and num_iters_per_epoch < 1:
            raise ValueError(f"num_iters_per_epoch must be >= 1, got {num_iters_per_epoch}")
        self.dataset = dataset
        self.sampler = sampler
        self.train = train
        self.num_iters_per_epoch = num_iters_per_epoch
        self.num_batches = num_batches
        self.rank = rank
        self.world_size = world_size
        self.seed = seed
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self.collate_fn = collate_fn

    def plan_batches(self, plan: int) -> List[PlannedBatch]:
        """Global batches of plan ``plan`` (the sampler's epoch ``plan``), before sharding."""
        batches = self.sampler.planned_batches(plan)
        return batches if self.num_batches is None else batches[: self.num_batches]

    def epoch_batches(self, epoch: int) -> List[PlannedBatch]:
        """The global batches of training epoch ``epoch`` (1-based), before sharding."""
        n = self.num_iters_per_epoch
        if n is None:
            return self.plan_batches(epoch)
        start, plan, out = (epoch - 1) * n, 1, []
        batches = self.plan_batches(plan)
        if not batches:
            raise ValueError("the dynres sampler planned no batches (num_batches 0 or no utterances)")
        while start >= len(batches):  # skip whole plans before this epoch's first batch
            start -= len(batches)
            plan += 1
            batches = self.plan_batches(plan)
        while len(out) < n:
            out.extend(batches[start : start + n - len(out)])
            start = 0
            plan += 1
            batches = self.plan_batches(plan)
        return out

    def build_iter(self, epoch: int, shuffle: Optional[bool] = None) -> DataLoader:
        batches = self.epoch_batches(epoch) if self.train else self.plan_batches(1)
        return DataLoader(
            PlannedBatchDataset(self.dataset, self.collate_fn),
            sampler=[b.shard(self.rank, self.world_size) for b in batches],
            batch_size=None,
            collate_fn=whole_batch,
            num_workers=self.num_workers,
            pin_memory=self.pin_memory,
            worker_init_fn=functools.partial(worker_init_fn, base_seed=epoch + self.seed),
        )
