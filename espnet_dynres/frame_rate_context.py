"""Per-batch facts the frontend and SpecAugment share: frame rates and the epoch.

ESPnet's model calls ``frontend(speech, speech_lengths)`` and then
``specaug(feats, feats_lengths)``; SpecAugment never sees the waveform, so it
cannot know each utterance's frame rate.  The ``dynres`` frontend records the
rates here on every forward (``None`` when it ran at the standard rate) and
``specaug: dynres`` reads them.  The iterator factory records the epoch for
the optional resolution curriculum.  The ``token_normalized`` model passes the
sampler's planned frame counts (batch key ``speech_frames``) to the frontend.  A :class:`contextvars.ContextVar` keeps
concurrent threads (e.g. ``DataParallel`` replicas) apart.  The rates are read once
(:func:`take_frame_rates`) and cleared when the model's forward ends, so a later batch never
sees stale ones.  Why module-level state at all: ESPnet's ``encode`` calls the frontend and
SpecAugment with ``(tensor, lengths)`` only (issue 14 moves this to explicit arguments).
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator, Optional

import torch

_FRAME_RATES_HZ: contextvars.ContextVar = contextvars.ContextVar("espnet_dynres_frame_rates_hz", default=None)


def set_frame_rates(frame_rates_hz: Optional[torch.Tensor]) -> None:
    """Record ``(B,)`` float frame rates (Hz) of the current batch; ``None`` = standard rate."""
    _FRAME_RATES_HZ.set(frame_rates_hz)


def current_frame_rates() -> Optional[torch.Tensor]:
    """The ``(B,)`` frame rates (Hz) last recorded in this context, or ``None``."""
    return _FRAME_RATES_HZ.get()


def take_frame_rates() -> Optional[torch.Tensor]:
    """:func:`current_frame_rates`, then forget them: each recorded batch is read once (by SpecAugment)."""
    rates = _FRAME_RATES_HZ.get()
    _FRAME_RATES_HZ.set(None)
    return rates


_EPOCH: contextvars.ContextVar = contextvars.ContextVar("espnet_dynres_epoch", default=None)


def set_epoch(epoch: Optional[int]) -> None:
    """Record the 1-based training epoch (set by the dynres iterator factory per epoch)."""
    _EPOCH.set(epoch)


def current_epoch() -> Optional[int]:
    """The epoch last recorded in this context, or ``None`` (no curriculum)."""
    return _EPOCH.get()


SPEECH_FRAMES_KEY = "speech_frames"  # batch key carrying the sampler's plan, (B,) int64

_PLANNED_FRAMES: contextvars.ContextVar = contextvars.ContextVar("espnet_dynres_planned_frames", default=None)


@contextlib.contextmanager
def planned_frames(frames: Optional[torch.Tensor]) -> Iterator[None]:
    """Within the block, the ``dynres`` frontend computes exactly ``frames`` per utterance.

    ``frames``: ``(B,)`` int64 feature frames per utterance as planned by the
    ``dynres`` sampler (the batch key ``speech_frames``), or ``None`` (the
    frontend applies the policy's batch rule itself).  The ``token_normalized``
    model opens this block around its forward.
    """
    token = _PLANNED_FRAMES.set(frames)
    try:
        yield
    finally:
        _PLANNED_FRAMES.reset(token)
        _FRAME_RATES_HZ.set(None)  # this batch's rates end with its forward: nothing stale for the next one


def current_planned_frames() -> Optional[torch.Tensor]:
    """The ``(B,)`` planned frames of the batch being computed, or ``None``."""
    return _PLANNED_FRAMES.get()
