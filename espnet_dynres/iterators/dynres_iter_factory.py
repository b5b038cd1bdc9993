"""Iterator factory for ``batch_type: dynres``: a fresh batch plan every epoch, sharded for DDP."""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch.utils.data import DataLoader

from espnet2.iterators.abs_iter_factory import AbsIterFactory
from espnet2.iterators.sequence_iter_factory import worker_init_fn

from espnet_dynres.glue.data_checks import check_audio_file
from espnet_dynres.samplers.dynres_batch_sampler import DynResBatchSampler

# Batch key of the sampler's plan, (B,) int64 feature frames per utterance; the name of the
# speech_frames argument of DynResASRModel.forward (ESPnet passes batch keys as keyword arguments).
SPEECH_FRAMES_KEY = "speech_frames"
PlannedItem = Tuple[str, int]  # (utterance id, planned feature frames)


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


class PlannedFramesDataset(torch.utils.data.Dataset):
    """Wraps a dataset: item ``(uid, frames)`` → ``(uid, data)`` with the plan in ``data``."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __getitem__(self, item: PlannedItem):
        uid, frames = item
        uid, data = self.dataset[uid]
        data = dict(data)
        data[SPEECH_FRAMES_KEY] = int(frames)
        return uid, data

    def __len__(self) -> int:
        return len(self.dataset)


class PlannedFramesCollate:
    """ESPnet's collate function, plus the batch key ``speech_frames`` ``(B,)`` int64."""

    def __init__(self, collate_fn: Optional[Callable]):
        self.collate_fn = collate_fn

    def __call__(self, items: Sequence[Tuple[str, Dict[str, Any]]]):
        frames = [data[SPEECH_FRAMES_KEY] for _, data in items]
        items = [(uid, {k: v for k, v in data.items() if k != SPEECH_FRAMES_KEY}) for uid, data in items]
        if self.collate_fn is None:
            raise ValueError("the dynres iterator needs ESPnet's collate function (CommonCollateFn)")
        uids, batch = self.collate_fn(items)
        batch[SPEECH_FRAMES_KEY] = torch.tensor(frames, dtype=torch.long)
        return uids, batch


class DynResIterFactory(AbsIterFactory):
    """Builds each epoch's ``DataLoader`` from the sampler's plan for that epoch.

    * Training (``train=True``): epoch ``e`` uses
      :meth:`DynResBatchSampler.batches_for_epoch` ``(e)`` — new composition and
      order, deterministic in ``(seed, e)``, so ``--resume true`` rebuilds the
      same epoch.  Every item carries its planned frame count, which reaches the
      model as batch key ``speech_frames`` ``(B,)`` int64; the plan already holds
      the epoch's resolution curriculum, so nothing else needs the epoch.
    * With ``num_iters_per_epoch = n``: the epochs' plans are concatenated into
      one stream (plan 1, plan 2, ...) and epoch ``e`` takes stream items
      ``(e - 1) n`` to ``e n - 1``; every utterance is still seen exactly once per
      plan.
    * Validation (``train=False``): the sampler's fixed sorted batches, no plan
      key (the frontend runs at the standard rate in eval mode).
    * DDP: every batch is split ``batch[rank::world_size]`` (the sampler gives
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

    def plan_items(self, plan: int) -> List[List[PlannedItem]]:
        """Global batches of plan ``plan`` as ``(uid, frames)`` items, before sharding."""
        batches = self.sampler.batches_for_epoch(plan)
        frames = self.sampler.utt_frames_for_epoch(plan)
        items = [list(zip(b, f)) for b, f in zip(batches, frames)]
        return items if self.num_batches is None else items[: self.num_batches]

    def epoch_items(self, epoch: int) -> List[List[PlannedItem]]:
        """The global batches of training epoch ``epoch`` (1-based), before sharding."""
        n = self.num_iters_per_epoch
        if n is None:
            return self.plan_items(epoch)
        start, plan, out = (epoch - 1) * n, 1, []
        items = self.plan_items(plan)
        if not items:
            raise ValueError("the dynres sampler planned no batches (num_batches 0 or no utterances)")
        while start >= len(items):  # skip whole plans before this epoch's first item
            start -= len(items)
            plan += 1
            items = self.plan_items(plan)
        while len(out) < n:
            take = items[start : start + n - len(out)]
            out.extend(take)
            start = 0
            plan += 1
            items = self.plan_items(plan)
        return out

    def checked_dataset(self) -> CheckedDataset:
        """The dataset, each item checked against the sampler's shape file (:class:`CheckedDataset`)."""
        return CheckedDataset(self.dataset, self.sampler.utt2samples, self.sampler.shape_files[0],
                              self.sampler.policy.fs)

    def build_iter(self, epoch: int, shuffle: Optional[bool] = None) -> DataLoader:
        dataset = self.checked_dataset()
        common = dict(
            num_workers=self.num_workers,
            pin_memory=self.pin_memory,
            worker_init_fn=functools.partial(worker_init_fn, base_seed=epoch + self.seed),
        )
        if not self.train:
            batches = self.sampler.batches_for_epoch(1)
            if self.num_batches is not None:
                batches = batches[: self.num_batches]
            batches = [list(b[self.rank :: self.world_size]) for b in batches]
            return DataLoader(dataset, batch_sampler=batches, collate_fn=self.collate_fn, **common)
        batches = [b[self.rank :: self.world_size] for b in self.epoch_items(epoch)]
        return DataLoader(
            PlannedFramesDataset(dataset),
            batch_sampler=batches,
            collate_fn=PlannedFramesCollate(self.collate_fn),
            **common,
        )
