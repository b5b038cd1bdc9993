"""The BatchNorm re-estimate's sample of training utterances, bounded by the run's evaluation budget
(:mod:`espnet_dynres.asr.batchnorm_reestimate`)."""

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

    A batch costs ``B ×`` its longest member's cost: ``1 + T_samples // hop_length`` standard frames when
    ``hop_length`` (samples per standard frame) is set, else its elements ``T × D``.  ``batch_bins``: most cost
    per batch; ``max_batch_size``: most utterances (``None``: no limit; not both); ``fold_length``: ESPnet's
    ``folded`` rule, at most ``max(1, max_batch_size // (1 + L // fold_length))`` for a longest member ``L``.

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
        """The most utterances of a batch whose longest member is ``longest`` (``folded`` rule applied)."""
        limit = self.max_batch_size
        if limit is not None and self.fold_length is not None:
            limit = max(1, limit // (1 + int(longest.shape[0]) // self.fold_length))
        return limit

    def sample_cost(self, utt: torch.Tensor) -> int:
        """An utterance's share of the sample: :meth:`cost` under a bins budget, ``1`` under a count budget."""
        return self.cost(utt) if self.batch_bins is not None else 1

    def sample_capacity(self, num_batches: int) -> int:
        """Most total :meth:`sample_cost` of ``num_batches`` evaluation batches."""
        return num_batches * (self.batch_bins if self.batch_bins is not None else self.max_batch_size)

    @classmethod
    def from_task_args(cls, args: argparse.Namespace, hop_length: Optional[int] = None) -> "RestatBudget":
        """The budget of the run's validation (``valid_batch_*`` else ``batch_*`` of ESPnet's task ``args``);
        ``hop_length``: the dynres frontend's standard frame shift (samples), for ``dynres`` batches.

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

    Kept utterances are unpadded host copies of the model's input (``(T_samples,)``, ``(T_samples, C)`` or
    ``(T_frames, D)``): the longest run, in order of random keys (from ``seed``), whose total cost fits
    :meth:`RestatBudget.sample_capacity` of ``num_batches`` (``0``: none, re-estimate off).

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
            speech: ``(B, T_samples)`` float32 raw audio, ``(B, T_samples, C)``, or features ``(B, T_frames, D)``.
            speech_lengths: ``(B,)`` int64 samples (or frames) before padding.
            budget: the run's evaluation budget.

        Raises:
            ValueError: ``speech`` is not 2-D or 3-D, or ``speech_lengths`` is not ``(B,)``.
        """
        if self.num_batches == 0:
            return
        if speech.dim() not in (2, 3) or speech_lengths.shape != speech.shape[:1]:
            raise ValueError(f"the BatchNorm re-estimate takes speech (B, T_samples), (B, T_samples, C) or features "
                             f"(B, T_frames, D) with speech_lengths (B,), got {tuple(speech.shape)} and "
                             f"{tuple(speech_lengths.shape)}")
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
        """Start the next epoch's sample; keys restart from ``seed`` (so a resumed run re-estimates the same)."""
        self._rng = random.Random(self._seed)
        self._kept: List[list] = []  # heap of [-key, arrival, utterance, cost]
        self._total = 0
        self._count = 0
        self._cutoff = 1.0  # keys at or above it are out (the smallest key evicted so far)

    def batches(self, budget: RestatBudget) -> List[torch.Tensor]:
        """The sample as padding-free ``(B, T, ...)`` host tensors inside ``budget``, grouped by
        :meth:`BatchPlanner.for_evaluation`, each utterance cut to the shortest of its batch."""
        utts = sorted(self._utts, key=lambda u: int(u.shape[0]))
        planner = BatchPlanner.for_evaluation([budget.cost(u) for u in utts], budget.batch_bins,
                                              [budget.max_batch_size_for(u) for u in utts])
        groups = [[utts[i] for i in group] for group in planner.group(range(len(utts)))]
        return [torch.stack([u[: group[0].shape[0]] for u in group]) for group in groups]
