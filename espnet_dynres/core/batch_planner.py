"""The one object that plans a dynres batch: which utterances join it, and the frames each gets.  Every rule about a
batch's frame counts is here, for the ``dynres`` sampler, the frontend's batch without a plan
(:meth:`BatchPlanner.plan_batch`) and the re-estimate (:func:`fits_budget`).

**Joining a training batch** (:meth:`BatchPlanner.add`): an utterance joins while (a) the
:class:`~espnet_dynres.core.frame_rate_policy.FrameRatePolicy` batch rule, at the batch's target rate, finds one ``T``
for the batch inside the clamp ``[min_frame_rate_hz, max_frame_rate_hz]``, (b) ``B × T <= batch_bins`` (feature
frames), (c) ``B <= max_batch_size`` and (d) ``T`` >= every member's CTC minimum; (e) with ``batch_fill="nearest"`` an
utterance over ``batch_bins`` still joins if the overshoot is smaller than the room the batch leaves without it, with
``T = batch_bins // B``, which must stay inside every member's clamp and CTC minimum.

**The plan of a batch** (:meth:`BatchPlanner.plan`, a :class:`BatchPlan`): rule (1) ``T`` from the batch rule inside the
clamp; if none, with the lower limit relaxed to ``fallback_frame_rate_hz``; (2) ``T`` raised to the CTC minimum where
the clamp allows; if ``B × T > batch_bins`` (a lone long utterance, a batch forced to ``min_batch_size`` under DDP),
lowered toward ``batch_bins // B``, not below the fallback rate or the CTC minimum (kind ``LOWERED``; else ``RULE``);
(3) no common ``T``: each member at its lowest count (fallback rate or CTC minimum, at most its highest), zero-padded to
the longest (kind ``PADDED``; also the frontend's *fallback batch*).  **Evaluation** (validation, re-estimate): every
member at the standard rate, padded; a batch costs ``B × max(standard frames)`` (:func:`fits_budget`; ``STANDARD``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from espnet_dynres.core.frame_rate_policy import FrameRatePolicy

BATCH_FILLS = ("below", "nearest")


class BatchKind(str, Enum):
    """How a batch's frame counts were planned (module docstring): ``RULE``, a common ``T`` (rules 1–2); ``LOWERED``,
    a common ``T`` lowered toward ``batch_bins / B``; ``PADDED`` (rule 3); ``STANDARD`` (evaluation)."""
    RULE = "rule"
    LOWERED = "lowered"
    PADDED = "padded"
    STANDARD = "standard"


@dataclass(frozen=True)
class BatchPlan:
    """A batch's planned feature frames (``frames``: ``B`` counts, in member order) and its :class:`BatchKind`."""
    frames: Tuple[int, ...]
    kind: BatchKind

    @property
    def num_frames(self) -> Optional[int]:
        """The batch's ``T`` (common count, or an evaluation batch's padded length); ``None`` for ``PADDED``."""
        return None if self.kind is BatchKind.PADDED else max(self.frames)

    @property
    def cost_frames(self) -> int:
        """``B × max(frames)``: what the batch costs in the budget's unit, padding included."""
        return padded_cost_frames(len(self.frames), max(self.frames))

    def shard(self, rank: int, world_size: int) -> "BatchPlan":
        """The plan of this rank's part ``[rank::world_size]`` of the batch (ESPnet's DDP split)."""
        return BatchPlan(self.frames[rank::world_size], self.kind)


class PlannedBatch(NamedTuple):
    """A batch as the ``dynres`` sampler yields it: ``keys`` (utterance ids, in ``plan.frames`` order) and ``plan``."""
    keys: Tuple[str, ...]
    plan: BatchPlan

    def shard(self, rank: int, world_size: int) -> "PlannedBatch":
        """This rank's part ``[rank::world_size]`` of the batch, with its plan."""
        return PlannedBatch(self.keys[rank::world_size], self.plan.shard(rank, world_size))


def padded_cost_frames(batch_size, longest_frames):
    """``B × max``: a batch's cost in the budget's unit, padding included (the one definition; ints or numpy arrays).
    ``longest_frames``: a common ``T``, or under ESPnet's element budgets a re-estimate batch's input elements."""
    return batch_size * longest_frames


def fits_budget(batch_size: int, longest_frames: int, batch_bins: Optional[int],
                max_batch_size: Optional[float] = None) -> bool:
    """``padded_cost_frames <= batch_bins`` and ``batch_size <= max_batch_size`` (``None``: no limit)."""
    return ((batch_bins is None or padded_cost_frames(batch_size, longest_frames) <= batch_bins)
            and (max_batch_size is None or batch_size <= max_batch_size))


def check_plan(policy: FrameRatePolicy, num_samples: Sequence[int], frames: Sequence[int]) -> None:
    """Check a batch's plan (the iterator's ``batch_plan``): one count per utterance, each reachable between
    ``fallback_frame_rate_hz`` and ``max_frame_rate_hz``.

    Raises:
        ValueError: a wrong-sized plan, or a count the policy cannot produce (sampler and frontend configs differ).
    """
    frames = list(frames)
    if len(frames) != len(num_samples):
        raise ValueError(f"the batch plan has {len(frames)} entries for a batch of {len(num_samples)} utterances "
                         "(the iterator's plan does not match the batch)")
    lo = policy.frame_count_ranges(num_samples, policy.fallback_frame_rate_hz)[0].tolist()
    hi = policy.frame_count_ranges(num_samples)[1].tolist()
    for n, t, a, b in zip(num_samples, frames, lo, hi):
        if not a <= t <= b:
            raise ValueError(
                f"planned frame counts {frames} cannot be produced for utterance lengths {list(num_samples)} samples: "
                f"an utterance of {n} samples takes {a}..{b} frames at {policy.fallback_frame_rate_hz:g}-"
                f"{policy.max_frame_rate_hz:g} Hz. batch_type dynres and frontend dynres must use the same "
                "frontend_conf.")


class BatchPlanner:
    """Plans batches of a set of utterances (rules in the module docstring); stateful as lhotse's ``TimeConstraint``:
    :meth:`reset` opens a batch, :meth:`add` admits an utterance or refuses it, :meth:`force` adds one regardless.

    Args:
        policy: shared with the frontend; num_samples: ``(N,)`` int samples; min_frames: ``(N,)`` int CTC minimum
            (feature frames, capped at the standard count; ``None``: 1).
        batch_bins: budget ``B × T`` (feature frames); max_batch_size: most utterances per batch (``None``: no limit).
        batch_fill: ``"below"`` or ``"nearest"`` (rule (e)); evaluation: plan evaluation batches.

    Raises:
        ValueError: ``batch_bins < 1``, ``max_batch_size < 1``, an unknown ``batch_fill``.
    """

    def __init__(self, policy: FrameRatePolicy, num_samples: Sequence[int], min_frames: Optional[Sequence[int]] = None,
                 batch_bins: Optional[int] = None, max_batch_size: Optional[int] = None, batch_fill: str = "below",
                 evaluation: bool = False):
        if batch_bins is not None and batch_bins < 1:
            raise ValueError(f"batch_bins must be >= 1 frame, got {batch_bins}")
        if max_batch_size is not None and max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        if batch_fill not in BATCH_FILLS:
            raise ValueError(f"batch_fill must be one of {BATCH_FILLS}, got {batch_fill!r}")
        self.policy = policy
        self.batch_bins = batch_bins
        self.max_batch_size = max_batch_size
        self.batch_fill = batch_fill
        self.evaluation = evaluation
        samples = np.asarray(num_samples, dtype=np.int64)
        self.num_samples = samples
        std = policy.standard_frame_counts(samples)
        lo, hi = policy.frame_count_ranges(samples)
        fallback_lo = policy.frame_count_ranges(samples, policy.fallback_frame_rate_hz)[0]
        mins = np.ones_like(std) if min_frames is None else np.minimum(np.asarray(min_frames, dtype=np.int64), std)
        self.standard_frames, self.lowest_in_clamp, self.highest = std, lo, hi
        self.lowest_at_fallback, self.min_frames = fallback_lo, mins
        self._std, self._lo, self._hi = std.tolist(), lo.tolist(), hi.tolist()  # lists: add() runs per utterance
        self._fb_lo, self._min = fallback_lo.tolist(), mins.tolist()
        self._bins = math.inf if batch_bins is None else batch_bins
        self._max_bs = math.inf if max_batch_size is None else max_batch_size
        self._limits = None  # evaluation: most utterances per batch, per longest member (for_evaluation)
        self._nearest = batch_fill == "nearest"
        self._pick = policy.pick_frame_count
        self.reset()

    @classmethod
    def for_evaluation(cls, costs: Sequence[int], batch_bins: Optional[int],
                       max_batch_sizes: Optional[Sequence[Optional[int]]] = None) -> "BatchPlanner":
        """An evaluation planner over ``costs`` (``(N,)`` int per utterance in the budget's unit: standard frames, input
        elements or 1) instead of samples (the BatchNorm re-estimate): a batch costs ``B ×`` its costliest member's
        cost, holding at most that member's ``max_batch_sizes`` entry (``(N,)``; ``None``: no limit)."""
        planner = cls.__new__(cls)
        planner.policy, planner.evaluation, planner.batch_fill = None, True, "below"
        planner.batch_bins, planner.max_batch_size = batch_bins, None
        planner._std = [int(c) for c in costs]
        planner._bins = math.inf if batch_bins is None else batch_bins
        planner._max_bs = math.inf
        planner._limits = (None if max_batch_sizes is None
                           else [math.inf if m is None else int(m) for m in max_batch_sizes])
        planner.reset()
        return planner

    @classmethod
    def for_batch(cls, policy: FrameRatePolicy, num_samples: Sequence[int]) -> "BatchPlanner":
        """A planner for one batch without a budget or CTC minimum (the frontend without a plan)."""
        return cls(policy, num_samples)

    def plan_batch(self, epoch: Optional[int] = None) -> BatchPlan:
        """:meth:`plan` of every utterance of this planner, in order (the frontend's batch without a plan).

        Raises:
            ValueError: no utterance.
        """
        if len(self._std) == 0:
            raise ValueError("a batch needs at least one utterance")
        return self.plan(range(len(self._std)), epoch)

    def reset(self, target_rate_hz: Optional[float] = None) -> None:
        """Open an empty batch aiming at ``target_rate_hz`` (a drawn rate, Hz; ``None``: the policy's)."""
        self.size = 0
        self.target_rate_hz = target_rate_hz
        self._lo_b, self._hi_b, self._std_b, self._need_b, self._longest = 1, None, 0, 0, 0
        self._limit = self._max_bs

    def add(self, i: int) -> bool:
        """Admit utterance ``i`` to the open batch if the rules allow (True), else leave it as it was."""
        if self.size == 0:
            self.force(i)
            return True
        size = self.size + 1
        if self.evaluation:
            s = self._std[i]
            longest, limit = (self._longest, self._limit) if self._longest > s else (s, self._limit_of(i))
            if fits_budget(size, longest, self.batch_bins, limit):
                self.size, self._longest, self._limit = size, longest, limit
                return True
            return False
        u_lo, u_hi, u_min = self._lo[i], self._hi[i], self._min[i]
        lo, hi, need = self._lo_b, self._hi_b, self._need_b
        new_lo = lo if lo > u_lo else u_lo  # no min()/max() and padded_cost_frames written out: runs per utterance
        new_hi = hi if hi < u_hi else u_hi
        new_need = need if need > u_min else u_min
        if new_lo > new_hi:
            return False
        rate = self.target_rate_hz
        total = self._std_b + self._std[i]
        t = self._pick(new_lo, new_hi, total, size, None, rate)
        fits = new_need <= t and size * t <= self._bins and size <= self._max_bs
        if not fits and self._nearest and size <= self._max_bs:  # rule (e)
            over = size * t - self._bins
            room = self._bins - (size - 1) * self._pick(lo, hi, self._std_b, size - 1, None, rate)
            t = self._bins // size
            fits = 0 < over < room and t >= (new_lo if new_lo > new_need else new_need)
        if not fits:
            return False
        self.size, self._lo_b, self._hi_b, self._need_b, self._std_b = size, new_lo, new_hi, new_need, total
        return True

    def force(self, i: int) -> None:
        """Add utterance ``i`` to the open batch whatever the rules say (its plan may be ``LOWERED`` or ``PADDED``)."""
        if self.evaluation:
            if self.size == 0 or self._std[i] >= self._longest:
                self._longest, self._limit = self._std[i], self._limit_of(i)
            self.size += 1
            return
        u_lo, u_hi, u_min, s = self._lo[i], self._hi[i], self._min[i], self._std[i]
        if self.size == 0:
            self._lo_b, self._hi_b, self._need_b, self._std_b, self._longest = u_lo, u_hi, u_min, s, s
        else:
            self._lo_b = max(self._lo_b, u_lo)
            self._hi_b = min(self._hi_b, u_hi)
            self._need_b = max(self._need_b, u_min)
            self._std_b += s
            self._longest = max(self._longest, s)
        self.size += 1

    def _limit_of(self, i: int):
        return self._max_bs if self._limits is None else self._limits[i]

    def group(self, order: Sequence[int], min_batch_size: int = 1,
              target_rates_hz: Optional[Sequence[float]] = None) -> List[List[int]]:
        """Utterance indices ``order`` grouped into batches: a batch closes when the next one does not join
        (:meth:`add`), unless it holds fewer than ``min_batch_size`` (the DDP world size; then that one is forced in); a
        short last batch is rebalanced with the one before (a forced batch has at most ``2 × min_batch_size − 1``).
        ``target_rates_hz``: each batch's drawn target rate (Hz) in fill order, or ``None``."""
        batches: List[List[int]] = []
        current: List[int] = []
        add, force = self.add, self.force
        self.reset(None if target_rates_hz is None else float(target_rates_hz[0]))
        for i in order:
            if add(i):
                current.append(i)
                continue
            if len(current) < min_batch_size:
                force(i)
                current.append(i)
                continue
            batches.append(current)
            self.reset(None if target_rates_hz is None else float(target_rates_hz[len(batches)]))
            force(i)
            current = [i]
        if not current:
            return batches
        if batches and len(current) < min_batch_size:
            merged = batches.pop() + current
            if len(merged) >= 2 * min_batch_size:
                batches.extend([merged[: len(merged) - min_batch_size], merged[len(merged) - min_batch_size :]])
            else:
                batches.append(merged)
        else:
            batches.append(current)
        return batches

    def plan(self, members: Sequence[int], epoch: Optional[int] = None,
             target_rate_hz: Optional[float] = None) -> BatchPlan:
        """The :class:`BatchPlan` of utterance indices ``members`` (at least one; frames in their order) by rules 1–3
        or the evaluation rule.  ``epoch``: 1-based, for the policy's curriculum (``None``: none); ``target_rate_hz``:
        the batch's drawn target rate (Hz; ``None``: the policy's target)."""
        members = list(members)
        if self.evaluation:
            return BatchPlan(tuple(self._std[i] for i in members), BatchKind.STANDARD)
        lo = max(self._lo[i] for i in members)
        hi = min(self._hi[i] for i in members)
        total = sum(self._std[i] for i in members)
        return self._plan_from_totals(members, lo, hi, total, epoch, target_rate_hz)

    def _plan_from_totals(self, members, lo: int, hi: int, total_std: int, epoch: Optional[int],
                          target_rate_hz: Optional[float]) -> BatchPlan:
        """:meth:`plan` from the members' range intersection and summed standard frames."""
        size = len(members)
        need = max(self._min[i] for i in members)
        pick = self.policy.pick_frame_count
        t = pick(lo, hi, total_std, size, epoch, target_rate_hz)
        if t is None:  # rule 2: the lower limit relaxed to the fallback rate
            t = pick(max(self._fb_lo[i] for i in members), hi, total_std, size, epoch, target_rate_hz)
        if t is None:  # rule 3: each member at its own lowest frame count, padded
            counts = tuple(min(max(self._fb_lo[i], self._min[i]), self._hi[i]) for i in members)
            return BatchPlan(counts, BatchKind.PADDED)
        if t < need <= hi:  # a target below the standard rate can put T under a CTC minimum
            t = need
        kind = BatchKind.RULE
        if padded_cost_frames(size, t) > self._bins:  # lower toward the budget, never below fallback or CTC minimum
            floor = max(self._fb_lo[i] for i in members)
            lowered = max(floor, need if need <= hi else floor, min(t, self._bins // size))
            kind = BatchKind.LOWERED if lowered < t else kind
            t = lowered
        return BatchPlan((t,) * size, kind)

    def plan_groups(self, groups: Sequence[Sequence[int]], epoch: Optional[int] = None,
                    target_rates_hz: Optional[Sequence[Optional[float]]] = None) -> list:
        """:meth:`plan` of many groups, their ranges and totals computed at once (numpy)."""
        if self.evaluation:
            return [self.plan(g) for g in groups]
        flat = np.fromiter((i for g in groups for i in g), dtype=np.int64)
        starts = np.cumsum([0] + [len(g) for g in groups[:-1]])
        lo = np.maximum.reduceat(self.lowest_in_clamp[flat], starts).tolist()
        hi = np.minimum.reduceat(self.highest[flat], starts).tolist()
        std = np.add.reduceat(self.standard_frames[flat], starts).tolist()
        rates = [None] * len(groups) if target_rates_hz is None else target_rates_hz
        return [self._plan_from_totals(g, a, b, s, epoch, r) for g, a, b, s, r in zip(groups, lo, hi, std, rates)]

    def within_budget(self, frames: Sequence[int]) -> bool:
        """Whether a batch at ``frames`` (one count per member) keeps ``batch_bins`` (padded) and ``max_batch_size``."""
        return fits_budget(len(frames), max(frames), self.batch_bins, self.max_batch_size)

    def lowest_frames(self, i: int) -> int:
        """The fewest frames utterance ``i`` can be planned: its fallback-rate count, or its CTC minimum if higher."""
        return max(self._fb_lo[i], self._min[i])

    def min_batch_bins_in_clamp(self, min_batch_size: int = 1) -> int:
        """Smallest ``batch_bins`` keeping each utterance alone in its clamp and CTC minimum (× ``min_batch_size``)."""
        return min_batch_size * int(np.maximum(self.lowest_in_clamp, self.min_frames).max())
