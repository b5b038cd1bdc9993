"""What one forward of ``model: dynres`` (or ``token_normalized``) carries from its batch to its stats."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

import torch

from espnet_dynres.core.batch_planner import BatchPlan


@dataclass
class StepContext:
    """One forward's plan, mode and figures, in one object with the forward's lifetime.

    ESPnet's ``forward`` calls ``encode``, which calls ``_extract_feats`` and, through the loss,
    ``_calc_ctc_loss``; none of them has room for the plan or returns the figures.  The model
    opens a context at the start of its ``forward`` (:meth:`for_model`), holds it as its one
    attribute ``_step`` while that forward runs, and drops it in a ``finally``; the hooks read
    the plan from it and write their figures into it, and the forward turns them into stats
    (:meth:`stats`).  A ``DataParallel`` replica runs its own forward on its own module object.

    Attributes:
        dynamic: the frontend gives each utterance its own frame rate (a training step:
            ``model.training`` and autograd on).  Decided here, passed to the frontend.
        augment: SpecAugment applies (``model.training``, ESPnet's own condition).
        plan: the batch's :class:`~espnet_dynres.core.batch_planner.BatchPlan` from ``batch_type: dynres``,
            or ``None``.
        utt_ids: the batch's utterance ids (for warnings), or ``None``.
        fallback: the frontend planned the batch itself and found no common frame count.
        below_clamp: utterances computed below ``min_frame_rate_hz``.
        frame_stats: a training batch's frame-rate figures (``frame_rate_hz``, ``at_min_frame_rate``,
            ``at_max_frame_rate``, ``padded_batch``).
        ctc_infeasible: utterances with fewer encoder frames than their CTC targets need
            (``model: token_normalized``).
        Each figure is ``None`` (or empty) until the part that measures it ran.
    """

    dynamic: bool
    augment: bool
    plan: Optional[BatchPlan] = None
    utt_ids: Optional[List[str]] = None
    fallback: Optional[bool] = None
    below_clamp: Optional[int] = None
    frame_stats: Dict[str, float] = field(default_factory=dict)
    ctc_infeasible: Optional[int] = None

    @classmethod
    def for_model(cls, model: torch.nn.Module, plan: Optional[BatchPlan] = None,
                  utt_ids: Optional[List[str]] = None) -> "StepContext":
        """The context of a forward of ``model`` now: the one place the mode is decided."""
        return cls(dynamic=model.training and torch.is_grad_enabled(), augment=model.training,
                   plan=plan, utt_ids=None if utt_ids is None else list(utt_ids))

    def frame_rate_stats(self, device: torch.device) -> Dict[str, torch.Tensor]:
        """``frame_rate_fallback``, ``below_clamp`` and :attr:`frame_stats` as ESPnet stats (``(1,)``
        float32 on ``device``), those measured."""
        values: Dict[str, float] = {}
        if self.fallback is not None:
            values["frame_rate_fallback"] = float(self.fallback)
        if self.below_clamp is not None:
            values["below_clamp"] = float(self.below_clamp)
        values.update(self.frame_stats)
        return {k: torch.tensor([float(v)], device=device) for k, v in values.items()}
