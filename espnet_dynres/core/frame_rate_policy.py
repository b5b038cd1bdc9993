"""The one object that decides frame counts and frame rates.

Both the ``dynres`` batch sampler (planning batches from shape files) and the
``dynres`` frontend (computing features) call this policy, so the frame count a
batch was planned for is the frame count it gets.

Conventions (as ESPnet's ``Stft`` with ``center=True`` and an even ``n_fft``):

* an utterance of ``L`` samples analysed with a frame shift of ``h`` samples has
  ``1 + floor(L / h)`` frames, frame ``t`` centred on sample ``t * h``;
* the standard frame rate is ``fs / hop_length`` Hz (16 kHz / 160 = 100 Hz,
  8 kHz / 80 = 100 Hz), so the standard frame count is ``1 + L // hop_length``;
* a frame rate ``r`` Hz means a frame shift of ``fs / r`` samples: rates are
  rates at any ``fs``, shifts are samples.

Frame count ``T`` is what a frame shift ``h`` in ``(L / T, L / (T - 1)]`` gives
(``T - 1 <= L / h < T``: first centre at sample 0, last centre no later than
sample ``L``, the uncovered tail shorter than one shift).  Intersecting that
interval with the allowed shifts ``[fs / max_rate, fs / min_rate]`` gives the
frame counts an utterance may take — exactly the frame counts at the two clamp
rates::

    1 + floor(L * min_rate / fs)  <=  T  <=  1 + floor(L * max_rate / fs)

Inside the allowed interval the policy takes the frame shift closest to the
standard ``hop_length``, so an utterance whose ``T`` equals its standard frame
count is analysed exactly as ESPnet's ``DefaultFrontend`` would.

The batch rule (:meth:`FrameRatePolicy.pick_frame_count`):
``T`` = the mean of the utterances' standard frame counts times ``target_frame_rate_hz / standard
rate`` (1 by default: the mean standard frame count), rounded, clipped into the intersection of
their ranges at ``[min_frame_rate_hz, max_frame_rate_hz]``; every utterance gets ``T``.  A target
below the standard rate makes the batch cost fewer encoder frames (``target / standard`` of them
when no clip applies).  What happens when that intersection is empty, the budget, the CTC minimum
and padding are the planner's (:mod:`espnet_dynres.core.batch_planner`), the one place that
plans a batch.

Optional drawn target rate (``target_frame_rate_range_hz = (lo, hi)``): each training batch
aims at its own target rate, drawn uniformly from ``[lo, hi]`` Hz by
:meth:`FrameRatePolicy.batch_target_rates_hz` (deterministic in seed and epoch), in place of
``target_frame_rate_hz`` in rule 1, so the rate a batch gets does not follow its utterances'
durations.  Only the ``dynres`` sampler's plan carries the draws.

Optional resolution curriculum (``curriculum_epochs = N > 0``): in epoch ``e``
(1-based) ``T`` moves from the lowest common frame count (lowest rates) at
``e = 1`` linearly to the rule above from ``e = N + 1`` on.  It never exceeds
the rule's ``T``, so the sampler's frame budget holds in every epoch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple, Union

import humanfriendly
import numpy as np
import torch


def standard_frame_counts(num_samples, hop_length: int):
    """``1 + L // hop_length``: the frames ESPnet's ``Stft(center=True)`` gives ``L`` samples.

    The one implementation of the standard frame count (the policy, the sampler and the
    batch audit call it).

    Args:
        num_samples: ``(N,)`` int samples per utterance (array-like).
        hop_length: frame shift in samples.

    Returns:
        ``(N,)`` int64 frames (numpy).
    """
    return 1 + np.asarray(num_samples, dtype=np.int64) // int(hop_length)


def parse_fs(fs: Union[int, str]) -> int:
    """Sampling rate in Hz from an int or an ESPnet-style string ("16k", "8000")."""
    value = humanfriendly.parse_size(fs) if isinstance(fs, str) else fs
    if not isinstance(value, int) or value <= 0:
        raise ValueError(f"fs must be a positive sampling rate in Hz (e.g. 16000 or '16k'), got {fs!r}")
    return value


# The clamp's defaults, as multiples of the standard rate fs / hop_length (70, 130 and 50 Hz at 100 Hz).
DEFAULT_CLAMP_RATIOS = {"min_frame_rate_hz": 0.7, "max_frame_rate_hz": 1.3, "fallback_frame_rate_hz": 0.5}


@dataclass(frozen=True)
class FrameRatePolicy:
    """Frame counts and frame rates for dynamic-resolution batches.

    Args:
        fs: sampling rate of the input waveform in Hz (e.g. 16000 or "16k"); no default: the
            frontend's (:class:`~espnet_dynres.core.frontend_config.FrontendConfig`, the one defaults table).
        hop_length: standard frame shift in samples (160 at 16 kHz = 100 Hz); no default, as ``fs``.
        min_frame_rate_hz: lowest frame rate of the clamp (Hz); ``None``: 0.7 × the standard rate.
        max_frame_rate_hz: highest frame rate an utterance may be given (Hz); ``None``: 1.3 × it.
        fallback_frame_rate_hz: lowest rate a batch without a common frame count in the clamp
            may be lowered to (:mod:`~espnet_dynres.core.batch_planner`) (Hz); ``None``: 0.5 × it.
        curriculum_epochs: length of the optional low-rate-first schedule in
            epochs (0 = off).
        target_frame_rate_hz: mean frame rate the batch rule aims at (Hz);
            ``None`` = the standard rate ``fs / hop_length`` (the batch's mean
            standard frame count).  Must lie in ``[min_frame_rate_hz,
            max_frame_rate_hz]``.
        eval_frame_rate_hz: the fixed frame rate of every pass outside a
            training step (validation, the BatchNorm re-estimate, decoding,
            collect-stats) (Hz); ``None`` = the standard rate.  Must lie in
            ``[min_frame_rate_hz, max_frame_rate_hz]``.
        target_frame_rate_range_hz: ``(lo, hi)`` Hz: each training batch of the
            sampler's plan aims at a target rate drawn uniformly from it
            (:meth:`batch_target_rates_hz`) instead of ``target_frame_rate_hz``;
            ``None`` = off.  Inside ``[min_frame_rate_hz, max_frame_rate_hz]``,
            ``lo <= hi``, and not together with ``target_frame_rate_hz``.

    Raises:
        ValueError: non-positive values, ``min_frame_rate_hz`` above the
            standard rate, ``max_frame_rate_hz`` below it or above ``fs``,
            ``fallback_frame_rate_hz`` above ``min_frame_rate_hz``, a negative
            ``curriculum_epochs`` or a ``target_frame_rate_hz``,
            ``eval_frame_rate_hz`` or ``target_frame_rate_range_hz`` outside the clamp
            (or a range given with ``target_frame_rate_hz``); the message names the key to fix.
    """

    fs: int
    hop_length: int
    min_frame_rate_hz: Optional[float] = None
    max_frame_rate_hz: Optional[float] = None
    fallback_frame_rate_hz: Optional[float] = None
    curriculum_epochs: int = 0
    target_frame_rate_hz: Optional[float] = None
    eval_frame_rate_hz: Optional[float] = None
    target_frame_rate_range_hz: Optional[Tuple[float, float]] = None

    def __post_init__(self):
        object.__setattr__(self, "fs", parse_fs(self.fs))
        if not isinstance(self.hop_length, int) or self.hop_length <= 0:
            raise ValueError(f"hop_length must be a positive number of samples, got {self.hop_length}")
        std = self.standard_frame_rate_hz
        for key, ratio in DEFAULT_CLAMP_RATIOS.items():  # the clamp's defaults, relative to the standard rate
            value = getattr(self, key)
            object.__setattr__(self, key, float(ratio * std if value is None else value))
        if not 0 < self.min_frame_rate_hz <= std <= self.max_frame_rate_hz:
            raise ValueError(
                "frame-rate clamp must satisfy 0 < min_frame_rate_hz <= standard rate <= "
                f"max_frame_rate_hz; got min_frame_rate_hz={self.min_frame_rate_hz}, "
                f"standard rate={std:g} Hz (fs={self.fs} / hop_length={self.hop_length}), "
                f"max_frame_rate_hz={self.max_frame_rate_hz}. Fix frontend_conf."
            )
        if self.max_frame_rate_hz > self.fs:
            raise ValueError(
                f"max_frame_rate_hz={self.max_frame_rate_hz} exceeds fs={self.fs}: "
                "a frame shift cannot be shorter than one sample."
            )
        if not 0 < self.fallback_frame_rate_hz <= self.min_frame_rate_hz:
            raise ValueError(
                f"fallback_frame_rate_hz={self.fallback_frame_rate_hz} must be in "
                f"(0, min_frame_rate_hz={self.min_frame_rate_hz}]. Fix frontend_conf."
            )
        if self.curriculum_epochs < 0:
            raise ValueError(f"curriculum_epochs must be >= 0, got {self.curriculum_epochs}")
        for key in ("target_frame_rate_hz", "eval_frame_rate_hz"):
            value = getattr(self, key)
            if value is not None and not self.min_frame_rate_hz <= value <= self.max_frame_rate_hz:
                raise ValueError(
                    f"{key}={value} must lie in [min_frame_rate_hz={self.min_frame_rate_hz}, max_frame_rate_hz="
                    f"{self.max_frame_rate_hz}] (or be null for the standard rate). Fix frontend_conf."
                )
        if self.target_frame_rate_range_hz is not None:
            rng = self.target_frame_rate_range_hz
            if isinstance(rng, (int, float, str)) or len(rng) != 2:
                raise ValueError(f"target_frame_rate_range_hz must be two rates [lo, hi] in Hz, got {rng!r}. "
                                 "Fix frontend_conf.")
            lo, hi = float(rng[0]), float(rng[1])
            if not self.min_frame_rate_hz <= lo <= hi <= self.max_frame_rate_hz:
                raise ValueError(
                    f"target_frame_rate_range_hz=[{lo:g}, {hi:g}] must satisfy min_frame_rate_hz="
                    f"{self.min_frame_rate_hz:g} <= lo <= hi <= max_frame_rate_hz={self.max_frame_rate_hz:g}. "
                    "Fix frontend_conf."
                )
            if self.target_frame_rate_hz is not None:
                raise ValueError(
                    f"target_frame_rate_hz={self.target_frame_rate_hz:g} and target_frame_rate_range_hz=[{lo:g}, "
                    f"{hi:g}] both set the batches' target rate; keep one of them in frontend_conf."
                )
            object.__setattr__(self, "target_frame_rate_range_hz", (lo, hi))

    def batch_target_rates_hz(self, seed: int, epoch: int, num_batches: int):
        """Target rates (Hz) of an epoch's training batches under ``target_frame_rate_range_hz``.

        Batch ``k`` (in the order the sampler fills batches) aims at element ``k``, drawn
        uniformly from the range by ``numpy.random.default_rng([seed, epoch, 2])``: the same
        for the same ``(seed, epoch)``.

        Args:
            seed: ESPnet's ``--seed``.
            epoch: 1-based epoch.
            num_batches: how many draws (an upper bound on the epoch's batches).

        Returns:
            ``(num_batches,)`` float64 Hz (numpy), or ``None`` when no range is set.
        """
        if self.target_frame_rate_range_hz is None:
            return None
        lo, hi = self.target_frame_rate_range_hz
        return np.random.default_rng([int(seed), int(epoch), 2]).uniform(lo, hi, size=int(num_batches))

    # ------------------------------------------------------------------ rates
    @property
    def standard_frame_rate_hz(self) -> float:
        """The evaluation frame rate, ``fs / hop_length`` (Hz)."""
        return self.fs / self.hop_length

    def standard_frame_counts(self, num_samples):
        """Frames ESPnet's DefaultFrontend gives each utterance (center=True): ``1 + L // hop_length``.

        Args:
            num_samples: ``(N,)`` int samples per utterance (array-like).

        Returns:
            ``(N,)`` int64 frames (numpy).
        """
        return standard_frame_counts(num_samples, self.hop_length)

    @property
    def eval_frame_shift_samples(self) -> float:
        """The frame shift outside a training step: ``fs / eval_frame_rate_hz`` samples
        (``hop_length`` when no evaluation rate is set)."""
        if self.eval_frame_rate_hz is None:
            return float(self.hop_length)
        return self.fs / self.eval_frame_rate_hz

    def eval_frame_counts(self, num_samples):
        """Frames outside a training step: ``1 + floor(L × eval_frame_rate_hz / fs)``, which is
        :meth:`standard_frame_counts` when no evaluation rate is set (and ESPnet's ``Stft`` count
        at ``hop_length = fs / eval_frame_rate_hz`` when that is a whole number of samples).

        Args:
            num_samples: ``(N,)`` int samples per utterance (array-like).

        Returns:
            ``(N,)`` int64 frames (numpy).
        """
        if self.eval_frame_rate_hz is None:
            return self.standard_frame_counts(num_samples)
        n = np.asarray(num_samples, dtype=np.float64)
        return (1 + np.floor(n * float(self.eval_frame_rate_hz) / self.fs)).astype(np.int64)

    def frame_count_ranges(self, num_samples, min_rate_hz: Optional[float] = None):
        """Frame-count ranges inside the clamp for a whole array at once (numpy; the one implementation).

        Args:
            num_samples: ``(N,)`` int samples per utterance (array-like).
            min_rate_hz: the low end of the clamp (Hz); ``None``: ``min_frame_rate_hz``.

        Returns:
            ``(lo (N,) int64, hi (N,) int64)`` frames.
        """
        n = np.asarray(num_samples, dtype=np.int64)
        low_rate = self.min_frame_rate_hz if min_rate_hz is None else min_rate_hz
        lo = 1 + np.floor(n * low_rate / self.fs + 1e-9).astype(np.int64)
        hi = 1 + np.floor(n * self.max_frame_rate_hz / self.fs + 1e-9).astype(np.int64)
        return lo, hi

    def below_clamp(self, num_samples, num_frames):
        """Which utterances are planned *below the clamp*: fewer frames than ``min_frame_rate_hz`` gives.

        The one definition of ``below_clamp`` (the sampler's summary, the audit and the training
        stat all call it): ``num_frames < lo`` with ``lo`` from :meth:`frame_count_ranges`, i.e.
        a frame rate under ``min_frame_rate_hz`` (down to ``fallback_frame_rate_hz``), which the
        sampler plans only for an utterance (or a forced batch) over ``batch_bins`` at the clamp's
        lowest rate, or for a padded batch.

        Args:
            num_samples: ``(N,)`` int samples per utterance (array-like).
            num_frames: ``(N,)`` int planned feature frames per utterance.

        Returns:
            ``(N,)`` bool (numpy).
        """
        lo, _ = self.frame_count_ranges(num_samples)
        return np.asarray(num_frames, dtype=np.int64) < lo

    def pick_frame_count(
        self, lo: int, hi: Optional[int], sum_standard_frames: int, batch_size: int, epoch: Optional[int] = None,
        target_hz: Optional[float] = None,
    ) -> Optional[int]:
        """The batch rule from running totals (used by the sampler while it grows a batch).

        Args:
            lo, hi: intersection of the utterances' :meth:`frame_count_ranges`.
            sum_standard_frames: sum of their standard frame counts.
            batch_size: number of utterances.
            epoch: 1-based epoch for the curriculum; ``None`` = no curriculum.
            target_hz: this batch's drawn target rate (Hz, :meth:`batch_target_rates_hz`);
                ``None``: ``target_frame_rate_hz`` (or the standard rate).

        Returns:
            ``round(sum_standard_frames × target / standard rate / batch_size)`` clipped to
            ``[lo, hi]`` (moved toward ``lo`` during the curriculum), or ``None``
            when ``lo > hi``.
        """
        if hi is None or lo > hi:
            return None
        if target_hz is None:
            target_hz = self.target_frame_rate_hz
        if target_hz is None:
            mean = sum_standard_frames / batch_size
        else:  # mean x target / (fs / hop), one division so that exact halves round as written
            mean = sum_standard_frames * target_hz * self.hop_length / (self.fs * batch_size)
        target = int(math.floor(mean + 0.5))
        t = lo if target < lo else (hi if target > hi else target)  # clip (the sampler calls this per utterance)
        if epoch is not None and self.curriculum_epochs > 0 and epoch <= self.curriculum_epochs:
            progress = (max(epoch, 1) - 1) / self.curriculum_epochs  # 0 at epoch 1
            t = lo + int(math.floor((t - lo) * progress))
        return t

    def frame_shifts_samples(
        self, num_samples: torch.Tensor, num_frames: torch.Tensor, fs_hz: Optional[torch.Tensor] = None
    ) -> torch.Tensor:
        """Frame shifts for a whole batch, in float64 tensor ops (the one implementation; used by
        the ``dynres`` frontend): the shift closest to
        ``hop_length`` inside ``(L / T, L / (T - 1)] ∩ [fs / max_rate, fs /
        fallback_rate]`` (the frame count wins when that is empty), nudged by
        one ulp where rounding would miss ``T``.

        Args:
            num_samples: ``(B,)`` int64 samples per utterance.
            num_frames: ``(B,)`` int64 frames wanted per utterance (>= 1).
            fs_hz: ``(B,)`` sampling rate (Hz) of each signal being framed
                (e.g. after resampling); default ``fs`` for all.

        Returns:
            ``(B,)`` float64 frame shifts in samples, on ``num_samples``' device.

        Raises:
            ValueError: a frame count below 1.
        """
        if bool((num_frames < 1).any()):
            raise ValueError(f"num_frames must be >= 1, got {num_frames.tolist()}")
        policy = self
        n = num_samples.to(torch.float64)
        t = num_frames.to(device=n.device, dtype=torch.float64)
        fs = torch.full_like(n, float(self.fs)) if fs_hz is None else fs_hz.to(device=n.device, dtype=torch.float64)
        lo = n / (t - 1e-6)
        hi = torch.where(t > 1, n / (t - 1).clamp(min=1), torch.full_like(n, math.inf))
        c_lo = torch.maximum(lo, fs / policy.max_frame_rate_hz)
        c_hi = torch.minimum(hi, fs / policy.fallback_frame_rate_hz)
        in_clamp = c_lo <= c_hi
        lo, hi = torch.where(in_clamp, c_lo, lo), torch.where(in_clamp, c_hi, hi)
        shift = torch.minimum(torch.maximum(torch.full_like(n, float(policy.hop_length)), lo), hi)
        inf, positive = torch.full_like(n, math.inf), n > 0
        while True:  # floating-point rounding at the closed end
            over = (1 + torch.floor(n / shift) > t) & positive
            if not bool(over.any()):
                break
            shift = torch.where(over, torch.nextafter(shift, inf), shift)
        while True:
            under = (1 + torch.floor(n / shift) < t) & positive
            if not bool(under.any()):
                break
            shift = torch.where(under, torch.nextafter(shift, torch.zeros_like(n)), shift)
        return torch.where(positive, shift, torch.full_like(n, float(policy.hop_length)))
