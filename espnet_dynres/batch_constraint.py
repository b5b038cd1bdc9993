"""The one object that decides whether a dynres batch fits.

A batch of ``B`` utterances fits when (a) the :class:`~espnet_dynres.frame_rate_policy.FrameRatePolicy`
finds one frame count ``T`` for all of them inside the rate clamp (the batch rule), (b)
``B × T <= batch_bins`` (feature frames), (c) ``B <= max_batch_size`` and (d) ``T`` leaves every
member at least its CTC minimum (:func:`espnet_dynres.ctc_feasibility.training_min_frames`).

The sampler grows its batches with it (running totals: the policy's batch rule, then
:meth:`BatchConstraint.admits`), the audit counts the batches that break it (:meth:`BatchConstraint.admits`), and the frontend
applies it, without a budget, to a training batch that comes without a plan
(:meth:`BatchConstraint.batch_frame_counts`), so the three can never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from espnet_dynres.frame_rate_policy import FrameRatePolicy


@dataclass(frozen=True)
class BatchConstraint:
    """Rules (a)–(d) of the module docstring.

    Args:
        policy: the frame-rate policy shared with the frontend.
        batch_bins: frame budget ``B × T`` (feature frames); ``None``: no budget.
        max_batch_size: most utterances per batch; ``None``: no limit.

    Raises:
        ValueError: ``batch_bins < 1`` or ``max_batch_size < 1``.
    """

    policy: FrameRatePolicy
    batch_bins: Optional[int] = None
    max_batch_size: Optional[int] = None

    def __post_init__(self):
        if self.batch_bins is not None and self.batch_bins < 1:
            raise ValueError(f"batch_bins must be >= 1 frame, got {self.batch_bins}")
        if self.max_batch_size is not None and self.max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {self.max_batch_size}")

    def admits(self, num_frames: int, batch_size: int, min_frames: int = 1) -> bool:
        """Rules (b)–(d) for a batch of ``batch_size`` utterances at ``num_frames`` frames each, whose
        largest CTC minimum is ``min_frames``."""
        return (
            num_frames >= min_frames
            and (self.batch_bins is None or batch_size * num_frames <= self.batch_bins)
            and (self.max_batch_size is None or batch_size <= self.max_batch_size)
        )

    def frame_count(
        self, lo: int, hi: int, sum_standard_frames: int, batch_size: int, min_frames: int = 1,
        epoch: Optional[int] = None,
    ) -> Optional[int]:
        """The batch's ``T`` if it fits (rules (a)–(d)), else ``None``.

        Args:
            lo, hi: intersection of the members' frame-count ranges
                (:meth:`FrameRatePolicy.frame_count_ranges`).
            sum_standard_frames: their summed standard frame counts.
            batch_size: ``B``.
            min_frames: the members' largest CTC minimum (feature frames).
            epoch: 1-based epoch for the resolution curriculum; ``None`` = none.
        """
        if lo > hi:
            return None
        t = self.policy.pick_frame_count(lo, hi, sum_standard_frames, batch_size, epoch)
        return t if t is not None and self.admits(t, batch_size, min_frames) else None

    def batch_frame_counts(self, num_samples: Sequence[int], epoch: Optional[int] = None) -> Tuple[List[int], bool]:
        """Frames per utterance for a whole training batch, and whether it is a *fallback batch*.

        Rules 1–3 of :mod:`espnet_dynres.frame_rate_policy`: one common ``T`` that fits, with the
        clamp's lower limit at ``min_frame_rate_hz``, else relaxed to ``fallback_frame_rate_hz``;
        if none fits, every utterance at its standard frame count (``True``: computed at the
        standard rate and zero-padded to the longest).

        Args:
            num_samples: samples per utterance (``B`` values, at least one).
            epoch: as in :meth:`frame_count`.

        Raises:
            ValueError: an empty batch.
        """
        if len(num_samples) == 0:
            raise ValueError("batch_frame_counts needs at least one utterance")
        policy = self.policy
        standard = policy.standard_frame_counts(num_samples)
        for low_rate in (policy.min_frame_rate_hz, policy.fallback_frame_rate_hz):
            lo, hi = policy.frame_count_ranges(num_samples, low_rate)
            t = self.frame_count(int(lo.max()), int(hi.min()), int(standard.sum()), len(num_samples), epoch=epoch)
            if t is not None:
                return [t] * len(num_samples), False
        return [int(n) for n in standard], True
