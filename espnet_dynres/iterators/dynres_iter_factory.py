"""Iterator factory for ``batch_type: dynres``: a fresh batch plan every epoch, sharded for DDP."""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from torch.utils.data import DataLoader

from espnet2.iterators.abs_iter_factory import AbsIterFactory
from espnet2.iterators.sequence_iter_factory import worker_init_fn

from espnet_dynres.glue.data_checks import check_audio_file
from espnet_dynres.core.batch_planner import PlannedBatch
from espnet_dynres.samplers.dynres_batch_sampler import DynResBatchSampler

# Batch key of the sampler's plan (a BatchPlan); the name of the batch_plan argument of
# DynResASRModel.forward (ESPnet passes batch keys as keyword arguments).
BATCH_PLAN_KEY = "batch_plan"


class CheckedDataset(torch.utils.data.Dataset):
    """Wraps ESPnet's dataset: every loaded utterance must be what the sampler planned with.

    The plan comes from the shape file (``speech_shape``: samples, channels), so audio re-cut,
    re-sampled or re-mixed after collect-stats would be computed at rates the plan did not choose
    (or fail later with a message that names neither file nor cause).  Checked per item, as the
    audio is loaded anyway (no extra reading): the sample count and channel count against the
    shape file, and ESPnet's "Sampling rates are mismatched" error re-raised with the utterance,
    its file, its rate and the fix.

    Args:
        dataset: ESPnet's ``ESPnetDataset``.
        utt2samples: samples per utterance from the shape file (the sampler's); the shape file is
            mono (``frontend: dynres`` refuses others before training), so one channel is expected.
        shape_file: the shape file's path (named in the message).
        fs_hz: the frontend's sampling rate.

    Raises (from ``__getitem__``):
        ValueError: a length or channel count other than the shape file's (stale shape file:
            rerun collect-stats), or a sampling rate other than ``fs_hz`` (named, with the fix).
    """

    def __init__(self, dataset, utt2samples: Dict[str, int], shape_file: str, fs_hz: int):
        self.dataset = dataset
        self.utt2samples = utt2samples
        self.shape_file = shape_file
        self.fs_hz = fs_hz
        self._first_uid: Optional[str] = None  # ESPnet checks every file's rate against the first one it read

    def _audio_path(self, uid: str) -> Optional[str]:
        loader = getattr(self.dataset, "loader_dict", {}).get("speech")
        table = getattr(getattr(loader, "loader", loader), "data", None)
        return table.get(uid) if isinstance(table, dict) else None

    def __getitem__(self, uid: str):
        try:
            uid, data = self.dataset[uid]
        except RuntimeError as e:
            if "Sampling rates are mismatched" not in str(e):
                raise
            path = self._audio_path(uid)
            for key in (uid, self._first_uid):  # this file, else the first one read set ESPnet's rate
                if key is not None and isinstance(self._audio_path(key), str):
                    check_audio_file(key, self._audio_path(key), fs_hz=self.fs_hz, mono=False)  # raises, naming it
            raise ValueError(
                f"utterance {uid} ({path}): {e} (ESPnet compares each file with the first one it read; the model "
                f"expects {self.fs_hz} Hz). Resample the data to one rate (recipe stage 3, --fs) and rerun "
                "collect-stats."
            ) from e
        if self._first_uid is None:
            self._first_uid = uid
        speech = data.get("speech")
        if speech is not None and uid in self.utt2samples:
            samples = int(speech.shape[0])
            channels = int(speech.shape[1]) if speech.ndim > 1 else 1
            want_samples, want_channels = self.utt2samples[uid], 1
            if (samples, channels) != (want_samples, want_channels):
                raise ValueError(
                    f"utterance {uid} ({self._audio_path(uid) or 'speech'}) has {samples} samples x {channels} "
                    f"channel(s), but the shape file {self.shape_file} says {want_samples} x {want_channels}: the "
                    "audio changed after collect-stats (re-cut, re-sampled or re-mixed), so batches were planned "
                    "for other lengths. Rerun collect-stats (asr.sh stage 10 / --collect_stats true) for this "
                    "data, then train again."
                )
        return uid, data

    def __len__(self) -> int:
        return len(self.dataset)


class PlannedBatchDataset(torch.utils.data.Dataset):
    """One item is one whole batch: a :class:`PlannedBatch` is loaded (each utterance checked,
    :class:`CheckedDataset`), collated by ESPnet's collate function and given its plan as the batch
    key ``batch_plan``, once, in one step.

    Args:
        dataset: the checked dataset.
        collate_fn: ESPnet's collate function (``CommonCollateFn``).
    """

    def __init__(self, dataset: CheckedDataset, collate_fn: Optional[Callable]):
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
        dataset: ESPnet's ``ESPnetDataset`` holding every utterance of the sampler.
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

    def checked_dataset(self) -> CheckedDataset:
        """The dataset, each item checked against the sampler's shape file (:class:`CheckedDataset`)."""
        return CheckedDataset(self.dataset, self.sampler.utt2samples, self.sampler.shape_files[0],
                              self.sampler.policy.fs)

    def build_iter(self, epoch: int, shuffle: Optional[bool] = None) -> DataLoader:
        batches = self.epoch_batches(epoch) if self.train else self.plan_batches(1)
        return DataLoader(
            PlannedBatchDataset(self.checked_dataset(), self.collate_fn),
            sampler=[b.shard(self.rank, self.world_size) for b in batches],
            batch_size=None,
            collate_fn=whole_batch,
            num_workers=self.num_workers,
            pin_memory=self.pin_memory,
            worker_init_fn=functools.partial(worker_init_fn, base_seed=epoch + self.seed),
        )
