"""The BatchNorm re-estimate's sample of training utterances, bounded by the run's evaluation budget.

Why the re-estimate exists, and how it runs, is in :mod:`espnet_dynres.asr.batchnorm_reestimate`.
This module keeps a uniform sample of the epoch's training utterances, as large as a few
validation batches (a budget in standard frames or input elements, never a count of utterances,
so that its cost does not grow with the length of the utterances), in the model's input as it came
(raw audio, so any frame rate can be computed from it, or extracted features ``(T_frames, D)``),
in host memory, and gives it back as padding-free batches of that budget, grouped by the planner
in evaluation mode (:meth:`~espnet_dynres.core.batch_planner.BatchPlanner.for_evaluation`).
"""

from __future__ import annotations

import argparse
import heapq
import random
from dataclasses import dataclass
from typing import List, Optional

import torch

from espnet_dynres.core.batch_planner import BatchPlanner
from espnet_dynres.core.frame_rate_policy import standard_frame_counts


# ESPnet batch types whose budget is a count of utterances (``batch_size``), not ``batch_bins``.
BATCH_SIZE_TYPES = ("unsorted", "sorted", "folded")


@dataclass(frozen=True)
class RestatBudget:
    """How large one batch of the re-estimate may be: the run's evaluation budget.

    A batch of the re-estimate costs ``B × the cost of its longest member``, the padded cost the
    validation samplers plan with, although the batch itself is cut to its shortest member (so
    what is computed is never more).  The cost of one utterance is

    * ``hop_length`` set: its standard frame count ``1 + T_samples // hop_length`` — the unit of
      ``batch_type: dynres``'s ``batch_bins`` (feature frames);
    * ``hop_length`` ``None``: its elements ``T × D`` (samples for raw audio, frames × feature
      dimension for extracted features) — the unit of ESPnet's ``numel`` and ``length`` budgets.

    Args:
        batch_bins: most cost per batch; ``None``: no bins limit (then ``max_batch_size`` limits).
        max_batch_size: most utterances per batch; ``None``: no count limit.  Both ``None`` is
            refused: a pass over data is always bounded.
        hop_length: see above (samples per standard frame).
        fold_length: ESPnet's ``folded`` rule: with it, a batch whose longest member has ``L``
            (samples or frames) holds at most ``max(1, max_batch_size // (1 + L // fold_length))``.

    An utterance whose cost alone is over ``batch_bins`` is encoded alone (never joins a batch).

    Raises:
        ValueError: neither limit given, or a limit below 1.
    """

    batch_bins: Optional[int] = None
    max_batch_size: Optional[int] = 1
    hop_length: Optional[int] = None
    fold_length: Optional[int] = None

    def __post_init__(self):
        if self.batch_bins is None and self.max_batch_size is None:
            raise ValueError("RestatBudget needs batch_bins or max_batch_size: the re-estimate is a bounded pass")
        for name in ("batch_bins", "max_batch_size", "hop_length", "fold_length"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"RestatBudget {name} must be >= 1, got {value}")

    def cost(self, utt: torch.Tensor) -> int:
        """Cost of one utterance ``(T_samples,)``, ``(T_samples, C)`` or ``(T_frames, D)`` (class docstring)."""
        if self.hop_length is not None:
            return int(standard_frame_counts([int(utt.shape[0])], self.hop_length)[0])
        return int(utt.numel())

    def max_batch_size_for(self, longest: torch.Tensor) -> Optional[int]:
        """The most utterances of a batch whose longest member is ``longest``: ``max_batch_size``,
        under ESPnet's ``folded`` rule divided by ``1 + T // fold_length``."""
        limit = self.max_batch_size
        if limit is not None and self.fold_length is not None:
            limit = max(1, limit // (1 + int(longest.shape[0]) // self.fold_length))
        return limit

    def sample_cost(self, utt: torch.Tensor) -> int:
        """An utterance's share of the re-estimate's sample (:class:`BatchNormSample`): its
        :meth:`cost` under a bins budget, ``1`` under a count budget (``batch_bins`` ``None``)."""
        return self.cost(utt) if self.batch_bins is not None else 1

    def sample_capacity(self, num_batches: int) -> int:
        """Most total :meth:`sample_cost` of a sample of ``num_batches`` evaluation batches:
        ``num_batches × batch_bins``, or ``num_batches × max_batch_size`` under a count budget."""
        return num_batches * (self.batch_bins if self.batch_bins is not None else self.max_batch_size)

    @classmethod
    def from_task_args(cls, args: argparse.Namespace, hop_length: Optional[int] = None) -> "RestatBudget":
        """The budget of the run's validation: ``valid_batch_type`` (else ``batch_type``) with
        ``valid_batch_bins`` / ``valid_batch_size`` (else ``batch_bins`` / ``batch_size``), as
        ESPnet's trainer builds the validation iterator.

        Args:
            args: ESPnet's task arguments.
            hop_length: the dynres frontend's standard frame shift (samples); used with
                ``dynres`` batches, whose ``batch_bins`` counts standard frames.

        Raises:
            ValueError: a ``dynres`` budget without ``hop_length`` (no dynres frontend).
        """
        batch_type = getattr(args, "valid_batch_type", None) or getattr(args, "batch_type", "folded")
        bins = getattr(args, "valid_batch_bins", None) or getattr(args, "batch_bins", None)
        size = getattr(args, "valid_batch_size", None) or getattr(args, "batch_size", None)
        if batch_type == "dynres":
            if hop_length is None:
                raise ValueError("batch_type dynres plans frame counts for the dynres frontend (its batch_bins "
                                 "counts standard frames), but the model has another frontend; set frontend: dynres "
                                 "(or use another batch_type).")
            return cls(batch_bins=int(bins), max_batch_size=getattr(args, "max_batch_size", None),
                       hop_length=int(hop_length))
        if batch_type in BATCH_SIZE_TYPES:
            folds = list(getattr(args, "fold_length", None) or [])
            fold = int(folds[0]) if batch_type == "folded" and folds else None
            return cls(batch_bins=None, max_batch_size=int(size), fold_length=fold)
        return cls(batch_bins=int(bins), max_batch_size=None)  # numel, length: elements (samples x dims)


class BatchNormSample:
    """A uniform sample of training utterances, bounded in input, from which
    :func:`~espnet_dynres.asr.batchnorm_reestimate.reestimate_batchnorm` re-estimates BatchNorm statistics.

    The sample holds each kept utterance as the model received it, unpadded: raw audio
    ``(T_samples,)`` (or ``(T_samples, C)``) or extracted features ``(T_frames, D)``, as a copy
    in host memory (pinned when it came from a CUDA device, so the copy back is asynchronous);
    the device holds one batch of it at a time, only while the re-estimate runs.

    **Its size is a budget, not a count of utterances.**  Every utterance :meth:`add` sees gets a
    random key (uniform in [0, 1), drawn in the order the utterances come); the sample is the
    longest run of utterances in key order whose total cost fits ``num_batches`` evaluation
    batches (:meth:`RestatBudget.sample_capacity`: ``num_batches × batch_bins`` standard frames or
    input elements, or ``num_batches × max_batch_size`` utterances under a count budget).  That
    is a prefix of a uniformly random order of the epoch's utterances, so every utterance is
    equally likely to be drawn first, and the re-estimate costs at most about ``num_batches``
    validation batches per BatchNorm layer however long the utterances are.  It is computed in
    one pass (the kept set only shrinks from the largest key), holding at most the capacity plus
    one batch.  An utterance whose cost alone is over the capacity ends the run where its key
    falls.

    Args:
        num_batches: size of the sample per epoch, in evaluation batches (see above); ``0``
            keeps none (the re-estimate is off).
        seed: seed of the keys (deterministic given the order of the utterances).

    Raises:
        ValueError: ``num_batches`` is negative.
    """

    def __init__(self, num_batches: int, seed: int = 0):
        if num_batches < 0:
            raise ValueError(f"batchnorm_restat_batches must be >= 0 (0 turns the re-estimate off), got {num_batches}")
        self.num_batches = num_batches
        self._seed = seed
        self.clear()

    def __len__(self) -> int:
        return len(self._kept)

    @property
    def _utts(self) -> List[torch.Tensor]:
        """The kept utterances, in key order."""
        return [entry[2] for entry in sorted(self._kept, key=lambda e: -e[0])]

    @property
    def total_cost(self) -> int:
        """The kept utterances' total cost (:meth:`RestatBudget.sample_cost`)."""
        return self._total

    @staticmethod
    def _host_copy(utt: torch.Tensor) -> torch.Tensor:
        copy = utt.detach().to("cpu", copy=True)
        return copy.pin_memory() if utt.is_cuda else copy

    def add(self, speech: torch.Tensor, speech_lengths: torch.Tensor, budget: RestatBudget) -> None:
        """Offer a training batch's utterances to the sample.

        Args:
            speech: ``(B, T_samples)`` float32 raw audio, ``(B, T_samples, C)``, or extracted
                features ``(B, T_frames, D)``, padded along dim 1; an utterance is kept as
                ``speech[b, :speech_lengths[b]]`` (a detached host copy).
            speech_lengths: ``(B,)`` int64 samples (or frames) before padding.
            budget: the run's evaluation budget; the sample's capacity is
                ``budget.sample_capacity(num_batches)`` (class docstring).

        Raises:
            ValueError: ``speech`` is not 2-D or 3-D, or ``speech_lengths`` is not ``(B,)``.
        """
        if self.num_batches == 0:
            return
        if speech.dim() not in (2, 3) or speech_lengths.shape != speech.shape[:1]:
            raise ValueError(
                f"the BatchNorm re-estimate takes speech (B, T_samples), (B, T_samples, C) or features "
                f"(B, T_frames, D) with speech_lengths (B,), got {tuple(speech.shape)} and "
                f"{tuple(speech_lengths.shape)}"
            )
        capacity = budget.sample_capacity(self.num_batches)
        added = []
        for b, length in enumerate(speech_lengths.tolist()):
            key = self._rng.random()
            if key >= self._cutoff:
                continue  # after an utterance that did not fit in key order: never in this epoch's sample
            utt = speech[b, :length]
            cost = budget.sample_cost(utt)
            self._count += 1
            entry = [-key, self._count, utt, cost]  # a max-heap on the key
            heapq.heappush(self._kept, entry)
            added.append(entry)
            self._total += cost
            while self._total > capacity:
                neg_key, _, _, dropped = heapq.heappop(self._kept)
                self._total -= dropped
                self._cutoff = -neg_key
        for entry in added:  # copy only what stays, after the batch's evictions
            if -entry[0] < self._cutoff:
                entry[2] = self._host_copy(entry[2])

    def clear(self) -> None:
        """Start the next epoch's sample.  The keys restart from ``seed``, so an epoch's sample
        depends only on that epoch's utterance order, and a run resumed from a checkpoint
        (``--resume true``, a fresh sample) re-estimates exactly as the uninterrupted run."""
        self._rng = random.Random(self._seed)
        self._kept: List[list] = []  # heap of [-key, arrival, utterance, cost]
        self._total = 0
        self._count = 0
        self._cutoff = 1.0  # keys at or above it are out (the smallest key evicted so far)

    def batches(self, budget: RestatBudget) -> List[torch.Tensor]:
        """The sample as padding-free batches inside ``budget``, in host memory.

        Sorted by length and grouped by the planner in evaluation mode
        (:meth:`BatchPlanner.for_evaluation`: ``B ×`` the cost of its longest member
        ``<= batch_bins``, and the count limit, :meth:`RestatBudget.max_batch_size_for`), as
        the validation sampler groups; each utterance is cut to the shortest of its batch (sorting
        keeps the cut small), so what is computed is at most the budget.  An utterance over the
        budget alone is a batch of its own.

        Returns:
            ``(B, T, ...)`` tensors (``T_samples`` or ``T_frames`` along dim 1).
        """
        utts = sorted(self._utts, key=lambda u: int(u.shape[0]))
        planner = BatchPlanner.for_evaluation([budget.cost(u) for u in utts], budget.batch_bins,
                                              [budget.max_batch_size_for(u) for u in utts])
        groups = [[utts[i] for i in group] for group in planner.group(range(len(utts)))]
        return [torch.stack([u[: group[0].shape[0]] for u in group]) for group in groups]
