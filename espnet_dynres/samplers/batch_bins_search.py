"""Choosing a dynres ``batch_bins`` by audio per step or largest batch; the warning for a carried-over ``numel`` one."""

from __future__ import annotations

import contextlib
import logging
from typing import Dict, Optional, Sequence, Tuple

import numpy as np

from espnet_dynres.samplers.dynres_batch_sampler import DynResBatchSampler


def mean_audio_per_batch_sec(batches: Sequence[Sequence[str]], utt2samples: Dict[str, int], fs_hz: int) -> float:
    """Mean seconds of audio per batch (``Σ samples / fs`` over a batch's members).
    Raises:
        ValueError: no batches.
        KeyError: a member missing from ``utt2samples``."""
    if not batches:
        raise ValueError("cannot average over 0 batches")
    return sum(utt2samples[k] for b in batches for k in b) / float(fs_hz) / len(batches)


@contextlib.contextmanager
def warnings_silenced():
    """Log records below ERROR dropped (a budget search plans many candidates, each may warn)."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(previous)


def fullest_batch_frames(sampler: DynResBatchSampler, epochs: Sequence[int]) -> int:
    """The most ``B × T`` frames (padding included) of any batch of the plans of ``epochs``."""
    return max(b.plan.cost_frames for e in epochs for b in sampler.planned_batches(e))


def memory_safe_batch_bins(sampler: DynResBatchSampler, max_frames: int, epochs: Sequence[int] = (1, 2)) -> int:
    """Largest ``batch_bins`` whose fullest batch over ``epochs`` has <= ``max_frames`` ``B × T`` frames (bisection).
    Raises:
        ValueError: ``max_frames < 1``."""
    if max_frames < 1:
        raise ValueError(f"max_frames must be >= 1, got {max_frames}")
    with warnings_silenced():
        lo, hi = int(max_frames), int(1.5 * max_frames) + 1  # lo fits, hi is the first value not tried
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if fullest_batch_frames(sampler.with_batch_bins(mid), epochs) <= max_frames:
                lo = mid
            else:
                hi = mid
    return lo


def binding_batch_bins(sampler: DynResBatchSampler, batch_bins: int,
                       epochs: Sequence[int] = (1, 2)) -> Tuple[int, bool]:
    """``(value, lowered)``: ``batch_bins``, or its plan's fullest batch frames if under half of it (clamp binds)."""
    fullest = fullest_batch_frames(sampler.with_batch_bins(batch_bins), epochs)
    if fullest < 0.5 * batch_bins:
        return fullest, True
    return batch_bins, False


def batch_bins_for_audio(sampler: DynResBatchSampler, audio_sec: float, epoch: int = 1, iterations: int = 4) -> int:
    """``batch_bins`` (``B × T``, >= 1) whose ``epoch`` plan averages ``audio_sec`` s of audio per batch (iterated)."""
    policy = sampler.policy
    drawn = policy.target_frame_rate_range_hz
    rate_hz = policy.target_frame_rate_hz or (sum(drawn) / 2 if drawn else policy.standard_frame_rate_hz)
    bins = max(1, int(round(audio_sec * rate_hz)))
    with warnings_silenced():
        for _ in range(iterations):
            candidate = sampler.with_batch_bins(bins)
            got = mean_audio_per_batch_sec([b.keys for b in candidate.planned_batches(epoch)], candidate.utt2samples,
                                           policy.fs)
            new = max(1, int(round(bins * audio_sec / got)))
            if new == bins:
                break
            bins = new
    return bins


def numel_sized_budget(sampler: DynResBatchSampler, shape_files: Sequence[str], epoch: int = 1) -> Optional[str]:
    """``None``, or a warning if ``batch_bins`` looks like a ``numel`` one (fullest batch < half; >= median samples)."""
    from espnet2.samplers.build_batch_sampler import build_batch_sampler
    batches = [b.keys for b in sampler.planned_batches(epoch)]
    fullest = fullest_batch_frames(sampler, [epoch])
    median_samples = float(np.median(np.fromiter(sampler.utt2samples.values(), dtype=np.int64)))
    if fullest >= 0.5 * sampler.batch_bins or sampler.batch_bins < median_samples:
        return None
    fs = sampler.policy.fs
    numel = list(build_batch_sampler(
        type="numel", batch_size=20, batch_bins=sampler.batch_bins, shape_files=list(shape_files),
        fold_lengths=[80000, 150][: len(shape_files)], sort_in_batch=sampler.sort_in_batch,
        sort_batch=sampler.sort_batch, drop_last=False, min_batch_size=sampler.min_batch_size))
    numel_sec = mean_audio_per_batch_sec(numel, sampler.utt2samples, fs)
    dyn_audio = [sum(sampler.utt2samples[k] for k in b) / fs for b in batches]
    suggestion = batch_bins_for_audio(sampler, numel_sec, epoch)
    return (
        f"batch_bins={sampler.batch_bins} looks like a numel budget (samples x dims). Under batch_type dynres it "
        f"counts feature frames B x T: this plan's largest batch holds {max(dyn_audio):.0f} s of audio "
        f"({max(len(b) for b in batches)} utterances; mean {np.mean(dyn_audio):.0f} s), and batch_bins never limits "
        f"a batch (the fullest uses {fullest} frames), so it does not bound memory. batch_type numel with the same "
        f"value holds {numel_sec:.1f} s per batch on average; the dynres batch_bins with that mean audio per batch "
        f"is {suggestion} (python -m espnet_dynres.bin.audit_batches shows any value's batches).")
