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

# Batch key of the sampler's BatchPlan = DynResASRModel.forward's argument (ESPnet passes batch keys as keywords).
BATCH_PLAN_KEY = "batch_plan"


class PlannedBatchDataset(torch.utils.data.Dataset):
    """One item is one whole :class:`PlannedBatch` of ``dataset``, collated, with its plan as ``batch_plan``.

    Raises:
        ValueError: ``collate_fn`` is ``None`` (give ESPnet's ``CommonCollateFn``).
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
    """The DataLoader's collate step for :class:`PlannedBatchDataset` (items are batches already)."""
    return item


class DynResIterFactory(AbsIterFactory):
    """Builds each epoch's ``DataLoader`` from the sampler's plan for that epoch.

    Args:
        dataset: ESPnet's dataset holding every utterance of the sampler, keyed by utterance id.
        sampler, train: the ``dynres`` batch sampler; training (redrawn every epoch) or validation.
        num_iters_per_epoch: ``None`` (one plan per epoch) or ``n`` (epoch ``e``: ``(e-1)n`` to ``en-1`` of all plans).
        num_batches: keep only the first ``num_batches`` batches of each plan.
        rank, world_size, seed: DDP rank and world size (batches split ``[rank::world_size]``); ``--seed``.
        num_workers, pin_memory, collate_fn: DataLoader options; ESPnet's collate function.

    Raises:
        ValueError: ``rank`` outside ``[0, world_size)``; ``num_iters_per_epoch < 1``; (``epoch_batches``)
            a sampler that planned no batches.
    """

    def __init__(self, dataset, sampler: DynResBatchSampler, train: bool, num_iters_per_epoch: Optional[int] = None,
                 num_batches: Optional[int] = None, rank: int = 0, world_size: int = 1, seed: int = 0,
                 num_workers: int = 0, pin_memory: bool = False, collate_fn: Optional[Callable] = None):
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
        return DataLoader(PlannedBatchDataset(self.dataset, self.collate_fn),
                          sampler=[b.shard(self.rank, self.world_size) for b in batches], batch_size=None,
                          collate_fn=whole_batch, num_workers=self.num_workers, pin_memory=self.pin_memory,
                          worker_init_fn=functools.partial(worker_init_fn, base_seed=epoch + self.seed))
