"""The one object that decides frame counts and frame rates, for both the ``dynres`` sampler and frontend.

Conventions (ESPnet's ``Stft``, ``center=True``, even ``n_fft``): ``L`` samples at a shift of ``h`` samples give
``1 + floor(L / h)`` frames, frame ``t`` centred on sample ``t * h``; the standard rate is ``fs / hop_length`` Hz (count
``1 + L // hop_length``); a rate ``r`` Hz is a shift of ``fs / r`` samples.  A shift in ``(L / T, L / (T - 1)]`` gives
``T`` frames, so the allowed shifts ``[fs / max_rate, fs / min_rate]`` give
``1 + floor(L * min_rate / fs) <= T <= 1 + floor(L * max_rate / fs)``; ``T`` is framed at the allowed shift closest to
``hop_length`` (the standard count exactly as ``DefaultFrontend``).

Batch rule (:meth:`FrameRatePolicy.pick_frame_count`): ``T`` = round(mean standard count × target / standard rate),
clipped into the members' common range; every member gets ``T`` (the rest is :mod:`espnet_dynres.core.batch_planner`'s).
The target is ``target_frame_rate_hz`` (default: the standard rate) or, with ``target_frame_rate_range_hz``, drawn per
training batch (:meth:`FrameRatePolicy.batch_target_rates_hz`).  Curriculum (``curriculum_epochs = N > 0``): in 1-based
epoch ``e``, ``T`` moves linearly from the lowest common count (``e = 1``) to the rule's (``e >= N + 1``), never above
it, so the frame budget holds in every epoch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple, Union

import humanfriendly
import numpy as np
import torch


def standard_frame_counts(num_samples, hop_length: int):
    """``1 + L // hop_length``: ESPnet's ``Stft(center=True)`` frames (the one implementation). ``(N,)`` int samples
    (array-like), ``hop_length`` samples -> ``(N,)`` int64 frames (numpy)."""
    return 1 + np.asarray(num_samples, dtype=np.int64) // int(hop_length)


def parse_fs(fs: Union[int, str]) -> int:
    """Sampling rate in Hz from an int or an ESPnet-style string ("16k", "8000"); ValueError if not positive."""
    value = humanfriendly.parse_size(fs) if isinstance(fs, str) else fs
    if not isinstance(value, int) or value <= 0:
        raise ValueError(f"fs must be a positive sampling rate in Hz (e.g. 16000 or '16k'), got {fs!r}")
    return value


# The clamp's defaults, as multiples of the standard rate fs / hop_length (70, 130 and 50 Hz at 100 Hz).
DEFAULT_CLAMP_RATIOS = {"min_frame_rate_hz": 0.7, "max_frame_rate_hz": 1.3, "fallback_frame_rate_hz": 0.5}


@dataclass(frozen=True)
class FrameRatePolicy:
    """Frame counts and frame rates for dynamic-resolution batches (rules in the module docstring).

    Args (rates in Hz; ``None``: relative to the standard rate ``fs / hop_length``):
        fs, hop_length: input sampling rate (16000 or "16k"), standard shift in samples; no defaults
            (:class:`~espnet_dynres.core.frontend_config.FrontendConfig` has them).
        min_frame_rate_hz, max_frame_rate_hz: the clamp (0.7 / 1.3 ×); fallback_frame_rate_hz: lowest rate a batch
            without a common count in it may be lowered to (:mod:`~espnet_dynres.core.batch_planner`; 0.5 ×).
        curriculum_epochs: epochs of the low-rate-first schedule (0: off); target_frame_rate_hz: the rule's target;
            eval_frame_rate_hz: the rate outside a training step; target_frame_rate_range_hz: ``(lo, hi)``, a target
            drawn per batch (:meth:`batch_target_rates_hz`).

    Raises:
        ValueError: a non-positive value, not ``min <= standard rate <= max <= fs`` or ``fallback <= min``, a negative
            ``curriculum_epochs``, a rate or range outside the clamp, or a range with a target; naming the key to fix.
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
        for key, ratio in DEFAULT_CLAMP_RATIOS.items():
            value = getattr(self, key)
            object.__setattr__(self, key, float(ratio * std if value is None else value))
        if not 0 < self.min_frame_rate_hz <= std <= self.max_frame_rate_hz:
            raise ValueError("frame-rate clamp must satisfy 0 < min_frame_rate_hz <= standard rate <= "
                f"max_frame_rate_hz; got min_frame_rate_hz={self.min_frame_rate_hz}, "
                f"standard rate={std:g} Hz (fs={self.fs} / hop_length={self.hop_length}), "
                f"max_frame_rate_hz={self.max_frame_rate_hz}. Fix frontend_conf.")
        if self.max_frame_rate_hz > self.fs:
            raise ValueError(f"max_frame_rate_hz={self.max_frame_rate_hz} exceeds fs={self.fs}: "
                             "a frame shift cannot be shorter than one sample.")
        if not 0 < self.fallback_frame_rate_hz <= self.min_frame_rate_hz:
            raise ValueError(f"fallback_frame_rate_hz={self.fallback_frame_rate_hz} must be in "
                             f"(0, min_frame_rate_hz={self.min_frame_rate_hz}]. Fix frontend_conf.")
        if self.curriculum_epochs < 0:
            raise ValueError(f"curriculum_epochs must be >= 0, got {self.curriculum_epochs}")
        for key in ("target_frame_rate_hz", "eval_frame_rate_hz"):
            value = getattr(self, key)
            if value is not None and not self.min_frame_rate_hz <= value <= self.max_frame_rate_hz:
                raise ValueError(
                    f"{key}={value} must lie in [min_frame_rate_hz={self.min_frame_rate_hz}, max_frame_rate_hz="
                    f"{self.max_frame_rate_hz}] (or be null for the standard rate). Fix frontend_conf.")
        if self.target_frame_rate_range_hz is not None:
            rng = self.target_frame_rate_range_hz
            if isinstance(rng, (int, float, str)) or len(rng) != 2:
                raise ValueError(f"target_frame_rate_range_hz must be two rates [lo, hi] in Hz, got {rng!r}. "
                                 "Fix frontend_conf.")
            lo, hi = float(rng[0]), float(rng[1])
            if not self.min_frame_rate_hz <= lo <= hi <= self.max_frame_rate_hz:
                raise ValueError(f"target_frame_rate_range_hz=[{lo:g}, {hi:g}] must satisfy min_frame_rate_hz="
                    f"{self.min_frame_rate_hz:g} <= lo <= hi <= max_frame_rate_hz={self.max_frame_rate_hz:g}. "
                    "Fix frontend_conf.")
            if self.target_frame_rate_hz is not None:
                raise ValueError(
                    f"target_frame_rate_hz={self.target_frame_rate_hz:g} and target_frame_rate_range_hz=[{lo:g}, "
                    f"{hi:g}] both set the batches' target rate; keep one of them in frontend_conf.")
            object.__setattr__(self, "target_frame_rate_range_hz", (lo, hi))

    def batch_target_rates_hz(self, seed: int, epoch: int, num_batches: int):
        """``(num_batches,)`` float64 Hz (numpy): targets of an epoch's training batches in fill order, uniform over
        ``target_frame_rate_range_hz`` by ``numpy.random.default_rng([seed, epoch, 2])``; ``None`` without a range."""
        if self.target_frame_rate_range_hz is None:
            return None
        lo, hi = self.target_frame_rate_range_hz
        return np.random.default_rng([int(seed), int(epoch), 2]).uniform(lo, hi, size=int(num_batches))

    @property
    def standard_frame_rate_hz(self) -> float:
        """The evaluation frame rate, ``fs / hop_length`` (Hz)."""
        return self.fs / self.hop_length

    def standard_frame_counts(self, num_samples):
        """:func:`standard_frame_counts` at ``hop_length``: ``(N,)`` int samples -> ``(N,)`` int64 frames (numpy)."""
        return standard_frame_counts(num_samples, self.hop_length)

    @property
    def eval_frame_shift_samples(self) -> float:
        """The frame shift outside a training step: ``fs / eval_frame_rate_hz`` samples (else ``hop_length``)."""
        if self.eval_frame_rate_hz is None:
            return float(self.hop_length)
        return self.fs / self.eval_frame_rate_hz

    def eval_frame_counts(self, num_samples):
        """Frames outside a training step, ``1 + floor(L × eval_frame_rate_hz / fs)`` (else
        :meth:`standard_frame_counts`): ``(N,)`` int samples (array-like) -> ``(N,)`` int64 frames (numpy)."""
        if self.eval_frame_rate_hz is None:
            return self.standard_frame_counts(num_samples)
        n = np.asarray(num_samples, dtype=np.float64)
        return (1 + np.floor(n * float(self.eval_frame_rate_hz) / self.fs)).astype(np.int64)

    def frame_count_ranges(self, num_samples, min_rate_hz: Optional[float] = None):
        """Frame-count ranges in the clamp (the one implementation): ``(N,)`` int samples (array-like) -> ``(lo, hi)``,
        ``(N,)`` int64 frames each (numpy); ``min_rate_hz``: the low end (Hz; ``None``: ``min_frame_rate_hz``)."""
        n = np.asarray(num_samples, dtype=np.int64)
        low_rate = self.min_frame_rate_hz if min_rate_hz is None else min_rate_hz
        lo = 1 + np.floor(n * low_rate / self.fs + 1e-9).astype(np.int64)
        hi = 1 + np.floor(n * self.max_frame_rate_hz / self.fs + 1e-9).astype(np.int64)
        return lo, hi

    def below_clamp(self, num_samples, num_frames):
        """Which utterances are planned below the clamp (the one definition): ``num_frames`` < ``lo`` of
        :meth:`frame_count_ranges`.  ``(N,)`` int samples and planned frames (array-like) -> ``(N,)`` bool (numpy)."""
        lo, _ = self.frame_count_ranges(num_samples)
        return np.asarray(num_frames, dtype=np.int64) < lo

    def pick_frame_count(
        self, lo: int, hi: Optional[int], sum_standard_frames: int, batch_size: int, epoch: Optional[int] = None,
        target_hz: Optional[float] = None,
    ) -> Optional[int]:
        """The batch rule from running totals: ``round(sum_standard_frames × target / standard rate / batch_size)``
        clipped to ``[lo, hi]`` (the members' :meth:`frame_count_ranges` intersection; toward ``lo`` in the curriculum
        of 1-based ``epoch``), ``None`` if ``lo > hi``; ``target_hz``: drawn target (Hz; ``None``: the policy's)."""
        if hi is None or lo > hi:
            return None
        if target_hz is None:
            target_hz = self.target_frame_rate_hz
        if target_hz is None:
            mean = sum_standard_frames / batch_size
        else:  # one division, so that exact halves round as written
            mean = sum_standard_frames * target_hz * self.hop_length / (self.fs * batch_size)
        target = int(math.floor(mean + 0.5))
        t = lo if target < lo else (hi if target > hi else target)  # clip (runs per utterance)
        if epoch is not None and self.curriculum_epochs > 0 and epoch <= self.curriculum_epochs:
            progress = (max(epoch, 1) - 1) / self.curriculum_epochs  # 0 at epoch 1
            t = lo + int(math.floor((t - lo) * progress))
        return t

    def frame_shifts_samples(self, num_samples: torch.Tensor, num_frames: torch.Tensor,
                             fs_hz: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Frame shifts for a batch in float64 tensor ops (the one implementation): the shift closest to ``hop_length``
        in ``(L / T, L / (T - 1)] ∩ [fs / max_rate, fs / fallback_rate]`` (``T`` wins if it is empty), nudged by one
        ulp where rounding would miss ``T``.  ``num_samples``, ``num_frames`` (>= 1): ``(B,)`` int64; ``fs_hz``:
        ``(B,)`` Hz per signal (``None``: ``fs``) -> ``(B,)`` float64 shifts in samples, on ``num_samples``' device.

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
