"""``model: dynres`` — ESPnet's CTC/attention model and loss, fed by the dynres sampler's plan."""

from __future__ import annotations

import inspect
from typing import Dict, Optional, Tuple

import torch
from typeguard import typechecked

from espnet2.asr.espnet_model import ESPnetASRModel

from espnet_dynres.asr.frontend.dynres import DynResFrontend
from espnet_dynres.asr.specaug.dynres_specaug import DynResSpecAug
from espnet_dynres.asr.step_context import StepContext
from espnet_dynres.core.batch_planner import BatchKind, BatchPlan


class DynResASRModel(ESPnetASRModel):
    """``ESPnetASRModel`` that passes the ``dynres`` plan and frame rates as arguments.

    Loss, batch weight and stats are ESPnet's (``model: token_normalized``,
    :class:`~espnet_dynres.asr.token_normalized_model.TokenNormalizedASRModel`, changes only the loss).  Added:
    the plan (``batch_plan``) reaches :meth:`DynResFrontend.features`; the frame rates reach ``specaug: dynres``
    as ``frame_rate_ratios`` ``(B,)`` = rate / standard rate (``fs / hop_length``), applied by this model after
    the frontend, before ``normalize`` (``self.dynres_specaug``; ESPnet's ``self.specaug`` is ``None``); stats
    ``frame_rate_fallback`` and ``below_clamp`` in a training step; ``batchnorm_restat_batches`` for
    :class:`~espnet_dynres.glue.trainer.DynResTrainer`.  A forward's state is a
    :class:`~espnet_dynres.asr.step_context.StepContext`, held as ``self._step`` only while :meth:`forward` runs.
    Decoding and collect-stats run at the standard rate without SpecAugment.
    """

    @typechecked
    def __init__(self, *args, batchnorm_restat_batches: int = 6, **kwargs):
        """ESPnet's arguments, plus ``batchnorm_restat_batches``: the per-epoch BatchNorm re-estimate sample, in
        evaluation batches (``0``: off).

        Raises:
            ValueError: ``batchnorm_restat_batches`` is negative.
        """
        if batchnorm_restat_batches < 0:
            raise ValueError("model_conf batchnorm_restat_batches must be >= 0 (0 turns the re-estimate off), "
                             f"got {batchnorm_restat_batches}")
        arguments = inspect.signature(ESPnetASRModel.__init__).bind(None, *args, **kwargs).arguments
        arguments.pop("self")
        specaug = arguments.get("specaug")
        dynres_specaug = None
        if isinstance(specaug, DynResSpecAug):  # applied by _extract_feats, with the rates (class docstring)
            dynres_specaug, arguments["specaug"] = specaug, None
        super().__init__(**arguments)
        self.dynres_specaug: Optional[DynResSpecAug] = dynres_specaug
        self._step: Optional[StepContext] = None  # the running forward's, only while it runs
        self.batchnorm_restat_batches = batchnorm_restat_batches  # read by the trainer; recorded in config.yaml

    def forward(self, speech: torch.Tensor, speech_lengths: torch.Tensor, text: torch.Tensor,
                text_lengths: torch.Tensor, batch_plan: Optional[BatchPlan] = None, **kwargs
                ) -> Tuple[torch.Tensor, Dict[str, torch.Tensor], torch.Tensor]:
        """ESPnet's forward (frontend, SpecAugment, encoder, CTC/attention loss) with the plan.

        Args:
            speech: ``(B, T_samples)`` float32 raw audio, or ``(B, T_frames, D)`` features without a frontend;
                speech_lengths ``(B,)`` int64 samples (or frames).
            text: ``(B, L_tokens)`` int64 padded with ``ignore_id``; text_lengths ``(B,)`` int64.
            batch_plan: the :class:`~espnet_dynres.core.batch_planner.BatchPlan` of ``batch_type: dynres``, or ``None``.
            kwargs: passed to ESPnet (e.g. ``utt_id``).

        Returns:
            ESPnet's ``(loss, stats, weight)``, plus stats ``frame_rate_fallback`` and ``below_clamp`` with the
            ``dynres`` frontend, and in training :meth:`frame_rate_stats`.

        Raises:
            ValueError: ``batch_plan`` without the ``dynres`` frontend, or not one frame count per utterance.
        """
        if batch_plan is not None:
            if not isinstance(self.frontend, DynResFrontend):
                raise ValueError(f"batch_plan (the dynres sampler's plan) needs frontend: dynres, got "
                                 f"{type(self.frontend).__name__}; set frontend: dynres or use another batch_type.")
            if (len(batch_plan.frames),) != tuple(speech_lengths.shape):
                raise ValueError(
                    f"batch_plan has {len(batch_plan.frames)} frame counts for speech_lengths "
                    f"{tuple(speech_lengths.shape)}: the batch's plan does not match its utterances; build batches "
                    "with the dynres iterator (batch_type: dynres), which plans one count per utterance (under "
                    "several GPUs, train with DDP, asr.sh's default, not DataParallel).")
        step = StepContext.for_model(self, batch_plan, kwargs.get("utt_id"))
        self._step = step
        try:
            return self.step_forward(step, speech, speech_lengths, text, text_lengths, **kwargs)
        finally:
            self._step = None

    def step_forward(self, step: StepContext, speech: torch.Tensor, speech_lengths: torch.Tensor,
                     text: torch.Tensor, text_lengths: torch.Tensor, **kwargs
                     ) -> Tuple[torch.Tensor, Dict[str, torch.Tensor], torch.Tensor]:
        """ESPnet's forward inside ``step`` (arguments as :meth:`forward`), with its frame-rate stats."""
        loss, stats, weight = super().forward(speech, speech_lengths, text, text_lengths, **kwargs)
        stats.update(step.frame_rate_stats(loss.device))
        return loss, stats, weight

    def frontend_features(self, speech: torch.Tensor, speech_lengths: torch.Tensor, step: StepContext
                          ) -> Tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
        """The frontend's output in ``step``'s mode and plan, and frame-rate ratios; fills ``step``'s figures.

        ``speech`` ``(B, T_samples)`` float32, ``speech_lengths`` ``(B,)`` int64 -> feats ``(B, T_frames, n_mels)``,
        feats_lengths ``(B,)`` int64, ``(B,)`` float32 rate / standard rate (``None`` at the standard rate).
        """
        if not isinstance(self.frontend, DynResFrontend):
            feats, feats_lengths = super()._extract_feats(speech, speech_lengths)
            return feats, feats_lengths, None
        assert speech_lengths.dim() == 1, f"speech_lengths must be (B,), got {tuple(speech_lengths.shape)}"
        speech = speech[:, : speech_lengths.max()]  # as ESPnet's _extract_feats (DataParallel padding)
        out = self.frontend.features(speech, speech_lengths, step.plan, dynamic=step.dynamic)
        step.fallback = out.fallback
        ratios = None
        step.below_clamp = 0  # at the standard rate (evaluation) nothing is below the clamp
        if out.frame_rates_hz is not None:
            policy = self.frontend.policy
            ratios = out.frame_rates_hz / policy.standard_frame_rate_hz  # (B,)
            step.below_clamp = int(policy.below_clamp(speech_lengths.tolist(), out.feats_lengths.tolist()).sum())
        if step.augment:  # a training forward (ESPnet's condition for its training figures)
            padded = out.fallback or (step.plan is not None and step.plan.kind is BatchKind.PADDED)
            step.frame_stats = self.frame_rate_stats(speech_lengths, out.feats_lengths, out.frame_rates_hz, padded)
        return out.feats, out.feats_lengths, ratios

    def frame_rate_stats(self, speech_lengths: torch.Tensor, feats_lengths: torch.Tensor,
                         frame_rates_hz: Optional[torch.Tensor], padded: bool) -> Dict[str, float]:
        """A training batch's frame-rate figures, from ``speech_lengths`` / ``feats_lengths`` ``(B,)`` int64,
        ``frame_rates_hz`` ``(B,)`` Hz (``None``: standard rate) and ``padded`` (planned ``PADDED``).

        Returns:
            ``frame_rate_hz`` (mean, Hz); ``at_min_frame_rate`` / ``at_max_frame_rate``: share at the clamp's
            lowest / highest frame count (:meth:`FrameRatePolicy.frame_count_ranges`); ``padded_batch``: 0 or 1.
        """
        policy = self.frontend.policy
        n = speech_lengths.tolist()
        t = feats_lengths.tolist()
        lo, hi = policy.frame_count_ranges(n)
        rate = (policy.standard_frame_rate_hz if frame_rates_hz is None else float(frame_rates_hz.double().mean()))
        return {"frame_rate_hz": rate, "at_min_frame_rate": sum(a == b for a, b in zip(t, lo.tolist())) / len(t),
                "at_max_frame_rate": sum(a == b for a, b in zip(t, hi.tolist())) / len(t),
                "padded_batch": float(padded)}

    def _extract_feats(self, speech: torch.Tensor, speech_lengths: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Frontend (with the plan), then ``specaug: dynres`` (with the rates) in training; called by ``encode``."""
        step = self._step if self._step is not None else StepContext.for_model(self)  # outside forward: encode()
        feats, feats_lengths, ratios = self.frontend_features(speech, speech_lengths, step)
        if self.dynres_specaug is not None and step.augment:
            feats, feats_lengths = self.dynres_specaug(feats, feats_lengths, frame_rate_ratios=ratios)
        return feats, feats_lengths

    def collect_feats(self, speech: torch.Tensor, speech_lengths: torch.Tensor, text: torch.Tensor,
                      text_lengths: torch.Tensor, batch_plan: Optional[BatchPlan] = None, **kwargs
                      ) -> Dict[str, torch.Tensor]:
        """ESPnet's ``collect_feats``: features without SpecAugment; ``batch_plan`` unused (standard rate)."""
        feats, feats_lengths, _ = self.frontend_features(speech, speech_lengths, StepContext.for_model(self))
        return {"feats": feats, "feats_lengths": feats_lengths}
