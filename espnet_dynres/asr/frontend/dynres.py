"""``frontend: dynres`` — log-mel filterbank with a per-utterance frame rate."""

from __future__ import annotations

import functools
import logging
from typing import Dict, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
import torch
import torchaudio
from typeguard import typechecked

from espnet2.asr.frontend.abs_frontend import AbsFrontend
from espnet2.layers.log_mel import LogMel
from espnet2.layers.stft import Stft

from espnet_dynres.asr.frontend.default_options import check_default_frontend_options
from espnet_dynres.core import features
from espnet_dynres.core.batch_planner import BatchKind, BatchPlanner, check_plan
from espnet_dynres.core.frame_rate_policy import FrameRatePolicy, parse_fs

METHODS = ("hop", "resample")
FILTERBANKS = ("original", "resampled")
def float32_features(forward):
    """Run a frontend's ``forward(input, input_lengths, ...)`` in float32 with autocast off.

    Under mixed precision (ESPnet's ``--use_amp true``, ``torch.autocast``) the
    mel matmul and the resampling convolution would run in bfloat16/float16:
    log-mel values then differ by up to ~0.1 (bf16), and the STFT power can
    overflow float16.  The wrapped forward gets ``input.float()`` and runs under
    ``torch.autocast(device_type=input.device.type, enabled=False)``, so the
    features are float32 whatever autocast context the training step opened.
    """

    @functools.wraps(forward)
    def wrapped(self, input: torch.Tensor, input_lengths: torch.Tensor, *args, **kwargs):
        with torch.autocast(device_type=input.device.type, enabled=False):
            return forward(self, input.float(), input_lengths, *args, **kwargs)

    return wrapped


class DynResFeatures(NamedTuple):
    """What one :meth:`DynResFrontend.features` call computed, returned as values (no state kept).

    Attributes:
        feats: ``(B, T_frames, n_mels)`` float32 log-mel, padded frames 0.
        feats_lengths: ``(B,)`` int64 frames per utterance before padding.
        frame_rates_hz: ``(B,)`` float32 frame rate of each utterance in Hz in a training step;
            ``None`` outside one (every utterance at the evaluation rate).
        fallback: a training batch without a plan and without a common frame count, planned
            by the frontend as the sampler plans such a batch (each utterance at its lowest rate,
            padded).
    """

    feats: torch.Tensor
    feats_lengths: torch.Tensor
    frame_rates_hz: Optional[torch.Tensor]
    fallback: bool


class DynResFrontend(AbsFrontend):
    """Log-mel fbank whose training batches have one frame count and no padding.

    Parameters shared with ESPnet's ``DefaultFrontend`` (``fs``, ``n_fft``,
    ``win_length``, ``hop_length``, ``window``, ``n_mels``, ``fmin``, ``fmax``,
    ``htk``) mean the same and have the same defaults (``fs`` 16000, ``n_fft``
    512, ``win_length`` ``None`` = ``n_fft``, ``hop_length`` 128 = 125 Hz, 80
    mels), so an omitted key gives DefaultFrontend's features.  The recipe sets
    the usual 25 ms window / 10 ms shift: ``win_length: 400, hop_length: 160``
    (100 Hz).  For ``fs: 8k`` give ``win_length: 200, hop_length: 80, n_fft:
    256`` (rates stay rates, hops are samples).  ``min_frame_rate_hz``, ``max_frame_rate_hz``,
    ``fallback_frame_rate_hz`` (Hz; omitted: 0.7, 1.3 and 0.5 × the standard
    rate ``fs / hop_length``, i.e. 70, 130 and 50 Hz at 100 Hz), ``curriculum_epochs``
    (applied by the sampler's plan; needs ``batch_type: dynres``) and
    ``target_frame_rate_hz`` (the mean rate a batch aims at, Hz; omitted: the
    standard rate, i.e. each batch gets its mean standard frame count; lower
    targets cost fewer encoder frames, measured in ``docs/experiments/frame_rate_lever.md``),
    ``target_frame_rate_range_hz`` (``[lo, hi]`` Hz: each training batch of the sampler's plan
    aims at a rate drawn from it; needs ``batch_type: dynres``)
    configure the
    :class:`FrameRatePolicy` shared with the sampler.  The rest of DefaultFrontend's
    parameters are accepted where they change nothing (``center: true``,
    ``normalized: false``, ``onesided: true``, ``apply_stft: true``, and
    ``frontend_conf`` with WPE and beamformer off) and refused otherwise
    (:func:`~espnet_dynres.asr.frontend.default_options.check_default_frontend_options`), so a ``frontend_conf`` copied from
    ``frontend: default`` works as it is.

    Modes (docs/frontend.md has the math and both methods in full):

    * **training step** (``dynamic``: decided by ``model: dynres``'s step context, else
      ``self.training`` and autograd enabled): every utterance gets the frames of the sampler's
      plan, or, without one, those of :class:`~espnet_dynres.core.batch_planner.BatchPlanner`
      (no budget), by ``method``: ``hop``, each utterance's own fractional frame shift, the whole
      batch in one gather + FFT (:func:`~espnet_dynres.core.features.framed_logmel`); or
      ``resample``, each utterance resampled (windowed sinc) to ``fs' = fs × hop / shift`` on a
      ``resample_grid_hz`` grid, then framed at (nearly) ``hop_length``, analysed with the
      filterbank of ``fs`` (``resample_filterbank: original``, a speed change, the default) or
      of ``fs'`` (``resampled``).  A batch the frontend planned itself without a common frame
      count (a *fallback batch*) is counted in ``num_fallback_batches`` and logged.
    * **otherwise** (``eval()`` for validation and decoding, or ``torch.no_grad()`` as in
      ESPnet's collect-stats): exactly ESPnet's ``Stft`` + ``LogMel`` at the standard rate,
      identical to ``DefaultFrontend``; with ``eval_frame_rate_hz`` every utterance at that one
      rate instead (shift ``fs / eval_frame_rate_hz`` samples).

    The plan and the rates travel as arguments and return values, never as
    state: :meth:`features` takes the sampler's plan (``speech_frames``) and
    returns the frame rates with the features (:class:`DynResFeatures`);
    ``model: dynres`` (:class:`~espnet_dynres.asr.dynres_model.DynResASRModel`)
    passes the plan in and the rates on to ``specaug: dynres``.  ``forward`` without
    ``with_rates`` is the :class:`AbsFrontend` interface (features and lengths only).

    Raises:
        ValueError: a DefaultFrontend option the dynres frontend cannot honour
            (:func:`~espnet_dynres.asr.frontend.default_options.check_default_frontend_options`), an odd ``n_fft``, ``win_length`` outside ``1..n_fft``, an
            unknown ``method`` or ``resample_filterbank``, a non-positive
            ``resample_grid_hz``, or an invalid rate clamp (see
            :class:`FrameRatePolicy`).
    """

    @typechecked
    def __init__(
        self,
        fs: Union[int, str] = 16000,
        n_fft: int = 512,
        win_length: Optional[int] = None,
        hop_length: int = 128,
        window: Optional[str] = "hann",
        n_mels: int = 80,
        fmin: Optional[int] = None,
        fmax: Optional[int] = None,
        htk: bool = False,
        min_frame_rate_hz: Optional[float] = None,
        max_frame_rate_hz: Optional[float] = None,
        fallback_frame_rate_hz: Optional[float] = None,
        curriculum_epochs: int = 0,
        target_frame_rate_hz: Optional[float] = None,
        eval_frame_rate_hz: Optional[float] = None,
        target_frame_rate_range_hz: Optional[Union[Sequence[float], float]] = None,  # a number is refused with the fix
        method: str = "hop",
        resample_filterbank: str = "original",
        resample_grid_hz: Optional[int] = None,
        center: bool = True,
        normalized: bool = False,
        onesided: bool = True,
        frontend_conf: Optional[dict] = None,
        apply_stft: bool = True,
    ):
        super().__init__()
        check_default_frontend_options(center=center, normalized=normalized, onesided=onesided,
                                       apply_stft=apply_stft, frontend_conf=frontend_conf)
        fs = parse_fs(fs)
        win_length = n_fft if win_length is None else win_length
        if n_fft % 2 != 0:
            raise ValueError(f"n_fft must be even (frame centres as DefaultFrontend), got {n_fft}")
        if not 0 < win_length <= n_fft:
            raise ValueError(f"win_length must be in 1..n_fft={n_fft}, got {win_length}")
        if method not in METHODS:
            raise ValueError(f"frontend_conf method must be one of {METHODS}, got {method!r}")
        if resample_filterbank not in FILTERBANKS:
            raise ValueError(f"frontend_conf resample_filterbank must be one of {FILTERBANKS}, got {resample_filterbank!r}")
        resample_grid_hz = fs // 40 if resample_grid_hz is None else resample_grid_hz
        if resample_grid_hz <= 0:
            raise ValueError(f"resample_grid_hz must be a positive number of Hz, got {resample_grid_hz}")
        self.policy = FrameRatePolicy(
            fs=fs,
            hop_length=hop_length,
            min_frame_rate_hz=None if min_frame_rate_hz is None else float(min_frame_rate_hz),
            max_frame_rate_hz=None if max_frame_rate_hz is None else float(max_frame_rate_hz),
            fallback_frame_rate_hz=None if fallback_frame_rate_hz is None else float(fallback_frame_rate_hz),
            curriculum_epochs=curriculum_epochs,
            target_frame_rate_hz=None if target_frame_rate_hz is None else float(target_frame_rate_hz),
            eval_frame_rate_hz=None if eval_frame_rate_hz is None else float(eval_frame_rate_hz),
            target_frame_rate_range_hz=(tuple(target_frame_rate_range_hz)
                                        if isinstance(target_frame_rate_range_hz, (list, tuple))
                                        else target_frame_rate_range_hz),
        )
        self.fs = fs
        self.n_fft = n_fft
        self.win_length = win_length
        self.hop_length = hop_length
        self.n_mels = n_mels
        self.window = window
        self.method = method
        self.resample_filterbank = resample_filterbank
        self.resample_grid_hz = resample_grid_hz
        self._mel_options = dict(n_fft=n_fft, n_mels=n_mels, fmin=fmin, fmax=fmax, htk=htk)
        self._resampled_logmels: Dict[int, LogMel] = {}
        self._resamplers: Dict[Tuple[int, str], torchaudio.transforms.Resample] = {}  # not submodules
        # Standard-rate path: ESPnet's own modules, so eval output == DefaultFrontend.
        self.stft = Stft(
            n_fft=n_fft,
            win_length=win_length,
            hop_length=hop_length,
            center=True,
            window=window,
            normalized=False,
            onesided=True,
        )
        self.logmel = LogMel(fs=fs, **self._mel_options)
        self.frontend_type = "dynres"
        self.num_fallback_batches = 0  # a running count for the log message only

    def output_size(self) -> int:
        return self.n_mels

    def is_dynamic(self) -> bool:
        """True when the next forward uses per-utterance frame rates (a training step)."""
        return self.training and torch.is_grad_enabled()

    def features(
        self, input: torch.Tensor, input_lengths: torch.Tensor, speech_frames: Optional[torch.Tensor] = None,
        dynamic: Optional[bool] = None,
    ) -> DynResFeatures:
        """``self(input, input_lengths, speech_frames, with_rates=True, dynamic=dynamic)``: features, lengths,
        rates, fallback.

        Goes through ``__call__``, so forward hooks on the frontend see every call.
        """
        return self(input, input_lengths, speech_frames, with_rates=True, dynamic=dynamic)

    @float32_features
    def forward(
        self,
        input: torch.Tensor,
        input_lengths: torch.Tensor,
        speech_frames: Optional[torch.Tensor] = None,
        with_rates: bool = False,
        dynamic: Optional[bool] = None,
    ) -> Union[Tuple[torch.Tensor, torch.Tensor], DynResFeatures]:
        """Log-mel features, computed in float32 with autocast off (:func:`float32_features`).

        Args:
            input: speech ``(B, T_samples)`` float32 at ``fs`` Hz, zero-padded;
                outside a training step also ``(B, T_samples, C)``, of which, as
                in ``DefaultFrontend``, the first channel is used in ``eval()``
                and a random one in train mode (collect-stats).
            input_lengths: ``(B,)`` int64, samples before padding.
            speech_frames: ``(B,)`` int64 feature frames per utterance planned by
                ``batch_type: dynres`` (batch key ``speech_frames``), used in a
                training step (checked by :func:`~espnet_dynres.core.batch_planner.check_plan`); ``None``:
                the planner's rules for a batch without a plan (no budget, no
                curriculum: only the sampler's plan carries it).  Ignored
                outside a training step (standard rate).
            with_rates: return :class:`DynResFeatures` (as :meth:`features`)
                instead of the :class:`AbsFrontend` pair ``(feats, feats_lengths)``.
            dynamic: a training step (per-utterance frame rates) or not, as the caller decided
                (``model: dynres``'s step context); ``None``: :meth:`is_dynamic` (the
                :class:`AbsFrontend` interface, called by ESPnet's own models).

        Returns:
            ``(feats, feats_lengths)``, or with ``with_rates`` a
            :class:`DynResFeatures`: feats ``(B, T_frames, n_mels)`` float32
            (natural-log mel power, padded frames 0), feats_lengths ``(B,)``
            int64 (in a training step all equal to ``T_frames`` except in a
            fallback batch or a planned padded batch, where each utterance has
            its own count), the frame rates ``(B,)`` Hz (``None`` at the
            standard rate) and the fallback flag.

        Raises:
            ValueError: multi-channel input in a training step (the plan is per
                utterance and channel choice is not: down-mix the data), an input
                that is neither 2-D nor 3-D, NaN/inf samples, or a plan this
                policy cannot produce.
        """
        dynamic = self.is_dynamic() if dynamic is None else dynamic
        if input.dim() == 3 and not dynamic:
            # (B, T_samples, C) -> (B, T_samples): DefaultFrontend's channel choice (its STFT is per channel).
            ch = int(np.random.randint(input.size(2))) if self.training else 0
            input = input[:, :, ch]
        if input.dim() != 2:
            raise ValueError(
                f"frontend dynres: speech of shape {tuple(input.shape)}"
                + (" in a training step" if dynamic else "")
                + "; it takes mono (B, T_samples) (multi-channel (B, T_samples, C) only outside a training step). "
                "Down-mix or pick one channel when preparing the data (e.g. `sox in.wav -c 1 "
                "out.wav`, or recipe stage 3)."
            )
        assert input_lengths.dim() == 1 and input_lengths.numel() == input.size(0), (
            f"speech_lengths must be (B,)={input.size(0)}, got {tuple(input_lengths.shape)}"
        )
        # NaN/inf samples are refused; short inputs (even 0 samples) are reflected/zero-padded as
        # DefaultFrontend does, so decoding writes a hypothesis for every utterance.
        features.check_speech_batch(input, input_lengths, min_samples=0)
        fallback = False
        if dynamic:
            feats_lengths, fallback = self.frame_counts(input_lengths, speech_frames)
            if fallback:
                self._count_fallback(input_lengths)
            if self.method == "hop":
                feats, rates = self.hop_logmel(input, input_lengths, feats_lengths)
            else:
                feats, rates = self.resample_logmel(input, input_lengths, feats_lengths)
            return DynResFeatures(feats, feats_lengths, rates, fallback) if with_rates else (feats, feats_lengths)
        if self.policy.eval_frame_rate_hz is not None:
            # eval_frame_rate_hz: one fixed shift fs / rate for every utterance (validation, re-estimate, decoding).
            feats_lengths = torch.from_numpy(self.policy.eval_frame_counts(input_lengths.cpu().numpy())).to(input.device)
            shifts = torch.full((input.size(0),), self.policy.eval_frame_shift_samples, dtype=torch.float64,
                                device=input.device)
            window = features.padded_window(self.window, self.win_length, self.n_fft, input.device)
            feats = features.framed_logmel(input.float(), input_lengths, shifts, feats_lengths, window, self.logmel)
            return DynResFeatures(feats, feats_lengths, None, fallback) if with_rates else (feats, feats_lengths)
        # float32 for the features whatever autocast does around us.
        stft, feats_lengths = self.stft(input.float(), input_lengths)  # (B, T_frames, F, 2)
        power = stft[..., 0] ** 2 + stft[..., 1] ** 2  # (B, T_frames, F)
        feats, _ = self.logmel(power, feats_lengths)
        return DynResFeatures(feats, feats_lengths, None, fallback) if with_rates else (feats, feats_lengths)

    def frame_counts(
        self, input_lengths: torch.Tensor, speech_frames: Optional[torch.Tensor] = None
    ) -> Tuple[torch.Tensor, bool]:
        """Frames per utterance for a training step, and whether the batch is a fallback batch.

        The sampler's plan ``speech_frames`` when given (checked by
        :func:`~espnet_dynres.core.batch_planner.check_plan`; never a fallback batch), else the
        planner's rules for a batch without a plan (no budget); a fallback batch is the ``PADDED``
        plan of a batch without a common frame count.

        Args:
            input_lengths: ``(B,)`` int64 samples.
            speech_frames: ``(B,)`` int64 planned frames, or ``None``.

        Returns:
            ``(feats_lengths (B,) int64, fallback)``.

        Raises:
            ValueError: a plan of the wrong size, or one this policy cannot produce.
        """
        lengths = [int(n) for n in input_lengths.tolist()]
        if speech_frames is not None:
            check_plan(self.policy, lengths, [int(t) for t in speech_frames.reshape(-1).tolist()])
            return speech_frames.to(input_lengths.device).long(), False
        plan = BatchPlanner.for_batch(self.policy, lengths).plan_batch()
        return torch.tensor(plan.frames, dtype=torch.long, device=input_lengths.device), plan.kind is BatchKind.PADDED

    def _count_fallback(self, input_lengths: torch.Tensor) -> None:
        self.num_fallback_batches += 1
        secs = [n / self.fs for n in input_lengths.tolist()]
        logging.warning(
            f"dynres frontend: batch of {len(secs)} utterances ({min(secs):.2f}-{max(secs):.2f} s) has no "
            f"common frame count down to {self.policy.fallback_frame_rate_hz:g} Hz; each utterance computed at its "
            f"lowest rate, padded to the longest (fallback batch #{self.num_fallback_batches})."
        )

    # ------------------------------------------------------ the two methods
    def hop_logmel(
        self, speech: torch.Tensor, speech_lengths: torch.Tensor, feats_lengths: torch.Tensor
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """``method: hop``: each utterance at its own fractional frame shift, the batch at once
        (:func:`~espnet_dynres.core.features.framed_logmel`).

        Args:
            speech: ``(B, T_samples)`` float32; speech_lengths ``(B,)`` int64 samples;
            feats_lengths: ``(B,)`` int64 frames wanted per utterance.

        Returns:
            feats ``(B, max(feats_lengths), n_mels)`` and the frame rates ``(B,)`` float (Hz).
        """
        shifts = self.policy.frame_shifts_samples(speech_lengths.to(speech.device), feats_lengths.to(speech.device))
        window = features.padded_window(self.window, self.win_length, self.n_fft, speech.device)
        feats = features.framed_logmel(speech, speech_lengths, shifts, feats_lengths, window, self.logmel)
        return feats, (self.fs / shifts).float()

    def resample_logmel(
        self, speech: torch.Tensor, speech_lengths: torch.Tensor, feats_lengths: torch.Tensor
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """``method: resample``: each utterance resampled to its rate on the grid
        (:func:`~espnet_dynres.core.features.resample_rows`), then framed at (nearly) the standard hop.

        Args:
            speech: ``(B, T_samples)`` float32; speech_lengths ``(B,)`` int64 samples;
            feats_lengths: ``(B,)`` int64 frames wanted per utterance.

        Returns:
            feats ``(B, max(feats_lengths), n_mels)`` and the frame rates ``(B,)``
            float (Hz, in the original time axis).
        """
        device = speech.device
        counts = feats_lengths.to(device)
        new_rates = features.resample_rates_hz(self.policy, speech_lengths.to(device).long(), counts,
                                               self.resample_grid_hz)  # (B,) int64 Hz
        padded, new_lengths = features.resample_rows(speech, speech_lengths, new_rates, self.fs,
                                                     lambda fs_new: self.resampler(fs_new, device))
        shifts = self.policy.frame_shifts_samples(new_lengths, counts, fs_hz=new_rates)  # (B,) samples at fs'
        window = features.padded_window(self.window, self.win_length, self.n_fft, device)
        if self.resample_filterbank == "original":
            feats = features.framed_logmel(padded, new_lengths, shifts, feats_lengths, window, self.logmel)
        else:
            feats = torch.zeros(speech.size(0), int(feats_lengths.max()), self.n_mels, device=device)
            for fs_new in sorted(set(new_rates.tolist())):
                sel = new_rates == fs_new
                part = features.framed_logmel(padded[sel], new_lengths[sel], shifts[sel], feats_lengths[sel], window,
                                              self._logmel_for(fs_new, device))
                feats[sel, : part.size(1)] = part  # a padded batch's rows differ in length
        return feats, (new_rates.double() / shifts).float()

    def resampler(self, fs_new: int, device: torch.device) -> torchaudio.transforms.Resample:
        """``fs -> fs_new`` windowed-sinc resampler (``sinc_interp_hann``), its kernel built once and kept.

        Not a registered submodule: nothing of it goes into checkpoints.
        """
        key = (int(fs_new), str(device))
        if key not in self._resamplers:
            self._resamplers[key] = torchaudio.transforms.Resample(
                self.fs, int(fs_new), resampling_method="sinc_interp_hann"
            ).to(device)
        return self._resamplers[key]

    def _logmel_for(self, fs_new: int, device: torch.device) -> LogMel:
        """Mel filterbank for signals sampled at ``fs_new`` covering at most ``0..fs/2`` Hz."""
        if fs_new not in self._resampled_logmels:
            options = dict(self._mel_options)
            options["fmax"] = min(options["fmax"] or self.fs / 2, self.fs / 2)
            self._resampled_logmels[fs_new] = LogMel(fs=fs_new, **options)
        return self._resampled_logmels[fs_new].to(device)
