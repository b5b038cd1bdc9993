"""Log-mel features at a per-utterance frame shift: :func:`framed_logmel`, :func:`resample_rows` and the three feature
paths built from them, the functions :class:`~espnet_dynres.asr.frontend.dynres.DynResFrontend` is made of."""

from __future__ import annotations

from typing import Callable, Optional, Tuple

import torch

from espnet_dynres.core.frame_rate_policy import FrameRatePolicy

SHOWN_ITEMS = 5  # batch items named in an error message

# (power (B, T, F), lengths (B,) or None) -> (log-mel (B, T, n_mels) with padded frames 0, ...): ESPnet's LogMel.
LogMelFn = Callable[[torch.Tensor, Optional[torch.Tensor]], Tuple[torch.Tensor, Optional[torch.Tensor]]]


def padded_window(window: Optional[str], win_length: int, n_fft: int, device: torch.device) -> torch.Tensor:
    """The analysis window (``torch.<window>_window``, or ones for ``None``) zero-padded to ``n_fft``, centred, as
    ``torch.stft`` pads it: ``(n_fft,)`` float32."""
    win = torch.ones(win_length, device=device) if window is None else getattr(torch, f"{window}_window")(
        win_length, device=device)
    left = (n_fft - win_length) // 2
    return torch.nn.functional.pad(win, (left, n_fft - win_length - left))


def reflect_padded(speech: torch.Tensor, speech_lengths: torch.Tensor, n_fft: int) -> torch.Tensor:
    """Every utterance reflect-padded by ``n_fft // 2`` samples at its own two ends, as ``pad_mode="reflect"`` (edge
    sample not repeated; the mirror repeats for utterances shorter than the pad; unspecified past ``L_b + n_fft // 2``):
    ``speech`` ``(B, T_samples)`` float, ``speech_lengths`` ``(B,)`` int64 -> ``(B, T_samples + n_fft)`` float32."""
    half = n_fft // 2
    speech = speech.float()
    padded = torch.nn.functional.pad(speech, (half, half))  # (B, L_max + n_fft)
    j = torch.arange(half, device=speech.device)  # (n_fft/2,)
    n = speech_lengths.to(speech.device).long().clamp(min=1)[:, None]  # (B, 1)
    pos = torch.cat([(j - half).expand(n.size(0), half), n + j], dim=1)  # (B, n_fft): both borders
    period = (2 * (n - 1)).clamp(min=1)
    src = torch.remainder(pos, period)
    src = torch.where(src >= n, period - src, src).clamp(min=0)
    src = torch.where(n == 1, torch.zeros_like(src), src)  # (B, n_fft) source samples
    return padded.scatter_(1, pos + half, speech.gather(1, src))


def framed_logmel(speech: torch.Tensor, speech_lengths: torch.Tensor, shifts: torch.Tensor,
                  feats_lengths: torch.Tensor, window: torch.Tensor, logmel: LogMelFn) -> torch.Tensor:
    """Log-mel of frames centred on ``round(t × shift_b)``, reflected at each utterance's ends, as
    ``torch.stft(center=True, pad_mode="reflect")`` frames one utterance, times ``window`` (``(n_fft,)``,
    :func:`padded_window`), then ``rfft``, power, ``logmel``.  ``speech`` ``(B, T_samples)``, ``speech_lengths``
    ``(B,)`` int64, ``shifts`` ``(B,)`` float64 samples, ``feats_lengths`` ``(B,)`` int64 frames -> feats
    ``(B, max(feats_lengths), n_mels)``, 0 past an utterance's length."""
    device = speech.device
    n_fft = int(window.numel())
    t_max = int(feats_lengths.max())
    padded = reflect_padded(speech, speech_lengths, n_fft)  # (B, L_max + n_fft)
    t_idx = torch.arange(t_max, device=device, dtype=torch.float64)  # (T,)
    starts = torch.round(shifts[:, None] * t_idx[None, :]).long()  # (B, T): frame starts in padded
    starts = starts.clamp(max=padded.size(1) - n_fft)
    # Every n_fft window of the flat batch is a row of one strided view; index_select copies the B x T wanted rows.
    batch, padded_len = padded.shape
    windows = padded.reshape(-1).as_strided((batch * padded_len - n_fft + 1, n_fft), (1, 1))
    rows = (starts + torch.arange(batch, device=device)[:, None] * padded_len).reshape(-1)  # (B * T,)
    frames = windows.index_select(0, rows).view(batch, t_max, n_fft)  # (B, T, n_fft), a copy
    frames.mul_(window.to(device))
    spec = torch.fft.rfft(frames, n=n_fft)  # (B, T, n_fft // 2 + 1)
    power = spec.real * spec.real + spec.imag * spec.imag  # bit-identical to DefaultFrontend's x ** 2, faster on CPU
    all_full = bool((feats_lengths == t_max).all())  # masking costs a pass; a dynamic batch has no padded frames
    feats, _ = logmel(power, None if all_full else feats_lengths)  # (B, T, n_mels), padding -> 0
    return feats


def hop_logmel(policy: FrameRatePolicy, speech: torch.Tensor, speech_lengths: torch.Tensor, feats_lengths: torch.Tensor,
               window: torch.Tensor, logmel: LogMelFn) -> Tuple[torch.Tensor, torch.Tensor]:
    """``method: hop``: each utterance framed at its own shift (:meth:`FrameRatePolicy.frame_shifts_samples`) in one
    :func:`framed_logmel`.  ``speech`` ``(B, T_samples)`` float32, ``speech_lengths`` ``(B,)`` int64 samples,
    ``feats_lengths`` ``(B,)`` int64 frames -> feats ``(B, max(feats_lengths), n_mels)``, rates ``(B,)`` float32 Hz."""
    shifts = policy.frame_shifts_samples(speech_lengths.to(speech.device), feats_lengths.to(speech.device))
    return framed_logmel(speech, speech_lengths, shifts, feats_lengths, window, logmel), (policy.fs / shifts).float()


def resample_logmel(policy: FrameRatePolicy, speech: torch.Tensor, speech_lengths: torch.Tensor,
                    feats_lengths: torch.Tensor, window: torch.Tensor, logmel: LogMelFn, grid_hz: int,
                    resampler: Callable[[int], Callable[[torch.Tensor], torch.Tensor]],
                    logmel_at: Optional[Callable[[int], LogMelFn]] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """``method: resample``: each utterance resampled to its rate ``fs'`` on the ``grid_hz`` grid
    (:func:`resample_rates_hz`, :func:`resample_rows`), framed at (nearly) the standard hop; otherwise as
    :func:`hop_logmel`.  ``logmel``: ``policy.fs``'s filterbank (a speed change); ``resampler(fs')``: the ``fs -> fs'``
    transform; ``logmel_at(fs')``: the filterbank of ``fs'`` (``None``: ``logmel``)."""
    device = speech.device
    counts = feats_lengths.to(device)
    new_rates = resample_rates_hz(policy, speech_lengths.to(device).long(), counts, grid_hz)  # (B,) int64 Hz
    padded, new_lengths = resample_rows(speech, speech_lengths, new_rates, policy.fs, resampler)
    shifts = policy.frame_shifts_samples(new_lengths, counts, fs_hz=new_rates)  # (B,) samples at fs'
    if logmel_at is None:
        feats = framed_logmel(padded, new_lengths, shifts, feats_lengths, window, logmel)
    else:
        feats = None
        for fs_new in sorted(set(new_rates.tolist())):
            sel = new_rates == fs_new
            part = framed_logmel(padded[sel], new_lengths[sel], shifts[sel], feats_lengths[sel], window,
                                 logmel_at(fs_new))
            if feats is None:
                feats = torch.zeros(speech.size(0), int(feats_lengths.max()), part.size(2), device=device)
            feats[sel, : part.size(1)] = part  # a padded batch's rows differ in length
    return feats, (new_rates.double() / shifts).float()


def fixed_rate_logmel(policy: FrameRatePolicy, speech: torch.Tensor, speech_lengths: torch.Tensor,
                      window: torch.Tensor, logmel: LogMelFn) -> Tuple[torch.Tensor, torch.Tensor]:
    """Every utterance at ``policy.eval_frame_rate_hz`` (:meth:`FrameRatePolicy.eval_frame_counts` frames): feats
    ``(B, T_frames, n_mels)`` (padded frames 0) and feats_lengths ``(B,)`` int64."""
    feats_lengths = torch.from_numpy(policy.eval_frame_counts(speech_lengths.cpu().numpy())).to(speech.device)
    shifts = torch.full((speech.size(0),), policy.eval_frame_shift_samples, dtype=torch.float64, device=speech.device)
    return framed_logmel(speech.float(), speech_lengths, shifts, feats_lengths, window, logmel), feats_lengths


def resample_rates_hz(policy: FrameRatePolicy, num_samples: torch.Tensor, num_frames: torch.Tensor,
                      grid_hz: int) -> torch.Tensor:
    """``fs'`` per utterance for ``method: resample``: the rate at which ``hop_length`` gives its frame rate
    (:meth:`FrameRatePolicy.frame_shifts_samples`), on a ``grid_hz`` grid (at least one step).  ``num_samples``,
    ``num_frames`` ``(B,)`` int64 -> ``(B,)`` int64 Hz."""
    rate_hz = policy.fs / policy.frame_shifts_samples(num_samples, num_frames)  # (B,) float64
    ideal = policy.fs * rate_hz / policy.standard_frame_rate_hz
    return (torch.round(ideal / grid_hz) * grid_hz).clamp(min=grid_hz).long()


def resample_rows(speech: torch.Tensor, speech_lengths: torch.Tensor, new_rates_hz: torch.Tensor, fs_hz: int,
                  resampler: Callable[[int], Callable[[torch.Tensor], torch.Tensor]]
                  ) -> Tuple[torch.Tensor, torch.Tensor]:
    """Each utterance resampled from ``fs_hz`` to its own ``new_rates_hz`` (``(B,)`` int64), the rows of one rate
    zero-padded together (as ``torchaudio.functional.resample`` assumes); ``resampler(fs_new)``: the transform.
    ``speech`` ``(B, T_samples)`` float32, ``speech_lengths`` ``(B,)`` int64 -> ``(B, T_resampled)`` float32 zero-padded
    and ``(B,)`` int64 samples (``ceil(L × fs' / fs)``, as torchaudio)."""
    device = speech.device
    lengths = speech_lengths.to(device).long()
    g = torch.gcd(new_rates_hz, torch.full_like(new_rates_hz, fs_hz))
    new_lengths = torch.where(new_rates_hz == fs_hz, lengths,
                              torch.ceil((new_rates_hz // g * lengths).double() / (fs_hz // g).double()).long(),
                              )  # (B,)
    padded = speech.new_zeros(speech.size(0), int(new_lengths.max()))  # (B, T_resampled)
    for fs_new in sorted(set(new_rates_hz.tolist())):  # a loop over distinct rates, not utterances
        rows = (new_rates_hz == fs_new).nonzero().flatten()
        n_max = int(lengths[rows].max())
        wav = speech[rows, :n_max].float()
        wav = wav * (torch.arange(n_max, device=device)[None, :] < lengths[rows, None])  # zero past each end
        if fs_new != fs_hz:
            wav = resampler(fs_new)(wav)  # (rows, ceil(n_max * fs' / fs))
        padded[rows, : wav.size(1)] = wav
    return padded, new_lengths


def check_speech_batch(speech: torch.Tensor, speech_lengths: torch.Tensor, *, min_samples: int) -> None:
    """Reject a batch that would make the frontend fail or emit NaN features, naming batch index and length (find it
    with :func:`espnet_dynres.glue.data_checks.check_audio_files`).  ``speech`` ``(B, T_samples)`` float, zero-padded;
    ``speech_lengths`` ``(B,)`` int64; ``min_samples``: see :func:`~espnet_dynres.glue.data_checks.min_input_samples`.

    Raises:
        ValueError: an utterance shorter than ``min_samples``, or NaN/inf samples.
    """
    short = (speech_lengths < int(min_samples)).nonzero().flatten().tolist()
    if short:
        lengths = [int(speech_lengths[b]) for b in short[:SHOWN_ITEMS]]
        raise ValueError(
            f"batch items {short[:SHOWN_ITEMS]} have {lengths} samples, fewer than the {int(min_samples)} one "
            "analysis window needs. Remove such utterances from the data (recipe stage 4, --min_wav_duration; "
            "with asr.sh, --min_wav_duration) and re-run collect-stats.")
    # A finite sum proves all samples finite in one pass (isfinite().all(): ~4); an overflow falls to the exact test.
    if not bool(torch.isfinite(speech.sum())) and not bool(torch.isfinite(speech).all()):
        items = (~torch.isfinite(speech)).any(dim=1).nonzero().flatten().tolist()
        raise ValueError(f"batch items {items[:SHOWN_ITEMS]} have NaN/inf samples (lengths "
            f"{[int(speech_lengths[b]) for b in items[:SHOWN_ITEMS]]}). Find and re-create the files "
            "(recipe stage 3 reports them by name) or check the data augmentation.")
