"""What one forward of ``model: dynres`` (or ``token_normalized``) carries from its batch to its stats."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

import torch

from espnet_dynres.core.batch_planner import BatchPlan


@dataclass
class StepContext:
    """One forward's plan, mode and figures, held as the model's ``_step`` while that forward runs.

    Attributes:
        dynamic: per-utterance frame rates (``model.training`` and autograd on); passed to the frontend.
        augment: SpecAugment applies (``model.training``).
        plan: the batch's :class:`~espnet_dynres.core.batch_planner.BatchPlan`, or ``None``.
        utt_ids: the batch's utterance ids (for warnings), or ``None``.
        fallback: the frontend planned the batch itself and found no common frame count.
        below_clamp: utterances computed below ``min_frame_rate_hz``.
        frame_stats: frame-rate figures (:meth:`~espnet_dynres.asr.dynres_model.DynResASRModel.frame_rate_stats`).
        ctc_infeasible: utterances with fewer encoder frames than their CTC targets need (``None`` until measured).
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
        """The measured figures as ESPnet stats (``(1,)`` float32 on ``device``)."""
        values: Dict[str, float] = {}
        if self.fallback is not None:
            values["frame_rate_fallback"] = float(self.fallback)
        if self.below_clamp is not None:
            values["below_clamp"] = float(self.below_clamp)
        values.update(self.frame_stats)
        return {k: torch.tensor([float(v)], device=device) for k, v in values.items()}
