"""``specaug: dynres`` — SpecAugment whose time masks and time warp keep their width in seconds."""

from __future__ import annotations

from typing import Optional, Sequence, Tuple, Union

import torch
from typeguard import typechecked

from espnet2.asr.specaug.abs_specaug import AbsSpecAug
from espnet2.layers.mask_along_axis import MaskAlongAxis, MaskAlongAxisVariableMaxWidth
from espnet2.layers.time_warp import time_warp


def _pair(value, name: str) -> Tuple:
    if isinstance(value, (int, float)):
        return (0, value)
    if len(value) != 2 or value[0] > value[1]:
        raise ValueError(f"{name} must be one number or [low, high] with low <= high, got {value}")
    return tuple(value)


class DynResSpecAug(AbsSpecAug):
    """SpecAugment for dynamic-resolution batches.

    Same keys as ESPnet's ``SpecAug``.  Frame widths (``time_mask_width_range``, ``time_warp_window``) are
    frames at the standard frame rate (``fs / hop_length``), scaled per utterance by ``frame_rate_ratios``
    (rounded), so a mask covers the same seconds; without ratios this is ESPnet's ``SpecAug``.  Short inputs
    are never an error (masks clipped, warp skipped when ``T_frames <= 2 × window``).

    Raises:
        ValueError: nothing to apply, both time-mask kinds given, bad ranges.
    """

    @typechecked
    def __init__(self, apply_time_warp: bool = True, time_warp_window: int = 5, time_warp_mode: str = "bicubic",
                 apply_freq_mask: bool = True, freq_mask_width_range: Union[int, Sequence[int]] = (0, 20),
                 num_freq_mask: int = 2, apply_time_mask: bool = True,
                 time_mask_width_range: Optional[Union[int, Sequence[int]]] = None,
                 time_mask_width_ratio_range: Optional[Union[float, Sequence[float]]] = None, num_time_mask: int = 2,
                 replace_with_zero: bool = True):
        if not (apply_time_warp or apply_freq_mask or apply_time_mask):
            raise ValueError("specaug dynres: enable at least one of time warp, freq mask, time mask")
        if apply_time_mask and (time_mask_width_range is None) == (time_mask_width_ratio_range is None):
            raise ValueError("specaug dynres: give exactly one of time_mask_width_range (frames at the standard rate) "
                             "or time_mask_width_ratio_range (fraction of the utterance)")
        super().__init__()
        self.apply_time_warp = apply_time_warp
        self.time_warp_window = time_warp_window
        self.time_warp_mode = time_warp_mode
        self.freq_mask = (MaskAlongAxis(dim="freq", mask_width_range=freq_mask_width_range, num_mask=num_freq_mask,
                                        replace_with_zero=replace_with_zero) if apply_freq_mask else None)
        self.time_mask_width_range = None
        self.time_mask_ratio = None
        if apply_time_mask and time_mask_width_range is not None:
            self.time_mask_width_range = _pair(time_mask_width_range, "time_mask_width_range")
        elif apply_time_mask:
            self.time_mask_ratio = MaskAlongAxisVariableMaxWidth(
                dim="time", mask_width_ratio_range=time_mask_width_ratio_range, num_mask=num_time_mask,
                replace_with_zero=replace_with_zero)
        self.num_time_mask = num_time_mask
        self.replace_with_zero = replace_with_zero

    def forward(self, x: torch.Tensor, x_lengths: Optional[torch.Tensor] = None,
                frame_rate_ratios: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        """Time warp, frequency masks and time masks, frame widths scaled per utterance.

        Args:
            x: feats ``(B, T_frames, n_mels)``; returned augmented, with ``x_lengths``.
            x_lengths: ``(B,)`` int64 frames before padding (``None``: all ``T_frames``).
            frame_rate_ratios: ``(B,)`` float, frame rate / standard rate (``None``: all 1).

        Raises:
            ValueError: ``frame_rate_ratios`` not of shape ``(B,)`` or not positive.
        """
        assert x.dim() == 3, f"feats must be (B, T_frames, n_mels), got {tuple(x.shape)}"
        batch, t_max = x.shape[0], x.shape[1]
        if x_lengths is None:
            x_lengths = torch.full((batch,), t_max, dtype=torch.long, device=x.device)
        if frame_rate_ratios is None:
            ratio = torch.ones(batch, device=x.device)
        elif frame_rate_ratios.shape != (batch,) or not bool((frame_rate_ratios > 0).all()):
            raise ValueError(f"specaug dynres: frame_rate_ratios must be (B,)=({batch},) positive values, got shape "
                             f"{tuple(frame_rate_ratios.shape)}; pass the dynres frontend's rates / its standard rate.")
        else:
            ratio = frame_rate_ratios.to(device=x.device, dtype=torch.float32)  # (B,)
        if self.apply_time_warp:
            x = self._time_warp(x, x_lengths, ratio)
        if self.freq_mask is not None:
            x, _ = self.freq_mask(x, x_lengths)
        if self.time_mask_width_range is not None:
            x = self._time_mask(x, x_lengths, ratio)
        elif self.time_mask_ratio is not None:
            x, _ = self.time_mask_ratio(x, x_lengths)
        return x, x_lengths

    def _time_warp(self, x, x_lengths, ratio):
        out = []
        for b in range(x.shape[0]):
            n = int(x_lengths[b])
            window = int(round(self.time_warp_window * float(ratio[b])))
            warped = time_warp(x[b : b + 1, :n].clone(), window=window, mode=self.time_warp_mode)  # (1, n, F)
            out.append(torch.cat([warped, x[b : b + 1, n:]], dim=1))
        return torch.cat(out, dim=0)

    def _time_mask(self, x, x_lengths, ratio):
        batch, t_max = x.shape[0], x.shape[1]
        low, high = self.time_mask_width_range
        width_std = torch.randint(int(low), int(high) + 1, (batch, self.num_time_mask), device=x.device)
        width = torch.round(width_std.float() * ratio[:, None]).long()  # (B, num_mask)
        lengths = x_lengths.to(x.device)[:, None]  # (B, 1)
        width = torch.minimum(width, lengths)
        room = (lengths - width + 1).clamp(min=1).float()
        pos = (torch.rand(batch, self.num_time_mask, device=x.device) * room).long()  # (B, num_mask)
        aran = torch.arange(t_max, device=x.device)[None, None, :]  # (1, 1, T)
        mask = ((pos[:, :, None] <= aran) & (aran < (pos + width)[:, :, None])).any(dim=1)  # (B, T)
        value = 0.0 if self.replace_with_zero else x.mean()
        return x.masked_fill(mask[:, :, None], value)
