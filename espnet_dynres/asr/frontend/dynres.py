"""``frontend: dynres`` — log-mel filterbank with a per-utterance frame rate."""

from __future__ import annotations

import logging
import math
from typing import Dict, List, Optional, Tuple, Union

import torch
import torchaudio
from typeguard import typechecked

from espnet2.asr.frontend.abs_frontend import AbsFrontend
from espnet2.layers.log_mel import LogMel
from espnet2.layers.stft import Stft

from espnet_dynres.frame_rate_context import current_epoch, set_frame_rates
from espnet_dynres.frame_rate_policy import FrameRatePolicy, parse_fs

METHODS = ("hop", "resample")
FILTERBANKS = ("original", "resampled")


class DynResFrontend(AbsFrontend):
    """Log-mel fbank whose training batches have one frame count and no padding.

    Parameters shared with ESPnet's ``DefaultFrontend`` (``fs``, ``n_fft``,
    ``win_length``, ``hop_length``, ``window``, ``n_mels``, ``fmin``, ``fmax``,
    ``htk``) mean the same; the defaults are the usual 16 kHz / 25 ms window /
    10 ms shift (``hop_length=160`` → 100 Hz) / 80 mels.  For ``fs: 8k`` give
    ``win_length: 200, hop_length: 80, n_fft: 256`` (rates stay rates, hops are
    samples).  ``min_frame_rate_hz``, ``max_frame_rate_hz``,
    ``fallback_frame_rate_hz`` and ``curriculum_epochs`` configure the
    :class:`FrameRatePolicy` shared with the sampler.

    Modes:

    * **training step** (``self.training`` and autograd enabled): the policy
      gives the batch one frame count ``T`` (:meth:`FrameRatePolicy.batch_frame_counts`)
      and every utterance comes out with exactly ``T`` frames, by
      ``method``:

      - ``hop``: the utterance's own fractional frame shift
        (:meth:`FrameRatePolicy.frame_shift_samples`), window and FFT size
        unchanged, the whole batch in one gather + FFT on its device;
      - ``resample``: ``torchaudio.functional.resample`` (windowed sinc,
        ``sinc_interp_hann``) to ``fs' = fs × hop / shift`` snapped to a
        ``resample_grid_hz`` grid (so ``fs / gcd(fs, fs')`` and the polyphase
        kernel stay small), then the standard ``hop_length`` corrected by the
        snap error (< ``resample_grid_hz / (2 fs')`` relative) to land on ``T``.
        ``resample_filterbank: original`` keeps the mel filterbank of ``fs``: the
        resampled signal is analysed as if sampled at ``fs``, a *speed change*
        (time stretch and pitch shift by ``fs / fs'``, like speed perturbation)
        — the published design's variant and the default.
        ``resample_filterbank: resampled`` builds the filterbank for ``fs'``
        (with ``fmax`` at most ``fs / 2``): only the time axis changes, but when
        ``fs' < fs`` the content above ``fs' / 2`` is lost, so the top mel
        bands go to the log floor.

      A *fallback batch* (no common ``T`` down to ``fallback_frame_rate_hz``)
      is computed at the standard rate and zero-padded; it is counted in
      ``num_fallback_batches`` and logged.
    * **otherwise** (``eval()`` for validation and decoding, or
      ``torch.no_grad()`` as in ESPnet's collect-stats, which keeps the model in
      train mode): exactly ESPnet's ``Stft`` + ``LogMel`` at the standard rate,
      i.e. identical to ``DefaultFrontend`` with the same settings, for both
      methods.

    Every forward records the utterances' frame rates for ``specaug: dynres``
    (:mod:`espnet_dynres.frame_rate_context`).

    Raises:
        ValueError: an odd ``n_fft``, ``win_length`` outside ``1..n_fft``, an
            unknown ``method`` or ``resample_filterbank``, a non-positive
            ``resample_grid_hz``, or an invalid rate clamp (see
            :class:`FrameRatePolicy`).
    """

    @typechecked
    def __init__(
        self,
        fs: Union[int, str] = 16000,
        n_fft: int = 512,
        win_length: Optional[int] = 400,
        hop_length: int = 160,
        window: Optional[str] = "hann",
        n_mels: int = 80,
        fmin: Optional[int] = None,
        fmax: Optional[int] = None,
        htk: bool = False,
        min_frame_rate_hz: float = 70.0,
        max_frame_rate_hz: float = 130.0,
        fallback_frame_rate_hz: float = 50.0,
        curriculum_epochs: int = 0,
        method: str = "hop",
        resample_filterbank: str = "original",
        resample_grid_hz: Optional[int] = None,
    ):
        super().__init__()
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
            min_frame_rate_hz=float(min_frame_rate_hz),
            max_frame_rate_hz=float(max_frame_rate_hz),
            fallback_frame_rate_hz=float(fallback_frame_rate_hz),
            curriculum_epochs=curriculum_epochs,
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
        self.num_fallback_batches = 0
        self.last_batch_fallback = False

    def output_size(self) -> int:
        return self.n_mels

    def is_dynamic(self) -> bool:
        """True when the next forward uses per-utterance frame rates (a training step)."""
        return self.training and torch.is_grad_enabled()

    def forward(
        self, input: torch.Tensor, input_lengths: torch.Tensor
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """Log-mel features.

        Args:
            input: speech ``(B, T_samples)`` float32 at ``fs`` Hz, zero-padded.
            input_lengths: ``(B,)`` int64, samples before padding.

        Returns:
            feats ``(B, T_frames, n_mels)`` float32 (natural-log mel power,
            padded frames 0) and feats_lengths ``(B,)`` int64, the frames
            computed per utterance.  In a training step outside fallback every
            length equals ``T_frames``.
        """
        assert input.dim() == 2, f"speech must be (B, T_samples), got {tuple(input.shape)}"
        assert input_lengths.dim() == 1 and input_lengths.numel() == input.size(0), (
            f"speech_lengths must be (B,)={input.size(0)}, got {tuple(input_lengths.shape)}"
        )
        self.last_batch_fallback = False
        if self.is_dynamic():
            feats_lengths, fallback = self.frame_counts(input_lengths)
            if not fallback:
                if self.method == "hop":
                    feats, rates = self.hop_logmel(input, input_lengths, feats_lengths)
                else:
                    feats, rates = self.resample_logmel(input, input_lengths, feats_lengths)
                set_frame_rates(rates)
                return feats, feats_lengths
            self._count_fallback(input_lengths)
        set_frame_rates(None)
        # float32 for the features whatever autocast does around us.
        stft, feats_lengths = self.stft(input.float(), input_lengths)  # (B, T_frames, F, 2)
        power = stft[..., 0] ** 2 + stft[..., 1] ** 2  # (B, T_frames, F)
        feats, _ = self.logmel(power, feats_lengths)
        return feats, feats_lengths

    def frame_counts(self, input_lengths: torch.Tensor) -> Tuple[torch.Tensor, bool]:
        """Frames per utterance for a training step (the policy's batch rule).

        Args:
            input_lengths: ``(B,)`` int64 samples.

        Returns:
            ``(feats_lengths (B,) int64, fallback)``; outside fallback all
            lengths equal the batch's ``T``.
        """
        counts, fallback = self.policy.batch_frame_counts([int(n) for n in input_lengths.tolist()], current_epoch())
        return torch.tensor(counts, dtype=torch.long, device=input_lengths.device), fallback

    def _count_fallback(self, input_lengths: torch.Tensor) -> None:
        self.num_fallback_batches += 1
        self.last_batch_fallback = True
        secs = [n / self.fs for n in input_lengths.tolist()]
        logging.warning(
            f"dynres frontend: batch of {len(secs)} utterances ({min(secs):.2f}-{max(secs):.2f} s) has no "
            f"common frame count down to {self.policy.fallback_frame_rate_hz:g} Hz; computed at the standard "
            f"rate with padding (fallback batch #{self.num_fallback_batches})."
        )

    # ---------------------------------------------------------------- hop
    def hop_logmel(
        self, speech: torch.Tensor, speech_lengths: torch.Tensor, feats_lengths: torch.Tensor
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """``method: hop``: per-utterance fractional frame shift, whole batch at once.

        Args:
            speech: ``(B, T_samples)`` float32; speech_lengths ``(B,)`` int64 samples;
            feats_lengths: ``(B,)`` int64 frames wanted per utterance.

        Returns:
            feats ``(B, max(feats_lengths), n_mels)`` and the frame rates ``(B,)`` float (Hz).
        """
        shifts = [
            self.policy.frame_shift_samples(int(n), int(t))
            for n, t in zip(speech_lengths.tolist(), feats_lengths.tolist())
        ]
        shifts_t = torch.tensor(shifts, dtype=torch.float64, device=speech.device)  # (B,)
        feats = self.framed_logmel(speech, speech_lengths, shifts_t, feats_lengths, self.logmel)
        return feats, (self.fs / shifts_t).float()

    def framed_logmel(
        self,
        speech: torch.Tensor,
        speech_lengths: torch.Tensor,
        shifts: torch.Tensor,
        feats_lengths: torch.Tensor,
        logmel: LogMel,
    ) -> torch.Tensor:
        """Log-mel of frames centred on ``round(t × shift_b)``, reflected at each utterance's ends.

        As ``torch.stft(center=True, pad_mode="reflect")`` does for one
        utterance: each frame reads ``n_fft`` samples around its centre, the
        ``win_length`` window centred in ``n_fft``; ``rfft``, power, ``logmel``.

        Args:
            speech ``(B, T_samples)``; speech_lengths ``(B,)`` int64; shifts
            ``(B,)`` float64 samples; feats_lengths ``(B,)`` int64 frames.

        Returns:
            feats ``(B, max(feats_lengths), n_mels)``, frames past an
            utterance's length set to 0.
        """
        device = speech.device
        batch = speech.size(0)
        t_max = int(feats_lengths.max())
        half = self.n_fft // 2
        # 1. Reflect-pad every utterance at its own ends: (B, L_max + n_fft), cost O(B x L).
        pos = torch.arange(-half, speech.size(1) + half, device=device)[None, :]  # (1, L_max + n_fft)
        n = speech_lengths.to(device).long().clamp(min=1)[:, None]  # (B, 1)
        period = (2 * (n - 1)).clamp(min=1)
        src = torch.remainder(pos, period)
        src = torch.where(src >= n, period - src, src).clamp(min=0)
        src = torch.where(n == 1, torch.zeros_like(src), src)  # (B, L_max + n_fft)
        padded = torch.gather(speech.float(), 1, src)  # (B, L_max + n_fft)
        # 2. Frame t of utterance b starts at padded sample round(t * shift_b) (centre minus n_fft/2).
        t_idx = torch.arange(t_max, device=device, dtype=torch.float64)  # (T,)
        starts = torch.round(shifts[:, None] * t_idx[None, :]).long()  # (B, T)
        starts = starts.clamp(max=padded.size(1) - self.n_fft)
        windows = padded.unfold(1, self.n_fft, 1)  # (B, L_max + 1, n_fft), a view
        frames = windows[torch.arange(batch, device=device)[:, None], starts]  # (B, T, n_fft)
        spec = torch.fft.rfft(frames * self._padded_window(device), n=self.n_fft)  # (B, T, n_fft // 2 + 1)
        power = spec.real**2 + spec.imag**2
        feats, _ = logmel(power, feats_lengths)  # (B, T, n_mels), padding -> 0
        return feats

    # ----------------------------------------------------------- resample
    def resample_rate_hz(self, num_samples: int, num_frames: int) -> int:
        """``fs'``: the rate at which ``hop_length`` gives the utterance's frame rate, on the grid."""
        rate_hz = self.policy.frame_rate_hz(num_samples, num_frames)
        ideal = self.fs * rate_hz / self.policy.standard_frame_rate_hz
        return max(self.resample_grid_hz, int(round(ideal / self.resample_grid_hz)) * self.resample_grid_hz)

    def resample_logmel(
        self, speech: torch.Tensor, speech_lengths: torch.Tensor, feats_lengths: torch.Tensor
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """``method: resample``: polyphase resampling, then (nearly) the standard hop.

        Args:
            speech: ``(B, T_samples)`` float32; speech_lengths ``(B,)`` int64 samples;
            feats_lengths: ``(B,)`` int64 frames wanted per utterance.

        Returns:
            feats ``(B, max(feats_lengths), n_mels)`` and the frame rates ``(B,)``
            float (Hz, in the original time axis).
        """
        lengths = speech_lengths.tolist()
        counts = feats_lengths.tolist()
        new_rates = [self.resample_rate_hz(n, t) for n, t in zip(lengths, counts)]
        resampled: List[torch.Tensor] = []
        for b, (n, fs_new) in enumerate(zip(lengths, new_rates)):
            wav = speech[b, :n].float()  # (T_samples,)
            if fs_new != self.fs:
                g = math.gcd(self.fs, fs_new)
                wav = torchaudio.functional.resample(
                    wav, self.fs // g, fs_new // g, resampling_method="sinc_interp_hann"
                )  # (T_samples * fs' / fs,)
            resampled.append(wav)
        new_lengths = torch.tensor([len(w) for w in resampled], dtype=torch.long, device=speech.device)
        padded = torch.nn.utils.rnn.pad_sequence(resampled, batch_first=True)  # (B, T_resampled)
        shifts = torch.tensor(
            [
                self.policy.frame_shift_samples(int(n), int(t), fs_hz=fs_new)
                for n, t, fs_new in zip(new_lengths.tolist(), counts, new_rates)
            ],
            dtype=torch.float64,
            device=speech.device,
        )  # (B,) samples at fs'
        if self.resample_filterbank == "original":
            feats = self.framed_logmel(padded, new_lengths, shifts, feats_lengths, self.logmel)
        else:
            feats = torch.zeros(len(lengths), int(feats_lengths.max()), self.n_mels, device=speech.device)
            for fs_new in sorted(set(new_rates)):
                sel = torch.tensor([r == fs_new for r in new_rates], device=speech.device)
                feats[sel] = self.framed_logmel(
                    padded[sel], new_lengths[sel], shifts[sel], feats_lengths[sel], self._logmel_for(fs_new, speech.device)
                )
        rates = torch.tensor(new_rates, dtype=torch.float64, device=speech.device) / shifts
        return feats, rates.float()

    def _logmel_for(self, fs_new: int, device: torch.device) -> LogMel:
        """Mel filterbank for signals sampled at ``fs_new`` covering at most ``0..fs/2`` Hz."""
        if fs_new not in self._resampled_logmels:
            options = dict(self._mel_options)
            options["fmax"] = min(options["fmax"] or self.fs / 2, self.fs / 2)
            self._resampled_logmels[fs_new] = LogMel(fs=fs_new, **options)
        return self._resampled_logmels[fs_new].to(device)

    def _padded_window(self, device: torch.device) -> torch.Tensor:
        """The analysis window zero-padded to ``n_fft``, centred (as torch.stft)."""
        if self.window is None:
            win = torch.ones(self.win_length, device=device)
        else:
            win = getattr(torch, f"{self.window}_window")(self.win_length, device=device)
        left = (self.n_fft - self.win_length) // 2
        return torch.nn.functional.pad(win, (left, self.n_fft - self.win_length - left))
