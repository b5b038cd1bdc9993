"""``frontend: dynres`` — log-mel filterbank with a per-utterance frame rate."""

from __future__ import annotations

import dataclasses
import logging
from typing import Dict, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
import torch
import torchaudio
from typeguard import typechecked

from espnet2.asr.frontend.abs_frontend import AbsFrontend
from espnet2.layers.log_mel import LogMel
from espnet2.layers.stft import Stft

from espnet_dynres.core import features
from espnet_dynres.core.batch_planner import BatchKind, BatchPlan, BatchPlanner, check_plan
from espnet_dynres.core.frontend_config import FrontendConfig

FRONTEND_KEYS = {f.name for f in dataclasses.fields(FrontendConfig) if f.init}


class DynResFeatures(NamedTuple):
    """What one :meth:`DynResFrontend.features` call computed.

    Attributes:
        feats: ``(B, T_frames, n_mels)`` float32 log-mel, padded frames 0.
        feats_lengths: ``(B,)`` int64 frames per utterance before padding.
        frame_rates_hz: ``(B,)`` float32 Hz per utterance in a training step; ``None`` outside one.
        fallback: a training batch without a plan and without a common frame count (each utterance at its
            lowest rate, padded).
    """

    feats: torch.Tensor
    feats_lengths: torch.Tensor
    frame_rates_hz: Optional[torch.Tensor]
    fallback: bool


class DynResFrontend(AbsFrontend):
    """Log-mel fbank whose training batches have one frame count and no padding.

    Options: :class:`~espnet_dynres.core.frontend_config.FrontendConfig` (docs/frontend.md).  In a training step
    each utterance gets the plan's frames, or :class:`~espnet_dynres.core.batch_planner.BatchPlanner`'s (without a
    common count: a logged *fallback batch*); otherwise DefaultFrontend's features at the standard rate (or at
    ``eval_frame_rate_hz``).

    Raises:
        ValueError: an option :class:`FrontendConfig` refuses (named, with the fix).
    """

    @typechecked
    def __init__(
        self, fs: Union[int, str] = FrontendConfig.fs, n_fft: int = FrontendConfig.n_fft,
        win_length: Optional[int] = FrontendConfig.win_length, hop_length: int = FrontendConfig.hop_length,
        window: Optional[str] = FrontendConfig.window, n_mels: int = FrontendConfig.n_mels,
        fmin: Optional[int] = FrontendConfig.fmin, fmax: Optional[int] = FrontendConfig.fmax,
        htk: bool = FrontendConfig.htk, min_frame_rate_hz: Optional[float] = FrontendConfig.min_frame_rate_hz,
        max_frame_rate_hz: Optional[float] = FrontendConfig.max_frame_rate_hz,
        fallback_frame_rate_hz: Optional[float] = FrontendConfig.fallback_frame_rate_hz,
        curriculum_epochs: int = FrontendConfig.curriculum_epochs,
        target_frame_rate_hz: Optional[float] = FrontendConfig.target_frame_rate_hz,
        eval_frame_rate_hz: Optional[float] = FrontendConfig.eval_frame_rate_hz,
        target_frame_rate_range_hz: Optional[Union[Sequence[float], float]] = FrontendConfig.target_frame_rate_range_hz,
        method: str = FrontendConfig.method, resample_filterbank: str = FrontendConfig.resample_filterbank,
        resample_grid_hz: Optional[int] = FrontendConfig.resample_grid_hz, center: bool = FrontendConfig.center,
        normalized: bool = FrontendConfig.normalized, onesided: bool = FrontendConfig.onesided,
        frontend_conf: Optional[dict] = FrontendConfig.frontend_conf, apply_stft: bool = FrontendConfig.apply_stft,
    ):
        """The options of :class:`~espnet_dynres.core.frontend_config.FrontendConfig`, named for ESPnet's key check."""
        super().__init__()
        config = FrontendConfig(**{k: v for k, v in locals().items() if k in FRONTEND_KEYS})
        self.config, self.policy = config, config.policy
        self.fs, self.n_fft, self.win_length, self.hop_length = config.fs, config.n_fft, config.win_length, config.hop_length
        self.n_mels, self.window, self.method = config.n_mels, config.window, config.method
        self.resample_filterbank, self.resample_grid_hz = config.resample_filterbank, config.resample_grid_hz
        self._mel_options = config.mel_options
        self._resampled_logmels: Dict[int, LogMel] = {}
        self._resamplers: Dict[Tuple[int, str], torchaudio.transforms.Resample] = {}  # not submodules
        # Standard rate: ESPnet's own modules (== DefaultFrontend).
        self.stft = Stft(n_fft=self.n_fft, win_length=self.win_length, hop_length=self.hop_length, center=True,
                         window=self.window, normalized=False, onesided=True)
        self.logmel = LogMel(fs=self.fs, **self._mel_options)
        self.frontend_type = "dynres"
        self.num_fallback_batches = 0  # a running count for the log message only

    def output_size(self) -> int:
        return self.n_mels

    def is_dynamic(self) -> bool:
        """True when the next forward uses per-utterance frame rates (a training step)."""
        return self.training and torch.is_grad_enabled()

    def features(self, input: torch.Tensor, input_lengths: torch.Tensor, plan: Optional[BatchPlan] = None,
                 dynamic: Optional[bool] = None) -> DynResFeatures:
        """:meth:`forward` with ``with_rates=True``, through ``__call__`` (so forward hooks see every call)."""
        return self(input, input_lengths, plan, with_rates=True, dynamic=dynamic)

    def forward(self, input: torch.Tensor, input_lengths: torch.Tensor, plan: Optional[BatchPlan] = None,
                with_rates: bool = False, dynamic: Optional[bool] = None
                ) -> Union[Tuple[torch.Tensor, torch.Tensor], DynResFeatures]:
        """Log-mel features, float32, computed with autocast off.

        Args:
            input: speech ``(B, T_samples)`` float at ``fs`` Hz, zero-padded (``(B, T_samples, C)`` outside training).
            input_lengths: ``(B,)`` int64 samples before padding.
            plan: the ``batch_plan`` (checked by :func:`~espnet_dynres.core.batch_planner.check_plan`), or ``None``.
            with_rates: return :class:`DynResFeatures` instead of ``(feats, feats_lengths)``.
            dynamic: a training step or not; ``None``: :meth:`is_dynamic`.

        Returns:
            ``(feats (B, T_frames, n_mels) float32 natural-log mel power with padded frames 0,
            feats_lengths (B,) int64)``, or with ``with_rates`` a :class:`DynResFeatures`.

        Raises:
            ValueError: multi-channel input in training, input neither 2-D nor 3-D, NaN/inf, or an impossible plan.
        """
        dynamic = self.is_dynamic() if dynamic is None else dynamic
        with torch.autocast(device_type=input.device.type, enabled=False):
            out = self._features(input.float(), input_lengths, plan, dynamic)
        return out if with_rates else (out.feats, out.feats_lengths)

    def _features(self, input: torch.Tensor, input_lengths: torch.Tensor, plan: Optional[BatchPlan],
                  dynamic: bool) -> DynResFeatures:
        if input.dim() == 3 and not dynamic:
            # (B, T_samples, C) -> (B, T_samples): DefaultFrontend's channel choice.
            ch = int(np.random.randint(input.size(2))) if self.training else 0
            input = input[:, :, ch]
        if input.dim() != 2:
            raise ValueError(
                f"frontend dynres: speech of shape {tuple(input.shape)}" + (" in a training step" if dynamic else "")
                + "; it takes mono (B, T_samples) (multi-channel (B, T_samples, C) only outside a training step). "
                "Down-mix or pick one channel when preparing the data (e.g. `sox in.wav -c 1 "
                "out.wav`, or recipe stage 3).")
        assert input_lengths.dim() == 1 and input_lengths.numel() == input.size(0), (
            f"speech_lengths must be (B,)={input.size(0)}, got {tuple(input_lengths.shape)}")
        # NaN/inf refused; short inputs (even 0 samples) padded as DefaultFrontend, so decoding never skips one.
        features.check_speech_batch(input, input_lengths, min_samples=0)
        if dynamic:
            feats_lengths, fallback = self.frame_counts(input_lengths, plan)
            if fallback:
                self._count_fallback(input_lengths)
            feats, rates = self.dynamic_logmel(input, input_lengths, feats_lengths)
            return DynResFeatures(feats, feats_lengths, rates, fallback)
        if self.policy.eval_frame_rate_hz is not None:
            feats, feats_lengths = features.fixed_rate_logmel(self.policy, input, input_lengths,
                                                              self._window(input.device), self.logmel)
            return DynResFeatures(feats, feats_lengths, None, False)
        stft, feats_lengths = self.stft(input, input_lengths)  # (B, T_frames, F, 2)
        power = stft[..., 0] ** 2 + stft[..., 1] ** 2  # (B, T_frames, F)
        feats, _ = self.logmel(power, feats_lengths)
        return DynResFeatures(feats, feats_lengths, None, False)

    def frame_counts(self, input_lengths: torch.Tensor, plan: Optional[BatchPlan] = None) -> Tuple[torch.Tensor, bool]:
        """``(feats_lengths (B,) int64, fallback)``: the ``plan``'s frames, else the planner's ``(B,)`` samples.

        Raises:
            ValueError: a plan of the wrong size, or one this policy cannot produce.
        """
        lengths = [int(n) for n in input_lengths.tolist()]
        if plan is not None:
            check_plan(self.policy, lengths, plan.frames)
            return torch.tensor(plan.frames, dtype=torch.long, device=input_lengths.device), False
        plan = BatchPlanner.for_batch(self.policy, lengths).plan_batch()
        return torch.tensor(plan.frames, dtype=torch.long, device=input_lengths.device), plan.kind is BatchKind.PADDED

    def dynamic_logmel(self, speech: torch.Tensor, speech_lengths: torch.Tensor, feats_lengths: torch.Tensor
                       ) -> Tuple[torch.Tensor, torch.Tensor]:
        """Feats ``(B, max(feats_lengths), n_mels)`` at ``feats_lengths`` ``(B,)`` frames by ``method``, and the
        frame rates ``(B,)`` Hz (:mod:`espnet_dynres.core.features`)."""
        device = speech.device
        if self.method == "hop":
            return features.hop_logmel(self.policy, speech, speech_lengths, feats_lengths, self._window(device),
                                       self.logmel)
        logmel_at = None if self.resample_filterbank == "original" else (lambda r: self._logmel_at(r, device))
        return features.resample_logmel(self.policy, speech, speech_lengths, feats_lengths, self._window(device),
                                        self.logmel, self.resample_grid_hz, lambda r: self.resampler(r, device),
                                        logmel_at)

    def resampler(self, fs_new: int, device: torch.device) -> torchaudio.transforms.Resample:
        """``fs -> fs_new`` ``sinc_interp_hann`` resampler, cached (not a submodule, not in checkpoints)."""
        key = (int(fs_new), str(device))
        if key not in self._resamplers:
            self._resamplers[key] = torchaudio.transforms.Resample(self.fs, int(fs_new),
                                                                   resampling_method="sinc_interp_hann").to(device)
        return self._resamplers[key]

    def _logmel_at(self, fs_new: int, device: torch.device) -> LogMel:
        """Mel filterbank for signals sampled at ``fs_new`` covering at most ``0..fs/2`` Hz."""
        if fs_new not in self._resampled_logmels:
            options = dict(self._mel_options)
            options["fmax"] = min(options["fmax"] or self.fs / 2, self.fs / 2)
            self._resampled_logmels[fs_new] = LogMel(fs=fs_new, **options)
        return self._resampled_logmels[fs_new].to(device)

    def _window(self, device: torch.device) -> torch.Tensor:
        return features.padded_window(self.window, self.win_length, self.n_fft, device)

    def _count_fallback(self, input_lengths: torch.Tensor) -> None:
        self.num_fallback_batches += 1
        secs = [n / self.fs for n in input_lengths.tolist()]
        logging.warning(
            f"dynres frontend: batch of {len(secs)} utterances ({min(secs):.2f}-{max(secs):.2f} s) has no "
            f"common frame count down to {self.policy.fallback_frame_rate_hz:g} Hz; each utterance computed at its "
            f"lowest rate, padded to the longest (fallback batch #{self.num_fallback_batches}).")
