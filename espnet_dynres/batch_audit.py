"""Batch audit: what a batch sampler does to a corpus, in numbers (CLI: :mod:`espnet_dynres.bin.audit_batches`).

Padding fraction ``Σ_b (B_b · T_b − Σ_i frames_i) / Σ_b B_b · T_b`` (feature frames; ESPnet's samplers: standard
``1 + samples // hop_length`` frames, ``T_b`` the longest); frame rate ``planned / standard frames × fs / hop_length``
Hz; composition change ``1 − pairs still together / pairs together in epoch 1`` (0 for ESPnet's samplers)."""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from espnet_dynres.core.batch_planner import BatchKind, BatchPlan, padded_cost_frames
from espnet_dynres.core.frame_rate_policy import FrameRatePolicy, parse_fs, standard_frame_counts
from espnet_dynres.core.frontend_config import FrontendConfig
from espnet_dynres.core.readers import read_shape_file
from espnet_dynres.samplers.batch_bins_search import batch_bins_for_audio, binding_batch_bins, memory_safe_batch_bins
from espnet_dynres.samplers.dynres_batch_sampler import DynResBatchSampler

ESPNET_BATCH_TYPES = ("unsorted", "sorted", "folded", "length", "numel")
BATCH_TYPES = ESPNET_BATCH_TYPES + ("dynres",)
OFF_STANDARD_TOLERANCE = 0.10  # |rate / standard rate - 1| above this counts as off the standard rate
RATE_BIN_HZ = 10.0  # width of the audit's frame-rate histogram bins


def rate_histogram(rates_hz: np.ndarray, bin_hz: float = RATE_BIN_HZ) -> Dict[str, int]:
    """``{"lo-hi": count}`` of ``(N,)`` rates (Hz) per ``bin_hz``-wide bin ``[lo, hi)``, in order, empty bins kept."""
    rates = np.asarray(rates_hz, dtype=np.float64)
    if rates.size == 0:
        return {}
    first = int(np.floor(rates.min() / bin_hz + 1e-9))
    last = int(np.floor(rates.max() / bin_hz + 1e-9))
    edges = np.arange(first, last + 2) * bin_hz
    counts, _ = np.histogram(rates, bins=edges)
    return {f"{a:g}-{b:g}": int(c) for a, b, c in zip(edges[:-1], edges[1:], counts)}


@dataclass(frozen=True)
class ShapeTable:
    """Shape files' ``keys``, ``num_samples`` and ``num_tokens`` (``(N,)`` int64; tokens ``None`` without text)."""
    keys: List[str]
    num_samples: np.ndarray
    num_tokens: Optional[np.ndarray] = None

    def __len__(self) -> int:
        return len(self.keys)


def read_shape_table(speech_shape: Union[str, Path], text_shape: Optional[Union[str, Path]] = None) -> ShapeTable:
    """:class:`ShapeTable` from a speech shape file and an optional text shape file.
    Raises:
        ValueError: malformed files, or keys differing between the two (up to 5 named on each side)."""
    keys, samples = read_shape_file(speech_shape)
    tokens = None
    if text_shape is not None:
        text_keys, text_tokens = read_shape_file(text_shape)
        index = dict(zip(text_keys, range(len(text_keys))))
        if len(index) != len(keys) or any(k not in index for k in keys):
            missing = [k for k in keys if k not in index][:5]
            extra = sorted(set(text_keys) - set(keys))[:5]
            raise ValueError(f"{text_shape} lacks {missing} and has extra {extra} compared with {speech_shape}; "
                             "use the shape files of one collect-stats run (stage 10).")
        tokens = text_tokens[np.fromiter((index[k] for k in keys), dtype=np.int64, count=len(keys))]
    return ShapeTable(keys=keys, num_samples=samples, num_tokens=tokens)


@dataclass(frozen=True)
class Distribution:
    """Summary of a per-batch or per-utterance quantity; ``cv`` = population std / mean (``nan`` for mean 0)."""
    min: float
    p5: float
    median: float
    p95: float
    max: float
    mean: float
    cv: float

    @classmethod
    def of(cls, values: np.ndarray) -> "Distribution":
        v = np.asarray(values, dtype=np.float64)
        if v.size == 0:
            raise ValueError("cannot summarise an empty list of batches")
        p5, median, p95 = np.percentile(v, [5, 50, 95])
        mean = float(v.mean())
        cv = float(v.std() / mean) if mean != 0 else math.nan
        return cls(float(v.min()), float(p5), float(median), float(p95), float(v.max()), mean, cv)


@dataclass
class BatchAudit:
    """What :func:`audit_batches` measured (epoch 1): per batch ``batch_size``, ``tokens`` (``None`` without text),
    ``audio_sec`` (s), ``frames`` (``B × T``); per utterance ``frame_rate_hz`` (Hz); ``batch_*`` arrays
    ``(num_batches,)`` in sampler order, ``utt_frame_rate_hz`` ``(utterance slots,)`` Hz; ``composition_change``
    (``None`` without a batch of two) and ``num_below_clamp`` (``None`` without a policy)."""
    batch_type: str
    num_utterances: int
    num_utterances_in_batches: int
    num_batches: int
    batch_size: Distribution
    total_frames: int
    padded_frames: int
    padding_fraction: float
    num_padded_batches: int
    tokens: Optional[Distribution]
    composition_change: Optional[float]
    frame_rate_hz: Optional[Distribution] = None
    off_standard_rate_fraction: float = 0.0
    audio_sec: Optional[Distribution] = None
    build_time_sec: float = 0.0
    num_below_clamp: Optional[int] = None
    frames: Optional[Distribution] = None
    frame_rate_histogram: Optional[Dict[str, int]] = None
    batch_sizes: np.ndarray = field(default=None, repr=False)
    batch_frames: np.ndarray = field(default=None, repr=False)
    batch_padded_frames: np.ndarray = field(default=None, repr=False)
    batch_tokens: Optional[np.ndarray] = field(default=None, repr=False)
    batch_audio_sec: np.ndarray = field(default=None, repr=False)
    batch_min_sec: np.ndarray = field(default=None, repr=False)
    batch_max_sec: np.ndarray = field(default=None, repr=False)
    utt_frame_rate_hz: np.ndarray = field(default=None, repr=False)

    def summary(self) -> Dict:
        """JSON-ready dict of the scalar results (no per-batch arrays; NaN becomes ``None``)."""
        out = asdict(self)
        for name in ("batch_sizes", "batch_frames", "batch_padded_frames", "batch_tokens",
                     "batch_audio_sec", "batch_min_sec", "batch_max_sec", "utt_frame_rate_hz"):
            out.pop(name)
        def clean(x):
            if isinstance(x, dict):
                return {k: clean(v) for k, v in x.items()}
            return None if isinstance(x, float) and math.isnan(x) else x
        return clean(out)


def _flat_indices(batches: Sequence[Sequence[str]], index: Dict[str, int], what: str) -> Tuple[np.ndarray, np.ndarray]:
    sizes = np.fromiter(map(len, batches), dtype=np.int64, count=len(batches))
    try:
        flat = np.fromiter(map(index.__getitem__, itertools.chain.from_iterable(batches)), dtype=np.int64,
                           count=int(sizes.sum()))
    except KeyError as e:
        raise ValueError(f"utterance {e.args[0]} in the {what} batches is not in the shape files; "
                         "audit the sampler with the shape files it was built from.") from None
    return flat, sizes


def _change_from_flat(num_keys: int, flat_a: np.ndarray, sizes_a: np.ndarray, flat_b: np.ndarray,
                      sizes_b: np.ndarray) -> Optional[float]:
    pairs_a = int((sizes_a * (sizes_a - 1) // 2).sum())
    if pairs_a == 0:
        return None
    batch_a = np.full(num_keys, -1, dtype=np.int64)
    batch_b = np.full(num_keys, -1, dtype=np.int64)
    batch_a[flat_a] = np.repeat(np.arange(len(sizes_a)), sizes_a)
    batch_b[flat_b] = np.repeat(np.arange(len(sizes_b)), sizes_b)
    both = (batch_a >= 0) & (batch_b >= 0)
    cell = np.sort(batch_a[both] * max(len(sizes_b), 1) + batch_b[both])
    if cell.size == 0:
        return 1.0
    bounds = np.flatnonzero(np.diff(cell)) + 1
    counts = np.diff(np.concatenate([[0], bounds, [cell.size]]))
    kept = int((counts * (counts - 1) // 2).sum())
    return 1.0 - kept / pairs_a


def composition_change(batches_a: Sequence[Sequence[str]], batches_b: Sequence[Sequence[str]],
                       keys: Optional[Sequence[str]] = None) -> Optional[float]:
    """Fraction of pairs co-batched in ``batches_a`` and not in ``batches_b``, ``1 − Σ_{a,b} C(|A_a ∩ B_b|, 2) /
    Σ_a C(|A_a|, 2)`` (missing keys count as separated; ``keys`` default: all; ``None`` without a batch of two).
    Raises:
        ValueError: a key not in ``keys``."""
    if keys is None:
        keys = sorted({k for b in batches_a for k in b} | {k for b in batches_b for k in b})
    index = dict(zip(keys, range(len(keys))))
    flat_a, sizes_a = _flat_indices(batches_a, index, "first epoch's")
    flat_b, sizes_b = _flat_indices(batches_b, index, "second epoch's")
    return _change_from_flat(len(keys), flat_a, sizes_a, flat_b, sizes_b)


def audit_batches(table: ShapeTable, batches_epoch1: Sequence[Sequence[str]],
                  batches_epoch2: Optional[Sequence[Sequence[str]]] = None, *, hop_length_samples: int, fs_hz: int,
                  plans: Optional[Sequence[BatchPlan]] = None, batch_type: str = "", build_time_sec: float = 0.0,
                  policy=None) -> BatchAudit:
    """Audit epoch 1's batches (key tuples) and the change to ``batches_epoch2``; ``fs_hz``: the shape files' rate (Hz);
    ``plans``: a :class:`~espnet_dynres.core.batch_planner.BatchPlan` per batch (``None``: standard frames, padded).
    Raises:
        ValueError: no batches, an empty batch, a key not in ``table``, ``plans`` not matching the batches or < 1."""
    if len(batches_epoch1) == 0:
        raise ValueError(f"{batch_type or 'the sampler'} produced 0 batches")
    index = dict(zip(table.keys, range(len(table))))
    flat, sizes = _flat_indices(batches_epoch1, index, "epoch-1")
    if (sizes == 0).any():
        raise ValueError(f"batch {int(np.argmax(sizes == 0))} of {batch_type or 'the sampler'} is empty")
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    std_frames = standard_frame_counts(table.num_samples[flat], hop_length_samples)
    seconds = table.num_samples[flat] / float(fs_hz)
    batch_audio_sec = np.add.reduceat(table.num_samples[flat], starts) / float(fs_hz)  # (num_batches,) s per step
    min_sec = np.minimum.reduceat(seconds, starts)
    max_sec = np.maximum.reduceat(seconds, starts)
    if plans is None:
        padded_batch = np.ones(len(sizes), dtype=bool)
        utt_frames = std_frames  # (B_total,) frames per utterance
    else:
        if [len(p.frames) for p in plans] != sizes.tolist():
            raise ValueError("plans must hold one plan per batch and one count per utterance, in batch order")
        padded_batch = np.array([p.kind in (BatchKind.PADDED, BatchKind.STANDARD) for p in plans], dtype=bool)
        utt_frames = np.fromiter(itertools.chain.from_iterable(p.frames for p in plans), dtype=np.int64,
                                 count=int(sizes.sum()))
        if (utt_frames < 1).any():
            raise ValueError("a planned frame count must be >= 1")
    max_utt = np.maximum.reduceat(utt_frames, starts)
    batch_frames = padded_cost_frames(sizes, max_utt)
    batch_padded = batch_frames - np.add.reduceat(utt_frames, starts)
    standard_rate_hz = fs_hz / float(hop_length_samples)
    utt_rate_hz = utt_frames / std_frames * standard_rate_hz  # (B_total,) Hz
    total = int(batch_frames.sum())
    padded = int(batch_padded.sum())
    batch_tokens = None
    tokens = None
    if table.num_tokens is not None:
        batch_tokens = np.add.reduceat(table.num_tokens[flat], starts)
        tokens = Distribution.of(batch_tokens)
    change = None
    if batches_epoch2 is not None:
        flat2, sizes2 = _flat_indices(batches_epoch2, index, "epoch-2")
        change = _change_from_flat(len(table), flat, sizes, flat2, sizes2)
    return BatchAudit(
        batch_type=batch_type, num_utterances=len(table), num_utterances_in_batches=int(sizes.sum()),
        num_batches=len(sizes), batch_size=Distribution.of(sizes), total_frames=total, padded_frames=padded,
        padding_fraction=padded / total if total else 0.0,
        num_padded_batches=int(padded_batch.sum()) if plans is not None else 0, tokens=tokens,
        composition_change=change, frame_rate_hz=Distribution.of(utt_rate_hz),
        audio_sec=Distribution.of(batch_audio_sec),
        off_standard_rate_fraction=float(np.mean(np.abs(utt_rate_hz / standard_rate_hz - 1) > OFF_STANDARD_TOLERANCE)),
        build_time_sec=build_time_sec,
        num_below_clamp=None if policy is None else int(policy.below_clamp(table.num_samples[flat], utt_frames).sum()),
        frames=Distribution.of(batch_frames), frame_rate_histogram=rate_histogram(utt_rate_hz),
        utt_frame_rate_hz=utt_rate_hz, batch_sizes=sizes, batch_frames=batch_frames, batch_padded_frames=batch_padded,
        batch_tokens=batch_tokens, batch_audio_sec=batch_audio_sec, batch_min_sec=min_sec, batch_max_sec=max_sec,
    )


@dataclass
class SamplerBatches:
    """Two epochs' batches (key tuples), epoch 1's ``plans`` (``dynres``), build wall/CPU seconds, the ``sampler``."""
    epoch1: List[Tuple[str, ...]]
    epoch2: List[Tuple[str, ...]]
    plans: Optional[List[BatchPlan]]
    build_time_sec: float
    build_cpu_sec: float = 0.0
    sampler: object = field(repr=False, default=None)


def build_batches(batch_type: str, speech_shape: Union[str, Path], text_shape: Optional[Union[str, Path]] = None, *,
                  batch_size: int = 20, batch_bins: int = 1000000, fold_lengths: Sequence[int] = (80000, 150),
                  sort_in_batch: str = "descending", sort_batch: str = "descending",  # ESPnet's trainer default
                  min_batch_size: int = 1, policy=None, max_batch_size: Optional[int] = None, seed: int = 0,
                  utt2min_frames: Optional[Dict[str, int]] = None, oversized: str = "warn",
                  shuffle_jitter: float = 0.5, batch_fill: str = "below", epoch: int = 1) -> SamplerBatches:
    """Build a sampler (ESPnet's as its trainer does, or ``dynres``); draw the batches of ``epoch`` and ``epoch + 1``.
    Raises:
        ValueError: unknown ``batch_type``, ``dynres`` without ``policy``, ``epoch < 1``."""
    if epoch < 1:
        raise ValueError(f"epoch must be >= 1 (1-based, as ESPnet's trainer), got {epoch}")
    shape_files = [str(speech_shape)] + ([str(text_shape)] if text_shape is not None else [])
    start, start_cpu = time.perf_counter(), time.process_time()
    if batch_type in ESPNET_BATCH_TYPES:
        from espnet2.samplers.build_batch_sampler import build_batch_sampler
        sampler = build_batch_sampler(
            type=batch_type, batch_size=batch_size, batch_bins=batch_bins, shape_files=shape_files,
            fold_lengths=list(fold_lengths)[: len(shape_files)], sort_in_batch=sort_in_batch, sort_batch=sort_batch,
            drop_last=False, min_batch_size=min_batch_size)
        epoch1 = list(sampler)
        build_time, build_cpu = time.perf_counter() - start, time.process_time() - start_cpu
        epoch2 = list(sampler)
        plans = None
    elif batch_type == "dynres":
        if policy is None:
            raise ValueError("batch_type dynres needs the frontend's FrameRatePolicy (policy=...)")
        sampler = DynResBatchSampler(
            batch_bins=batch_bins, shape_files=shape_files, policy=policy, min_batch_size=min_batch_size,
            max_batch_size=max_batch_size, sort_in_batch=sort_in_batch, sort_batch=sort_batch,
            utt2min_frames=utt2min_frames, seed=seed, shuffle=True, oversized=oversized,
            shuffle_jitter=shuffle_jitter, batch_fill=batch_fill)
        planned = sampler.planned_batches(epoch)
        epoch1, plans = [b.keys for b in planned], [b.plan for b in planned]
        build_time, build_cpu = time.perf_counter() - start, time.process_time() - start_cpu
        epoch2 = [b.keys for b in sampler.planned_batches(epoch + 1)]
    else:
        raise ValueError(f"unknown batch_type {batch_type!r}; choose from {', '.join(BATCH_TYPES)}")
    return SamplerBatches(epoch1, epoch2, plans, build_time, build_cpu, sampler)


# The sampler keys of a training config (ESPnet's names), as build_batches takes them.
CONFIG_KEYS = ("batch_type", "batch_bins", "batch_size", "max_batch_size", "min_batch_size", "seed", "sort_in_batch",
               "sort_batch", "fold_length", "oversized", "shuffle_jitter", "batch_fill")


def config_sampler_options(conf: Mapping) -> Dict:
    """The keys of :data:`CONFIG_KEYS` a training config sets (``fold_length`` as a list)."""
    options = {k: conf[k] for k in CONFIG_KEYS if conf.get(k) is not None}
    if isinstance(options.get("fold_length"), int):
        options["fold_length"] = [options["fold_length"]]
    return options


def budget_figures(audit: BatchAudit) -> Dict[str, float]:
    """An audit's ``mean_audio_sec``, ``max_audio_sec`` (s per batch), ``mean_frames``, ``max_frames`` (``B × T``)."""
    return {"mean_audio_sec": audit.audio_sec.mean, "max_audio_sec": audit.audio_sec.max,
            "mean_frames": audit.frames.mean, "max_frames": audit.frames.max}


def audit_plan(sampler: DynResBatchSampler, table: ShapeTable, epoch: int = 1) -> BatchAudit:
    """:func:`audit_batches` of a dynres sampler's plan of ``epoch`` (no second epoch)."""
    planned = sampler.planned_batches(epoch)
    return audit_batches(table, [b.keys for b in planned], hop_length_samples=sampler.policy.hop_length,
                         fs_hz=sampler.policy.fs, plans=[b.plan for b in planned], batch_type="dynres")


def reference_figures(reference: Mapping, table: ShapeTable, speech_shape, text_shape=None,
                      fs_hz: Optional[int] = None) -> Dict[str, float]:
    """:func:`budget_figures` of the batches config ``reference`` plans on the shape files (default 16 kHz, hop 160)."""
    options = config_sampler_options(reference)
    frontend_conf = reference.get("frontend_conf") or {}
    policy = FrontendConfig.from_conf(frontend_conf).policy if reference.get("frontend") == "dynres" else None
    built = build_batches(options.pop("batch_type", "folded"), speech_shape, text_shape, policy=policy,
                          fold_lengths=options.pop("fold_length", None) or [80000, 150], **options)
    fs = policy.fs if policy else parse_fs(fs_hz or frontend_conf.get("fs") or 16000)
    hop = policy.hop_length if policy else frontend_conf.get("hop_length") or 160
    return budget_figures(audit_batches(table, built.epoch1, hop_length_samples=hop, fs_hz=fs, plans=built.plans))


def match(reference: Mapping, table: ShapeTable, speech_shape, text_shape=None, *, policy: FrameRatePolicy,
          fs_hz: Optional[int] = None, batch_bins: Optional[int] = None, epoch: int = 1, **options) -> Dict:
    """The dynres ``batch_bins`` for a reference config (e.g. the user's ``numel`` one), planned with ``policy`` and
    ``options``: ``batch_bins_mean_matched`` (its mean audio per step), ``batch_bins_memory_safe`` (no batch of
    ``epoch``, ``epoch + 1`` larger in ``B × T`` than its largest; each the fullest planned batch if the clamp binds
    first), ``batch_bins`` (the smaller), their ``figures``, ``reference_figures`` and flags."""
    ref = reference_figures(reference, table, speech_shape, text_shape, fs_hz)
    sampler = build_batches("dynres", speech_shape, text_shape, batch_bins=batch_bins or int(ref["max_frames"]),
                            policy=policy, epoch=epoch, **options).sampler
    epochs = (epoch, epoch + 1)
    safe = memory_safe_batch_bins(sampler, int(ref["max_frames"]), epochs)
    mean_matched = batch_bins_for_audio(sampler, ref["mean_audio_sec"], epoch)
    safe, safe_capped = binding_batch_bins(sampler, safe, epochs)
    mean_matched, mean_capped = binding_batch_bins(sampler, mean_matched, epochs)
    result = {"reference_figures": ref, "batch_bins": min(safe, mean_matched), "batch_bins_memory_safe": safe,
              "batch_bins_mean_matched": mean_matched, "reference_mean_unreachable": mean_capped,
              "memory_bound_never_binds": safe_capped}
    result["figures"] = {name: budget_figures(audit_plan(sampler.with_batch_bins(result[name]), table, epoch))
                         for name in ("batch_bins", "batch_bins_memory_safe", "batch_bins_mean_matched")}
    return result
