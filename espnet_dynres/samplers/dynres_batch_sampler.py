"""``batch_type: dynres`` — batches of utterances that share one frame count."""

from __future__ import annotations

import logging
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from typeguard import typechecked

from espnet2.fileio.read_text import load_num_sequence_text
from espnet2.samplers.abs_sampler import AbsSampler

from espnet_dynres.frame_rate_policy import FrameRatePolicy


def read_speech_lengths(shape_files: Sequence[str]) -> Dict[str, int]:
    """Samples per utterance from the first ESPnet shape file (``utt_id N[,C]``).

    All shape files must list the same utterances.

    Raises:
        RuntimeError: empty shape file, or keys differing between shape files
            (the message names up to 5 keys missing from each side).
    """
    if len(shape_files) == 0:
        raise RuntimeError("batch_type dynres needs at least one shape file (speech_shape)")
    shapes = [load_num_sequence_text(s, loader_type="csv_int") for s in shape_files]
    first = shapes[0]
    if len(first) == 0:
        raise RuntimeError(f"0 lines found in shape file {shape_files[0]}")
    for path, d in zip(shape_files[1:], shapes[1:]):
        if set(d) != set(first):
            missing = sorted(set(first) - set(d))[:5]
            extra = sorted(set(d) - set(first))[:5]
            raise RuntimeError(
                f"shape files disagree: {path} lacks {missing} and has extra {extra} "
                f"compared with {shape_files[0]}; re-run collect-stats (stage 10) for this data dir."
            )
    return {k: int(v[0]) for k, v in first.items()}


class DynResBatchSampler(AbsSampler):
    """Groups utterances by duration into batches that share one frame count.

    Utterances are sorted by length (samples, from the speech shape file) and
    taken in order; an utterance joins the current batch while
    (a) the :class:`FrameRatePolicy` still finds one frame count ``T`` for the
    whole batch inside the rate clamp and (b) ``batch_size × T <= batch_bins``
    (feature frames after resampling, so ``batch_bins`` is a frame budget, not
    samples × dims as with ``numel``) and (c) ``T`` leaves every member at least
    its ``utt2min_frames`` (CTC safety: the frames its transcript needs after
    the encoder's subsampling, never more than its standard frame count).
    A batch is only closed once it holds ``min_batch_size`` utterances;
    leftovers too few for a batch join the previous one.  Such forced batches
    follow the policy's fallback rules (:meth:`FrameRatePolicy.batch_frame_counts`);
    ``num_fallback_batches`` counts those padded at the standard rate.  An
    utterance that alone exceeds ``batch_bins`` gets a batch of its own and a
    warning naming it.  Every utterance is in exactly one batch.

    Args:
        batch_bins: frame budget per batch, ``B × T`` (feature frames).
        shape_files: ESPnet shape files; the first gives samples per utterance.
        policy: the frame-rate policy shared with the ``dynres`` frontend.
        min_batch_size: smallest batch (ESPnet passes the world size under DDP).
        sort_in_batch: "descending" (ESPnet's default) or "ascending".
        sort_batch: "ascending" or "descending" order of batches by length.
        drop_last: accepted for ESPnet compatibility; must be False (no
            utterance is dropped).
        utt2min_frames: optional fewest feature frames per utterance (CTC
            safety, see :func:`espnet_dynres.ctc_feasibility.min_feature_frames`).

    Raises:
        ValueError: ``batch_bins < 1``, ``drop_last=True`` or bad sort options.
        RuntimeError: unreadable or inconsistent shape files.
    """

    @typechecked
    def __init__(
        self,
        batch_bins: int,
        shape_files: Sequence[str],
        policy: FrameRatePolicy,
        min_batch_size: int = 1,
        sort_in_batch: str = "descending",
        sort_batch: str = "ascending",
        drop_last: bool = False,
        utt2min_frames: Optional[Dict[str, int]] = None,
    ):
        if batch_bins < 1:
            raise ValueError(f"batch_bins must be >= 1 frame, got {batch_bins}")
        if drop_last:
            raise ValueError("batch_type dynres never drops utterances: set drop_last_iter false")
        for name, value in (("sort_in_batch", sort_in_batch), ("sort_batch", sort_batch)):
            if value not in ("ascending", "descending"):
                raise ValueError(f"{name} must be ascending or descending, got {value!r}")
        self.batch_bins = batch_bins
        self.shape_files = list(shape_files)
        self.policy = policy
        self.min_batch_size = max(1, min_batch_size)
        self.sort_in_batch = sort_in_batch
        self.sort_batch = sort_batch

        self.utt2samples = read_speech_lengths(self.shape_files)
        self.utt2min_frames = {
            k: min(int((utt2min_frames or {}).get(k, 1)), policy.standard_frame_count(n))
            for k, n in self.utt2samples.items()
        }
        self.batch_list, self.batch_frames = self._plan(self.utt2samples)
        self.num_fallback_batches = sum(t is None for t in self.batch_frames)

    def _plan(self, utt2samples: Dict[str, int]) -> Tuple[List[Tuple[str, ...]], List]:
        keys = sorted(utt2samples, key=lambda k: (utt2samples[k], k))
        batches: List[List[str]] = []
        current: List[str] = []
        lo, hi, total_std = 1, None, 0
        need = 0  # largest utt2min_frames in the current batch
        for key in keys:
            n = utt2samples[key]
            u_lo, u_hi = self.policy.frame_count_range(n)
            if current:
                size = len(current) + 1
                t = self.policy.pick_frame_count(
                    max(lo, u_lo), min(hi, u_hi), total_std + self.policy.standard_frame_count(n), size
                )
                fits = (
                    t is not None
                    and size * t <= self.batch_bins
                    and t >= max(need, self.utt2min_frames[key])
                )
                if not fits and len(current) >= self.min_batch_size:
                    batches.append(current)
                    current, lo, hi, total_std, need = [], 1, None, 0, 0
            current.append(key)
            lo = max(lo, u_lo)
            hi = u_hi if hi is None else min(hi, u_hi)
            total_std += self.policy.standard_frame_count(n)
            need = max(need, self.utt2min_frames[key])
        if current:
            if batches and len(current) < self.min_batch_size:
                batches[-1].extend(current)  # too few left for a batch of their own
            else:
                batches.append(current)

        frames: List = []
        for batch in batches:
            counts, fallback = self.policy.batch_frame_counts([utt2samples[k] for k in batch])
            t = None if fallback else counts[0]
            if len(batch) == 1 and t > self.batch_bins:
                logging.warning(
                    f"utterance {batch[0]} alone needs {t} frames > batch_bins={self.batch_bins}; "
                    "it gets a batch of its own (raise batch_bins or split the recording)."
                )
            frames.append(t)

        if self.sort_in_batch == "descending":
            batches = [b[::-1] for b in batches]
        if self.sort_batch == "descending":
            batches.reverse()
            frames.reverse()
        return [tuple(b) for b in batches], frames

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}(N-batch={len(self)}, batch_bins={self.batch_bins}, "
            f"frame rates {self.policy.min_frame_rate_hz:g}-{self.policy.max_frame_rate_hz:g} Hz, "
            f"fallback batches={self.num_fallback_batches})"
        )

    def __len__(self) -> int:
        return len(self.batch_list)

    def __iter__(self) -> Iterator[Tuple[str, ...]]:
        return iter(self.batch_list)
