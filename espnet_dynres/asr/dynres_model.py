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

    The loss, the batch weight and every ESPnet stat are ESPnet's own
    (per utterance); ``model: token_normalized``
    (:class:`~espnet_dynres.asr.token_normalized_model.TokenNormalizedASRModel`)
    subclasses this class and changes only the loss.  What this class adds is
    independent of the loss:

    1. **The plan.**  ``forward(..., batch_plan=BatchPlan)`` (the batch key the ``dynres``
       iterator adds: frames per utterance and the batch's kind) reaches the ``dynres``
       frontend whole as the argument of :meth:`DynResFrontend.features`, which computes
       exactly those frame counts in a training step (or raises).  Without it (another
       ``batch_type``) the frontend applies the policy's batch rule.
    2. **The rates.**  The frontend returns each utterance's frame rate; they
       reach ``specaug: dynres`` as ``frame_rate_ratios`` ``(B,)`` = rate /
       the frontend's standard rate (``fs / hop_length``, the one place it is
       configured), so its time masks keep their width in seconds.
       To call SpecAugment with that argument this model applies a
       :class:`DynResSpecAug` itself, right after the frontend and before
       ``normalize``, as ESPnet's ``encode`` would: it is held as
       ``self.dynres_specaug`` and ESPnet's ``self.specaug`` is ``None``
       (SpecAugment has no parameters, so checkpoints are unchanged).  Any
       other ``specaug`` is left to ESPnet.
    3. **Stats** ``frame_rate_fallback`` (1 for a fallback batch) and
       ``below_clamp`` (utterances of the batch computed below
       ``min_frame_rate_hz``, :meth:`FrameRatePolicy.below_clamp`) with the
       ``dynres`` frontend in a training step.
    4. **BatchNorm statistics at the standard rate.**  ``batchnorm_restat_batches`` (a
       ``model_conf`` key) sizes the sample of training utterances from which the plugin's trainer
       re-estimates every BatchNorm layer's statistics before each validation
       (:class:`~espnet_dynres.glue.trainer.DynResTrainer`); the model itself keeps no sample, and
       ``model.eval()`` only switches the mode.

    One forward's plan, mode and figures travel in one
    :class:`~espnet_dynres.asr.step_context.StepContext`, opened by :meth:`forward`, held as
    ``self._step`` while it runs (ESPnet's ``encode`` and ``_extract_feats`` have no room for it)
    and dropped in its ``finally``, so nothing outlives the batch.

    Decoding (``eval()``) and collect-stats (``torch.no_grad()``) run at the
    standard rate without SpecAugment, as ESPnet's model with
    ``DefaultFrontend``.
    """

    @typechecked
    def __init__(self, *args, batchnorm_restat_batches: int = 6, **kwargs):
        """ESPnet's arguments, plus:

        Args:
            batchnorm_restat_batches: size of the per-epoch sample of training utterances whose
                standard-rate encoding re-estimates every BatchNorm layer's statistics before
                validation, in batches of the run's evaluation budget (item 4 of the class
                docstring); ``0`` turns it off.

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

    def forward(
        self,
        speech: torch.Tensor,
        speech_lengths: torch.Tensor,
        text: torch.Tensor,
        text_lengths: torch.Tensor,
        batch_plan: Optional[BatchPlan] = None,
        **kwargs,
    ) -> Tuple[torch.Tensor, Dict[str, torch.Tensor], torch.Tensor]:
        """ESPnet's forward (frontend, SpecAugment, encoder, CTC/attention loss) with the plan.

        Args:
            speech: ``(B, T_samples)`` float32 raw audio, or ``(B, T_frames, D)`` extracted
                features when the model has no frontend (``input_size`` set, ``frontend: null``);
                speech_lengths ``(B,)`` int64 samples (or frames).
            text: ``(B, L_tokens)`` int64 padded with ``ignore_id``; text_lengths ``(B,)`` int64.
            batch_plan: the batch's :class:`~espnet_dynres.core.batch_planner.BatchPlan` from
                ``batch_type: dynres`` (one frame count per utterance), or ``None``.
            kwargs: passed to ESPnet (e.g. ``utt_id``).

        Returns:
            ESPnet's ``(loss, stats, weight)``, plus stats ``frame_rate_fallback``
            and ``below_clamp`` with the ``dynres`` frontend, and in training the batch's frame
            rates (:meth:`frame_rate_stats`: ``frame_rate_hz``, ``at_min_frame_rate``,
            ``at_max_frame_rate``, ``padded_batch``), which ESPnet's trainer averages per epoch
            in ``train.log`` and plots in ``<exp>/images``.

        Raises:
            ValueError: ``batch_plan`` given with a frontend other than ``dynres``, or not with
                one frame count per utterance.
        """
        if batch_plan is not None:
            if not isinstance(self.frontend, DynResFrontend):
                raise ValueError(
                    f"batch_plan (the dynres sampler's plan) needs frontend: dynres, got "
                    f"{type(self.frontend).__name__}; set frontend: dynres or use another batch_type."
                )
            if (len(batch_plan.frames),) != tuple(speech_lengths.shape):
                raise ValueError(
                    f"batch_plan has {len(batch_plan.frames)} frame counts for speech_lengths "
                    f"{tuple(speech_lengths.shape)}: the batch's plan does not match its utterances; build batches "
                    "with the dynres iterator (batch_type: dynres), which plans one count per utterance (under "
                    "several GPUs, train with DDP, asr.sh's default, not DataParallel)."
                )
        step = StepContext.for_model(self, batch_plan, kwargs.get("utt_id"))
        self._step = step
        try:
            return self.step_forward(step, speech, speech_lengths, text, text_lengths, **kwargs)
        finally:
            self._step = None

    def step_forward(
        self, step: StepContext, speech: torch.Tensor, speech_lengths: torch.Tensor, text: torch.Tensor,
        text_lengths: torch.Tensor, **kwargs,
    ) -> Tuple[torch.Tensor, Dict[str, torch.Tensor], torch.Tensor]:
        """ESPnet's forward inside the open ``step`` (arguments as :meth:`forward`), its frame-rate
        figures added to the stats."""
        loss, stats, weight = super().forward(speech, speech_lengths, text, text_lengths, **kwargs)
        stats.update(step.frame_rate_stats(loss.device))
        return loss, stats, weight

    def frontend_features(
        self, speech: torch.Tensor, speech_lengths: torch.Tensor, step: StepContext
    ) -> Tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
        """The frontend's output in ``step``'s mode, with its plan, and each utterance's frame-rate
        ratio; ``step``'s frame figures are filled in.

        Args:
            speech: ``(B, T_samples)`` float32 (padded); speech_lengths ``(B,)`` int64.
            step: the forward's context (mode and plan in, figures out).

        Returns:
            feats ``(B, T_frames, n_mels)``, feats_lengths ``(B,)`` int64 and
            ``(B,)`` float32 frame rate / standard rate (``None`` at the standard rate).
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

    def frame_rate_stats(
        self, speech_lengths: torch.Tensor, feats_lengths: torch.Tensor, frame_rates_hz: Optional[torch.Tensor],
        padded: bool,
    ) -> Dict[str, float]:
        """A training batch's frame-rate figures (ESPnet averages them per epoch, weighted by the batch weight).

        Args:
            speech_lengths: ``(B,)`` int64 samples; feats_lengths ``(B,)`` int64 frames computed.
            frame_rates_hz: ``(B,)`` Hz per utterance, or ``None`` (a fallback batch, at the standard rate).
            padded: the batch is planned ``PADDED`` (by the sampler, or by the frontend: a fallback batch).

        Returns:
            ``frame_rate_hz``: the mean rate of its utterances (Hz); ``at_min_frame_rate`` /
            ``at_max_frame_rate``: the share of its utterances at the clamp's lowest / highest frame
            count (:meth:`FrameRatePolicy.frame_count_ranges`); ``padded_batch``: 1 for a
            padded batch (its utterances at different frame counts), else 0.
        """
        policy = self.frontend.policy
        n = speech_lengths.tolist()
        t = feats_lengths.tolist()
        lo, hi = policy.frame_count_ranges(n)
        rate = (policy.standard_frame_rate_hz if frame_rates_hz is None
                else float(frame_rates_hz.double().mean()))
        return {
            "frame_rate_hz": rate,
            "at_min_frame_rate": sum(a == b for a, b in zip(t, lo.tolist())) / len(t),
            "at_max_frame_rate": sum(a == b for a, b in zip(t, hi.tolist())) / len(t),
            "padded_batch": float(padded),
        }

    def _extract_feats(
        self, speech: torch.Tensor, speech_lengths: torch.Tensor
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """Frontend (with this forward's plan), then ``specaug: dynres`` (with the rates) in training.

        Called by ESPnet's ``encode`` inside its autocast block, before ``normalize``.
        """
        step = self._step if self._step is not None else StepContext.for_model(self)  # outside forward: encode()
        feats, feats_lengths, ratios = self.frontend_features(speech, speech_lengths, step)
        if self.dynres_specaug is not None and step.augment:
            feats, feats_lengths = self.dynres_specaug(feats, feats_lengths, frame_rate_ratios=ratios)
        return feats, feats_lengths

    def collect_feats(
        self,
        speech: torch.Tensor,
        speech_lengths: torch.Tensor,
        text: torch.Tensor,
        text_lengths: torch.Tensor,
        batch_plan: Optional[BatchPlan] = None,
        **kwargs,
    ) -> Dict[str, torch.Tensor]:
        """ESPnet's ``collect_feats``: the frontend's features without SpecAugment (collect-stats).

        ``batch_plan`` is accepted and not used: collect-stats runs under ``torch.no_grad()``,
        i.e. at the standard rate.
        """
        feats, feats_lengths, _ = self.frontend_features(speech, speech_lengths, StepContext.for_model(self))
        return {"feats": feats, "feats_lengths": feats_lengths}
