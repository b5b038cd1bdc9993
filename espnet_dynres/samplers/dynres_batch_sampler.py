"""``batch_type: dynres`` — batches of utterances that share one frame count, redrawn every epoch."""

from __future__ import annotations

import logging
import math
from typing import Dict, Iterator, List, Optional, Sequence, Set, Tuple

import numpy as np
from typeguard import typechecked

from espnet2.samplers.abs_sampler import AbsSampler

from espnet_dynres.core.batch_planner import BatchKind, BatchPlan, BatchPlanner, PlannedBatch
from espnet_dynres.core.frame_rate_policy import FrameRatePolicy
from espnet_dynres.core.readers import read_speech_lengths

OVERSIZED_ACTIONS = ("warn", "error")
SHOWN_OVERSIZED = 5  # oversized utterances named in the plan's summary line (the count is always given)


class DynResBatchSampler(AbsSampler):
    """Groups utterances by duration into batches that share one frame count.

    Epoch ``e`` (1-based) sorts utterances by ``log(samples) + u``, ``u ~ Uniform(0, shuffle_jitter × log(max_rate /
    min_rate))`` from ``default_rng([seed, e])``; :attr:`planner` (the batch rules, a
    :class:`~espnet_dynres.core.batch_planner.BatchPlanner`) groups and plans them, each utterance in one batch.

    Args:
        batch_bins: frame budget per batch, ``B × T`` feature frames (under DDP the global budget).
        shape_files, policy: ESPnet shape files (the first gives samples); the ``dynres`` frontend's policy.
        min_batch_size, max_batch_size: smallest (the world size under DDP) and largest batch (``None``: no limit).
        sort_in_batch, sort_batch: "ascending" or "descending" (batches: when ``shuffle`` is False).
        drop_last, utt2min_frames: must be False; optional fewest feature frames per utterance (the CTC minimum).
        seed, shuffle: ESPnet's ``--seed``; redraw batches every epoch (training) or not (validation).
        shuffle_jitter: width of ``u`` as a fraction of ``log(max_rate / min_rate)`` (0 = sorted).
        oversized, batch_fill: "warn"/"error" for an utterance over ``batch_bins`` alone; "below"/"nearest".

    Raises:
        ValueError: ``batch_bins < 1``, ``max_batch_size < min_batch_size``, ``drop_last=True``, bad sort/oversized/
            batch_fill options, a negative jitter, an oversized utterance with ``oversized="error"`` (named, with fix).
        RuntimeError: unreadable or inconsistent shape files.
    """

    @typechecked
    def __init__(self, batch_bins: int, shape_files: Sequence[str], policy: FrameRatePolicy, min_batch_size: int = 1,
                 max_batch_size: Optional[int] = None, sort_in_batch: str = "descending", sort_batch: str = "ascending",
                 drop_last: bool = False, utt2min_frames: Optional[Dict[str, int]] = None, seed: int = 0,
                 shuffle: bool = True, shuffle_jitter: float = 0.5, oversized: str = "warn", batch_fill: str = "below"):
        if drop_last:
            raise ValueError("batch_type dynres never drops utterances: set drop_last_iter false")
        for name, value in (("sort_in_batch", sort_in_batch), ("sort_batch", sort_batch)):
            if value not in ("ascending", "descending"):
                raise ValueError(f"{name} must be ascending or descending, got {value!r}")
        if oversized not in OVERSIZED_ACTIONS:
            raise ValueError(f"oversized must be one of {OVERSIZED_ACTIONS}, got {oversized!r}")
        if shuffle_jitter < 0:
            raise ValueError(f"shuffle_jitter must be >= 0, got {shuffle_jitter}")
        self.min_batch_size = max(1, min_batch_size)
        if max_batch_size is not None and max_batch_size < self.min_batch_size:
            raise ValueError(f"max_batch_size={max_batch_size} is below min_batch_size={self.min_batch_size} "
                             "(the world size under DDP); raise max_batch_size.")
        self.batch_bins = batch_bins
        self.max_batch_size = max_batch_size
        self.shape_files = list(shape_files)
        self.policy = policy
        self.sort_in_batch = sort_in_batch
        self.sort_batch = sort_batch
        self.seed = seed
        self.shuffle = shuffle
        self.shuffle_jitter = shuffle_jitter
        self.oversized = oversized
        self.batch_fill = batch_fill
        self.epoch = 1
        self._arguments = dict(
            shape_files=self.shape_files, policy=policy, min_batch_size=min_batch_size, max_batch_size=max_batch_size,
            sort_in_batch=sort_in_batch, sort_batch=sort_batch, utt2min_frames=utt2min_frames, seed=seed,
            shuffle=shuffle, shuffle_jitter=shuffle_jitter, batch_fill=batch_fill)
        self.utt2samples = read_speech_lengths(self.shape_files)
        self.keys: List[str] = list(self.utt2samples)
        samples = np.fromiter(self.utt2samples.values(), dtype=np.int64, count=len(self.keys))
        self._samples = samples.tolist()
        self._samples_arr = samples
        min_frames = None if utt2min_frames is None else [int(utt2min_frames.get(k, 1)) for k in self.keys]
        self.planner = BatchPlanner(policy, samples, min_frames, batch_bins, max_batch_size, batch_fill,
                                    evaluation=not shuffle)
        self._log_samples = np.log(np.maximum(samples, 1).astype(np.float64))
        self._sorted = np.lexsort((np.arange(len(samples)), samples))  # by length, then file order
        self._cache: Dict[int, List[PlannedBatch]] = {}
        self._warned: Set[str] = set()
        self._pending: Dict[str, str] = {}  # oversized utterances of the plan being built -> their message
        self._below_clamp: Dict[int, int] = {}  # epoch -> utterances planned below the clamp
        self._logged_below_clamp: Optional[int] = None
        self.min_batch_bins_in_clamp = self.planner.min_batch_bins_in_clamp(self.min_batch_size)
        self._plan(1)  # validate (oversized="error") at build time

    def with_batch_bins(self, batch_bins: int) -> "DynResBatchSampler":
        """This sampler with another ``batch_bins`` and ``oversized="warn"`` (for budget searches)."""
        return DynResBatchSampler(batch_bins=batch_bins, oversized="warn", **self._arguments)

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch that ``__iter__`` / ``__len__`` refer to (1-based)."""
        self.epoch = int(epoch)

    def planned_batches(self, epoch: int) -> List[PlannedBatch]:
        """The batches of ``epoch`` (by ``seed``): ids and :class:`~espnet_dynres.core.batch_planner.BatchPlan`."""
        return list(self._plan(epoch))

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(N-batch={len(self)} (epoch {self.epoch}), batch_bins={self.batch_bins}, "
                f"frame rates {self.policy.min_frame_rate_hz:g}-{self.policy.max_frame_rate_hz:g} Hz, "
                f"shuffle={self.shuffle}, padded batches="
                f"{sum(b.plan.kind is BatchKind.PADDED for b in self._plan(self.epoch))}, "
                f"below_clamp={self._below_clamp[self.epoch]} utterances)")

    def __len__(self) -> int:
        return len(self._plan(self.epoch))

    def __iter__(self) -> Iterator[Tuple[str, ...]]:
        """The utterance ids of each batch of the epoch set with :meth:`set_epoch`."""
        return iter([b.keys for b in self._plan(self.epoch)])

    def _order(self, epoch: int) -> np.ndarray:
        if not self.shuffle or self.shuffle_jitter == 0:
            return self._sorted
        rng = np.random.default_rng([self.seed, epoch])
        width = self.shuffle_jitter * math.log(self.policy.max_frame_rate_hz / self.policy.min_frame_rate_hz)
        key = self._log_samples + rng.uniform(0.0, width, size=len(self._log_samples))
        return np.lexsort((np.arange(len(key)), key))

    def _name_oversized_valid(self, batch: List[int], plan: BatchPlan) -> None:
        t = plan.num_frames
        if len(batch) == 1 and t > self.batch_bins:
            key = self.keys[batch[0]]
            self._report_oversized(
                key,
                f"validation utterance {key} ({self._samples[batch[0]] / self.policy.fs:.1f} s) needs {t} frames at "
                f"the standard rate, more than valid_batch_bins={self.batch_bins}",
                "raise valid_batch_bins, split the recording, or set oversized: warn.")

    def _sort_members(self, groups: List[List[int]]) -> List[List[int]]:
        sizes = np.array([len(g) for g in groups], dtype=np.int64)
        flat = np.fromiter((i for g in groups for i in g), dtype=np.int64, count=int(sizes.sum()))
        gid = np.repeat(np.arange(len(groups)), sizes)
        flat = flat[np.lexsort((flat, self._samples_arr[flat], gid))]
        bounds = np.cumsum(sizes).tolist()
        flat_list = flat.tolist()
        return [flat_list[a:b] for a, b in zip([0] + bounds[:-1], bounds)]

    def _name_oversized(self, batch: List[int], t: int) -> None:
        fallback_lo = self.planner.lowest_at_fallback
        i = max(batch, key=lambda j: (int(fallback_lo[j]), self._samples[j]))
        key = self.keys[i]
        lowest = self.planner.lowest_frames(i)
        if len(batch) == 1:
            message = (f"utterance {key} ({self._samples[i] / self.policy.fs:.1f} s) needs {lowest} frames even at "
                       f"{self.policy.fallback_frame_rate_hz:g} Hz, more than batch_bins={self.batch_bins}")
        else:
            message = (f"utterance {key} ({self._samples[i] / self.policy.fs:.1f} s) needs {lowest} frames even at "
                       f"{self.policy.fallback_frame_rate_hz:g} Hz; in a batch of {len(batch)} (min_batch_size "
                       f"{self.min_batch_size}, the world size under DDP) that is {len(batch)} x {t} frames, more than "
                       f"batch_bins={self.batch_bins}")
        self._report_oversized(key, message, "raise batch_bins, split the recording, or set oversized: warn.")

    def _report_oversized(self, key: str, message: str, error_fix: str) -> None:
        if self.oversized == "error":
            raise ValueError(f"{message}; {error_fix}")
        self._pending.setdefault(key, message)

    def _summarize(self, epoch: int, below_clamp: int) -> None:
        pending, self._pending = self._pending, {}
        new = [k for k in pending if k not in self._warned]
        self._warned.update(new)
        if not new and below_clamp == self._logged_below_clamp:
            return
        self._logged_below_clamp = below_clamp
        if not new and below_clamp == 0:
            return
        budget = "valid_batch_bins" if not self.shuffle else "batch_bins"
        parts = [f"batch_type dynres, {budget}={self.batch_bins}, epoch {epoch}:"]
        if self.shuffle:
            parts.append(
                f"{below_clamp} of {len(self.keys)} utterances planned below the clamp (below_clamp: under "
                f"min_frame_rate_hz={self.policy.min_frame_rate_hz:g}, down to fallback_frame_rate_hz="
                f"{self.policy.fallback_frame_rate_hz:g} Hz); the smallest batch_bins that keeps every utterance "
                f"inside the clamp is {self.min_batch_bins_in_clamp}.")
        if new:
            shown = "; ".join(pending[k] for k in new[:SHOWN_OVERSIZED])
            more = f"; and {len(new) - SHOWN_OVERSIZED} more" if len(new) > SHOWN_OVERSIZED else ""
            parts.append(
                f"{len(new)} utterance(s) are over {budget} even at their lowest rate and are computed at it, each "
                f"in a batch of its own (or of min_batch_size under DDP) (raise "
                f"{budget} or split the recordings; oversized: error refuses them): {shown}{more}.")
            logging.warning(" ".join(parts))
        else:
            logging.info(" ".join(parts))

    def _plan(self, epoch: int):
        epoch = int(epoch)
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch}")
        if epoch in self._cache:
            return self._cache[epoch]
        if self.shuffle:
            rates = self.policy.batch_target_rates_hz(self.seed, epoch, len(self.keys) + 1)
            groups = self._sort_members(self.planner.group(self._order(epoch).tolist(), self.min_batch_size, rates))
            plans = self.planner.plan_groups(groups, epoch, None if rates is None else rates[: len(groups)].tolist())
            for g, plan in zip(groups, plans):
                if plan.cost_frames > self.batch_bins:
                    self._name_oversized(g, max(plan.frames))
        else:  # validation: computed at the standard rate, padded to the longest (the frontend's eval mode)
            groups = self._sort_members(self.planner.group(self._sorted.tolist(), self.min_batch_size))
            plans = self.planner.plan_groups(groups)
            for g, plan in zip(groups, plans):
                self._name_oversized_valid(g, plan)
        if self.shuffle:
            perm = np.random.default_rng([self.seed, epoch, 1]).permutation(len(groups)).tolist()
        else:
            perm = list(range(len(groups)))
            if self.sort_batch == "descending":
                perm.reverse()
        step = -1 if self.sort_in_batch == "descending" else 1
        batches = [PlannedBatch(tuple(self.keys[i] for i in groups[j][::step]),
                                BatchPlan(tuple(plans[j].frames[::step]), plans[j].kind)) for j in perm]
        if self.shuffle:
            flat = [i for g in groups for i in g]
            flat_frames = [c for p in plans for c in p.frames]
            below = int(self.policy.below_clamp(self._samples_arr[flat], flat_frames).sum()) if flat else 0
        else:
            below = 0  # validation: every utterance at the standard rate
        self._below_clamp[epoch] = below
        self._summarize(epoch, below)
        if len(self._cache) >= 4:
            self._cache.pop(next(iter(self._cache)))
        self._cache[epoch] = batches
        return batches
