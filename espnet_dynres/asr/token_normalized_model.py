"""``model: token_normalized`` — ESPnet's CTC/attention model with a per-token loss."""

from __future__ import annotations

import inspect
import logging
from typing import Dict, List, Optional, Tuple

import torch
from typeguard import typechecked

from espnet2.asr.espnet_model import ESPnetASRModel

from espnet_dynres import input_checks
from espnet_dynres.ctc_feasibility import ctc_frames_needed
from espnet_dynres.frame_rate_context import SPEECH_FRAMES_KEY, planned_frames

# Order of the per-batch counts in the tensor that is all-reduced over data-parallel ranks.
_COUNT_NAMES = ("batch_tokens", "att_targets", "ctc_tokens", "ctc_infeasible", "empty_transcripts", "batch_size")


class TokenNormalizedASRModel(ESPnetASRModel):
    """``ESPnetASRModel`` whose loss is a mean per target token, not per utterance.

    **Definition.**  For a batch of ``B`` utterances with ``U_b`` target tokens
    each (``text_lengths``, without ``<sos>``/``<eos>``), encoder output
    lengths ``T_b`` and ``R_b`` adjacent repeated tokens:

    ========================  =========================================================  ==========================
    count                     definition                                                 divides
    ========================  =========================================================  ==========================
    ``N`` (batch_tokens)      ``Σ_b U_b``                                                (reported only)
    ``D`` (att_targets)       ``Σ_b (U_b + 1)``: every decoder target incl. ``<eos>``     the attention sum
    ``C`` (ctc_tokens)        ``Σ_b U_b`` over CTC-feasible utterances, ``T_b ≥ U_b+R_b``  each CTC sum
    ========================  =========================================================  ==========================

    ::

        S_att     = Σ_b Σ_{i=1..U_b+1} CE_label_smoothed(b, i)     (ESPnet's criterion, lsm_weight)
        S_ctc     = Σ_{b feasible} CTC_b                           (infeasible: 0 loss, 0 gradient)
        S_ctc^l   = the same for intermediate CTC layer l          (same T_b, so the same C)
        loss_att  = S_att / D
        loss_ctc  = S_ctc / max(C, 1),   loss_interctc = mean_l S_ctc^l / max(C, 1)
        loss      = ctc_weight · [(1 − interctc_weight) · loss_ctc + interctc_weight · loss_interctc]
                    + (1 − ctc_weight) · loss_att

    ``ctc_weight: 0`` is the attention term alone, ``ctc_weight: 1`` the CTC
    terms alone (no decoder is run).  Each sum is divided by the number of
    targets it sums over, so both branches are per-token means; the loss is
    ESPnet's default loss re-divided: ``loss_att = stock_att · B / D`` and
    ``loss_ctc = stock_ctc · B / C`` (ESPnet divides both by ``B``).

    **Infeasible CTC.**  An utterance whose encoder output is shorter than
    ``U_b + R_b`` frames has no CTC alignment; ESPnet's ``zero_infinity``
    silently makes its loss 0.  Here it is counted (stat ``ctc_infeasible``,
    warning with its utterance id), its loss and gradient stay 0, and its
    tokens are left out of ``C`` — so ``loss_ctc`` is the mean over the
    tokens CTC actually scores, not diluted by dropped ones.  Its attention
    targets still count in ``D``.  Empty transcripts (``U_b = 0``) add 0 to
    ``N`` and ``C``, 1 (``<eos>``) to ``D``; they are counted
    (``empty_transcripts``) and warned about.  ``D ≥ B ≥ 1``, and ``C`` is
    clamped at 1, so a batch with zero tokens or only infeasible utterances
    gives a finite loss.

    **Global normalization.**  ``forward`` returns ``D`` as the batch weight.
    ESPnet's trainer under DDP computes ``Σ_r loss_r · D_r / Σ_r D_r``, times
    the world size that DDP's gradient averaging divides out; for
    ``loss_att`` that is exactly ``Σ S_att / Σ D`` over all ranks.  The CTC
    terms have their own count ``C``: in a training step with
    ``torch.distributed`` initialised (world size > 1) and
    ``sync_token_counts: true``, the counts are all-reduced (one tensor of 6
    numbers) and each rank returns ``S_ctc_r · D_all / (C_all · D_r)``, so the
    trainer's weighted mean is exactly ``Σ S_ctc / Σ C``.  Validation and
    ``torch.no_grad`` calls never communicate; their CTC terms use local
    counts.  Gradient accumulation (``accum_grad: k``) is ESPnet's: the
    update is the mean of the k micro-batches' per-token gradients, equal to
    one k-times-larger batch only when the micro-batches have equal counts
    (``docs/loss_normalization.md``).

    **Stats** (besides ESPnet's ``loss``, ``loss_ctc``, ``loss_att``, ...):
    ``loss_per_token`` (= ``loss``, named for dashboards), the counts
    ``batch_tokens``, ``att_targets``, ``ctc_tokens``, ``ctc_infeasible``,
    ``empty_transcripts`` (global totals in a synchronised step, else this
    process's), and ``frame_rate_fallback`` with the dynres frontend.  The
    trainer adds ``grad_norm`` (before clipping) per step.

    Args:
        sync_token_counts: all-reduce the counts in DDP training steps (see
            above); every other argument is ``ESPnetASRModel``'s.

    Raises:
        ValueError: ``length_normalized_loss=True`` (this model replaces it), a
            CTC module other than ``ctc_type: builtin`` with ``reduce: true``
            and ``zero_infinity: true``, a transducer or linear (classification)
            decoder, or ``aux_ctc``.
    """

    @typechecked
    def __init__(self, *args, sync_token_counts: bool = True, **kwargs):
        if kwargs.get("length_normalized_loss", False):
            raise ValueError(
                "model: token_normalized already divides every loss by the batch's token count; "
                "remove length_normalized_loss: true from model_conf."
            )
        bound = inspect.signature(ESPnetASRModel.__init__).bind_partial(None, *args, **kwargs).arguments
        if bound.get("joint_network") is not None:  # before ESPnet's __init__, which imports the RNN-T loss
            raise ValueError(
                "model: token_normalized supports CTC/attention models, not transducer decoders "
                f"(decoder {type(bound.get('decoder')).__name__} with a joint network); "
                "use model: espnet for a transducer."
            )
        super().__init__(*args, **kwargs)
        input_checks.check_normalize_stats(self.frontend, self.normalize)
        if self.use_linear_decoder:
            raise ValueError("model: token_normalized needs an attention decoder, not a linear (classification) one")
        if self.aux_ctc is not None:
            raise ValueError("model: token_normalized does not support aux_ctc (its targets are not the transcript)")
        if self.ctc_weight > 0.0:
            zero_infinity = getattr(getattr(self.ctc, "ctc_loss", None), "zero_infinity", False)
            if self.ctc.ctc_type != "builtin" or not self.ctc.reduce or not zero_infinity:
                raise ValueError(
                    "model: token_normalized needs ctc_conf ctc_type: builtin, reduce: true, zero_infinity: true "
                    f"(got ctc_type={self.ctc.ctc_type!r}, reduce={self.ctc.reduce}, zero_infinity={zero_infinity})"
                )
        self.sync_token_counts = sync_token_counts
        self._counts: Optional[Dict[str, torch.Tensor]] = None  # set only inside forward
        self._ctc_counted = False
        self._utt_ids: Optional[List[str]] = None

    # ------------------------------------------------------------------ counts
    @staticmethod
    def token_count(text_lengths: torch.Tensor) -> torch.Tensor:
        """``N = text_lengths.sum()`` as float32 ``()``; ``text_lengths (B,)`` int64 tokens."""
        return text_lengths.sum().to(torch.float32)

    @staticmethod
    def ctc_feasible(encoder_out_lens: torch.Tensor, ys_pad: torch.Tensor, ys_pad_lens: torch.Tensor) -> torch.Tensor:
        """``(B,)`` bool: encoder frames ``T_b ≥ U_b + R_b`` (tokens + adjacent repeats).

        Args:
            encoder_out_lens: ``(B,)`` int64 encoder frames.
            ys_pad: ``(B, L)`` int64 padded targets.
            ys_pad_lens: ``(B,)`` int64 tokens.
        """
        mask = torch.arange(ys_pad.size(1), device=ys_pad.device)[None, :] < ys_pad_lens[:, None]  # (B, L)
        repeats = ((ys_pad[:, 1:] == ys_pad[:, :-1]) & mask[:, 1:]).sum(dim=1)  # (B,)
        return encoder_out_lens >= ys_pad_lens + repeats

    @classmethod
    def ctc_infeasible_count(
        cls, encoder_out_lens: torch.Tensor, ys_pad: torch.Tensor, ys_pad_lens: torch.Tensor
    ) -> int:
        """Utterances whose encoder output is shorter than ``U + R`` (see :meth:`ctc_feasible`)."""
        return int((~cls.ctc_feasible(encoder_out_lens, ys_pad, ys_pad_lens)).sum())

    def _synchronised(self) -> bool:
        return (
            self.sync_token_counts
            and self.training
            and torch.is_grad_enabled()
            and torch.distributed.is_available()
            and torch.distributed.is_initialized()
            and torch.distributed.get_world_size() > 1
        )

    def _start_counts(self, text_lengths: torch.Tensor) -> None:
        lengths = text_lengths.detach().to(device="cpu", dtype=torch.float64)  # counts live on the CPU
        self._counts = {
            "batch_tokens": lengths.sum(),
            "att_targets": (lengths + 1).sum(),
            "ctc_tokens": lengths.sum(),  # until the encoder lengths are known
            "ctc_infeasible": lengths.new_zeros(()),
            "empty_transcripts": (lengths == 0).sum().to(torch.float64),
            "batch_size": lengths.new_tensor(float(lengths.numel())),
        }
        self._local = dict(self._counts)
        self._synced = False

    def _sync_counts(self) -> None:
        """All-reduce the counts once per step (DDP training only); afterwards they are global."""
        if self._synced:
            return
        self._synced = True
        if not self._synchronised():
            return
        packed = torch.stack([self._counts[k] for k in _COUNT_NAMES])
        device = next(self.parameters()).device
        packed = packed.to(device)
        torch.distributed.all_reduce(packed, op=torch.distributed.ReduceOp.SUM)
        self._counts = {k: packed[i].cpu() for i, k in enumerate(_COUNT_NAMES)}

    def _warn_dropped(self, what: str, flags: torch.Tensor) -> None:
        count = int(flags.sum())
        if count == 0:
            return
        ids = self._utt_ids
        names = [ids[i] for i in flags.nonzero().flatten().tolist()] if ids is not None else []
        shown = ", ".join(names[:5]) + (" ..." if len(names) > 5 else "")
        suffix = f": {shown}" if shown else ""
        logging.warning(f"token_normalized: {count} utterance(s) of this batch {what}{suffix}")

    # ------------------------------------------------------------------ losses
    def _calc_ctc_loss(self, encoder_out, encoder_out_lens, ys_pad, ys_pad_lens):
        # Stock (builtin, reduce, zero_infinity): Σ_b CTC_b / B with infeasible CTC_b = 0.
        outside_forward = self._counts is None  # called directly: this call's own, local counts
        if outside_forward:
            self._start_counts(ys_pad_lens)
            self._synced = True  # never communicate outside forward
        if outside_forward or not self._ctc_counted:
            self._ctc_counted = True
            feasible = self.ctc_feasible(encoder_out_lens, ys_pad, ys_pad_lens)
            lengths = ys_pad_lens.detach().to(torch.float64)
            self._counts["ctc_tokens"] = (lengths * feasible.to(torch.float64)).sum().cpu()
            self._counts["ctc_infeasible"] = (~feasible).sum().to(torch.float64).cpu()
            self._local = dict(self._counts)
            self._warn_dropped("have fewer encoder frames than their CTC targets need (tokens + repeats); "
                               "their CTC loss is 0 and their tokens leave the CTC count", ~feasible)
            self._sync_counts()
        loss_ctc, cer_ctc = super()._calc_ctc_loss(encoder_out, encoder_out_lens, ys_pad, ys_pad_lens)
        ctc_sum = loss_ctc * encoder_out.size(0)
        # Σ_r S_ctc_r · D_all / (C_all · D_r) = global per-token CTC under the trainer's D-weighted mean.
        d_ratio = (self._counts["att_targets"] / self._local["att_targets"]).item()
        loss_ctc = ctc_sum * d_ratio / max(self._counts["ctc_tokens"].item(), 1.0)
        if outside_forward:
            self._counts = None
        return loss_ctc, cer_ctc

    def _calc_att_loss(self, encoder_out, encoder_out_lens, ys_pad, ys_pad_lens):
        # Stock (normalize_length=False): Σ_{b,i} CE / B  ->  Σ_{b,i} CE / D.
        # D = Σ_b (U_b + 1), taken before ESPnet's in-place ys_pad_lens += 1 (lang_token_id);
        # outside forward (a direct call) from this call's ys_pad_lens.
        if self._counts is not None:
            att_targets = self._local["att_targets"].item()
        else:
            att_targets = float((ys_pad_lens + 1).sum())
        loss_att, acc_att, cer_att, wer_att = super()._calc_att_loss(
            encoder_out, encoder_out_lens, ys_pad, ys_pad_lens
        )
        loss_att = loss_att * encoder_out.size(0) / att_targets
        return loss_att, acc_att, cer_att, wer_att

    def forward(
        self,
        speech: torch.Tensor,
        speech_lengths: torch.Tensor,
        text: torch.Tensor,
        text_lengths: torch.Tensor,
        **kwargs,
    ) -> Tuple[torch.Tensor, Dict[str, torch.Tensor], torch.Tensor]:
        """Frontend + encoder + decoder + per-token loss (definition: class docstring).

        Args:
            speech: ``(B, T_samples)`` float32; speech_lengths ``(B,)`` int64 samples.
            text: ``(B, L_tokens)`` int64 token ids, padded with ``ignore_id``;
                text_lengths ``(B,)`` int64 tokens before padding (0 allowed).
            speech_frames (keyword, optional): ``(B,)`` int64 feature frames per
                utterance planned by ``batch_type: dynres``; the ``dynres``
                frontend computes exactly these in a training step.
            utt_id (keyword, optional): the batch's utterance ids, used in warnings.

        Returns:
            ``(loss, stats, weight)``: loss ``(1,)`` per-token mean (ESPnet gathers
            1-dim); stats as listed in the class docstring; weight ``(1,)``
            float32, ``D`` = decoder targets incl. ``<eos>`` of this process's batch.
        """
        utt_id = kwargs.pop("utt_id", None)
        self._utt_ids = list(utt_id) if utt_id is not None else None
        self._start_counts(text_lengths)
        self._ctc_counted = False
        self._warn_dropped("have an empty transcript (only <eos> is trained)", text_lengths == 0)
        # The dynres sampler's plan (B,) int64 frames per utterance, for the dynres frontend.
        speech_frames = kwargs.pop(SPEECH_FRAMES_KEY, None)
        try:
            with planned_frames(speech_frames):
                loss, stats, _ = super().forward(speech, speech_lengths, text, text_lengths, **kwargs)
            self._sync_counts()  # no-op if the CTC branch already did it
            device = loss.device
            stats["loss_per_token"] = loss.detach().reshape(1)
            for name in _COUNT_NAMES[:-1]:
                if name.startswith("ctc") and self.ctc_weight == 0.0:
                    continue
                stats[name] = self._counts[name].to(device=device, dtype=torch.float32).reshape(1)
            if getattr(self.frontend, "last_batch_fallback", None) is not None:
                stats["frame_rate_fallback"] = torch.tensor([float(self.frontend.last_batch_fallback)], device=device)
            weight = self._local["att_targets"].to(device=device, dtype=torch.float32).reshape(1)
        finally:
            self._counts = None
            self._utt_ids = None
        return loss, stats, weight

    def collect_feats(self, speech: torch.Tensor, speech_lengths: torch.Tensor, text: torch.Tensor,
                      text_lengths: torch.Tensor, **kwargs) -> Dict[str, torch.Tensor]:
        """ESPnet's ``collect_feats`` (standard rate); the plan ``speech_frames`` is not a feature."""
        kwargs.pop(SPEECH_FRAMES_KEY, None)
        return super().collect_feats(speech, speech_lengths, text, text_lengths, **kwargs)
